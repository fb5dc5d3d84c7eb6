package feed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkRelay_Backfill measures how fast a relay turned on late fills
// the feed from a ledger that already holds b.N reservations (two events
// each, plus the budget's).
func BenchmarkRelay_Backfill(b *testing.B) {
	env := testenv.New(b)
	ctx := context.Background()
	r := replicatest.Start(b, env, replica.Config{SweepInterval: -1})
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
	b.ResetTimer()
	// A replica started with the feed on folds the ledger from its start
	// and its relay fills the feed.
	rr, err := replica.Start(ctx, env.Connect(b), env.JS, replica.Config{Layout: env.Layout, SweepInterval: -1, Feed: true})
	if err != nil {
		b.Fatal(err)
	}
	testenv.WaitFor(b, 10*time.Minute, "the back-fill", func() bool { return rr.Relay.Relayed() >= want })
	b.StopTimer()
	_ = rr.Stop()
	b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "events/s")
}
