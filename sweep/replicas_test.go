package sweep_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// clock is a hand-driven clock shared by replicas.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock(t time.Time) *clock    { c := &clock{}; c.set(t); return c }
func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// admitMany admits n reservations with ttl through r, 64 at a time: the
// i-th in one of budgets scopes, every fifth in two scopes (a reservation
// over two balances). It returns the number of balance parts admitted.
func admitMany(t testing.TB, r *replica.Replica, prefix string, n, budgets int, ttl string) int {
	t.Helper()
	const callers = 64
	var next atomic.Int64
	var parts atomic.Int64
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				scopes := []string{fmt.Sprintf("org:%s%d", prefix, i%budgets)}
				if i%5 == 0 {
					scopes = append(scopes, fmt.Sprintf("team:%s%d", prefix, i%budgets))
				}
				rep, err := r.Admitter.Admit(ctxFor(t), events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", prefix, i),
					Scopes: scopes, Amount: "0.01", TTL: ttl})
				if err == nil && !rep.Admitted {
					err = fmt.Errorf("admit %d denied: %+v", i, rep.Denial)
				}
				if err != nil {
					errs <- err
					return
				}
				parts.Add(int64(len(scopes)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return int(parts.Load())
}

func defineBudgets(t testing.TB, r *replica.Replica, prefix string, budgets int, now time.Time) {
	t.Helper()
	for b := 0; b < budgets; b++ {
		for _, kind := range []string{"org", "team"} {
			_, err := r.Ledger.PutBudget(ctxFor(t), events.BudgetRef{Scope: events.Scope(fmt.Sprintf("%s:%s%d", kind, prefix, b)), Period: events.PeriodMonth},
				events.MustMoney("1000000"), "USD", now)
			require.NoError(t, err)
		}
	}
}

// TestSweep_TwoReplicasExactlyOnce: two replicas' sweepers pass over the
// same n expired reservations at once (every pass with its default worker
// count, so each replica's expiries go out in group commits that race the
// other's). Every reservation is expired exactly once: the sweepers' counts
// add up to n, the stream holds one expiry per balance part, and the audit
// replay (which refuses a release of a part that is no longer open)
// passes. How it can fail: if compare-and-set did not arbitrate, both
// replicas would write an expiry of the same reservation, the counts would
// add up to more than n and the replay would stop at the second release.
//
// n is 2,000 in the suite every change runs (dozens of group commits of
// each replica still race the other's) and 10,000 in .ci/run's soak step
// (SPENDGATE_SOAK): that size takes a minute and a half under -race on two
// cores, too long for the 4-minute test command.
func TestSweep_TwoReplicasExactlyOnce(t *testing.T) {
	n := 2_000
	if soak.Long() {
		n = 10_000
	}
	const budgets = 8
	env := testenv.New(t)
	clk := newClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	a := replicatest.Start(t, env, replica.Config{Now: clk.now, SweepInterval: -1})
	b := replicatest.Start(t, env, replica.Config{Now: clk.now, SweepInterval: -1})
	defineBudgets(t, a, "x", budgets, clk.now())
	parts := admitMany(t, a, "x", n, budgets, "1m")
	clk.add(time.Minute) // all due, at the nanosecond
	require.NoError(t, a.Ledger.Sync(ctxFor(t)))
	require.NoError(t, b.Ledger.Sync(ctxFor(t)))
	require.Len(t, a.Ledger.Expired(clk.now(), n+1), n)
	require.Len(t, b.Ledger.Expired(clk.now(), n+1), n)

	type result struct {
		n   int
		err error
	}
	res := make(chan result, 2)
	for _, r := range []*replica.Replica{a, b} {
		go func() {
			got, err := r.Sweeper.Pass(ctxFor(t))
			res <- result{got, err}
		}()
	}
	total := 0
	for i := 0; i < 2; i++ {
		r := <-res
		require.NoError(t, r.err)
		total += r.n
	}
	require.Equal(t, n, total, "every reservation expired by exactly one replica")
	require.NoError(t, a.Ledger.Sync(ctxFor(t)))
	require.Empty(t, a.Ledger.Expired(clk.now(), 1))

	st, err := projector.New(env.JS, env.Layout).CatchUp(ctxFor(t))
	require.NoError(t, err)
	expired := int64(0)
	for _, bal := range st.Balances() {
		expired += bal.Expired
		require.Zero(t, bal.Open, bal.Ref)
		require.Zero(t, bal.Reserved.Sign(), bal.Ref)
	}
	require.EqualValues(t, parts, expired, "one expiry event per balance part")
}

// BenchmarkSweep100k measures a mass expiry: 100,000 reservations
// (a fifth of them over two balances) come due at once, and two replicas
// whose sweepers run at default settings (sweep.DefaultInterval, the
// default worker count) release them all. It reports the seconds from the
// instant they came due until the last was released (the target is under
// 30). Run it with
//
//	go test -run '^$' -bench BenchmarkSweep100k -benchtime 1x ./sweep/
func BenchmarkSweep100k(b *testing.B) {
	const n, budgets = 100_000, 64
	for i := 0; i < b.N; i++ {
		env := testenv.New(b)
		clk := newClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
		r1 := replicatest.Start(b, env, replica.Config{Now: clk.now})
		r2 := replicatest.Start(b, env, replica.Config{Now: clk.now})
		defineBudgets(b, r1, "x", budgets, clk.now())
		admitMany(b, r1, "x", n, budgets, "1h")
		require.NoError(b, r2.Ledger.Sync(ctxFor(b)))
		b.ResetTimer()
		start := time.Now()
		clk.add(time.Hour) // all due now; the replicas' tickers take it from here
		testenv.WaitFor(b, 5*time.Minute, "every reservation released", func() bool {
			return len(r1.Ledger.Expired(clk.now(), 1)) == 0 && len(r2.Ledger.Expired(clk.now(), 1)) == 0
		})
		b.ReportMetric(time.Since(start).Seconds(), "s-to-release-100k")
		b.StopTimer()
	}
}

// A replica whose machine clock runs ten minutes ahead of the NATS
// server's (and of the other replica's) sweeps on the server's time: it
// releases a reservation the other replica admitted when its TTL is over,
// not ten minutes early, and the reservations it admits itself expire a
// TTL after the server's now. How we know it can fail: with the replica's
// clock the machine's (Ledger.Now returning the machine clock unchanged,
// as before the correction), the first sweep released the 30-second
// reservation at once, and the replica's own admit expired ten minutes
// late.
func TestSweep_ClockAheadIsCorrected(t *testing.T) {
	env := testenv.New(t)
	ahead := 10 * time.Minute
	a := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	b := replicatest.Start(t, env, replica.Config{SweepInterval: time.Hour, LedgerOptions: []ledger.Option{
		ledger.WithMachineClock(func() time.Time { return time.Now().Add(ahead) })}})
	ctx := ctxFor(t)

	d, ok := b.Ledger.ClockSkew()
	require.True(t, ok, "measured when the replica started")
	require.InDelta(t, ahead.Seconds(), d.Seconds(), 5, "the measured skew")
	require.WithinDuration(t, time.Now(), b.Ledger.Now(), 5*time.Second, "the replica's clock is the server's")

	_, err := a.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:skew", Period: events.PeriodMonth}, events.MustMoney("10"), "USD", time.Now())
	require.NoError(t, err)
	long, err := a.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "long", Scopes: []string{"org:skew"}, Amount: "1", TTL: "30s"})
	require.NoError(t, err)
	require.True(t, long.Admitted)
	short, err := a.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "short", Scopes: []string{"org:skew"}, Amount: "1", TTL: "1s"})
	require.NoError(t, err)
	require.True(t, short.Admitted)
	require.NoError(t, b.Ledger.Sync(ctx))

	testenv.WaitFor(t, 30*time.Second, "b's sweeper releases the 1-second reservation once it is due", func() bool {
		_, err := b.Sweeper.Pass(ctx)
		require.NoError(t, err)
		r, ok := b.Ledger.Reservation(short.ReservationID)
		return ok && r.Status == events.StatusExpired
	})
	r, ok := b.Ledger.Reservation(long.ReservationID)
	require.True(t, ok)
	require.Equal(t, events.StatusOpen, r.Status, "released %s before its TTL (expires %s)", time.Until(*long.ExpiresAt), long.ExpiresAt)

	own, err := b.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "own", Scopes: []string{"org:skew"}, Amount: "1", TTL: "30s"})
	require.NoError(t, err)
	require.True(t, own.Admitted)
	require.NotNil(t, own.ExpiresAt)
	require.WithinDuration(t, time.Now().Add(30*time.Second), *own.ExpiresAt, 5*time.Second, "expires a TTL after the server's now")
}
