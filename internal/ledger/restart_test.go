package ledger_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkRestart measures restart to first admit over a history of N
// reservations (default 100,000; SPENDGATE_HISTORY=N for another size),
// each admitted and settled by 64 callers over 200 budgets, with a 1 s
// idempotency window so that the history is almost all older than the
// window: once folding the whole stream, once from a snapshot written at
// the end of the history (plus a tail of 1,000 reservations). Run it with
//
//	go test -run '^$' -bench BenchmarkRestart -benchtime 1x ./internal/ledger/
//
// With SPENDGATE_SIGNED=1 the writer signs and the restarting replica
// checks every signature it folds.
func BenchmarkRestart(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("SPENDGATE_HISTORY")); err == nil && v > 0 {
		n = v
	}
	opts := []ledger.Option{ledger.WithRetention(time.Second, time.Second), ledger.WithSnapshotEvery(0, 0)}
	if os.Getenv("SPENDGATE_SIGNED") == "1" {
		// Signed writes, and every revision's signature checked on the
		// restart's fold.
		kp, err := nkeys.CreateUser()
		require.NoError(b, err)
		seed, err := kp.Seed()
		require.NoError(b, err)
		s, err := signing.NewSigner(seed)
		require.NoError(b, err)
		ks, err := signing.ParseKeys(s.PublicKey())
		require.NoError(b, err)
		opts = append(opts, ledger.WithSigner(s), ledger.WithTrust(ks))
	}
	for i := 0; i < b.N; i++ {
		env := testenv.New(b)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		w := startBenchLedger(b, env, opts...)
		history(b, w, "h", 0, n)
		_, err := w.Snapshot(ctx)
		require.NoError(b, err)
		history(b, w, "t", 0, 1000) // the tail
		require.NoError(b, w.Sync(ctx))
		b.ResetTimer()
		for _, tc := range []struct {
			name string
			load bool
		}{{"whole-fold", false}, {"from-snapshot", true}} {
			start := time.Now()
			l := startBenchLedger(b, env, append(opts, ledger.WithSnapshotLoad(tc.load))...)
			a, err := admit.New(l)
			require.NoError(b, err)
			rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: "first-" + tc.name, Scopes: []string{"org:h0"}, Amount: "0.01"})
			require.NoError(b, err)
			require.True(b, rep.Admitted)
			b.ReportMetric(time.Since(start).Seconds(), "s-restart-to-admit-"+tc.name)
		}
		b.StopTimer()
	}
}

func startBenchLedger(b *testing.B, env *testenv.Env, opts ...ledger.Option) *ledger.Ledger {
	b.Helper()
	nc := env.Connect(b)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	l, err := ledger.New(context.Background(), nc, js, env.Layout, opts...)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready():
	case err := <-done:
		b.Fatalf("ledger stopped: %v", err)
	case <-time.After(10 * time.Minute):
		b.Fatal("ledger not ready")
	}
	return l
}

// history admits and settles reservations [from, to) through l.
func history(b *testing.B, l *ledger.Ledger, prefix string, from, to int) {
	b.Helper()
	ctx := context.Background()
	for j := 0; j < 200; j++ {
		_, err := l.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(fmt.Sprintf("org:h%d", j)), Period: events.PeriodMonth},
			events.MustMoney("100000000"), "USD", time.Now())
		require.NoError(b, err)
	}
	a, err := admit.New(l)
	require.NoError(b, err)
	s, err := settle.New(l)
	require.NoError(b, err)
	var next atomic.Int64
	next.Store(int64(from))
	var failed atomic.Value
	var wg sync.WaitGroup
	for c := 0; c < 64; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= to {
					return
				}
				rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", prefix, k), Scopes: []string{fmt.Sprintf("org:h%d", k%200)}, Amount: "0.25"})
				if err == nil {
					_, err = s.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "0.2"})
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}
