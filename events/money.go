package events

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/cockroachdb/apd/v3"
)

// Limits on amounts accepted at the edge. They bound the work any request can
// cause and keep every sum exact within Context's precision.
const (
	// MaxAmountLen caps the length of an amount string before it is parsed.
	MaxAmountLen = 40
	// MaxIntegerDigits caps digits before the decimal point.
	MaxIntegerDigits = 18
	// MaxFractionDigits caps digits after the decimal point (1e-12).
	MaxFractionDigits = 12
	// MaxSumIntegerDigits caps digits before the point of a sum that a
	// reply or a report states (ParseSum): a report adds up amounts of many
	// budgets, which can outgrow MaxIntegerDigits; Context keeps every sum
	// exact up to this many.
	MaxSumIntegerDigits = 40 - MaxFractionDigits
)

// Context is the one decimal context of the money path. 40 digits of
// precision hold any sum of amounts within the limits above exactly; Inexact
// and Rounded trap, so an arithmetic result that would lose a digit is an
// error instead of a silently rounded number.
var Context = apd.Context{
	Precision:   40,
	MaxExponent: 40,
	MinExponent: -40,
	Traps:       apd.DefaultTraps | apd.Inexact | apd.Rounded,
}

// Money is an exact decimal amount. The zero value is 0. Money values are
// immutable: every operation returns a new value.
type Money struct{ d apd.Decimal }

// Zero is 0.
var Zero = Money{}

// ParseMoney parses a plain decimal string: ASCII digits with an optional
// fractional part ("12", "0.05", "0.000000001"). It rejects signs,
// exponents, NaN, Infinity, whitespace, empty strings, strings longer than
// MaxAmountLen and more than MaxIntegerDigits/MaxFractionDigits digits.
// Negative amounts are reported as such. The result is non-negative; callers
// decide whether zero is allowed. Its errors call the value "amount".
func ParseMoney(s string) (Money, error) { return ParseMoneyField("amount", s) }

// ParseMoneyField is ParseMoney for the request field name, whose errors
// name that field ("actual \"-1\" is negative", "limit is empty").
func ParseMoneyField(name, s string) (Money, error) {
	return parseDecimal(name, s, MaxAmountLen, MaxIntegerDigits)
}

// ParseSum parses a sum of amounts as a report states it (a group's
// spend, overrun or reserved; what denied admits asked): ParseMoney's
// rules, but up to MaxSumIntegerDigits digits before the point, since a
// sum over many budgets may pass MaxIntegerDigits. Its errors call the
// value "sum".
func ParseSum(s string) (Money, error) {
	return parseDecimal("sum", s, MaxSumIntegerDigits+1+MaxFractionDigits, MaxSumIntegerDigits)
}

