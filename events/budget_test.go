package events_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

func TestParseScope_Accepted(t *testing.T) {
	tests := []struct {
		in       string
		kind, id string
	}{
		{"org:acme", "org", "acme"},
		{"user:u-17", "user", "u-17"},
		{"key:k_9", "key", "k_9"},
		{"webhook-2:W_x-9", "webhook-2", "W_x-9"},
		{"org:" + strings.Repeat("a", events.MaxIDLen), "org", strings.Repeat("a", events.MaxIDLen)},
		{strings.Repeat("k", events.MaxKindLen) + ":x", strings.Repeat("k", events.MaxKindLen), "x"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := events.ParseScope(tt.in)
			require.NoError(t, err)
			require.Equal(t, events.Scope(tt.in), s)
			require.Equal(t, tt.kind, s.Kind())
			require.Equal(t, tt.id, s.ID())
		})
	}
}

func TestParseScope_Rejected(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"no colon", "org"},
		{"no kind", ":x"},
		{"no id", "org:"},
		{"colon only", ":"},
		{"dot", "org:a.b"},
		{"star", "org:*"},
		{"gt", "org:>"},
		{"space", "org:a b"},
		{"tab", "org:a\tb"},
		{"newline", "org:a\n"},
		{"upper-case kind", "Org:x"},
		{"kind starts with a digit", "1org:x"},
		{"kind starts with dash", "-org:x"},
		{"kind starts with underscore", "_org:x"},
		{"id longer than MaxIDLen", "org:" + strings.Repeat("a", events.MaxIDLen+1)},
		{"kind longer than MaxKindLen", strings.Repeat("k", events.MaxKindLen+1) + ":x"},
		{"invalid UTF-8 id", "org:\xff"},
		{"invalid UTF-8 kind", "\xffrg:x"},
		{"non-ASCII id", "org:café"},
		{"fullwidth", "org:ａ"},
		{"second colon", "org:a:b"},
		{"dot in kind", "o.rg:x"},
		{"wildcard kind", "*:x"},
		{"NUL", "org:a\x00"},
		{"slash", "org:a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := events.ParseScope(tt.in)
			requireCode(t, err, events.CodeInvalidIdentifier)
			require.Empty(t, s)
		})
	}
}

func TestValidateToken(t *testing.T) {
	require.NoError(t, events.ValidateToken("id", "abc-XYZ_019", 16))
	require.NoError(t, events.ValidateToken("id", "a", 1))
	requireCode(t, events.ValidateToken("id", "ab", 1), events.CodeInvalidIdentifier)
	for _, bad := range []string{"", "a.b", "a*", ">", "a b", "a:b", "a/b", "é", "\xff", "a\x00"} {
		requireCode(t, events.ValidateToken("id", bad, 64), events.CodeInvalidIdentifier)
	}
}

