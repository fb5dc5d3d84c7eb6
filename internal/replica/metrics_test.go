package replica_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// gauges reads every gauge of m without labels.
func gauges(t *testing.T, m *metrics.Set) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_GAUGE || len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) != 0 {
			continue
		}
		out[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	return out
}

// While a replica's start folds the ledger stream, its ledger health is
// exported: ready 0, the stream's leader answering, and the revisions
// still to fold; once the fold is done, ready 1 and lag 0. How we know it
// can fail: the gauges were registered only once the replica served, so a
// scrape during a long start fold (a minute on a big history) had no
// spendgate_ledger_ready series at all, and an alert on ready == 0 could
// not fire; this test timed out waiting for the series.
func TestReplica_LedgerHealthExportedDuringTheStartFold(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	w := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	_, err := w.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:acme", Period: "month"}, events.MustMoney("1000"), "USD", time.Now())
	require.NoError(t, err)
	for i := range 20 {
		rep, err := w.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "r" + strconv.Itoa(i), Scopes: []string{"org:acme"}, Amount: "1"})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
	}

	// The second replica's fold is held by its feed relay (a replica with
	// a feed folds at the feed's pace from the feed's end, here the
	// stream's start), until release.
	release := make(chan struct{})
	hold := feed.UnsafeAppendFaultForTesting(func() error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	m := metrics.New(metrics.BuildInfo{Version: "test"})
	type started struct {
		r   *replica.Replica
		err error
	}
	done := make(chan started, 1)
	go func() {
		r, err := replica.Start(ctx, env.Connect(t), env.JS, replica.Config{Layout: env.Layout, SweepInterval: -1, Feed: true, Metrics: m,
			ReadyTimeout: time.Minute, FeedOptions: []feed.Option{hold, feed.WithQueue(1), feed.WithQueueWait(time.Minute)}})
		done <- started{r, err}
	}()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	require.Eventually(t, func() bool {
		g := gauges(t, m)
		ready, ok := g["spendgate_ledger_ready"]
		return ok && ready == 0 && g["spendgate_ledger_stream_leader"] == 1 && g["spendgate_follower_lag_revisions"] > 0
	}, 30*time.Second, 20*time.Millisecond, "while the start folds: ready 0, leader 1, lag > 0")
	select {
	case s := <-done:
		t.Fatalf("the start returned while its fold was held: %v", s.err)
	default:
	}

	close(release)
	released = true
	var s started
	select {
	case s = <-done:
	case <-ctx.Done():
		t.Fatal("the start did not return once released")
	}
	require.NoError(t, s.err)
	t.Cleanup(func() { _ = s.r.Stop() })
	require.Eventually(t, func() bool {
		g := gauges(t, m)
		return g["spendgate_ledger_ready"] == 1 && g["spendgate_follower_lag_revisions"] == 0
	}, 30*time.Second, 20*time.Millisecond, "once started: ready 1, lag 0")
}

// labeled returns the value of family name's series whose scope label is
// scope, or false.
func labeled(t *testing.T, m *metrics.Set, name, scope string) (float64, bool) {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "scope" && l.GetValue() == scope {
					return s.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// The per-budget gauges carry the dashboard's forecast: a budget that
// spends runs out at its burn rate in so many seconds, before its month
// resets; one without spend has no such series and is not running out.
// How we know it can fail: there were no forecast gauges, so no
// Prometheus rule could warn before a budget ran out, only at 90 % used.
func TestReplica_BudgetGaugesCarryTheForecast(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	m := metrics.New(metrics.BuildInfo{Version: "test"})
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Metrics: m, MetricsBudgets: 10})
	now := time.Now()
	for _, s := range []events.Scope{"team:busy", "team:idle"} {
		_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: s, Period: "month"}, events.MustMoney("100"), "USD", now)
		require.NoError(t, err)
	}
	// Three calls: a pace (one call alone forecasts nothing unless it
	// spent as much as is left).
	for i := range 3 {
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprint("spend-", i), Scopes: []string{"team:busy"}, Amount: "5"})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
		_, err = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "5"})
		require.NoError(t, err)
	}

	var in float64
	require.Eventually(t, func() bool {
		var ok bool
		in, ok = labeled(t, m, "spendgate_budget_exhausts_in_seconds", "team:busy")
		return ok
	}, 30*time.Second, 20*time.Millisecond, "team:busy runs out at its burn rate")
	// 85 left at a rate of about 15 * ln 2 * 12 = 125 an hour (the
	// dashboard's decayed window): about 41 minutes.
	require.Greater(t, in, float64(30*60), "seconds to run out")
	require.Less(t, in, float64(3*60*60), "seconds to run out")
	before, ok := labeled(t, m, "spendgate_budget_exhausts_before_reset", "team:busy")
	require.True(t, ok)
	want := 1.0
	t.Logf("team:busy runs out in %.0f s", in)
	if now.UTC().Add(time.Duration(in)*time.Second).Month() != now.UTC().Month() {
		want = 0 // the month ends first (the test runs in its last hours)
	}
	require.Equal(t, want, before)

	_, ok = labeled(t, m, "spendgate_budget_exhausts_in_seconds", "team:idle")
	require.False(t, ok, "no burn rate, no forecast")
	before, ok = labeled(t, m, "spendgate_budget_exhausts_before_reset", "team:idle")
	require.True(t, ok)
	require.Equal(t, 0.0, before)
}
