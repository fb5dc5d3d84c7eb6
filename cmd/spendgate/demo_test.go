package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// demoTestTimeout bounds one in-process demo run.
const demoTestTimeout = time.Minute

func runDemo(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), demoTestTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code := demoRun(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The defaults reproduce seed 003's headline, and spendgate holds all
// four fail-open patterns.
func TestDemo_Overrun(t *testing.T) {
	t.Parallel()
	code, out, errOut := runDemo(t, "overrun")
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", errOut, out)
	require.Contains(t, out, "check-then-act ledger: $0.40 spent against a $0.10 ceiling: 300% over (20 admitted / 0 refused)")
	require.Contains(t, out, "spendgate:             $0.10 spent against a $0.10 ceiling: 0% over (5 admitted / 15 refused)")
	for _, name := range []string{"check-then-act", "post-hoc accounting", "best-effort recording", "unpriced model at zero"} {
		var row string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, name+"  ") {
				row = line
			}
		}
		require.NotEmpty(t, row, "no row for %s in:\n%s", name, out)
		fields := strings.Fields(row)
		require.Equal(t, "held", fields[len(fields)-1], "row %q", row)
		require.Contains(t, row, "| ", "row %q", row)
	}
	require.Contains(t, out, "OK, replay equals live")
	require.Contains(t, out, "spendgate held every ceiling; the naive ledger failed open in 4 of 4 patterns.")
}

// The JSON report: exact amounts and counts per pattern.
func TestDemo_OverrunJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runDemo(t, "overrun", "--json", "--concurrency", "8", "--ceiling", "0.1", "--price", "0.03")
	require.Equal(t, 0, code, "stderr: %s", errOut)
	var rep demoReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.Held)
	require.True(t, rep.AuditOK, rep.Audit)

	// 8 × 0.03 = 0.24 against 0.1: 140% over; spendgate fits 3 (0.09).
	requireDemoSide(t, rep.Headline.Naive, "0.24", "0.24", "140", 8, nil)
	requireDemoSide(t, rep.Headline.Spendgate, "0.09", "0.09", "0", 3, map[string]int{"limit_reached": 5})

	want := []struct {
		name                   string
		naiveSpent, naiveRec   string
		naiveOver              string
		naiveAdmitted          int
		sgSpent                string
		sgAdmitted             int
		sgRefused              map[string]int
		naiveRefusedForPostHoc bool
	}{
		{"check-then-act", "2", "2", "100", 40, "1", 20, map[string]int{"limit_reached": 20}, false},
		{"post-hoc accounting", "1.95", "1.95", "95", 20, "0.95", 19, map[string]int{"limit_reached": 21}, true},
		{"best-effort recording", "2", "1", "100", 40, "1", 20, map[string]int{"ledger_unavailable": 20}, false},
		{"unpriced model at zero", "2", "1", "100", 40, "1", 20, map[string]int{"invalid_amount": 20}, false},
	}
	require.Len(t, rep.Patterns, len(want))
	for i, w := range want {
		p := rep.Patterns[i]
		require.Equal(t, w.name, p.Name)
		require.Equal(t, 40, p.Requests)
		var naiveRefused map[string]int
		if w.naiveRefusedForPostHoc {
			naiveRefused = map[string]int{demoOverCeiling: 20}
		}
		requireDemoSide(t, p.Naive, w.naiveSpent, w.naiveRec, w.naiveOver, w.naiveAdmitted, naiveRefused)
		requireDemoSide(t, p.Spendgate, w.sgSpent, w.sgSpent, "0", w.sgAdmitted, w.sgRefused)
		require.Equal(t, demoHeld, p.Verdict)
		require.NotEmpty(t, p.Note)
	}
	require.Contains(t, rep.Patterns[3].Note, "caller-side table")
}

func requireDemoSide(t *testing.T, s demoSide, spent, recorded, over string, admitted int, refused map[string]int) {
	t.Helper()
	require.Equal(t, spent, s.Spent, "spent")
	require.Equal(t, recorded, s.Recorded, "recorded")
	require.Equal(t, over, s.OverPercent, "over")
	require.Equal(t, admitted, s.Admitted, "admitted")
	require.Equal(t, refused, s.RefusedBy, "refused by")
	n := 0
	for _, v := range refused {
		n += v
	}
	require.Equal(t, n, s.Refused, "refused")
	ceiling := events.MustMoney(s.Ceiling)
	require.Equal(t, events.MustMoney(spent).Cmp(ceiling) > 0, s.Breached, "breached")
}

func TestDemo_badArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		nil,
		{"underrun"},
		{"overrun", "--concurrency", "0"},
		{"overrun", "--concurrency", "10001"},
		{"overrun", "--ceiling", "0"},
		{"overrun", "--ceiling", "-1"},
		{"overrun", "--price", "1e3"},
		{"overrun", "--price", "NaN"},
		{"overrun", "--latency", "-1s"},
		{"overrun", "extra"},
		{"overrun", "--no-such-flag"},
	} {
		code, out, errOut := runDemo(t, args...)
		require.Equal(t, 1, code, "args %q", args)
		require.Empty(t, out, "args %q", args)
		require.NotEmpty(t, errOut, "args %q", args)
	}
}

func TestDemo_percentOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spent, ceiling, want string }{
		{"0.4", "0.1", "300"},
		{"0.1", "0.1", "0"},
		{"0.05", "0.1", "0"},
		{"0", "1", "0"},
		{"1.95", "1", "95"},
		{"2", "1", "100"},
		{"0.4", "0.3", "33.3"},
		{"0.5", "0.3", "66.7"},
		{"1.000000000001", "1", "0"},
		{"3", "0.000000000001", "299999999999900"},
	} {
		got, err := demoPercentOver(events.MustMoney(tc.spent), events.MustMoney(tc.ceiling))
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%s over %s", tc.spent, tc.ceiling)
	}
}

func TestDemo_usd(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0": "$0.00", "0.4": "$0.40", "1": "$1.00", "0.001": "$0.001", "12.5": "$12.50"} {
		require.Equal(t, want, demoUSD(events.MustMoney(in)))
	}
}
