package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestRow_ReservedInKeptBySnapshot: a reservation whose budgets hold
// different amounts (a fixed slot of 1 in a:slot, the admit's 0.2 in
// org:acme, in its month and its day) reports each scope's hold, the most
// over the scope's budgets, and Reserved the most of all; a report
// snapshot written and read back keeps them, so the open reservation is
// taken out of the sums as it was put in. How it can fail: without the
// holds in the snapshot, ReservedIn(org:acme) reads 1 after the load.
func TestRow_ReservedInKeptBySnapshot(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	slot := events.BalanceRef{Scope: "a:slot", Period: events.PeriodMonth, Instance: "2026-12", Unit: "USD"}
	month := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12", Unit: "USD"}
	day := events.BalanceRef{Scope: "org:acme", Period: events.PeriodDay, Instance: "2026-12-01", Unit: "USD"}
	all := []events.BalanceRef{slot, day, month}
	a := NewAggregate()
	for _, c := range []struct {
		ref    events.BalanceRef
		amount string
	}{{slot, "1"}, {day, "0.1"}, {month, "0.2"}} {
		ev := events.ReservationOpened{ReservationID: "rsv_1", RequestID: "r1", Balance: c.ref, Amount: events.MustMoney(c.amount), Unit: "USD",
			Balances: all, ExpiresAt: at.Add(time.Hour), At: at}
		require.NoError(t, a.rf.event(message{seq: 1, at: at}, c.ref, ev))
	}
	check := func(a *Aggregate) {
		t.Helper()
		r := a.rf.live["rsv_1"].row
		require.Equal(t, "1", r.Reserved.String())
		require.Equal(t, "1", r.ReservedIn("a:slot").String())
		require.Equal(t, "0.2", r.ReservedIn("org:acme").String())
	}
	check(a)
	data, err := a.MarshalJSON()
	require.NoError(t, err)
	b, err := UnmarshalAggregate(data)
	require.NoError(t, err)
	check(b)
}
