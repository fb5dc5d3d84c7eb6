package main

import (
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// TestServe_SnapshotAgeMetric: /metrics has spendgate_snapshot_age_seconds,
// as docs/operator.md lists it: NaN while the replica knows of no
// snapshot, then the age of the one it wrote (seconds, not the hours since
// the epoch), and after a restart the age of the one it loaded. How it can
// fail: the gauge is never registered (it was not, though documented), so
// an alert on old snapshots never fires; or it counts from the restart.
func TestServe_SnapshotAgeMetric(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"serve", "--data-dir", data, "--listen", listen, "--http", httpAddr, "--snapshot-interval", "2s"}
	p := startProc(t, true, args...)
	base := "http://" + httpAddr
	testenv.WaitFor(t, 10*time.Second, "ready", func() bool {
		code, _ := httpStatus(t, base+"/readyz")
		return code == http.StatusOK
	})
	m := scrape(t, base)
	require.Contains(t, m, "spendgate_snapshot_age_seconds")
	// The book's sizes (docs/operator.md): empty so far.
	for _, name := range []string{"spendgate_book_balances", "spendgate_book_window", "spendgate_book_balances_pruned_total",
		`spendgate_book_budgets{state="live"}`, `spendgate_book_budgets{state="retired"}`, "spendgate_book_learned_windows"} {
		require.Contains(t, m, name)
		require.Zero(t, m[name], name)
	}
	require.True(t, math.IsNaN(m["spendgate_snapshot_age_seconds"]), "no snapshot yet: NaN, not %v", m["spendgate_snapshot_age_seconds"])

	nc := connect(t, "nats://"+listen)
	var bv events.BudgetView
	require.Nil(t, e2eRequest(t, nc, "spendgate.budget.put", events.BudgetPutRequest{Scope: "org:age", Period: "month", Limit: "1", Unit: "USD"}, &bv))
	require.Nil(t, e2eRequest(t, nc, "spendgate.budget.put", events.BudgetPutRequest{Scope: "run:done", Period: "lifetime", Limit: "1", Unit: "USD"}, &bv))
	var rr events.BudgetRetireReply
	require.Nil(t, e2eRequest(t, nc, "spendgate.budget.retire", events.BudgetRetireRequest{Scope: "run:done", Period: "lifetime"}, &rr))
	testenv.WaitFor(t, 10*time.Second, "one live budget and one retired", func() bool {
		m := scrape(t, base)
		return m[`spendgate_book_budgets{state="live"}`] == 1 && m[`spendgate_book_budgets{state="retired"}`] == 1
	})
	testenv.WaitFor(t, 30*time.Second, "a periodic snapshot, and its age", func() bool {
		age := scrape(t, base)["spendgate_snapshot_age_seconds"]
		return !math.IsNaN(age) && age >= 0 && age < 30
	})
	nc.Close()
	// Nothing is written after it, so it only ages.
	testenv.WaitFor(t, 30*time.Second, "the snapshot 3 s old", func() bool {
		return scrape(t, base)["spendgate_snapshot_age_seconds"] >= 3
	})
	p.stop(t) // writes no new snapshot: the periodic one is at the stream's end

	p = startProc(t, true, args...)
	testenv.WaitFor(t, 10*time.Second, "ready again", func() bool {
		code, _ := httpStatus(t, base+"/readyz")
		return code == http.StatusOK
	})
	age := scrape(t, base)["spendgate_snapshot_age_seconds"]
	require.False(t, math.IsNaN(age), "the loaded snapshot's age")
	require.GreaterOrEqual(t, age, 3.0, "the age of the snapshot loaded, not of the restart")
	require.Less(t, age, 60.0)

	// The restart said which snapshot it was loading before it read it (a
	// large one takes seconds, with nothing else in the log meanwhile),
	// and then that it had.
	out := p.out.String()
	loading, loaded := strings.Index(out, "ledger: loading snapshot"), strings.Index(out, "ledger: loaded snapshot")
	require.GreaterOrEqual(t, loading, 0, out)
	require.Greater(t, loaded, loading, out)
}
