package replica_test

import (
	"context"
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