func TestParsePeriod(t *testing.T) {
	for _, p := range events.Periods {
		got, err := events.ParsePeriod(string(p))
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	require.Equal(t, []events.Period{events.PeriodMonth, events.PeriodWeek, events.PeriodDay, events.PeriodHour, events.PeriodMinute, events.PeriodLifetime}, events.Periods)

	for _, bad := range []string{"", "Month", "MONTH", "monthly", "Week", "weekly", "year", " day", "day ", "all", "lifetime\x00", "Hour", "hourly", "min", "minutes", "second"} {
		t.Run(bad, func(t *testing.T) {
			p, err := events.ParsePeriod(bad)
			requireCode(t, err, events.CodeInvalidPeriod)
			require.Empty(t, p)
		})
	}
}

func TestPeriod_Instance(t *testing.T) {
	plusOne := time.FixedZone("UTC+1", 60*60)
	minusFive := time.FixedZone("UTC-5", -5*60*60)
	tests := []struct {
		name                 string
		at                   time.Time
		month, day, lifetime string
	}{
		{
			name:  "utc midday",
			at:    time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
			month: "2026-11", day: "2026-11-30",
		},
		{
			name:  "last nanosecond of a UTC month",
			at:    time.Date(2026, 11, 30, 23, 59, 59, 999_999_999, time.UTC),
			month: "2026-11", day: "2026-11-30",
		},
		{
			name:  "first nanosecond of a UTC month",
			at:    time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
			month: "2026-12", day: "2026-12-01",
		},
		{
			// Local wall clock says 1 December; UTC is still 30 November.
			name:  "east of UTC, just before UTC midnight",
			at:    time.Date(2026, 12, 1, 0, 59, 59, 0, plusOne),
			month: "2026-11", day: "2026-11-30",
		},
		{
			// Local wall clock says 30 November; UTC is already 1 December.
			name:  "west of UTC, just after UTC midnight",
			at:    time.Date(2026, 11, 30, 19, 0, 1, 0, minusFive),
			month: "2026-12", day: "2026-12-01",
		},
		{
			name:  "west of UTC, just before UTC midnight",
			at:    time.Date(2026, 11, 30, 18, 59, 59, 0, minusFive),
			month: "2026-11", day: "2026-11-30",
		},
		{
			name:  "new year east of UTC",
			at:    time.Date(2027, 1, 1, 0, 30, 0, 0, plusOne),
			month: "2026-12", day: "2026-12-31",
		},
		{
			name:  "leap day",
			at:    time.Date(2028, 2, 29, 23, 0, 0, 0, time.UTC),
			month: "2028-02", day: "2028-02-29",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.month, events.PeriodMonth.Instance(tt.at))
			require.Equal(t, tt.day, events.PeriodDay.Instance(tt.at))
			require.Equal(t, "all", events.PeriodLifetime.Instance(tt.at))
			// Same instant, any zone: same instance.
			require.Equal(t, tt.day, events.PeriodDay.Instance(tt.at.UTC()))
			require.Equal(t, tt.day, events.PeriodDay.Instance(tt.at.In(minusFive)))
			require.Equal(t, tt.month, events.PeriodMonth.Instance(tt.at.In(plusOne)))
		})
	}
}

func TestValidateUnit(t *testing.T) {
	for _, u := range []string{"USD", "EUR", "GBP", "JPY", "CHF", "CREDITS", "requests"} {
		require.NoError(t, events.ValidateUnit(u), u)
	}
	for _, u := range []string{"", "usd", "Usd", "USD ", " USD", "XXX", "BTC", "request", "REQUESTS", "credits", "US$", "USD\x00"} {
		t.Run(u, func(t *testing.T) {
			requireCode(t, events.ValidateUnit(u), events.CodeInvalidUnit)
		})
	}
}

func TestIsCount(t *testing.T) {
	require.True(t, events.IsCount(events.UnitRequests))
	require.False(t, events.IsCount("USD"))
	require.False(t, events.IsCount(""))
}

func TestBalanceRef(t *testing.T) {
	b := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	require.Equal(t, "org:acme/month/2026-11", b.String())
	require.Equal(t, events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}, b.Budget())
}

func TestSortScopes(t *testing.T) {
	in := []events.Scope{"user:u-17", "org:acme", "key:k_9", "org:acme", "user:u-17", "org:acme"}
	orig := append([]events.Scope(nil), in...)

	got := events.SortScopes(in)
	require.Equal(t, []events.Scope{"key:k_9", "org:acme", "user:u-17"}, got)
	require.Equal(t, orig, in, "the input is not modified")

	require.Empty(t, events.SortScopes(nil))
	require.Empty(t, events.SortScopes([]events.Scope{}))
	require.Equal(t, []events.Scope{"org:a"}, events.SortScopes([]events.Scope{"org:a"}))
	require.Equal(t, []events.Scope{"org:a"}, events.SortScopes([]events.Scope{"org:a", "org:a", "org:a"}))
	require.Equal(t, []events.Scope{"org:a", "org:b"}, events.SortScopes([]events.Scope{"org:b", "org:a"}))

	// The result is a copy: appending to it or editing it leaves the input alone.
	in2 := []events.Scope{"org:b", "org:a"}
	out := events.SortScopes(in2)
	out[0] = "changed:x"
	require.Equal(t, []events.Scope{"org:b", "org:a"}, in2)
}
