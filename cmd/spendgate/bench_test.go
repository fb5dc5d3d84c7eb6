package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBench_Restart runs the restart scenario as its users do, through
// the binary, with a history of 1,000 reservations (so it cannot rot): the
// replica is a child process killed, stopped and restarted, and every
// figure of its table is there. A graceful stop must leave a snapshot the
// restart loads; with the snapshots deleted the restart folds the whole
// stream. The targets are reported, not asserted: they are properties of
// the machine (docs/performance.md has the figures). bench runs
// race-built, its replicas the plain build (plainReplicas).
func TestBench_Restart(t *testing.T) {
	t.Parallel()
	p := startProcEnv(t, plainReplicas(), false, "bench", "--scenarios", "restart", "--restart-reservations", "1000")
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("spendgate bench --scenarios restart did not finish:\n%s", p.out.String())
	}
	out := p.out.String()
	require.NoError(t, p.err, out)
	rows := map[string][]string{}
	sep := regexp.MustCompile(`\s{2,}`)
	for _, line := range strings.Split(out, "\n") {
		f := sep.Split(strings.TrimSpace(line), -1)
		if len(f) == 5 {
			rows[f[0]] = f
		}
	}
	require.Contains(t, rows, "measure", out)
	require.Equal(t, []string{"measure", "value", "target", "met", "detail"}, rows["measure"])
	require.Regexp(t, `^[0-9]+ reservations/s$`, rows["history written (admit + settle, hot budget)"][1])
	require.Regexp(t, `^[0-9]+ messages$`, rows["ledger stream"][1])
	for what, target := range map[string]string{"SIGKILL, restart: time to first admit": "< 5.00 s", "SIGTERM, restart: time to first admit": "< 2.00 s"} {
		row, ok := rows[what]
		require.True(t, ok, "no row %q:\n%s", what, out)
		require.Regexp(t, `^[0-9.]+ (ms|s)$`, row[1], what)
		require.Equal(t, target, row[2], what)
		require.Regexp(t, `^(yes|no)$`, row[3], what)
		require.Contains(t, row[4], "window 1k", what)
	}
	require.Contains(t, rows["SIGTERM, restart: time to first admit"][4], "snapshot at seq", "the graceful stop left no snapshot, or the restart did not load it:\n%s", out)
	require.Contains(t, rows["for comparison: SIGTERM, snapshots deleted, restart"][4], "no snapshot: folded the whole stream", out)
	require.Regexp(t, `bytes per remembered reservation`, rows["replica RSS after it (peak)"][4])
	require.Regexp(t, `the snapshot on stop copied the book under its lock in [0-9.]+ (µs|ms|s)$`, rows["SIGTERM: graceful stop took"][4], out)
}
