package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// The book is a pure fold: these tests need no server.

var (
	bookT0  = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	bookBal = events.BalanceRef{Scope: "org:b", Period: events.PeriodMonth, Instance: "2026-11"}
)

func bookRev(t *testing.T, prev uint64, prevData []byte, id string, reserved string, open int64) (events.LaneRevision, []byte) {
	t.Helper()
	c := events.Chain{Prev: prev}
	if prevData != nil {
		c.PrevHash = events.HashPayload(prevData)
	}
	rev := events.LaneRevision{Schema: events.SchemaLane, Chain: c, Balances: []events.BalanceRevision{{
		Schema: events.SchemaBalance, Balance: bookBal, Unit: "USD", Limit: events.MustMoney("1"),
		Spent: events.Zero, Reserved: events.MustMoney(reserved), Overrun: events.Zero, Open: open,
		Events: events.Events{events.ReservationOpened{ReservationID: id, RequestID: id, RequestHash: "h", Balance: bookBal,
			Amount: events.MustMoney("0.1"), Unit: "USD", Balances: []events.BalanceRef{bookBal}, ExpiresAt: bookT0.Add(time.Hour), At: bookT0}},
	}}}
	data, err := rev.AppendJSON(nil)
	require.NoError(t, err)
	return rev, data
}

// TestBook_Chain: the book folds a chain of lane revisions, skips one
// already folded, and refuses a gap or a fork with a ChainError, unchanged.
// How we know it can fail: the refused revisions are valid on their own
// numbers; only the chain tells them apart.
func TestBook_Chain(t *testing.T) {
	layout := streams.Default()
	lane := layout.LaneKey(bookBal)
	b := newBook(layout, time.Minute, time.Hour)
	r1, d1 := bookRev(t, 0, nil, "a", "0.1", 1)
	require.NoError(t, b.applyLane(lane, 1, &r1, events.HashPayload(d1)))
	r2, d2 := bookRev(t, 1, d1, "b", "0.2", 2)
	require.NoError(t, b.applyLane(lane, 4, &r2, events.HashPayload(d2)))
	require.NoError(t, b.applyLane(lane, 4, &r2, events.HashPayload(d2)), "already folded: skipped")
	before := b.balance(streams.BalanceKey(bookBal), bookBal)
	for name, prev := range map[string]struct {
		seq  uint64
		data []byte
	}{"gap": {3, d2}, "fork": {4, []byte("another payload")}, "stale": {1, d1}} {
		r, d := bookRev(t, prev.seq, prev.data, "c", "0.3", 3)
		err := b.applyLane(lane, 9, &r, events.HashPayload(d))
		var ce *events.ChainError
		require.True(t, errors.As(err, &ce), "%s: %v", name, err)
		require.EqualValues(t, 9, ce.Seq)
		require.Equal(t, before, b.balance(streams.BalanceKey(bookBal), bookBal), name)
		require.EqualValues(t, 4, b.rev(lane))
		_, ok := b.reservations["c"]
		require.False(t, ok)
	}
	r3, d3 := bookRev(t, 4, d2, "c", "0.3", 3)
	require.NoError(t, b.applyLane(lane, 9, &r3, events.HashPayload(d3)))
	require.Equal(t, 3, b.balance(streams.BalanceKey(bookBal), bookBal).Open)
}

// TestBook_QueueByStatusAtClose: a reservation that expired and was then
// settled late, both folded before the follower stamped either (a
// committer folds its own writes first), is queued as expired and as
// closed, exactly as when the follower stamps between the two: the queue
// is chosen by the status at the close, not at the stamp. Otherwise a
// writer's snapshot and a fresh fold of the same stream disagree.
func TestBook_QueueByStatusAtClose(t *testing.T) {
	b := newBook(streams.Default(), time.Minute, time.Hour)
	key := streams.BalanceKey(bookBal)
	amt := events.MustMoney("0.5")
	fold := func(seq uint64, e events.Event) {
		b.applyBalance(key, seq, &events.BalanceRevision{Schema: events.SchemaBalance, Balance: bookBal, Unit: "USD",
			Limit: events.MustMoney("1"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero, Events: events.Events{e}})
	}
	fold(1, events.ReservationOpened{ReservationID: "r", RequestID: "q", RequestHash: "h", Balance: bookBal, Amount: amt,
		Unit: "USD", Balances: []events.BalanceRef{bookBal}, ExpiresAt: bookT0.Add(time.Second), At: bookT0})
	b.forgetUntil(1, bookT0)
	fold(2, events.ReservationReleased{ReservationID: "r", Balance: bookBal, Reserved: amt, Reason: events.ReasonExpired, At: bookT0.Add(2 * time.Second)})
	fold(3, events.ReservationSettled{ReservationID: "r", Balance: bookBal, Reserved: amt, Actual: amt, Overrun: amt, Late: true, AfterExpiry: true, At: bookT0.Add(3 * time.Second)})
	b.forgetUntil(3, bookT0.Add(3*time.Second))
	r := b.reservations["r"]
	require.Equal(t, events.StatusSettled, r.Status)
	require.Len(t, b.expired, 1, "queued as expired: its status when it expired")
	require.Same(t, r, b.expired[0].r)
	require.Len(t, b.closed, 1, "and as closed, by its late settle")
	require.Same(t, r, b.closed[0].r)
}
