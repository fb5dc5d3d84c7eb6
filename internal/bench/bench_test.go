package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// benchTestBudget bounds one bench run in these tests, race detector
// included: a run that does not finish in it fails through its context, not
// through a wall-clock assertion.
const benchTestBudget = 15 * time.Second

func TestRun_Table(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*benchTestBudget)
	defer cancel()
	var out, errOut bytes.Buffer
	before := runtime.NumGoroutine()
	o := DefaultOptions()
	o.Duration = 200 * time.Millisecond
	o.Reps = 1
	o.Scenarios = []string{"hot1", "hot16"}
	err := Run(ctx, o, &out, &errOut)
	require.NoError(t, err, "stderr:\n%s\nstdout:\n%s", errOut.String(), out.String())
	// No goroutine outlives the command (closed connections and the server
	// take a moment to unwind).
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines outlive the command: %d before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}

	// The table: columns separated by two or more spaces.
	sep := regexp.MustCompile(`\s{2,}`)
	var header []string
	rows := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := sep.Split(strings.TrimSpace(line), -1)
		if f[0] == "scenario" {
			header = f
			continue
		}
		if header != nil && len(f) == len(header) {
			rows[f[0]] = f
		}
	}
	require.Equal(t, benchTableColumns, header, out.String())
	col := func(row []string, name string) string {
		for i, h := range header {
			if h == name {
				return row[i]
			}
		}
		t.Fatalf("no column %q", name)
		return ""
	}
	for _, sc := range []struct {
		name    string
		callers string
	}{{"hot1", "1"}, {"hot16", "16"}} {
		row, ok := rows[sc.name]
		require.True(t, ok, "no row for %s:\n%s", sc.name, out.String())
		require.Equal(t, sc.callers, col(row, "callers"))
		require.Equal(t, "0", col(row, "over-admissions"), sc.name)
		for _, c := range []string{"cycles/s", "floor cycles/s", "naive cycles/s", "client cycles/s", "batched floor cycles/s"} {
			v, err := strconv.ParseFloat(col(row, c), 64)
			require.NoError(t, err, c)
			// Naive CAS on one key with 16 callers may finish no cycle at
			// all in 200 ms under the race detector; that is a result.
			if c != "naive cycles/s" || sc.name == "hot1" {
				require.Positive(t, v, "%s %s", sc.name, c)
			}
		}
		for _, c := range []string{"admit p50", "p99", "p99.9", "floor admit p99"} {
			require.Regexp(t, `^[0-9.]+(µs|ms|s)$`, col(row, c), "%s %s", sc.name, c)
		}
		require.Regexp(t, `^[0-9.]+x$`, col(row, "x floor"))
		require.Regexp(t, `^[0-9.]+x$`, col(row, "client x batched floor"))
		if col(row, "naive cycles/s") == "0" {
			// No naive cycle finished: nothing to time or compare with.
			require.Equal(t, "-", col(row, "naive p99"))
			require.Equal(t, "-", col(row, "x naive"))
		} else {
			require.Regexp(t, `^[0-9.]+(µs|ms|s)$`, col(row, "naive p99"))
			require.Regexp(t, `^[0-9.]+x$`, col(row, "x naive"))
		}
	}
	// The Redis Lua baseline's columns: measured when redis-server is
	// installed, "-" and said so when not.
	_, noRedis := exec.LookPath("redis-server")
	for _, name := range []string{"hot1", "hot16"} {
		row := rows[name]
		if noRedis != nil {
			require.Equal(t, "-", col(row, "redis cycles/s"))
			require.Contains(t, out.String(), "redis: redis-server not installed (not on PATH): its columns print as -")
			continue
		}
		v, err := strconv.ParseFloat(col(row, "redis cycles/s"), 64)
		require.NoError(t, err)
		require.Positive(t, v, name)
		require.Regexp(t, `^[0-9.]+(µs|ms|s)$`, col(row, "redis admit p50"), name)
		for _, c := range []string{"client x redis", "client p50 / redis p50"} {
			require.Regexp(t, `^[0-9.]+x$`, col(row, c), "%s %s", name, c)
		}
		for _, c := range []string{"client CPU/cycle", "redis CPU/cycle", "redis-server CPU/cycle"} {
			require.Regexp(t, `^[0-9]+µs$`, col(row, c), "%s %s", name, c)
		}
	}
	if noRedis == nil {
		require.Regexp(t, `target against redis, hot1, NATS sync=interval \(2m\), redis appendfsync everysec: client admit p50 <= 3x redis admit p50: .*: met (yes|no)`, out.String())
	}
	// The embedded replica's commit counters are logged per rep.
	require.Regexp(t, `hot16 rep 1/1: ledger [1-9][0-9]* commits \(0 atomic batches\), [0-9.]+ txs per commit`, errOut.String())
	require.Contains(t, out.String(), "GOMAXPROCS=")
	require.Contains(t, out.String(), "reps=1")
	require.Contains(t, out.String(), "naive: the same callers calling KV directly (no service hop")
	require.NotContains(t, out.String(), "ERRORS")
}

