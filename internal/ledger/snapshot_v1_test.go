package ledger

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// TestSnapshot_ReadsVersion1: a version 1 snapshot (every reservation
// under "reservations", the window's queues naming closed ones by id)
// loads into the same book as the version 2 snapshot of that book, and
// as the book itself: open, settled, expired, expired-then-settled-late
// and a two-balance reservation closed in one balance only. How we know
// it can fail: the version 1 body is rebuilt from the version 2 one by
// moving the window's reservations back; a loader that ignored version 1
// queues would leave them out of the window (a replay unanswered).
func TestSnapshot_ReadsVersion1(t *testing.T) {
	layout := streams.Default()
	b := newBook(layout, time.Hour, 48*time.Hour)
	other := events.BalanceRef{Scope: "org:c", Period: events.PeriodMonth, Instance: "2026-11"}
	bl := map[events.BalanceRef]*balance{}
	for _, ref := range []events.BalanceRef{bookBal, other} {
		x := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, open: map[string]*Reservation{}}
		b.balances[x.key] = x
		bl[ref] = x
	}
	open := func(seq uint64, id string, refs ...events.BalanceRef) {
		for _, ref := range refs {
			b.applyEvent(bl[ref], bl[ref].key, seq, events.ReservationOpened{ReservationID: id, RequestID: "req-" + id, RequestHash: "0123456789abcdef0123456789abcdef",
				Balance: ref, Amount: events.MustMoney("0.30"), Unit: "USD", Balances: refs, ExpiresAt: bookT0.Add(time.Minute), At: bookT0})
		}
	}
	settle := func(seq uint64, id string, ref events.BalanceRef, after bool) {
		b.applyEvent(bl[ref], bl[ref].key, seq, events.ReservationSettled{ReservationID: id, Balance: ref, Reserved: events.MustMoney("0.30"),
			Actual: events.MustMoney("0.5"), Overrun: events.MustMoney("0.2"), AfterExpiry: after, Late: after, At: bookT0})
	}
	expire := func(seq uint64, id string, ref events.BalanceRef) {
		b.applyEvent(bl[ref], bl[ref].key, seq, events.ReservationReleased{ReservationID: id, Balance: ref, Reserved: events.MustMoney("0.30"),
			Reason: events.ReasonExpired, At: bookT0})
	}
	open(1, "rsv_00000000-0000-0000-0000-000000000001", bookBal)
	open(1, "open-one", bookBal)
	open(1, "rsv_00000000-0000-0000-0000-000000000003", bookBal)
	open(1, "late", bookBal)
	open(1, "two", bookBal, other)
	settle(2, "rsv_00000000-0000-0000-0000-000000000001", bookBal, false)
	expire(2, "rsv_00000000-0000-0000-0000-000000000003", bookBal)
	expire(2, "late", bookBal)
	b.forgetUntil(2, bookT0.Add(time.Second))
	settle(3, "late", bookBal, true)
	settle(3, "two", bookBal, false) // closed in bookBal, still open in other
	b.forgetUntil(3, bookT0.Add(2*time.Second))
	b.heads.Set(layout.LaneKey(bookBal), gate.Head{Valid: 3, Chained: true})
	require.Equal(t, 4, b.win.len())

	st, err := b.snapshotAs(3, 2)
	require.NoError(t, err)
	v2, err := bookFromSnapshot(layout, time.Hour, 48*time.Hour, st)
	require.NoError(t, err)
	require.Equal(t, bookView(b), bookView(v2))

	// The same state as version 1 wrote it.
	v1 := *st
	v1.Version = 1
	v1.Closed, v1.Expired = nil, nil
	for _, q := range []struct {
		from []snapClosed
		to   *[]snapClosed
	}{{st.Closed, &v1.Closed}, {st.Expired, &v1.Expired}} {
		for _, c := range q.from {
			v1.Reservations = append(v1.Reservations, *c.Reservation)
			*q.to = append(*q.to, snapClosed{ID: c.ID, At: c.At})
		}
	}
	// Version 1 kept a reservation settled late in both queues.
	v1.Expired = append(v1.Expired, snapClosed{ID: "late", At: bookT0.Add(time.Second)})
	raw, err := json.Marshal(&v1)
	require.NoError(t, err)
	var dec snapshotState
	require.NoError(t, json.Unmarshal(raw, &dec))
	got, err := bookFromSnapshot(layout, time.Hour, 48*time.Hour, &dec)
	require.NoError(t, err)
	require.Equal(t, bookView(b), bookView(got))
	r, ok := got.byRequest("req-late")
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, r.Status)
	require.Equal(t, "0.5", r.ActualAmount().String())
}
