package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// requireCode asserts that err is an *events.Error carrying code.
func requireCode(t testing.TB, err error, code events.Code) {
	t.Helper()
	require.Error(t, err)
	var e *events.Error
	require.True(t, errors.As(err, &e), "error %v (%T) is not an *events.Error", err, err)
	require.Equal(t, code, e.Code, "error: %v", err)
}

func TestParseMoney_Accepted(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"0", "0"},
		{"0.00", "0"},
		{"0.05", "0.05"},
		{"1", "1"},
		{"1.00", "1"},
		{"1.50", "1.5"},
		{"100", "100"},
		{"1000", "1000"},
		{"0.000000001", "0.000000001"},
		{"000.5", "0.5"},
		{"007", "7"},
		{"12.345", "12.345"},
		{"999999999999999999", "999999999999999999"},                                    // MaxIntegerDigits
		{"0.000000000001", "0.000000000001"},                                            // MaxFractionDigits
		{"999999999999999999.999999999999", "999999999999999999.999999999999"},          // both limits
		{"000000000000000000001", "1"},                                                  // leading zeros do not count as digits
		{strings.Repeat("0", events.MaxAmountLen-1) + "1", "1"},                         // exactly MaxAmountLen characters
		{"000000000999999999999999999.999999999999", "999999999999999999.999999999999"}, // 40 characters, 18 significant integer digits
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := events.ParseMoney(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, m.String())
			require.GreaterOrEqual(t, m.Sign(), 0)

			// The canonical form parses back to the same value.
			back, err := events.ParseMoney(m.String())
			require.NoError(t, err)
			require.Equal(t, 0, back.Cmp(m))
			require.Equal(t, m.String(), back.String())
		})
	}
}

func TestParseMoney_Rejected(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"negative", "-1"},
		{"negative zero", "-0"},
		{"negative fraction", "-0.05"},
		{"NaN", "NaN"},
		{"nan", "nan"},
		{"sNaN", "sNaN"},
		{"Infinity", "Infinity"},
		{"inf", "inf"},
		{"Inf", "Inf"},
		{"plus sign", "+1"},
		{"exponent", "1e3"},
		{"negative exponent", "1e-3"},
		{"exponent bomb", "1E999999"},
		{"leading space", " 1"},
		{"trailing space", "1 "},
		{"tab", "1\t"},
		{"newline", "1\n"},
		{"trailing dot", "1."},
		{"leading dot", ".5"},
		{"dot only", "."},
		{"two dots", "1.2.3"},
		{"hex", "0x10"},
		{"comma", "1,5"},
		{"underscore", "1_000"},
		{"letters", "abc"},
		{"NUL", "1\x00"},
		{"100 kB of digits", strings.Repeat("9", 100<<10)},
		{"longer than MaxAmountLen", strings.Repeat("0", events.MaxAmountLen) + "1"},
		{"19 integer digits", strings.Repeat("9", events.MaxIntegerDigits+1)},
		{"19 integer digits after zeros", "0" + strings.Repeat("1", events.MaxIntegerDigits+1)},
		{"13 fractional digits", "0." + strings.Repeat("0", events.MaxFractionDigits) + "1"},
		{"13 fractional zeros", "1." + strings.Repeat("0", events.MaxFractionDigits+1)},
		{"fullwidth digit", "１"},
		{"arabic-indic digit", "٣"},
		{"superscript digit", "²"},
		{"invalid UTF-8", "\xff"},
		{"invalid UTF-8 after digits", "1\xfe"},
		{"invalid UTF-8 in fraction", "1.\xc3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := events.ParseMoney(tt.in)
			requireCode(t, err, events.CodeInvalidAmount)
			require.True(t, m.IsZero())
			require.True(t, errors.Is(err, &events.Error{Code: events.CodeInvalidAmount}))
			require.Equal(t, events.CodeInvalidAmount, events.CodeOf(err))
			// The message must stay bounded whatever the input size.
			require.Less(t, len(err.Error()), 256)
		})
	}
}

func TestMustMoney(t *testing.T) {
	require.Equal(t, "0.05", events.MustMoney("0.05").String())
	require.Panics(t, func() { events.MustMoney("-1") })
	require.Panics(t, func() { events.MustMoney("1e3") })
}

func TestMoneyFromInt(t *testing.T) {
	require.Equal(t, "0", events.MoneyFromInt(0).String())
	require.Equal(t, "42", events.MoneyFromInt(42).String())
	require.Equal(t, "-7", events.MoneyFromInt(-7).String())
	require.Equal(t, 0, events.MoneyFromInt(1).Cmp(events.MustMoney("1.000")))
}