// With --baselines=false only spendgate runs: the baseline columns say so
// with "-" instead of zeros that would read as measurements.
func TestRun_NoBaselines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), benchTestBudget)
	defer cancel()
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	o.Duration = 200 * time.Millisecond
	o.Reps = 1
	o.Scenarios = []string{"hot1"}
	o.Baselines = false
	o.Redis = false // Redis's columns are TestRun_Table's: nothing here reads them
	o.JSON = true
	err := Run(ctx, o, &out, &errOut)
	require.NoError(t, err, "stderr:\n%s", errOut.String())
	var rows []benchRow
	require.NoError(t, json.Unmarshal(out.Bytes(), &rows), out.String())
	require.Len(t, rows, 1)
	require.Positive(t, rows[0].CyclesPerS)
	require.Zero(t, rows[0].FloorCyclesPerS)
	require.Zero(t, rows[0].NaiveCyclesPerS)
	require.Empty(t, rows[0].FloorReps)
	require.Equal(t, "-", fmtRatio(rows[0].XFloor))
	require.Equal(t, "-", fmtLatency(rows[0].FloorAdmitP99))
}

// --profile-way client writes a CPU profile of the client's timed run
// alone: a gzipped pprof profile whose samples include the Go client's
// calls (and none of the single requests' own code path, which only the
// single-request run takes).
func TestRun_ProfileWay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), benchTestBudget)
	defer cancel()
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	o.Duration = time.Second // enough samples of the callers' own code on a busy machine
	o.Reps = 2
	o.Scenarios = []string{"hot16"}
	o.Baselines = false
	o.Redis = false // 2 s of Redis cycles nothing here reads (TestRun_Table reads Redis's columns)
	o.CPUProfile = filepath.Join(t.TempDir(), "client.pprof")
	o.Trace = filepath.Join(t.TempDir(), "client.trace")
	o.ProfileWay = "client"
	o.Brief = true
	require.NoError(t, Run(ctx, o, &out, &errOut), "stderr:\n%s", errOut.String())
	require.Contains(t, out.String(), "Go client: brief admit replies")
	require.Equal(t, 1, strings.Count(errOut.String(), "profile of the client run written to "+o.CPUProfile), errOut.String())
	require.Equal(t, 1, strings.Count(errOut.String(), "profile of the client run written to "+o.Trace), errOut.String())
	tr, err := os.ReadFile(o.Trace)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(tr, []byte("go 1.")), "an execution trace starts with its Go version: %q", tr[:min(len(tr), 16)])
	raw, err := os.ReadFile(o.CPUProfile)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err, "a pprof profile is gzipped")
	prof, err := io.ReadAll(zr)
	require.NoError(t, err)
	// Function names are in the profile's string table. The callers mostly
	// wait for replies (off CPU), so a short profile on a busy machine may
	// hold no sample of bench.clientCycle itself; the client's own code
	// (the coalescer, the reply demultiplexer) and the service's batch
	// endpoints run on every reply: the profile holds one of them.
	require.True(t, strings.Contains(string(prof), "spendgate/spendgate/client.") || strings.Contains(string(prof), "spendgate/internal/service.(*Service).serveBatch"),
		"the profile holds no sample of the client's run")
	require.NotContains(t, string(prof), "bench.benchCycle", "the single-request run was not profiled")
}

