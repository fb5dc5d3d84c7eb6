package ledger

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// The book is a pure fold: these tests need no server.

var (
	bookT0  = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	bookBal = events.BalanceRef{Scope: "org:b", Period: events.PeriodMonth, Instance: "2026-11"}
)

func bookRev(t testing.TB, prev uint64, prevData []byte, id string, reserved string, open int64) (events.LaneRevision, []byte) {
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
	data, err := codec.AppendLane(nil, &rev)
	require.NoError(t, err)
	return rev, data
}

// TestBook_Chain: the book folds a chain of lane revisions that pass the
// gate, skips one already folded, and leaves a gap or a fork unfolded,
// unchanged. How we know it can fail: the refused revisions are valid on
// their own numbers; only the chain tells them apart.
func TestBook_Chain(t *testing.T) {
	layout := streams.Default()
	lane := layout.LaneKey(bookBal)
	b := newBook(layout, time.Minute, time.Hour)
	g := gate.New(layout, nil)
	fold := func(seq uint64, data []byte) *gate.Rejection {
		rev, rej := g.Check(b.heads, &gate.Message{Seq: seq, Subject: layout.Subject(lane), Header: nats.Header{}, Data: data})
		if rev != nil {
			b.apply(rev)
		}
		return rej
	}
	_, d1 := bookRev(t, 0, nil, "a", "0.1", 1)
	require.Nil(t, fold(1, d1))
	_, d2 := bookRev(t, 1, d1, "b", "0.2", 2)
	require.Nil(t, fold(4, d2))
	require.Nil(t, fold(4, d2), "already folded: skipped")
	before := b.balance(streams.BalanceKey(bookBal), bookBal)
	for name, prev := range map[string]struct {
		seq  uint64
		data []byte
	}{"gap": {3, d2}, "fork": {4, []byte("another payload")}, "stale": {1, d1}} {
		_, d := bookRev(t, prev.seq, prev.data, "c", "0.3", 3)
		seq := uint64(9)
		rej := fold(seq, d)
		require.NotNil(t, rej, name)
		require.EqualValues(t, 9, rej.Seq)
		require.Equal(t, before, b.balance(streams.BalanceKey(bookBal), bookBal), name)
		require.EqualValues(t, 9, b.rev(lane), "the skipped revision is what the next write names")
		valid, _ := b.valid(lane)
		require.EqualValues(t, 4, valid, "the chain goes on from the last valid revision")
		_, ok := b.reservations["c"]
		require.False(t, ok)
		b.heads.Set(lane, gate.Head{Valid: 4, Hash: events.HashPayload(d2), Chained: true}) // forget the skip for the next case
	}
	_, d3 := bookRev(t, 4, d2, "c", "0.3", 3)
	require.Nil(t, fold(9, d3))
	require.Equal(t, 3, b.balance(streams.BalanceKey(bookBal), bookBal).Open)
}

// TestBook_QueueByStatusAtClose: a reservation that expired and was then
// settled late, both folded before the follower stamped either (a
// committer folds its own writes first), ends in the window exactly as
// when the follower stamps between the two: stamped into the expired ring
// by the status it closed with, then moved to the closed ring by its late
// settle. Otherwise a writer's snapshot and a fresh fold of the same
// stream disagree.
func TestBook_QueueByStatusAtClose(t *testing.T) {
	key := streams.BalanceKey(bookBal)
	amt := events.MustMoney("0.5")
	evs := []events.Event{
		1: events.ReservationOpened{ReservationID: "r", RequestID: "q", RequestHash: "h", Balance: bookBal, Amount: amt,
			Unit: "USD", Balances: []events.BalanceRef{bookBal}, ExpiresAt: bookT0.Add(time.Second), At: bookT0},
		2: events.ReservationReleased{ReservationID: "r", Balance: bookBal, Reserved: amt, Reason: events.ReasonExpired, At: bookT0.Add(2 * time.Second)},
		3: events.ReservationSettled{ReservationID: "r", Balance: bookBal, Reserved: amt, Actual: amt, Overrun: amt, Late: true, AfterExpiry: true, At: bookT0.Add(3 * time.Second)},
	}
	// steps: >0 folds that revision, <0 stamps up to -step.
	run := func(steps ...int) *book {
		b := newBook(streams.Default(), time.Minute, time.Hour)
		for _, s := range steps {
			if s < 0 {
				b.forgetUntil(uint64(-s), bookT0.Add(time.Duration(-s-1)*time.Second))
				continue
			}
			b.applyBalance(key, uint64(s), &events.BalanceRevision{Schema: events.SchemaBalance, Balance: bookBal, Unit: "USD",
				Limit: events.MustMoney("1"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero, Events: events.Events{evs[s]}})
		}
		return b
	}
	follower := run(1, -1, 2, -2, 3, -3)
	want := bookView(follower)
	r, ok := follower.get("r")
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, r.Status)
	n := 0
	follower.win.each(winClosed, func(*Reservation, time.Time) { n++ })
	follower.win.each(winExpired, func(*Reservation, time.Time) { n += 10 })
	require.Equal(t, 1, n, "in the closed ring only")
	require.Equal(t, want, bookView(run(1, -1, 2, 3, -3)), "both closes stamped at once")
	require.Equal(t, want, bookView(run(1, -1, 2, 3, -2, -3)), "the late settle folded before the expiry is stamped")
}

