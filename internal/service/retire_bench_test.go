package service_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkRetire_Snapshot measures what agent runs cost a replica's
// snapshot (what a restart loads and keeps: the book and its readers'
// sections, the chart series among them) while their budgets live and
// after they are retired: runs budgets from a `run:*` lifetime default,
// each with calls naming the run, its team and its org, settled; then
// every run is retired and, with the retentions at 1 and 2 seconds and
// traffic going on, its balance left. It reports the snapshot's bytes per
// run before and after (the process heap is no measure here: the embedded
// server's caches move it more). SPENDGATE_RETIRE_RUNS sets the number of
// runs (default 1000).
//
//	go test ./internal/service -run '^$' -bench BenchmarkRetire_Snapshot -benchtime 1x
func BenchmarkRetire_Snapshot(b *testing.B) {
	runs := 1000
	if v, err := strconv.Atoi(os.Getenv("SPENDGATE_RETIRE_RUNS")); err == nil && v > 0 {
		runs = v
	}
	for _, calls := range []int{2, 10} {
		b.Run(fmt.Sprintf("calls=%d", calls), func(b *testing.B) {
			for b.Loop() {
				retireRuns(b, runs, calls)
			}
		})
	}
}

func retireRuns(b *testing.B, runs, calls int) {
	{ // one measurement
		h := newHarness(b, harnessOpts{noCheck: true, ledgerOpts: []ledger.Option{ledger.WithRetention(time.Second, 2*time.Second)}})
		_, e := h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "1", Unit: "USD"})
		require.Nil(b, e)
		h.putBudget("team:agents", "month", "1000000", "USD")
		h.putBudget("org:acme", "month", "1000000", "USD")
		l, a := h.replicas[0].Ledger, h.replicas[0].Admitter
		n := 0
		call := func(scopes ...string) {
			n++
			rep, err := a.Admit(ctxT(b), events.AdmitRequest{RequestID: fmt.Sprintf("c%d", n), Scopes: scopes, Amount: "0.1"})
			require.NoError(b, err)
			require.True(b, rep.Admitted)
			_, e := h.settle(rep.ReservationID, "0.05")
			require.Nil(b, e)
		}
		// The window of closed calls empties after its retention (1 s):
		// wait for it, with traffic (which the window holds for a second),
		// so that both snapshots hold the budgets and little else.
		settled := func(balances int) {
			testenv.WaitFor(b, 2*time.Minute, "balances and window settled in the book", func() bool {
				call("team:agents", "org:acme")
				st := l.Stats()
				return st.Balances == balances && st.Window < 100
			})
		}
		for i := range runs {
			run := fmt.Sprintf("run:r-%d", i)
			for range calls {
				call(run, "team:agents", "org:acme")
			}
		}
		settled(runs + 2)
		liveSnap, err := l.Snapshot(ctxT(b))
		require.NoError(b, err)
		for i := range runs {
			_, e := h.retire(events.BudgetRetireRequest{Scope: fmt.Sprintf("run:r-%d", i), Period: "lifetime"})
			require.Nil(b, e)
		}
		settled(2)
		retiredSnap, err := l.Snapshot(ctxT(b))
		require.NoError(b, err)
		b.ReportMetric(float64(liveSnap.Size)/float64(runs), "live-snap-B/run")
		b.ReportMetric(float64(retiredSnap.Size)/float64(runs), "retired-snap-B/run")
	}
}
