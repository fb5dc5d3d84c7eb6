package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestBook_LateSettleTwoLanesCompact: a reservation held in two balances
// (two lanes) expires in both and is then settled late in both. A writer
// folds its own expiries and the first late settle before its follower
// stamps the expiry; the stamp then moves the reservation into the window
// compact (no balance holds it open any more), and the second late settle,
// folded before the first is stamped, changes the window's entry. The
// first settle's stamp must not put back the reservation as it was before
// the second settle: the book must end as a fold in stream order does.
//
// How we know it can fail: the stamp of the first late settle re-added the
// pending queue's pointer, a copy the window no longer held once it had
// compacted the entry, and the second balance's actual was lost; and when
// the later revision's settle was folded first, the earlier one's close
// (closedAgain) did not find the queue's copy by pointer, and the close was
// stamped at the later revision's time.
func TestBook_LateSettleTwoLanesCompact(t *testing.T) {
	refA := events.BalanceRef{Scope: "org:a", Period: events.PeriodMonth, Instance: "2026-11"}
	refB := events.BalanceRef{Scope: "org:b", Period: events.PeriodMonth, Instance: "2026-11"}
	refs := []events.BalanceRef{refA, refB}
	amt, act := events.MustMoney("0.5"), events.MustMoney("0.3")
	open := func(ref events.BalanceRef) events.Event {
		return events.ReservationOpened{ReservationID: "rsv_0b0e9f0a-6a2b-4c1e-9d51-1f2d3c4b5a69", RequestID: "7c0e9f0a-6a2b-4c1e-9d51-1f2d3c4b5a69",
			RequestHash: "0123456789abcdef0123456789abcdef", Balance: ref, Amount: amt, Unit: "USD", Balances: refs,
			ExpiresAt: bookT0.Add(time.Second), At: bookT0}
	}
	expire := func(ref events.BalanceRef) events.Event {
		return events.ReservationReleased{ReservationID: "rsv_0b0e9f0a-6a2b-4c1e-9d51-1f2d3c4b5a69", Balance: ref, Reserved: amt,
			Reason: events.ReasonExpired, At: bookT0.Add(2 * time.Second)}
	}
	settle := func(ref events.BalanceRef) events.Event {
		return events.ReservationSettled{ReservationID: "rsv_0b0e9f0a-6a2b-4c1e-9d51-1f2d3c4b5a69", Balance: ref, Reserved: amt,
			Actual: act, Overrun: events.Zero, Late: true, AfterExpiry: true, At: bookT0.Add(3 * time.Second)}
	}
	type step struct {
		ref events.BalanceRef
		ev  events.Event
	}
	revs := []step{1: {refA, open(refA)}, 2: {refB, open(refB)}, 3: {refA, expire(refA)}, 4: {refB, expire(refB)},
		5: {refA, settle(refA)}, 6: {refB, settle(refB)}}
	run := func(steps ...int) *book {
		b := newBook(streams.Default(), time.Hour, time.Hour)
		for _, s := range steps {
			if s < 0 {
				b.forgetUntil(uint64(-s), bookT0.Add(time.Duration(-s)*time.Second))
				continue
			}
			rv := revs[s]
			b.applyBalance(streams.BalanceKey(rv.ref), uint64(s), &events.BalanceRevision{Schema: events.SchemaBalance, Balance: rv.ref,
				Unit: "USD", Limit: events.MustMoney("1"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero,
				Events: events.Events{rv.ev}})
		}
		return b
	}
	fold := run(1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6)
	want := bookView(fold)
	r, ok := fold.get("rsv_0b0e9f0a-6a2b-4c1e-9d51-1f2d3c4b5a69")
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, r.Status)
	require.Len(t, r.Parts, 2)
	for _, p := range r.Parts {
		require.Equal(t, "0.3", p.Actual.String(), p.Key)
	}
	// Settled after the sweeper released it: a retried settle answers
	// its whole actual as overrun, as the first did, on a replica that
	// restarted from a snapshot too (the window keeps it whole, the
	// snapshot says after_expiry). Without the flag kept, the retry
	// answered actual - reserved.
	require.True(t, r.AfterExpiry)
	loaded, _ := roundTrip(t, fold, 6, SnapshotVersion)
	require.Equal(t, want, bookView(loaded))
	r, ok = loaded.get("rsv_0b0e9f0a-6a2b-4c1e-9d51-1f2d3c4b5a69")
	require.True(t, ok)
	require.True(t, r.AfterExpiry)
	require.Equal(t, want, bookView(run(1, -1, 2, -2, 3, 4, 5, 6, -3, -4, -5, -6)), "all folded before any stamp")
	require.Equal(t, want, bookView(run(1, -1, 2, -2, 3, 4, 5, -3, 6, -4, -5, -6)), "the second settle folded between the stamps")
	require.Equal(t, want, bookView(run(1, -1, 2, -2, 3, 4, 6, -3, 5, -4, -5, -6)), "the later settle folded first, between the stamps")
}