// TestMoney_Exact is the float bug of seed 003: twenty reservations of 0.05
// must fit a ceiling of 1.00 exactly.
func TestMoney_Exact(t *testing.T) {
	five := events.MustMoney("0.05")
	sum := events.Zero
	for range 20 {
		sum = sum.Add(five)
	}
	require.Equal(t, "1", sum.String())
	require.Equal(t, 0, sum.Cmp(events.MustMoney("1.00")))
	require.Equal(t, 0, sum.Cmp(events.MoneyFromInt(1)))
	// A twenty-first does not fit.
	require.Equal(t, 1, sum.Add(five).Cmp(events.MustMoney("1.00")))

	// Subtracting them back lands on exactly zero.
	for range 20 {
		sum = sum.Sub(five)
	}
	require.True(t, sum.IsZero())
	require.Equal(t, 0, sum.Sign())
	require.Equal(t, "0", sum.String())

	tiny := events.MustMoney("0.000000001")
	acc := events.Zero
	for range 1000 {
		acc = acc.Add(tiny)
	}
	require.Equal(t, "0.000001", acc.String())
	require.Equal(t, 0, acc.Cmp(events.MustMoney("0.000001000")))

	// 0.1 + 0.2 == 0.3, unlike float64.
	require.Equal(t, "0.3", events.MustMoney("0.1").Add(events.MustMoney("0.2")).String())

	// The extremes of the input limits add exactly.
	maxAmount := events.MustMoney("999999999999999999.999999999999")
	require.Equal(t, "1999999999999999999.999999999998", maxAmount.Add(maxAmount).String())
	require.Equal(t, "1000000000000000000", maxAmount.Add(events.MustMoney("0.000000000001")).String())
}

func TestMoney_Add_PanicsWhenInexact(t *testing.T) {
	// Doubling the largest amount 100 times needs more than Context's 40
	// digits; Add must refuse rather than round.
	x := events.MustMoney("999999999999999999.999999999999")
	require.Panics(t, func() {
		for range 100 {
			x = x.Add(x)
		}
	})
}

func TestMoney_Arithmetic(t *testing.T) {
	m := events.MustMoney
	tests := []struct {
		a, b          string
		sum, diff     string
		cmp           int
		max           string
		signA, signAB int // Sign of a and of a-b
	}{
		{"0", "0", "0", "0", 0, "0", 0, 0},
		{"1", "1.00", "2", "0", 0, "1", 1, 0},
		{"0.05", "0.1", "0.15", "-0.05", -1, "0.1", 1, -1},
		{"10", "2.5", "12.5", "7.5", 1, "10", 1, 1},
		{"0.000000000001", "0", "0.000000000001", "0.000000000001", 1, "0.000000000001", 1, 1},
		{"0", "3", "3", "-3", -1, "3", 0, -1},
		{"100", "99.99", "199.99", "0.01", 1, "100", 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.a+"_"+tt.b, func(t *testing.T) {
			a, b := m(tt.a), m(tt.b)
			require.Equal(t, tt.sum, a.Add(b).String())
			require.Equal(t, tt.sum, b.Add(a).String())
			require.Equal(t, tt.diff, a.Sub(b).String())
			require.Equal(t, tt.cmp, a.Cmp(b))
			require.Equal(t, -tt.cmp, b.Cmp(a))
			require.Equal(t, tt.max, a.Max(b).String())
			require.Equal(t, tt.max, b.Max(a).String())
			require.Equal(t, tt.signA, a.Sign())
			require.Equal(t, tt.signAB, a.Sub(b).Sign())
			require.Equal(t, tt.signAB == 0, a.Sub(b).IsZero())
			// Operands are not modified.
			require.Equal(t, m(tt.a).String(), a.String())
			require.Equal(t, m(tt.b).String(), b.String())
		})
	}
}

func TestMoney_Zero(t *testing.T) {
	var z events.Money
	require.True(t, z.IsZero())
	require.True(t, events.Zero.IsZero())
	require.Equal(t, 0, z.Sign())
	require.Equal(t, "0", z.String())
	require.Equal(t, 0, z.Cmp(events.MustMoney("0.000")))
	require.Equal(t, "0.05", z.Add(events.MustMoney("0.05")).String())
	require.Equal(t, "-0.05", z.Sub(events.MustMoney("0.05")).String())
	require.Equal(t, "0", z.Max(z).String())
}

