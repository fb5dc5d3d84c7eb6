package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestDefaultDefined_Golden freezes default.defined.v1, its default.v1
// revision, and a budget.defined.v2 created from a default (from_default;
// the v2 golden without it is unchanged).
func TestDefaultDefined_Golden(t *testing.T) {
	slot := events.MustMoney("1")
	ev := events.DefaultDefined{Kind: "user", Period: events.PeriodMonth, Limit: events.MustMoney("10"), Unit: "USD",
		TZ: "Europe/Berlin", FixedSlot: &slot, Thresholds: []events.Money{events.MustMoney("0.5")}, Changed: []string{"limit"}, At: fixedAt}
	got, err := events.EncodeEvent(ev)
	require.NoError(t, err)
	b := golden(t, string(events.TypeDefaultDefined)+".json", got)
	back, err := events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(ev), back)

	rev := events.DefaultRevision{Schema: events.SchemaDefault, Chain: events.Chain{Prev: 3, PrevHash: events.HashPayload([]byte("revision 3"))},
		Kind: ev.Kind, Period: ev.Period, Limit: ev.Limit, Unit: ev.Unit, TZ: ev.TZ, FixedSlot: ev.FixedSlot, Thresholds: ev.Thresholds,
		Events: events.Events{ev}}
	got, err = json.Marshal(rev)
	require.NoError(t, err)
	b = golden(t, events.SchemaDefault+".json", got)
	backRev, err := events.DecodeDefaultRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, backRev)

	v2 := goldenDefinedV2()
	v2.Changed, v2.FromDefault = nil, 7
	got, err = events.EncodeEvent(v2)
	require.NoError(t, err)
	b = golden(t, "budget.defined.v2.from-default.json", got)
	back, err = events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(v2), back)

	for _, c := range []struct {
		in   string
		kind string
		ok   bool
		err  bool
	}{{"user:*", "user", true, false}, {"user:u1", "", false, false}, {"User:*", "", true, true}, {"user", "", false, false}} {
		k, ok, err := events.ParseDefaultScope(c.in)
		require.Equal(t, c.kind, k, c.in)
		require.Equal(t, c.ok, ok, c.in)
		require.Equal(t, c.err, err != nil, c.in)
	}
}

// TestBalanceRef_Alongside freezes the encoding of a balance of a budget
// defined alongside another in its period: its refs carry "unit" (omitted
// for every other budget, so older events encode as before).
func TestBalanceRef_Alongside(t *testing.T) {
	ref := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11", Unit: events.UnitRequests}
	o := goldenEvents()[1].(events.ReservationOpened)
	o.Balance, o.Balances, o.Amount, o.Unit = ref, []events.BalanceRef{balOrg, ref}, events.MustMoney("2"), events.UnitRequests
	got, err := events.EncodeEvent(o)
	require.NoError(t, err)
	std, err := json.Marshal(struct {
		Type events.Type `json:"type"`
		events.ReservationOpened
	}{events.TypeReservationOpened, o})
	require.NoError(t, err)
	require.Equal(t, string(std), string(got), "the hand encoder writes what encoding/json writes")
	b := golden(t, "reservation.opened.v1.alongside.json", got)
	back, err := events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(o), back)
	require.Equal(t, "org:acme/month/2026-11/requests", ref.String())
	require.Equal(t, events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth, Unit: events.UnitRequests}, ref.Budget())
}
