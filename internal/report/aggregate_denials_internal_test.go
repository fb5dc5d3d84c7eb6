package report

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestDenialAggregate folds denial records by hand: counts per scope (every
// scope named, once each even if named twice), per metadata value with the
// "" group for the key's absence, per tenant, within whole-hour bounds;
// values past MaxReportValues add up in Other (scopes in their kind's);
// an undecodable record is skipped; prune drops the hours whose records
// all left the stream; and addDenials merges the counts into a report's
// groups.
func TestDenialAggregate(t *testing.T) {
	h0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	rec := func(at time.Time, tenant string, scopes []string, meta map[string]string) []byte {
		b, err := events.EncodeAdmitDenied(events.AdmitDenied{At: at, Replica: "r", Tenant: tenant, RequestID: "x",
			Scopes: scopes, Unit: "USD", Metadata: meta, Denial: events.Denial{Reason: events.ReasonLimitReached}})
		require.NoError(t, err)
		return b
	}
	a := newDenialAggregate()
	a.apply(1, rec(h0.Add(time.Minute), "", []string{"org:a", "team:x", "team:x"}, map[string]string{"model": "m1"}))
	a.apply(2, rec(h0.Add(61*time.Minute), "", []string{"org:a"}, nil))
	a.apply(3, rec(h0.Add(62*time.Minute), "acme", []string{"org:a"}, map[string]string{"model": "m1"}))
	a.apply(4, []byte(`{"type":"nope"}`))
	a.apply(2, rec(h0, "", []string{"org:z"}, nil)) // at or below the position: skipped
	require.Equal(t, uint64(4), a.pos)

	c, err := a.counts(ByScope, Filter{})
	require.NoError(t, err)
	require.Equal(t, map[groupKey]int64{{Value: "org:a", Unit: "USD"}: 2, {Value: "team:x", Unit: "USD"}: 1,
		{Value: "acme/org:a", Unit: "USD"}: 1}, c)
	c, err = a.counts(ByMetadata("model"), Filter{})
	require.NoError(t, err)
	require.Equal(t, map[groupKey]int64{{Value: "m1", Unit: "USD"}: 2, {Unit: "USD"}: 1}, c)
	c, err = a.counts(ByMetadata("model"), Filter{OneTenant: true, Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, map[groupKey]int64{{Value: "m1", Unit: "USD"}: 1}, c)
	c, err = a.counts(ByScope, Filter{From: h0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, map[groupKey]int64{{Value: "org:a", Unit: "USD"}: 1, {Value: "acme/org:a", Unit: "USD"}: 1}, c)
	c, err = a.counts(ByScope, Filter{To: h0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, map[groupKey]int64{{Value: "org:a", Unit: "USD"}: 1, {Value: "team:x", Unit: "USD"}: 1}, c)

	// Merged into a report: an existing group gains its count, a group of
	// denials alone is added, the order is the report's.
	rep := &AggregateReport{SpendReport: SpendReport{Groups: []SpendGroup{{Value: "org:a", Unit: "USD", Reservations: 3, Spend: events.MustMoney("1")}}}}
	c, _ = a.counts(ByScope, Filter{})
	addDenials(rep, c)
	require.Equal(t, []SpendGroup{{Value: "org:a", Unit: "USD", Reservations: 3, Spend: events.MustMoney("1"), Denials: 2},
		{Value: "acme/org:a", Unit: "USD", Denials: 1}, {Value: "team:x", Unit: "USD", Denials: 1}}, rep.Groups)

	// The first hour's records left the stream (first sequence 2).
	a.prune(2)
	c, _ = a.counts(ByScope, Filter{})
	require.Equal(t, map[groupKey]int64{{Value: "org:a", Unit: "USD"}: 1, {Value: "acme/org:a", Unit: "USD"}: 1}, c)

	// Past MaxReportValues scopes of a kind: its Other group (team:*);
	// a scope of another kind still has its own.
	b := newDenialAggregate()
	for i := range MaxReportValues + 3 {
		b.apply(uint64(i+1), rec(h0, "", []string{fmt.Sprintf("team:t%d", i)}, nil))
	}
	b.apply(b.pos+1, rec(h0, "", []string{"org:late"}, nil))
	c, _ = b.counts(ByScope, Filter{})
	require.Len(t, c, MaxReportValues+2)
	require.Equal(t, int64(3), c[groupKey{Value: "team:*", Other: true, Unit: "USD"}])
	require.Equal(t, int64(1), c[groupKey{Value: "org:late", Unit: "USD"}])

	// Each tenant has its own slots: after b's, another tenant's new
	// scope and its keys are its own, not Other nor refused.
	for i := range MaxReportKeys + 1 {
		b.apply(b.pos+1, rec(h0, "", []string{"org:a"}, map[string]string{fmt.Sprintf("k%02d", i): "v"}))
	}
	b.apply(b.pos+1, rec(h0, "acme", []string{"team:new"}, map[string]string{"model": "m1"}))
	c, err = b.counts(ByScope, Filter{OneTenant: true, Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, map[groupKey]int64{{Value: "acme/team:new", Unit: "USD"}: 1}, c)
	c, err = b.counts(ByMetadata("model"), Filter{OneTenant: true, Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, map[groupKey]int64{{Value: "m1", Unit: "USD"}: 1}, c)
	_, err = b.counts(ByMetadata("model"), Filter{})
	require.ErrorIs(t, err, ErrKeyNotTracked, "over every tenant: the untenanted dropped keys")
}
