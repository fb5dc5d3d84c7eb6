package report

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestFoldSmallest_KeepsTheTotals: the groups with the least spend (then
// the fewest denials) go into the one Other group of their unit, which
// already exists in USD and is made in EUR; a kind's Other group is never
// folded; every count and amount still adds up per unit. The shadow
// groups fold the same way, per mode and unit, their reasons summed. How
// it can fail: a group dropped instead of summed, into another unit's
// Other group, or a bigger spender folded before a smaller one.
func TestFoldSmallest_KeepsTheTotals(t *testing.T) {
	m := events.MustMoney
	rep := &AggregateReport{SpendReport: SpendReport{Groups: []SpendGroup{
		{Value: "org:a", Unit: "USD", Reservations: 3, Settled: 3, Spend: m("9"), Denials: 1},
		{Value: "user:b", Unit: "USD", Reservations: 1, Settled: 1, Spend: m("0.5")},
		{Value: "user:c", Unit: "USD", Reservations: 0, Spend: m("0"), Denials: 4},
		{Value: "user:d", Unit: "USD", Reservations: 0, Spend: m("0"), Denials: 2},
		{Value: "", Unit: "USD", Reservations: 2, Open: 2, Spend: m("1"), Reserved: m("2")},
		{Value: "run:*", Unit: "USD", Reservations: 5, Settled: 5, Spend: m("0.1")},
		{Value: "team:e", Unit: "EUR", Reservations: 1, Released: 1, Spend: m("0"), Overrun: m("0")},
		{Value: "team:f", Unit: "EUR", Reservations: 2, Settled: 2, Spend: m("3"), Overrun: m("1")},
	}, Shadow: []ShadowGroup{
		{Value: "org:a", Mode: "shadow", Unit: "USD", Admitted: 5, Amount: m("5")},
		{Value: "user:b", Mode: "shadow", Unit: "USD", Denied: 1, Asked: m("2"), Reasons: map[events.Code]int64{"limit_reached": 1}},
		{Value: "user:c", Mode: "shadow", Unit: "USD", Denied: 2, Asked: m("3"), Reasons: map[events.Code]int64{"limit_reached": 1, "unknown_budget": 1}},
	}}, Other: []int{4, 5}}
	type totals struct {
		spend, overrun, reserved                                      string
		reservations, open, settled, released, expired, late, denials int64
	}
	sums := func(gs []SpendGroup) map[string]totals {
		money := map[string][3]events.Money{}
		out := map[string]totals{}
		for _, g := range gs {
			a := money[g.Unit]
			for i, x := range []events.Money{g.Spend, g.Overrun, g.Reserved} {
				if a[i].IsZero() {
					a[i] = events.Zero
				}
				a[i] = a[i].Add(x)
			}
			money[g.Unit] = a
			o := out[g.Unit]
			o.reservations += g.Reservations
			o.open += g.Open
			o.settled += g.Settled
			o.released += g.Released
			o.expired += g.Expired
			o.late += g.Late
			o.denials += g.Denials
			o.spend, o.overrun, o.reserved = a[0].String(), a[1].String(), a[2].String()
			out[g.Unit] = o
		}
		return out
	}
	before := sums(rep.Groups)
	require.Equal(t, 4, rep.FoldSmallest(4))
	require.Equal(t, before, sums(rep.Groups))
	var values []string
	for i, g := range rep.Groups {
		values = append(values, g.Value)
		require.Equal(t, g.Value == "" || g.Value == "run:*", rep.IsOther(i), g.Value)
	}
	// Folded: team:e (EUR, 0), user:d (0, 2 denials), user:c (0, 4), user:b (0.5).
	require.ElementsMatch(t, []string{"org:a", "", "run:*", "team:f", ""}, values)
	for i, g := range rep.Groups {
		if g.Value == "" && g.Unit == "USD" {
			require.Equal(t, SpendGroup{Unit: "USD", Reservations: 3, Open: 2, Settled: 1, Spend: m("1.5"), Reserved: m("2"), Denials: 6}, g)
			require.True(t, rep.IsOther(i))
		}
		if g.Value == "" && g.Unit == "EUR" {
			require.Equal(t, int64(1), g.Released)
			require.True(t, rep.IsOther(i))
		}
	}
	require.Zero(t, rep.FoldSmallest(0))

	require.Equal(t, 2, rep.FoldSmallestShadow(2))
	require.Len(t, rep.Shadow, 2)
	for _, g := range rep.Shadow {
		if g.Other {
			require.Equal(t, int64(3), g.Denied)
			require.Equal(t, "5", g.Asked.String())
			require.Equal(t, map[events.Code]int64{"limit_reached": 2, "unknown_budget": 1}, g.Reasons)
		} else {
			require.Equal(t, "org:a", g.Value, "the one with the most decisions stays")
		}
	}
}