// Two embedded replicas on 4 lanes, multi-scope admits: both replicas
// commit (they arbitrate by compare-and-set), the cap burst admits exactly
// the limit, and the row records the setup.
func TestRun_ServiceReplicasAndLanes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), benchTestBudget)
	defer cancel()
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	o.Duration = 300 * time.Millisecond
	o.Reps = 1
	o.Scenarios = []string{"multi3"}
	o.Baselines = false
	o.Redis = false // Redis's columns are TestRun_Table's: nothing here reads them
	o.ServiceReplicas = 2
	o.Lanes = 4
	o.JSON = true
	err := Run(ctx, o, &out, &errOut)
	require.NoError(t, err, "stderr:\n%s", errOut.String())
	var rows []benchRow
	require.NoError(t, json.Unmarshal(out.Bytes(), &rows), out.String())
	require.Len(t, rows, 1)
	r := rows[0]
	require.Positive(t, r.CyclesPerS)
	require.Zero(t, r.OverAdmissions)
	require.Equal(t, 64, r.Admitted, "the cap burst admits exactly the org limit")
	require.Equal(t, 4, r.Lanes)
	require.Equal(t, 2, r.ServiceReplicas)
	require.Regexp(t, `multi3 rep 1/1: ledger [1-9][0-9]* commits \([1-9][0-9]* atomic batches\)`, errOut.String(),
		"scopes over 4 lanes go through atomic batches")
}

// --cluster 3 embeds a 3-node cluster with the streams at R3, in one
// command: the production shape on one machine. It runs in .ci/run's soak
// step (the service's cluster tests run in the short suite).
func TestRun_Cluster(t *testing.T) {
	soak.Only(t) // .ci/run's soak step: a whole bench run, 20 s of the suite's time
	ctx, cancel := context.WithTimeout(context.Background(), 2*benchTestBudget)
	defer cancel()
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	o.Duration = 300 * time.Millisecond
	o.Reps = 1
	o.Scenarios = []string{"multi3"}
	o.Cluster = 3
	o.JSON = true
	err := Run(ctx, o, &out, &errOut)
	require.NoError(t, err, "stderr:\n%s", errOut.String())
	var rows []benchRow
	require.NoError(t, json.Unmarshal(out.Bytes(), &rows), out.String())
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, 3, r.Replicas)
	require.Contains(t, r.Server, "3-node cluster")
	require.Positive(t, r.CyclesPerS)
	require.Positive(t, r.FloorCyclesPerS)
	require.Zero(t, r.OverAdmissions)
	require.Equal(t, 64, r.Admitted)
}

