package report

import (
	"fmt"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
)

// BenchmarkAggregate_Fold folds gateway-shaped lane revisions into an
// Aggregate as a replica's fold hands them over (decoded by the gate): each
// revision opens 12 reservations in one budget, with the gateway's three
// metadata keys, and settles the 12 the revision before it opened. Reported
// per reservation (an open and a settle): what the report adds to a
// replica's fold and to its hot path.
func BenchmarkAggregate_Fold(b *testing.B) {
	const perRev = 12
	ref := events.BalanceRef{Scope: "team:search", Period: events.PeriodMonth, Instance: "2026-12"}
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	models := []string{"gpt-4o", "gpt-4o-mini", "claude-sonnet"}
	revs := make([]*gate.Revision, b.N/perRev+2)
	for r := range revs {
		var evs events.Events
		if r > 0 {
			for i := range perRev {
				id := fmt.Sprintf("rsv-%d-%d", r-1, i)
				evs = append(evs, events.ReservationSettled{ReservationID: id, Balance: ref, Reserved: events.MustMoney("0.05"),
					Actual: events.MustMoney("0.0123"), Overrun: events.Zero, At: at})
			}
		}
		for i := range perRev {
			id := fmt.Sprintf("rsv-%d-%d", r, i)
			evs = append(evs, events.ReservationOpened{ReservationID: id, RequestID: "req-" + id, RequestHash: "h", Balance: ref,
				Amount: events.MustMoney("0.05"), Unit: "USD", Balances: []events.BalanceRef{ref}, ExpiresAt: at.Add(time.Minute), At: at,
				Metadata: map[string]string{"key_id": fmt.Sprintf("k%d", i%8), "model": models[i%3], "endpoint": "chat.completions"}})
		}
		lane := &events.LaneRevision{Schema: events.SchemaLane, Balances: []events.BalanceRevision{{Balance: ref, Unit: "USD", Events: evs}}}
		if r > 0 {
			lane.Chain = events.Chain{Prev: uint64(r), PrevHash: fmt.Sprint(r - 1)}
		}
		revs[r] = &gate.Revision{Seq: uint64(r + 1), Key: "lane.0", Lane: lane, Hash: fmt.Sprint(r)}
	}
	a := NewAggregate()
	b.ReportAllocs()
	b.ResetTimer()
	for r, rev := range revs {
		if r*perRev >= b.N && r > 0 {
			break
		}
		if err := a.apply(message{seq: rev.Seq, key: rev.Key, at: at, rev: rev}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAggregate_SnapshotLock is what a replica writing a snapshot
// holds its book's lock for, for the report's section, with 100,000
// reservations tracked (open, or expired and held for late settles, as a
// caller that lets its reservations expire leaves them): "encode" is the
// whole encoding, which the lock held before; "copy" the copy it holds
// now, the encoding done after it lets go.
func BenchmarkAggregate_SnapshotLock(b *testing.B) {
	const n, perRev = 100_000, 100
	ref := events.BalanceRef{Scope: "team:search", Period: events.PeriodMonth, Instance: "2026-12"}
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	a := NewAggregate()
	for r := range n / perRev {
		var evs events.Events
		for i := range perRev {
			id := fmt.Sprintf("rsv-%d-%d", r, i)
			evs = append(evs, events.ReservationOpened{ReservationID: id, RequestID: "req-" + id, RequestHash: "h", Balance: ref,
				Amount: events.MustMoney("0.01"), Unit: "USD", Balances: []events.BalanceRef{ref}, ExpiresAt: at.Add(time.Second), At: at,
				Metadata: map[string]string{"key_id": "k1", "model": "gpt-4o-mini"}})
		}
		lane := &events.LaneRevision{Schema: events.SchemaLane, Balances: []events.BalanceRevision{{Balance: ref, Unit: "USD", Events: evs}}}
		if r > 0 {
			lane.Chain = events.Chain{Prev: uint64(r), PrevHash: fmt.Sprint(r - 1)}
		}
		if err := a.apply(message{seq: uint64(r + 1), key: "lane.0", at: at, rev: &gate.Revision{Seq: uint64(r + 1), Key: "lane.0", Lane: lane, Hash: fmt.Sprint(r)}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		for b.Loop() {
			_ = a.snapshotCopy()
		}
	})
}