func parseDecimal(name, s string, maxLen, maxInt int) (Money, error) {
	if s == "" {
		return Money{}, Errorf(CodeInvalidAmount, "%s is empty", name)
	}
	if len(s) > maxLen {
		return Money{}, Errorf(CodeInvalidAmount, "%s is longer than %d characters", name, maxLen)
	}
	if s[0] == '-' {
		return Money{}, Errorf(CodeInvalidAmount, "%s %q is negative", name, s)
	}
	if !PlainDecimal(s) {
		return Money{}, Errorf(CodeInvalidAmount, "%s %q is not a plain decimal string (digits, optional '.' and digits)", name, s)
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if len(strings.TrimLeft(intPart, "0")) > maxInt {
		return Money{}, Errorf(CodeInvalidAmount, "%s %q has more than %d integer digits", name, s, maxInt)
	}
	if len(frac) > MaxFractionDigits {
		return Money{}, Errorf(CodeInvalidAmount, "%s %q has more than %d fractional digits", name, s, MaxFractionDigits)
	}
	if len(intPart)+len(frac) <= maxInt64Digits {
		// Every digit fits one int64 coefficient: no apd parse.
		var c int64
		for i := 0; i < len(intPart); i++ {
			c = c*10 + int64(intPart[i]-'0')
		}
		for i := 0; i < len(frac); i++ {
			c = c*10 + int64(frac[i]-'0')
		}
		return reduced(c, -int32(len(frac))), nil
	}
	var m Money
	if _, _, err := m.d.SetString(s); err != nil {
		return Money{}, Errorf(CodeInvalidAmount, "%s %q: %v", name, s, err)
	}
	m.d.Reduce(&m.d)
	return m, nil
}

// recordBound is 10^MaxIntegerDigits: every amount the ledger stores (an
// event's, a balance's totals) is below it in magnitude, since every reader
// of the stream reads it back with ParseMoney's limits.
var recordBound = Money{d: *apd.New(1, MaxIntegerDigits)}

// Recordable reports whether m can be stored in the ledger and read back:
// its magnitude has at most MaxIntegerDigits integer digits. A sum of
// amounts (a balance's spent after many overruns) can outgrow them; a
// decision that would store one must refuse instead, or every replay of the
// stream would skip the revision as malformed.
func (m Money) Recordable() bool {
	var a apd.Decimal
	a.Abs(&m.d)
	return a.Cmp(&recordBound.d) < 0
}

// MustMoney parses s or panics; for constants in tests and examples.
func MustMoney(s string) Money {
	m, err := ParseMoney(s)
	if err != nil {
		panic(err)
	}
	return m
}

// MoneyFromInt returns n as Money.
func MoneyFromInt(n int64) Money {
	var m Money
	m.d.SetInt64(n)
	return m
}

// PlainDecimal reports whether s has the shape of a decimal as spendgate
// writes one: digits, and optionally '.' and digits ("12", "12.50"). It
// says nothing of its size.
func PlainDecimal(s string) bool {
	intPart, frac, hasDot := strings.Cut(s, ".")
	return digitsOnly(intPart) && (!hasDot || digitsOnly(frac))
}

func digitsOnly(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Add returns m + o. It panics only if the sum cannot be represented exactly
// in Context, which the input limits rule out for any realistic ledger.
func (m Money) Add(o Money) Money {
	if r, ok := addSmall(&m.d, &o.d, false); ok {
		return r
	}
	var r Money
	if _, err := Context.Add(&r.d, &m.d, &o.d); err != nil {
		panic("events: inexact money addition: " + err.Error())
	}
	r.d.Reduce(&r.d)
	return r
}

// Sub returns m - o (which may be negative).
func (m Money) Sub(o Money) Money {
	if r, ok := addSmall(&m.d, &o.d, true); ok {
		return r
	}
	var r Money
	if _, err := Context.Sub(&r.d, &m.d, &o.d); err != nil {
		panic("events: inexact money subtraction: " + err.Error())
	}
	r.d.Reduce(&r.d)
	return r
}

// Slots returns how many whole amounts of slot fit in m: floor(m / slot),
// 0 when m < slot or m <= 0. slot must be > 0.
func (m Money) Slots(slot Money) Money {
	var r Money
	if m.Sign() <= 0 || slot.Sign() <= 0 {
		return r
	}
	if _, err := Context.QuoInteger(&r.d, &m.d, &slot.d); err != nil {
		panic("events: money slots: " + err.Error())
	}
	r.d.Reduce(&r.d)
	return r
}

// Mul returns m * o. It panics only if the product cannot be represented
// exactly in Context.
func (m Money) Mul(o Money) Money {
	var r Money
	if _, err := Context.Mul(&r.d, &m.d, &o.d); err != nil {
		panic("events: inexact money multiplication: " + err.Error())
	}
	r.d.Reduce(&r.d)
	return r
}

// Cmp compares m and o: -1, 0 or +1.
func (m Money) Cmp(o Money) int { return m.d.Cmp(&o.d) }

// Sign returns -1, 0 or +1.
func (m Money) Sign() int { return m.d.Sign() }

// IsZero reports whether m == 0.
func (m Money) IsZero() bool { return m.d.IsZero() }

// Max returns the larger of m and o.
func (m Money) Max(o Money) Money {
	if m.Cmp(o) >= 0 {
		return m
	}
	return o
}

// String returns the canonical plain decimal form ("0.05", "100", "0").
func (m Money) String() string {
	if m.d.IsZero() {
		return "0"
	}
	return m.d.Text('f')
}

// MarshalJSON writes m as a JSON string.
func (m Money) MarshalJSON() ([]byte, error) { return json.Marshal(m.String()) }

// UnmarshalJSON reads a JSON string holding a stored amount. Stored amounts
// may be negative (a delta) but must otherwise obey ParseMoney's rules.
func (m *Money) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return Errorf(CodeInvalidAmount, "amount must be a JSON string")
	}
	neg := strings.HasPrefix(s, "-")
	v, err := ParseMoney(strings.TrimPrefix(s, "-"))
	if err != nil {
		return err
	}
	if neg {
		v.d.Neg(&v.d)
	}
	*m = v
	return nil
}

