package projector_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// A balance's Zones say which time zone its instance is a date in: the
// zone of the budget's definition when each admit into it was folded, "?"
// for an admit whose time is not in the instance in that zone. How we
// know it can fail: each step below asserts a different value, and a fold
// that took the zone from the definition at the end (or checked nothing)
// gives ["Pacific/Auckland"] or no "?".
func TestState_BalanceZones(t *testing.T) {
	ref := u17.Budget() // day, instance 2026-11-30
	bkey := streams.BudgetKey(ref)
	s := projector.NewState()
	v1 := budgetRev(t, ref, "10", "USD") // no zone: UTC
	require.NoError(t, s.Apply(1, bkey, v1))

	// At t0 (12:00 UTC) the UTC day is the instance.
	require.NoError(t, s.Apply(2, "lane.0", balanceRev(t, u17, usd("0", "1", "0", 1), opened("r1", u17, "1"))))
	b, ok := s.Balance(u17)
	require.True(t, ok)
	require.Equal(t, []string{"UTC"}, b.Zones)

	// The zone changes to Auckland (UTC+13): t0 is already 1 December
	// there, so an admit at t0 into 2026-11-30 was not decided in it.
	ev := events.BudgetDefinedV2{Budget: ref, Limit: m("10"), Unit: "USD", TZ: "Pacific/Auckland", Changed: []string{"tz"}, At: t0}
	v2, err := json.Marshal(events.BudgetRevision{Schema: events.SchemaBudget, Chain: events.Chain{Prev: 1, PrevHash: events.HashPayload(v1)},
		Budget: ref, Limit: ev.Limit, Unit: ev.Unit, TZ: ev.TZ, Events: events.Events{ev}})
	require.NoError(t, err)
	require.NoError(t, s.Apply(3, bkey, v2))
	require.NoError(t, s.Apply(4, "lane.0", balanceRev(t, u17, usd("0", "2", "0", 2), opened("r2", u17, "1"))))
	b, _ = s.Balance(u17)
	require.Equal(t, []string{"UTC", "?"}, b.Zones)

	// An admit at 23:00 UTC the day before is noon of 30 November in
	// Auckland: that zone.
	r3 := opened("r3", u17, "1")
	r3.At = t0.Add(-13 * time.Hour)
	require.NoError(t, s.Apply(5, "lane.0", balanceRev(t, u17, usd("0", "3", "0", 3), r3)))
	b, _ = s.Balance(u17)
	require.Equal(t, []string{"UTC", "?", "Pacific/Auckland"}, b.Zones)

	// A clone does not see what the original folds after it.
	c := s.Clone()
	r4 := opened("r4", u17, "1")
	require.NoError(t, s.Apply(6, "lane.0", balanceRev(t, u17, usd("0", "4", "0", 4), r4)))
	cb, _ := c.Balance(u17)
	require.Equal(t, []string{"UTC", "?", "Pacific/Auckland"}, cb.Zones)
	b, _ = s.Balance(u17)
	require.Equal(t, []string{"UTC", "?", "Pacific/Auckland"}, b.Zones)
}