// foldSteps folds the single-event revisions evs of bookBal into a book
// with a closed retention of a second and an expired one of two: a step
// s > 0 folds revision s, a step s < 0 is the follower stamping message -s
// (server time at[-s]). check, if not nil, runs after every step.
func foldSteps(evs []events.Event, at []time.Time, check func(step int, b *book), steps ...int) *book {
	key := streams.BalanceKey(bookBal)
	b := newBook(streams.Default(), time.Second, 2*time.Second)
	for _, s := range steps {
		if s < 0 {
			b.forgetUntil(uint64(-s), at[-s])
		} else {
			b.applyBalance(key, uint64(s), &events.BalanceRevision{Schema: events.SchemaBalance, Balance: bookBal, Unit: "USD",
				Limit: events.MustMoney("1"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero, Events: events.Events{evs[s]}})
		}
		if check != nil {
			check(s, b)
		}
	}
	return b
}

// TestBook_LateSettleFoldedAhead: a reservation expires (2), its expired
// retention ends by the server time of the next message (3), and it is
// then settled late (4). A fold in stream order has forgotten the expiry
// when it folds the settle, and holds nothing of the reservation; so must
// a writer that folds its own settle before its follower has stamped 3
// (a committer folds its own writes first), and so must its snapshots.
//
// How we know it can fail: before the fix the writer's fold took the
// expired entry out of the window into the book's maps, and its book held
// the reservation settled in the closed ring ("window 1" against "window
// 0"): TestSnapshot_TailEqualsWholeFold caught that under load, a
// snapshot of the writer holding a late-settled reservation that a fold
// of the stream to the snapshot's sequence did not.
func TestBook_LateSettleFoldedAhead(t *testing.T) {
	amt := events.MustMoney("0.5")
	evs := []events.Event{
		1: events.ReservationOpened{ReservationID: "r", RequestID: "q", RequestHash: "h", Balance: bookBal, Amount: amt,
			Unit: "USD", Balances: []events.BalanceRef{bookBal}, ExpiresAt: bookT0.Add(time.Second), At: bookT0},
		2: events.ReservationReleased{ReservationID: "r", Balance: bookBal, Reserved: amt, Reason: events.ReasonExpired, At: bookT0.Add(time.Second)},
		3: events.ReservationOpened{ReservationID: "s", RequestID: "q2", RequestHash: "h", Balance: bookBal, Amount: amt,
			Unit: "USD", Balances: []events.BalanceRef{bookBal}, ExpiresAt: bookT0.Add(time.Hour), At: bookT0.Add(5 * time.Second)},
		4: events.ReservationSettled{ReservationID: "r", Balance: bookBal, Reserved: amt, Actual: amt, Overrun: amt, Late: true, AfterExpiry: true, At: bookT0.Add(5 * time.Second)},
	}
	at := []time.Time{1: bookT0, 2: bookT0.Add(time.Second), 3: bookT0.Add(5 * time.Second), 4: bookT0.Add(5 * time.Second)}
	fold := foldSteps(evs, at, nil, 1, -1, 2, -2, 3, -3, 4, -4)
	want := bookView(fold)
	_, ok := fold.get("r")
	require.False(t, ok, "the expiry was forgotten before the settle")
	require.Contains(t, want, "window 0")
	require.Equal(t, want, bookView(foldSteps(evs, at, nil, 1, -1, 2, -2, 3, 4, -3, -4)), "the settle folded before 3 is stamped")
	require.Equal(t, want, bookView(foldSteps(evs, at, nil, 1, -1, 2, 3, 4, -2, -3, -4)), "the expiry and the settle folded before either is stamped")

	// Within the retention the late settle finds the expiry, whoever
	// folds it first: stamped into the closed ring at the settle's time.
	at[3], at[4] = bookT0.Add(2*time.Second), bookT0.Add(2*time.Second)
	fold = foldSteps(evs, at, nil, 1, -1, 2, -2, 3, -3, 4, -4)
	want = bookView(fold)
	r, ok := fold.get("r")
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, r.Status)
	require.Contains(t, want, "closed queue [r@"+at[4].Format(time.RFC3339Nano))
	require.Equal(t, want, bookView(foldSteps(evs, at, nil, 1, -1, 2, -2, 3, 4, -3, -4)), "the settle folded before 3 is stamped")
	require.Equal(t, want, bookView(foldSteps(evs, at, nil, 1, -1, 2, 3, 4, -2, -3, -4)), "the expiry and the settle folded before either is stamped")
}

