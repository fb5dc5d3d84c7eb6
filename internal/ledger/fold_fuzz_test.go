package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// FuzzBook_GateThenFold hands the one gate any message, under any key, at
// the sequence after a book holding one open reservation, and folds what
// passes into the book as a replica does; then the follower's stamp of
// that sequence, and a snapshot of the book loaded back. None of it may
// panic, whatever a writer signed; a message the gate refuses leaves the
// book as it was; and the book loaded from the snapshot is the book, so a
// replica that restarts from it serves what the one that folded serves.
// The seeds are revisions a replica writes (chained to the base), so that
// mutations reach the fold and not only the decoder. Run it with
//
//	go test -run '^$' -fuzz FuzzBook_GateThenFold -fuzztime 60s ./internal/ledger/
func FuzzBook_GateThenFold(f *testing.F) {
	layout := streams.Default()
	lane := layout.LaneKey(bookBal)
	_, d1 := bookRev(f, 0, nil, "a", "0.1", 1)
	_, open2 := bookRev(f, 1, d1, "b", "0.2", 2)
	f.Add(lane, open2)
	settle := events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: 1, PrevHash: events.HashPayload(d1)},
		Balances: []events.BalanceRevision{{Schema: events.SchemaBalance, Balance: bookBal, Unit: "USD", Limit: events.MustMoney("1"),
			Spent: events.MustMoney("0.15"), Reserved: events.Zero, Overrun: events.MustMoney("0.05"), Open: 0,
			Events: events.Events{events.ReservationSettled{ReservationID: "a", Balance: bookBal, Reserved: events.MustMoney("0.1"),
				Actual: events.MustMoney("0.15"), Overrun: events.MustMoney("0.05"), At: bookT0.Add(time.Second)}}}}}
	data, err := codec.AppendLane(nil, &settle)
	require.NoError(f, err)
	f.Add(lane, data)
	release := settle
	release.Balances = []events.BalanceRevision{settle.Balances[0]}
	release.Balances[0].Spent, release.Balances[0].Overrun = events.Zero, events.Zero
	release.Balances[0].Events = events.Events{events.ReservationReleased{ReservationID: "a", Balance: bookBal,
		Reserved: events.MustMoney("0.1"), Reason: events.ReasonExpired, At: bookT0.Add(2 * time.Minute)},
		events.RequestVoided{RequestID: "a", Balance: bookBal, At: bookT0.Add(2 * time.Minute)}}
	data, err = codec.AppendLane(nil, &release)
	require.NoError(f, err)
	f.Add(lane, data)
	f.Add(streams.BudgetKey(bookBal.Budget()), []byte(`{"schema":"budget.v1","budget":{"scope":"org:b","period":"month"},"limit":"2","unit":"USD"}`))
	f.Add("balance.x", []byte("junk"))
	f.Add(streams.TenantLimitsKey("acme"), []byte(`{"schema":"tenantlimits.v1","tenant":"acme","max_open":3}`))

	f.Fuzz(func(t *testing.T, key string, data []byte) {
		b := newBook(layout, time.Minute, time.Hour)
		g := gate.NewUnverified(layout)
		fold := func(seq uint64, key string, data []byte) *gate.Rejection {
			rev, rej := g.Check(b.heads, &gate.Message{Seq: seq, Subject: layout.Subject(key), Header: nats.Header{}, Data: data, At: bookT0.Add(time.Duration(seq) * time.Second)})
			if rev != nil {
				b.apply(rev)
			}
			return rej
		}
		require.Nil(t, fold(1, lane, d1))
		b.forgetUntil(1, bookT0.Add(time.Second))
		before := withoutSkips(bookView(b))

		if rej := fold(2, key, data); rej != nil {
			// The heads record the skip (the key's next write names it).
			require.Equal(t, before, withoutSkips(bookView(b)), "a refused message changed the book: %v", rej)
		}
		b.forgetUntil(2, bookT0.Add(2*time.Second))
		again, _ := roundTrip(t, b, 2, 3)
		require.Equal(t, bookView(b), bookView(again), "the snapshot of the book is not the book")
	})
}

// withoutSkips is a bookView without its lines of skipped revisions.
func withoutSkips(view string) string {
	var out []string
	for _, l := range strings.Split(view, "\n") {
		if !strings.HasPrefix(l, "skipped ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