func TestOptions_Validate(t *testing.T) {
	for name, mod := range map[string]func(*Options){
		"unknown scenario":       func(o *Options) { o.Scenarios = []string{"nope"} },
		"no scenario":            func(o *Options) { o.Scenarios = []string{"", " "} },
		"replicas on one server": func(o *Options) { o.Replicas = 3 },
		"zero duration":          func(o *Options) { o.Duration = 0 },
		"zero reps":              func(o *Options) { o.Reps = 0 },
		"zero conns":             func(o *Options) { o.Conns = 0 },
		"zero lanes":             func(o *Options) { o.Lanes = 0 },
		"zero service replicas":  func(o *Options) { o.ServiceReplicas = 0 },
		"service replicas remote": func(o *Options) {
			o.NATSURL, o.ServiceReplicas = "nats://127.0.0.1:1", 2
		},
		"sync-always remote":     func(o *Options) { o.NATSURL, o.SyncAlways = "nats://127.0.0.1:1", true },
		"cluster of 2":           func(o *Options) { o.Cluster = 2 },
		"cluster and remote":     func(o *Options) { o.Cluster, o.NATSURL = 3, "nats://127.0.0.1:1" },
		"cluster and sync":       func(o *Options) { o.Cluster, o.SyncAlways = 3, true },
		"cluster other replicas": func(o *Options) { o.Cluster, o.Replicas = 3, 5 },
		"profile way alone":      func(o *Options) { o.ProfileWay = "client" },
		"profile way unknown":    func(o *Options) { o.CPUProfile, o.ProfileWay = "cpu.pprof", "nope" },
		"profile way no client":  func(o *Options) { o.CPUProfile, o.ProfileWay, o.Client = "cpu.pprof", "client", false },
		"profile way no floor":   func(o *Options) { o.CPUProfile, o.ProfileWay, o.Baselines = "cpu.pprof", "floor", false },
		"restart remote":         func(o *Options) { o.Scenarios, o.NATSURL = []string{"restart"}, "nats://127.0.0.1:1" },
		"restart negative":       func(o *Options) { o.Scenarios, o.RestartReservations = []string{"restart"}, -1 },
		"restart without binary": func(o *Options) { o.Scenarios, o.Self = []string{"restart"}, "" },
		"restart unknown shape":  func(o *Options) { o.Scenarios, o.Self, o.RestartShape = []string{"restart"}, "spendgate", "cold" },
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			mod(&o)
			require.Error(t, o.Validate())
			var out, errOut bytes.Buffer
			require.Error(t, Run(context.Background(), o, &out, &errOut))
			require.Empty(t, out.String())
		})
	}
	o := DefaultOptions()
	o.Scenarios = []string{"multi3", "mem", "hot1"}
	c, err := o.resolve()
	require.NoError(t, err)
	require.True(t, c.mem)
	require.Len(t, c.scenarios, 2)
	require.Equal(t, "hot1", c.scenarios[0].name) // canonical order
	require.Equal(t, "multi3", c.scenarios[1].name)
	c, err = DefaultOptions().resolve()
	require.NoError(t, err)
	require.False(t, c.mem, "mem runs only when named")
	require.Len(t, c.scenarios, len(benchScenarios))
}

func TestRun_JSON(t *testing.T) {
	b := &bencher{o: config{Options: Options{Conns: 4, Reps: 3, Duration: time.Second, Replicas: 1}}, serverDesc: "test"}
	rows := []benchRow{{Scenario: "hot64", Callers: 64, Conns: 4, CyclesPerS: 1000, FloorCyclesPerS: 2000, XFloor: 0.5}}
	var out bytes.Buffer
	require.NoError(t, b.printJSON(&out, rows, &memResult{Scenario: "mem", Open: 10}))
	var got []map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	require.Len(t, got, 2)
	for _, k := range []string{"scenario", "callers", "conns", "cycles_per_s", "admit_p50_us", "admit_p99_us", "admit_p999_us",
		"over_admissions", "floor_cycles_per_s", "floor_admit_p99_us", "x_floor", "naive_cycles_per_s", "naive_reserve_p99_us", "x_naive"} {
		require.Contains(t, got[0], k)
	}
	require.Equal(t, "mem", got[1]["scenario"])
}

// benchHarness is an embedded server with a spendgate replica on its own
// connection and a separate client connection, as the bench command runs.
func benchHarness(b *testing.B) (client *nats.Conn, layout streams.Layout) {
	b.Helper()
	env := testenv.New(b)
	snc, err := nats.Connect(env.Server.ClientURL(), nats.Name("bench-replica"))
	require.NoError(b, err)
	b.Cleanup(snc.Close)
	sjs, err := jetstream.New(snc)
	require.NoError(b, err)
	r, err := replica.Start(context.Background(), snc, sjs, replica.Config{Layout: env.Layout, SweepInterval: -1})
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.Stop() })
	client, err = nats.Connect(env.Server.ClientURL(), nats.Name("bench-client"))
	require.NoError(b, err)
	b.Cleanup(client.Close)
	return client, env.Layout
}