// TestBook_VoidAgainFoldedAhead: a request id is voided (1), the void's
// retention ends by the server time of the next message (2), and it is
// voided again (3). A fold in stream order has forgotten the first void
// and makes a tombstone of the second, stamped at 3; so must a writer
// that folds its own second void before its follower has stamped 2, and
// its book must remember the request id voided at every step in between
// (its admits refuse a voided request id).
//
// How we know it can fail: before the fix the writer's fold of the
// second void found the first tombstone and made none; the follower then
// forgot the first, and the writer's book remembered no void of the
// request id while a fold of the stream did.
func TestBook_VoidAgainFoldedAhead(t *testing.T) {
	evs := []events.Event{
		1: events.RequestVoided{RequestID: "q", Balance: bookBal, At: bookT0},
		2: events.ReservationOpened{ReservationID: "s", RequestID: "q2", RequestHash: "h", Balance: bookBal, Amount: events.MustMoney("0.5"),
			Unit: "USD", Balances: []events.BalanceRef{bookBal}, ExpiresAt: bookT0.Add(time.Hour), At: bookT0.Add(5 * time.Second)},
		3: events.RequestVoided{RequestID: "q", Balance: bookBal, At: bookT0.Add(5 * time.Second)},
	}
	at := []time.Time{1: bookT0, 2: bookT0.Add(5 * time.Second), 3: bookT0.Add(5 * time.Second)}
	fold := foldSteps(evs, at, nil, 1, -1, 2, -2, 3, -3)
	want := bookView(fold)
	require.Contains(t, want, "voided queue [q@"+at[3].Format(time.RFC3339Nano)+"]")
	remembered := func(step int, b *book) {
		if step == 1 || step == 3 || step < -1 {
			require.NotNil(t, b.voids["q"], "after step %d", step)
		}
	}
	require.Equal(t, want, bookView(foldSteps(evs, at, remembered, 1, -1, 2, 3, -2, -3)), "the second void folded before 2 is stamped")
	require.Equal(t, want, bookView(foldSteps(evs, at, remembered, 1, 2, 3, -1, -2, -3)), "both voids folded before either is stamped")

	// Within the retention the second void changes nothing: the first
	// tombstone stays, stamped at 1.
	at[2], at[3] = bookT0.Add(500*time.Millisecond), bookT0.Add(500*time.Millisecond)
	want = bookView(foldSteps(evs, at, nil, 1, -1, 2, -2, 3, -3))
	require.Contains(t, want, "voided queue [q@"+at[1].Format(time.RFC3339Nano)+"]")
	require.Equal(t, want, bookView(foldSteps(evs, at, remembered, 1, -1, 2, 3, -2, -3)))
	require.Equal(t, want, bookView(foldSteps(evs, at, remembered, 1, 2, 3, -1, -2, -3)))
}