// utilCtx multiplies two decimals of at most 2*MaxAmountLen digits each
// exactly.
var utilCtx = apd.BaseContext.WithPrecision(4 * MaxAmountLen)

// CompareUtilization compares usedA/limitA with usedB/limitB (a budget's
// utilization, (spent + reserved) / limit) exactly, by cross products:
// -1, 0 or 1. A zero limit counts as fully used (1) when nothing is used,
// and above every finite utilization otherwise. The decimals must be
// finite, >= 0 and of at most 2*MaxAmountLen digits.
func CompareUtilization(usedA, limitA, usedB, limitB *apd.Decimal) int {
	inf := func(used, limit *apd.Decimal) bool { return limit.IsZero() && used.Sign() > 0 }
	switch ia, ib := inf(usedA, limitA), inf(usedB, limitB); {
	case ia && ib:
		return 0
	case ia:
		return 1
	case ib:
		return -1
	}
	one := apd.New(1, 0)
	if limitA.IsZero() {
		usedA, limitA = one, one
	}
	if limitB.IsZero() {
		usedB, limitB = one, one
	}
	var x, y apd.Decimal
	_, _ = utilCtx.Mul(&x, usedA, limitB)
	_, _ = utilCtx.Mul(&y, usedB, limitA)
	return x.Cmp(&y)
}

// The ledger's amounts are nearly all a few digits at a few decimals:
// their sums, differences and parses take an int64 path that gives what
// apd gives (Context's exact sum, reduced), without apd's arithmetic. A
// replica's fold of an LLM gateway's history spent a fifth of its time in
// apd adding report sums and parsing amounts.

// maxInt64Digits is how many decimal digits any int64 holds.
const maxInt64Digits = 18

// pow10s are 10^0 to 10^18.
var pow10s = func() (p [maxInt64Digits + 1]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// small returns d as a coefficient and exponent, if its coefficient fits
// an int64.
func small(d *apd.Decimal) (int64, int32, bool) {
	if d.Form != apd.Finite || !d.Coeff.IsInt64() {
		return 0, 0, false
	}
	c := d.Coeff.Int64()
	if c < 0 {
		return 0, 0, false // Coeff is a magnitude; never so
	}
	if d.Negative {
		c = -c
	}
	return c, d.Exponent, true
}

// addSmall returns a + b (a - b when sub) when both and the sum fit int64
// coefficients, at most 18 decimal places apart; ok false: use apd.
func addSmall(a, b *apd.Decimal, sub bool) (Money, bool) {
	x, ex, ok1 := small(a)
	y, ey, ok2 := small(b)
	if !ok1 || !ok2 {
		return Money{}, false
	}
	if sub {
		y = -y
	}
	e := min(ex, ey)
	if ex-e > maxInt64Digits || ey-e > maxInt64Digits {
		return Money{}, false
	}
	x, ok1 = mul10(x, ex-e)
	y, ok2 = mul10(y, ey-e)
	if !ok1 || !ok2 {
		return Money{}, false
	}
	sum := x + y
	if (x >= 0) == (y >= 0) && (sum >= 0) != (x >= 0) {
		return Money{}, false // overflowed
	}
	return reduced(sum, e), true
}

// mul10 is x * 10^k, if it fits.
func mul10(x int64, k int32) (int64, bool) {
	if k == 0 || x == 0 {
		return x, true
	}
	p := pow10s[k]
	if x > math.MaxInt64/p || x < math.MinInt64/p {
		return 0, false
	}
	return x * p, true
}

// reduced is c × 10^e with its trailing zeros removed, as Decimal.Reduce
// leaves it (zero: 0 × 10^0).
func reduced(c int64, e int32) Money {
	var m Money
	if c == 0 {
		m.d.SetFinite(0, 0)
		return m
	}
	for c%10 == 0 {
		c /= 10
		e++
	}
	m.d.SetFinite(c, e)
	return m
}