// benchParallel runs 64 caller goroutines (like hot64), whatever GOMAXPROCS.
func benchParallel(b *testing.B, cycle func(id string) error) {
	b.Helper()
	var seq atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := cycle("bench-cycle-" + strconv.FormatInt(seq.Add(1), 10)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "cycles/s")
	}
}

// BenchmarkAdmitSettleCycle is the hot request path: admit + settle on one
// budget over NATS request-reply (TCP loopback) against an embedded server
// and a replica, 64 callers on one client connection.
func BenchmarkAdmitSettleCycle(b *testing.B) {
	nc, layout := benchHarness(b)
	ctx := context.Background()
	data, err := json.Marshal(events.BudgetPutRequest{Scope: "org:bench", Period: "month", Limit: benchBigLimit, Unit: "USD"})
	require.NoError(b, err)
	_, err = benchRequest(ctx, nc, layout.Endpoint(streams.EndpointBudgetPut), data)
	require.NoError(b, err)
	admit, settle := layout.Endpoint(streams.EndpointAdmit), layout.Endpoint(streams.EndpointSettle)
	scopes := []string{"org:bench"}
	benchParallel(b, func(id string) error {
		_, err := benchCycle(ctx, nc, admit, settle, scopes, id)
		return err
	})
}

// BenchmarkFloorCycle is BenchmarkAdmitSettleCycle's floor: the same two
// requests to an endpoint that only decodes and replies.
func BenchmarkFloorCycle(b *testing.B) {
	nc, _ := benchHarness(b)
	fnc, err := nats.Connect(nc.ConnectedUrl(), nats.Name("bench-floor"))
	require.NoError(b, err)
	b.Cleanup(fnc.Close)
	f, err := startFloor(fnc)
	require.NoError(b, err)
	b.Cleanup(f.Stop)
	ctx := context.Background()
	scopes := []string{"org:bench"}
	benchParallel(b, func(id string) error {
		_, err := benchCycle(ctx, nc, benchFloorAdmit, benchFloorSettle, scopes, id)
		return err
	})
}

// Without baselines the table prints "-" in every floor and naive column,
// never a 0 that would read as a measurement.
func TestPrintTable_NoBaselines(t *testing.T) {
	b := &bencher{o: config{Options: Options{Conns: 4, Reps: 1, Duration: time.Second, Replicas: 1}}, serverDesc: "test"}
	rows := []benchRow{{Scenario: "hot1", Callers: 1, Conns: 1, CyclesPerS: 1000, AdmitP50: 500, AdmitP99: 900, AdmitP999: 990}}
	var out bytes.Buffer
	require.NoError(t, b.printTable(&out, rows, nil))
	header, row := tableRow(out.String(), "hot1")
	require.Equal(t, benchTableColumns, header)
	require.Len(t, row, len(header), out.String())
	for i, h := range header {
		if strings.HasPrefix(h, "floor") || strings.HasPrefix(h, "naive") || strings.HasPrefix(h, "x ") {
			require.Equal(t, "-", row[i], "column %q", h)
		}
	}
	require.NotContains(t, out.String(), "naive CAS conflicts")
}

