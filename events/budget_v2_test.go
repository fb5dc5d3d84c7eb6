package events_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// goldenBudgetRevisionDefinedV2 is a budget.v2 revision carrying a
// budget.defined.v2 event and stating its whole definition.
func goldenBudgetRevisionDefinedV2() events.BudgetRevision {
	ev := goldenDefinedV2()
	return events.BudgetRevision{
		Schema: events.SchemaBudget, Chain: events.Chain{Prev: 7, PrevHash: events.HashPayload([]byte("revision 7"))},
		Budget: ev.Budget, Limit: ev.Limit, Unit: ev.Unit, TZ: ev.TZ, Disabled: ev.Disabled,
		FixedSlot: ev.FixedSlot, Thresholds: ev.Thresholds,
		Events: events.Events{ev},
	}
}

// TestBudgetRevision_DefinedV2Golden freezes a revision with every new
// definition field; the plain budget.v2 golden (v1 event, no new field)
// stays byte for byte as it was.
func TestBudgetRevision_DefinedV2Golden(t *testing.T) {
	rev := goldenBudgetRevisionDefinedV2()
	got, err := json.Marshal(rev)
	require.NoError(t, err)
	b := golden(t, "budget.v2.defined-v2.json", got)
	back, err := events.DecodeBudgetRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, back)
}

// TestAsBudgetDefinedV2_Upcast: the frozen v1 event upcasts to a v2 in
// UTC, enabled, without slot or thresholds; v2 passes as it is; anything
// else is refused.
func TestAsBudgetDefinedV2_Upcast(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", string(events.TypeBudgetDefined)+".json"))
	require.NoError(t, err)
	e, err := events.DecodeEvent(b)
	require.NoError(t, err)
	v2, ok := events.AsBudgetDefinedV2(e)
	require.True(t, ok)
	v1 := e.(events.BudgetDefined)
	require.Equal(t, events.BudgetDefinedV2{Budget: v1.Budget, Limit: v1.Limit, Unit: v1.Unit, At: v1.At}, v2)

	g := goldenDefinedV2()
	got, ok := events.AsBudgetDefinedV2(g)
	require.True(t, ok)
	require.Equal(t, g, got)

	_, ok = events.AsBudgetDefinedV2(goldenEvents()[1])
	require.False(t, ok)

	// A v2 event with only the v1 fields encodes without the new ones.
	plain, err := events.EncodeEvent(v2)
	require.NoError(t, err)
	require.Equal(t, `{"type":"budget.defined.v2","budget":{"scope":"org:acme","period":"month"},"limit":"100.5","unit":"USD","at":"2026-11-30T12:34:56.123456789Z"}`, string(plain))
	// Strict: an unknown field is refused.
	_, err = events.DecodeEvent([]byte(`{"type":"budget.defined.v2","budget":{"scope":"org:acme","period":"month"},"limit":"1","unit":"USD","at":"2026-11-30T12:34:56Z","color":"red"}`))
	require.Error(t, err)
}

func TestPeriod_InstanceWeek(t *testing.T) {
	tests := []struct {
		at   time.Time
		want string
	}{
		{time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), "2026-W49"},              // a Tuesday
		{time.Date(2026, 11, 29, 23, 59, 59, 999_999_999, time.UTC), "2026-W48"}, // Sunday, last ns
		{time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), "2026-W49"},              // Monday, first ns
		{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), "2026-W53"},                // ISO week-year 2026
		{time.Date(2025, 12, 29, 0, 0, 0, 0, time.UTC), "2026-W01"},              // ISO week-year 2026
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, events.PeriodWeek.Instance(tt.at), tt.at)
		require.NoError(t, events.ValidateToken("instance", tt.want, events.MaxIDLen))
	}
}

// TestPeriod_InstanceIn: in a named zone the instance is the local date's,
// across both DST changes of Europe/Berlin in 2026 (29 March, 25 October).
func TestPeriod_InstanceIn(t *testing.T) {
	berlin, err := events.LoadZone("Europe/Berlin")
	require.NoError(t, err)
	tests := []struct {
		at               time.Time
		month, week, day string
		utcMonth, utcDay string
	}{
		// 23:30 UTC on 31 Oct (after the October change, UTC+1) is
		// 00:30 on 1 Nov in Berlin.
		{time.Date(2026, 10, 31, 23, 30, 0, 0, time.UTC), "2026-11", "2026-W44", "2026-11-01", "2026-10", "2026-10-31"},
		{time.Date(2026, 10, 31, 22, 59, 59, 0, time.UTC), "2026-10", "2026-W44", "2026-10-31", "2026-10", "2026-10-31"},
		// Summer time (UTC+2): local midnight is 22:00 UTC.
		{time.Date(2026, 6, 30, 22, 0, 0, 0, time.UTC), "2026-07", "2026-W27", "2026-07-01", "2026-06", "2026-06-30"},
		{time.Date(2026, 6, 30, 21, 59, 59, 999_999_999, time.UTC), "2026-06", "2026-W27", "2026-06-30", "2026-06", "2026-06-30"},
		// The night of the March change: 29 March 2026 has 23 hours in
		// Berlin; 22:00 UTC on 29 March is already 30 March 00:00 local.
		{time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC), "2026-03", "2026-W14", "2026-03-30", "2026-03", "2026-03-29"},
		{time.Date(2026, 3, 29, 21, 59, 59, 0, time.UTC), "2026-03", "2026-W13", "2026-03-29", "2026-03", "2026-03-29"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.month, events.PeriodMonth.InstanceIn(tt.at, berlin), tt.at)
		require.Equal(t, tt.week, events.PeriodWeek.InstanceIn(tt.at, berlin), tt.at)
		require.Equal(t, tt.day, events.PeriodDay.InstanceIn(tt.at, berlin), tt.at)
		require.Equal(t, tt.utcMonth, events.PeriodMonth.InstanceIn(tt.at, nil), tt.at)
		require.Equal(t, tt.utcDay, events.PeriodDay.Instance(tt.at), tt.at)
		require.Equal(t, "all", events.PeriodLifetime.InstanceIn(tt.at, berlin))
	}
}

func TestLoadZone(t *testing.T) {
	for _, tz := range []string{"", "UTC"} {
		loc, err := events.LoadZone(tz)
		require.NoError(t, err)
		require.Equal(t, time.UTC, loc)
	}
	for _, tz := range []string{"Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"} {
		_, err := events.LoadZone(tz)
		require.NoError(t, err, tz)
	}
	for _, bad := range []string{"Local", "Mars/Olympus", "europe/berlin", "../../etc/passwd", "Europe/Berlin ", "UTC+1", string(make([]byte, 100))} {
		_, err := events.LoadZone(bad)
		requireCode(t, err, events.CodeInvalidTZ)
	}
}
