package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// demoTestTimeout bounds one in-process demo run.
const demoTestTimeout = time.Minute

func runDemo(t *testing.T, o Options) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), demoTestTimeout)
	defer cancel()
	rep, err := Overrun(ctx, o)
	require.NoError(t, err)
	return rep
}

// The defaults: the check-then-act ledger lands 300% over the headline
// ceiling, spendgate 0%, and spendgate holds all four fail-open patterns.
func TestOverrun(t *testing.T) {
	t.Parallel()
	rep := runDemo(t, DefaultOptions())
	var buf bytes.Buffer
	require.NoError(t, rep.Print(&buf))
	out := buf.String()
	require.True(t, rep.Held, out)
	require.True(t, rep.AuditOK, out)
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
	for _, outside := range []string{"seed", "Seed", "issue", "NATS-FACTS"} {
		require.NotContains(t, out, outside, "the output cites nothing outside the repository")
	}
	require.Error(t, rep.Print(&failingWriter{limit: 64}), "a cut-short report is an error")
}

// failingWriter accepts limit bytes, then fails every write.
type failingWriter struct{ limit int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n := f.limit
		f.limit = 0
		return n, io.ErrShortWrite
	}
	f.limit -= len(p)
	return len(p), nil
}

// The JSON report: exact amounts and counts per pattern.
func TestOverrun_JSON(t *testing.T) {
	t.Parallel()
	o := DefaultOptions()
	o.Concurrency, o.Ceiling, o.Price = 8, "0.1", "0.03"
	// The outage pattern's client warnings are expected: counted in the
	// report, not logged (an earlier build printed 20 WARN lines that
	// read like a failure). Anything else still reaches the logger.
	var logged logRecorder
	o.Log = slog.New(&logged)
	data, err := json.Marshal(runDemo(t, o))
	require.NoError(t, err)
	var rep Report
	require.NoError(t, json.Unmarshal(data, &rep))
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
		{"unpriced model at zero", "2", "1", "100", 40, "1", 20, map[string]int{"unpriced_model": 20}, false},
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
	require.Contains(t, rep.Patterns[3].Note, "its own pricing table")
	for i, p := range rep.Patterns {
		// The outage's admits reached no replica, so the client voids
		// none of them and warns of nothing.
		require.Zero(t, p.Spendgate.ClientWarnings, "pattern %d", i)
		require.NotContains(t, p.Note, "warnings", "pattern %d", i)
	}
	require.Empty(t, logged.warnings(), "the demo logged warnings")
}

// logRecorder is a slog.Handler that keeps the records at WARN and above.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn {
		r.mu.Lock()
		r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
		r.mu.Unlock()
	}
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func requireDemoSide(t *testing.T, s Side, spent, recorded, over string, admitted int, refused map[string]int) {
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

func TestOptions_Validate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultOptions().Validate())
	for name, mod := range map[string]func(*Options){
		"no concurrency":     func(o *Options) { o.Concurrency = 0 },
		"too much":           func(o *Options) { o.Concurrency = 10001 },
		"zero ceiling":       func(o *Options) { o.Ceiling = "0" },
		"negative ceiling":   func(o *Options) { o.Ceiling = "-1" },
		"exponent price":     func(o *Options) { o.Price = "1e3" },
		"NaN price":          func(o *Options) { o.Price = "NaN" },
		"negative latency":   func(o *Options) { o.Latency = -time.Second },
		"latency over bound": func(o *Options) { o.Latency = time.Minute },
	} {
		o := DefaultOptions()
		mod(&o)
		require.Error(t, o.Validate(), name)
		_, err := Overrun(context.Background(), o)
		require.Error(t, err, name)
	}
}

func TestPercentOver(t *testing.T) {
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

func TestUSD(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0": "$0.00", "0.4": "$0.40", "1": "$1.00", "0.001": "$0.001", "12.5": "$12.50"} {
		require.Equal(t, want, demoUSD(events.MustMoney(in)))
	}
}