func TestMoney_JSON(t *testing.T) {
	tests := []struct {
		name string
		m    events.Money
		json string
	}{
		{"zero", events.Zero, `"0"`},
		{"cents", events.MustMoney("0.05"), `"0.05"`},
		{"trailing zeros dropped", events.MustMoney("1.00"), `"1"`},
		{"tiny", events.MustMoney("0.000000001"), `"0.000000001"`},
		{"big", events.MustMoney("999999999999999999.999999999999"), `"999999999999999999.999999999999"`},
		{"negative delta", events.MustMoney("0.05").Sub(events.MustMoney("0.3")), `"-0.25"`},
		{"negative integer", events.MoneyFromInt(-12), `"-12"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.m)
			require.NoError(t, err)
			require.Equal(t, tt.json, string(b))

			var back events.Money
			require.NoError(t, json.Unmarshal(b, &back))
			require.Equal(t, 0, back.Cmp(tt.m))
			require.Equal(t, tt.m.String(), back.String())
			require.Equal(t, tt.m.Sign(), back.Sign())

			// Also as a field, by value and by pointer.
			type wrap struct {
				V events.Money  `json:"v"`
				P *events.Money `json:"p"`
			}
			w := wrap{V: tt.m, P: &tt.m}
			b, err = json.Marshal(w)
			require.NoError(t, err)
			require.Equal(t, `{"v":`+tt.json+`,"p":`+tt.json+`}`, string(b))
			var wb wrap
			require.NoError(t, json.Unmarshal(b, &wb))
			require.Equal(t, 0, wb.V.Cmp(tt.m))
			require.NotNil(t, wb.P)
			require.Equal(t, 0, wb.P.Cmp(tt.m))
		})
	}
}

func TestMoney_UnmarshalJSON(t *testing.T) {
	accepted := []struct{ in, want string }{
		{`"0.05"`, "0.05"},
		{`"-0.05"`, "-0.05"},
		{`"1.00"`, "1"},
		{`"-1.00"`, "-1"},
		{`"-0"`, "0"}, // a negative zero is plain zero
		{`"000.5"`, "0.5"},
	}
	for _, tt := range accepted {
		t.Run("ok "+tt.in, func(t *testing.T) {
			var m events.Money
			require.NoError(t, json.Unmarshal([]byte(tt.in), &m))
			require.Equal(t, tt.want, m.String())
		})
	}
	negZero := events.MustMoney("0")
	require.NoError(t, json.Unmarshal([]byte(`"-0"`), &negZero))
	require.Equal(t, 0, negZero.Sign())

	rejected := []string{
		`0.05`, // a JSON number, not a string
		`1`,
		`true`,
		`{}`,
		`[]`,
		`null`,
		`""`,
		`"-"`,
		`"--1"`,
		`"-+1"`,
		`"+1"`,
		`"-NaN"`,
		`"NaN"`,
		`"-Infinity"`,
		`"1e3"`,
		`"-1e3"`,
		`" 1"`,
		`"1."`,
		`"-.5"`,
		`"` + strings.Repeat("9", 19) + `"`,
		`"-` + strings.Repeat("9", 19) + `"`,
		`"0.` + strings.Repeat("1", 13) + `"`,
		`"` + strings.Repeat("1", 100<<10) + `"`,
		`"\uff11"`,
	}
	for _, in := range rejected {
		name := in
		if len(name) > 32 {
			name = name[:32]
		}
		t.Run("bad "+name, func(t *testing.T) {
			m := events.MustMoney("7")
			err := json.Unmarshal([]byte(in), &m)
			requireCode(t, err, events.CodeInvalidAmount)
			require.Equal(t, "7", m.String(), "a failed decode leaves the value alone")
		})
	}
}

func TestMoney_SlotsMul(t *testing.T) {
	for _, tt := range []struct{ m, slot, want string }{
		{"10", "1", "10"}, {"10", "3", "3"}, {"0.99", "1", "0"}, {"0", "1", "0"},
		{"100.5", "0.25", "402"}, {"999999999999999999", "0.000000000001", "999999999999999999000000000000"},
	} {
		require.Equal(t, tt.want, events.MustMoney(tt.m).Slots(events.MustMoney(tt.slot)).String(), "%s/%s", tt.m, tt.slot)
	}
	require.Equal(t, "0", events.MustMoney("5").Sub(events.MustMoney("6")).Slots(events.MustMoney("1")).String())
	require.Equal(t, "57.5", events.MustMoney("10").Mul(events.MustMoney("5.75")).String())
}
