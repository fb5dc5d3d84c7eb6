package feed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/feed"
	"github.com/spendgate/spendgate/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkRelay_Backfill measures how fast a relay turned on late fills
// the feed from a ledger that already holds b.N reservations (two events
// each, plus the budget's).
func BenchmarkRelay_Backfill(b *testing.B) {
	env := testenv.New(b)
	ctx := context.Background()
	r := env.StartSpendgate(b, service.ReplicaConfig{SweepInterval: -1})
	_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:bench", Period: events.PeriodMonth}, events.MustMoney("1000000000"), "USD", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprint("b-", i), Scopes: []string{"org:bench"}, Amount: "1"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "1"}); err != nil {
			b.Fatal(err)
		}
	}
	want := uint64(1 + 2*b.N)
	rl, err := feed.NewRelay(env.JS, env.Layout)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rl.Run(rctx) }()
	testenv.WaitFor(b, 10*time.Minute, "the back-fill", func() bool { return rl.Relayed() >= want })
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "events/s")
}

// startReservations is the size of BenchmarkRelay_Start's ledger.
const startReservations = 20_000

// BenchmarkRelay_Start measures how long a relay takes after a restart to
// relay a new reservation (its two events), against a ledger that already
// holds startReservations reservations (two revisions each) whose events
// are all in the feed: "full" starts without checkpoints and folds the
// ledger from its first revision; "checkpoint" starts from a checkpoint
// DefaultCheckpointEvery revisions behind the feed's tail, the most a
// relay writing checkpoints at the default interval leaves behind when it
// stops. revisions/op is how many ledger revisions the starting relay
// decided.
func BenchmarkRelay_Start(b *testing.B) {
	env := testenv.New(b)
	ctx := context.Background()
	r := env.StartSpendgate(b, service.ReplicaConfig{SweepInterval: -1})
	_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:bench", Period: events.PeriodMonth}, events.MustMoney("1000000000"), "USD", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	reserve := func() {
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprint("b-", n), Scopes: []string{"org:bench"}, Amount: "1"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "1"}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	// start runs a relay until it appended want events; stop stops it.
	// It polls every 200 µs (testenv.WaitFor's 10 ms would round a
	// start from a checkpoint up).
	start := func(want uint64, opts ...feed.Option) (rl *feed.Relay, stop func()) {
		rl, err := feed.NewRelay(env.JS, env.Layout, opts...)
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rl.Run(rctx) }()
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		deadline := time.Now().Add(10 * time.Minute)
		for rl.Relayed() < want {
			if time.Now().After(deadline) {
				b.Fatalf("the relay appended %d events of %d in 10 minutes", rl.Relayed(), want)
			}
			<-tick.C
		}
		return rl, func() { cancel(); <-done }
	}
	// A relay fills the feed with the first reservations, writing
	// checkpoints; one that writes none relays the last
	// DefaultCheckpointEvery revisions' worth.
	behind := feed.DefaultCheckpointEvery / 2
	for range startReservations - behind {
		reserve()
	}
	rl, stop := start(uint64(1 + 2*(startReservations-behind)))
	stop()
	ck := rl.CheckpointStats().Written
	if ck == 0 {
		b.Fatal("the relay that filled the feed wrote no checkpoint")
	}
	for range behind {
		reserve()
	}
	_, stop = start(uint64(2*behind), feed.WithCheckpointEvery(0))
	stop()
	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	if err != nil {
		b.Fatal(err)
	}
	// dropNewer deletes the checkpoints a starting relay wrote after ck,
	// so that every start begins as far behind.
	dropNewer := func() {
		objs, err := store.List(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range objs {
			if seq, ok := streams.FeedChainSeq(o.Name); ok && seq > ck && !o.Deleted {
				if err := store.Delete(ctx, o.Name); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for _, v := range []struct {
		name string
		opts []feed.Option
	}{
		{"full", []feed.Option{feed.WithCheckpointEvery(0)}},
		{"checkpoint", nil},
	} {
		b.Run(v.name, func(b *testing.B) {
			var decided uint64
			for range b.N {
				b.StopTimer()
				reserve()
				dropNewer()
				b.StartTimer()
				rl, stop := start(2, v.opts...)
				b.StopTimer()
				stop()
				decided += rl.Decided()
			}
			b.ReportMetric(float64(decided)/float64(b.N), "revisions/op")
		})
	}
}