// Without redis-server the table says so, and every Redis column is "-".
func TestPrintTable_NoRedis(t *testing.T) {
	b := &bencher{o: config{Options: Options{Conns: 4, Reps: 1, Duration: time.Second, Replicas: 1, Client: true, Redis: true}},
		serverDesc: "test", redisNote: errRedisMissing.Error()}
	rows := []benchRow{{Scenario: "hot1", Callers: 1, Conns: 1, CyclesPerS: 1000, ClientCyclesPerS: 900, ClientCPUPerCycle: 120}}
	var out bytes.Buffer
	require.NoError(t, b.printTable(&out, rows, nil))
	header, row := tableRow(out.String(), "hot1")
	require.Len(t, row, len(header), out.String())
	for i, h := range header {
		switch {
		case h == "client CPU/cycle":
			require.Equal(t, "120µs", row[i])
		case strings.Contains(h, "redis"):
			require.Equal(t, "-", row[i], "column %q", h)
		}
	}
	require.Contains(t, out.String(), "redis: redis-server not installed (not on PATH): its columns print as -")
	require.NotContains(t, out.String(), "target against redis")
}

// tableRow returns the table's header and scenario's row, columns split
// at two or more spaces.
func tableRow(out, scenario string) (header, row []string) {
	sep := regexp.MustCompile(`\s{2,}`)
	for _, line := range strings.Split(out, "\n") {
		f := sep.Split(strings.TrimSpace(line), -1)
		switch f[0] {
		case "scenario":
			header = f
		case scenario:
			if row == nil {
				row = f
			}
		}
	}
	return header, row
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

// A report cut short is an error, and so is any failed request.
func TestRun_Failures(t *testing.T) {
	b := &bencher{o: config{Options: Options{Conns: 4, Reps: 1, Duration: time.Second, Replicas: 1, Baselines: true}}, serverDesc: "test"}
	rows := []benchRow{{Scenario: "hot1", Callers: 1, Conns: 1, CyclesPerS: 1000}}
	require.ErrorIs(t, b.printTable(&failingWriter{limit: 100}, rows, nil), io.ErrShortWrite)
	require.ErrorIs(t, b.printJSON(&failingWriter{limit: 10}, rows, nil), io.ErrShortWrite)

	require.NoError(t, verdict(rows, nil))
	rows[0].NaiveErrors = 1
	require.ErrorIs(t, verdict(rows, nil), ErrRequests)
	rows[0].NaiveErrors, rows[0].OverAdmissions = 0, 1
	require.ErrorIs(t, verdict(rows, nil), ErrOverAdmission)
	require.ErrorIs(t, verdict(nil, &memResult{Over: true}), ErrMemOver)
}

// TestRun_Flood runs the flood scenario briefly: every flood settle is
// answered (unknown_reservation, or ledger_busy) and the good cycles do
// not fail. The p99 target is reported, not asserted: it is a property of
// the machine. (A paced flood coalesces only when misses overlap, so the
// count of reads is logged here; TestService_MissFloodCoalesced asserts
// coalescing with misses sent at once.) It runs in .ci/run's soak step.
func TestRun_Flood(t *testing.T) {
	soak.Only(t) // .ci/run's soak step: a whole bench run, 20 s of the suite's time
	ctx, cancel := context.WithTimeout(context.Background(), 2*benchTestBudget)
	defer cancel()
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	o.Duration = 500 * time.Millisecond
	o.Reps = 1
	o.JSON = true
	o.Scenarios = []string{"flood"}
	err := Run(ctx, o, &out, &errOut)
	require.NoError(t, err, "stderr:\n%s\nstdout:\n%s", errOut.String(), out.String())
	var res []floodResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	require.Len(t, res, 1)
	f := res[0]
	require.Equal(t, "flood", f.Scenario)
	require.Positive(t, f.Sent)
	require.Zero(t, f.Other, "a flood settle was answered something else than unknown_reservation or ledger_busy")
	require.Zero(t, f.Unanswered)
	require.Equal(t, f.Sent, f.Unknown+f.Busy)
	require.Positive(t, f.FloodCyclesPS)
	t.Logf("flood: %d sent, %d stream reads; good admit p99 %.0f µs calm, %.0f µs flooded", f.Sent, f.SyncReads, f.CalmP99, f.FloodP99)
}
