package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Rows, their medians and ratios, and the table and JSON they print as.

// benchRow is one scenario's line of the report (one object of --json).
type benchRow struct {
	Scenario    string  `json:"scenario"`
	Description string  `json:"description"`
	Callers     int     `json:"callers"`
	Conns       int     `json:"conns"`
	CyclesPerS  float64 `json:"cycles_per_s"`
	AdmitP50    float64 `json:"admit_p50_us"`
	AdmitP99    float64 `json:"admit_p99_us"`
	AdmitP999   float64 `json:"admit_p999_us"`
	// OverAdmissions is counted by the cap burst.
	OverAdmissions int `json:"over_admissions"`
	capResult
	FloorCyclesPerS  float64 `json:"floor_cycles_per_s"`
	FloorAdmitP50    float64 `json:"floor_admit_p50_us"`
	FloorAdmitP99    float64 `json:"floor_admit_p99_us"`
	XFloor           float64 `json:"x_floor"`
	NaiveCyclesPerS  float64 `json:"naive_cycles_per_s"`
	NaiveP50         float64 `json:"naive_reserve_p50_us"`
	NaiveP99         float64 `json:"naive_reserve_p99_us"`
	NaiveConflictPct float64 `json:"naive_conflict_pct"`
	XNaive           float64 `json:"x_naive"`
	Errors           int64   `json:"errors"`
	FloorErrors      int64   `json:"floor_errors"`
	NaiveErrors      int64   `json:"naive_errors"`
	FirstError       string  `json:"first_error,omitempty"`
	// Client*: the same scenario through the Go client (coalescing).
	ClientCyclesPerS     float64   `json:"client_cycles_per_s,omitempty"`
	ClientAdmitP50       float64   `json:"client_admit_p50_us,omitempty"`
	ClientAdmitP99       float64   `json:"client_admit_p99_us,omitempty"`
	ClientXFloor         float64   `json:"client_x_floor,omitempty"`
	ClientOverAdmissions int       `json:"client_over_admissions"`
	ClientCapAdmitted    int       `json:"client_cap_admitted,omitempty"`
	ClientErrors         int64     `json:"client_errors"`
	ClientFirstError     string    `json:"client_first_error,omitempty"`
	ClientReps           []float64 `json:"client_cycles_per_s_reps,omitempty"`
	// BatchedFloor*: the Go client calling the floor's batch endpoints
	// (what NATS and the client cost with coalescing, without the ledger).
	BatchedFloorCyclesPerS float64   `json:"batched_floor_cycles_per_s,omitempty"`
	BatchedFloorReps       []float64 `json:"batched_floor_cycles_per_s_reps,omitempty"`
	// ClientCPUPerCycle is this process's CPU time per cycle of the client
	// runs, in µs: the embedded NATS server, the spendgate replica and the
	// callers with their Go clients (one process: they cannot be told
	// apart).
	ClientCPUPerCycle float64 `json:"client_cpu_us_per_cycle,omitempty"`
	// Redis*: the Redis Lua baseline (redis.go), zero when it did not run.
	// RedisCPUPerCycle is redis-server's CPU time plus this process's (the
	// callers and go-redis) per cycle, RedisServerCPUPerCycle redis-server's
	// alone, in µs.
	RedisCyclesPerS        float64   `json:"redis_cycles_per_s,omitempty"`
	RedisAdmitP50          float64   `json:"redis_admit_p50_us,omitempty"`
	RedisAdmitP99          float64   `json:"redis_admit_p99_us,omitempty"`
	ClientXRedis           float64   `json:"client_x_redis,omitempty"`
	ClientP50XRedis        float64   `json:"client_p50_x_redis_p50,omitempty"`
	RedisCPUPerCycle       float64   `json:"redis_cpu_us_per_cycle,omitempty"`
	RedisServerCPUPerCycle float64   `json:"redis_server_cpu_us_per_cycle,omitempty"`
	RedisReps              []float64 `json:"redis_cycles_per_s_reps,omitempty"`
	RedisErrors            int64     `json:"redis_errors"`
	RedisFirstError        string    `json:"redis_first_error,omitempty"`
	CyclesPerSReps         []float64 `json:"cycles_per_s_reps"`
	FloorReps              []float64 `json:"floor_cycles_per_s_reps"`
	NaiveReps              []float64 `json:"naive_cycles_per_s_reps"`
	// Facts of the run, repeated on every row.
	GOMAXPROCS int    `json:"gomaxprocs"`
	Server     string `json:"server"`
	Replicas   int    `json:"replicas"`
	// Lanes and ServiceReplicas are 0 with --nats-url (the running
	// service's own).
	Lanes           int     `json:"lanes"`
	ServiceReplicas int     `json:"service_replicas"`
	DurationS       float64 `json:"duration_s"`
	Reps            int     `json:"reps"`
}

func (b *bencher) summarize(p *benchPlan, capRes capResult, svc, floor, naive []runResult) benchRow {
	med := func(rs []runResult, f func(runResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	rates := func(rs []runResult) []float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = math.Round(r.rate())
		}
		return v
	}
	sum := func(rs []runResult, first *string) int64 {
		var n int64
		for _, r := range rs {
			n += r.errors
			if *first == "" && r.firstErr != "" {
				*first = r.firstErr
			}
		}
		return n
	}
	row := benchRow{
		Scenario: p.sc.name, Description: p.sc.desc, Callers: p.sc.callers, Conns: b.connsUsed(p.sc.callers),
		CyclesPerS:       med(svc, runResult.rate),
		AdmitP50:         med(svc, func(r runResult) float64 { return r.percentile(0.50) }),
		AdmitP99:         med(svc, func(r runResult) float64 { return r.percentile(0.99) }),
		AdmitP999:        med(svc, func(r runResult) float64 { return r.percentile(0.999) }),
		OverAdmissions:   capRes.Over,
		capResult:        capRes,
		FloorCyclesPerS:  med(floor, runResult.rate),
		FloorAdmitP50:    med(floor, func(r runResult) float64 { return r.percentile(0.50) }),
		FloorAdmitP99:    med(floor, func(r runResult) float64 { return r.percentile(0.99) }),
		NaiveCyclesPerS:  med(naive, runResult.rate),
		NaiveP50:         med(naive, func(r runResult) float64 { return r.percentile(0.50) }),
		NaiveP99:         med(naive, func(r runResult) float64 { return r.percentile(0.99) }),
		NaiveConflictPct: med(naive, runResult.conflictPct),
		CyclesPerSReps:   rates(svc), FloorReps: rates(floor), NaiveReps: rates(naive),
		GOMAXPROCS: runtime.GOMAXPROCS(0), Server: b.serverDesc, Replicas: b.o.Replicas,
		ServiceReplicas: len(b.replicas),
		DurationS:       b.o.Duration.Seconds(), Reps: b.o.Reps,
	}
	if len(b.replicas) > 0 {
		row.Lanes = b.o.Lanes
	}
	row.Errors = sum(svc, &row.FirstError)
	var ignore string
	row.FloorErrors = sum(floor, &ignore)
	row.NaiveErrors = sum(naive, &ignore)
	row.XFloor = ratio(row.CyclesPerS, row.FloorCyclesPerS)
	row.XNaive = ratio(row.CyclesPerS, row.NaiveCyclesPerS)
	return row
}

// summarizeClient fills the row's client columns.
func (b *bencher) summarizeClient(row *benchRow, capRes capResult, cli, cfloor []runResult) {
	if len(cfloor) > 0 {
		v := make([]float64, len(cfloor))
		for i, r := range cfloor {
			v[i] = r.rate()
			row.BatchedFloorReps = append(row.BatchedFloorReps, math.Round(r.rate()))
			row.FloorErrors += r.errors
		}
		row.BatchedFloorCyclesPerS = median(v)
	}
	v := make([]float64, len(cli))
	p50 := make([]float64, len(cli))
	p99 := make([]float64, len(cli))
	for i, r := range cli {
		v[i], p50[i], p99[i] = r.rate(), r.percentile(0.50), r.percentile(0.99)
		row.ClientReps = append(row.ClientReps, math.Round(r.rate()))
		row.ClientErrors += r.errors
		if row.ClientFirstError == "" {
			row.ClientFirstError = r.firstErr
		}
	}
	cpu := make([]float64, len(cli))
	for i, r := range cli {
		cpu[i] = r.cpuPerCycle()
	}
	row.ClientCyclesPerS, row.ClientAdmitP50, row.ClientAdmitP99 = median(v), median(p50), median(p99)
	row.ClientCPUPerCycle = median(cpu)
	row.ClientXFloor = ratio(row.ClientCyclesPerS, row.FloorCyclesPerS)
	row.ClientOverAdmissions, row.ClientCapAdmitted = capRes.Over, capRes.Admitted
	row.ClientErrors += int64(capRes.Errors)
	if row.ClientFirstError == "" {
		row.ClientFirstError = capRes.FirstErr
	}
}

// summarizeRedis fills the row's Redis columns (after the client's): the
// medians of the reps, and the client's figures over Redis's.
func summarizeRedis(row *benchRow, rds []runResult) {
	if len(rds) == 0 {
		return
	}
	n := len(rds)
	rate, p50, p99, all, srv := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i, r := range rds {
		rate[i], p50[i], p99[i] = r.rate(), r.percentile(0.50), r.percentile(0.99)
		all[i], srv[i] = r.cpuPerCycle()+r.serverCPUPerCycle(), r.serverCPUPerCycle()
		row.RedisReps = append(row.RedisReps, math.Round(r.rate()))
		row.RedisErrors += r.errors
		if row.RedisFirstError == "" {
			row.RedisFirstError = r.firstErr
		}
	}
	row.RedisCyclesPerS, row.RedisAdmitP50, row.RedisAdmitP99 = median(rate), median(p50), median(p99)
	row.RedisCPUPerCycle, row.RedisServerCPUPerCycle = median(all), median(srv)
	row.ClientXRedis = ratio(row.ClientCyclesPerS, row.RedisCyclesPerS)
	row.ClientP50XRedis = ratio(row.ClientAdmitP50, row.RedisAdmitP50)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// benchTableColumns are the table's columns, in order.
var benchTableColumns = []string{
	"scenario", "callers", "conns", "cycles/s", "admit p50", "p99", "p99.9", "over-admissions",
	"floor cycles/s", "floor admit p99", "x floor", "naive cycles/s", "naive p99", "x naive",
	"client cycles/s", "client p50", "client p99", "client x floor", "client over-adm.",
	"batched floor cycles/s", "client x batched floor",
	"redis cycles/s", "redis admit p50", "client x redis", "client p50 / redis p50",
	"client CPU/cycle", "redis CPU/cycle", "redis-server CPU/cycle",
}

func (b *bencher) facts() string {
	conns := fmt.Sprintf("callers spread over %d shared client connection(s)", b.o.Conns)
	if b.o.ConnPerCaller {
		conns = "one client connection per caller"
	}
	if b.o.Brief {
		conns += " | Go client: brief admit replies"
	}
	lanes := fmt.Sprintf("lanes=%d | spendgate replicas=%d", b.o.Lanes, b.o.ServiceReplicas)
	if b.o.NATSURL != "" {
		lanes = "lanes and spendgate replicas: the running service's"
	}
	return fmt.Sprintf("GOMAXPROCS=%d NumCPU=%d %s %s/%s | %s | stream replicas=%d, %s | duration=%s per run, reps=%d (medians) | %s",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		b.serverDesc, b.o.Replicas, lanes, b.o.Duration, b.o.Reps, conns)
}

// printTable writes the report as a table and returns the first write
// error, so that a truncated report is never taken for a whole one.
func (b *bencher) printTable(w io.Writer, rows []benchRow, mem *memResult) error {
	ew := &errWriter{w: w}
	if err := b.writeTable(ew, rows, mem); err != nil {
		return err
	}
	return ew.err
}

// errWriter remembers the first write error; every later write fails
// with it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

func (b *bencher) writeTable(w io.Writer, rows []benchRow, mem *memResult) error {
	fmt.Fprintln(w, b.facts())
	if len(rows) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(benchTableColumns, "\t"))
		for _, r := range rows {
			// Without baselines their columns say "-", not a measured 0.
			floor := []string{"-", "-", "-"}
			naive := []string{"-", "-", "-"}
			if b.o.Baselines {
				floor = []string{fmt.Sprintf("%.0f", r.FloorCyclesPerS), fmtLatency(r.FloorAdmitP99), fmtRatio(r.XFloor)}
				naive = []string{fmt.Sprintf("%.0f", r.NaiveCyclesPerS), fmtLatency(r.NaiveP99), fmtRatio(r.XNaive)}
			}
			cl := []string{"-", "-", "-", "-", "-", "-", "-"}
			if b.o.Client {
				cl = []string{fmt.Sprintf("%.0f", r.ClientCyclesPerS), fmtLatency(r.ClientAdmitP50), fmtLatency(r.ClientAdmitP99),
					fmtRatio(r.ClientXFloor), strconv.Itoa(r.ClientOverAdmissions), "-", "-"}
				if b.o.Baselines {
					cl[5], cl[6] = fmt.Sprintf("%.0f", r.BatchedFloorCyclesPerS), fmtRatio(ratio(r.ClientCyclesPerS, r.BatchedFloorCyclesPerS))
				}
			}
			// Redis's columns say "-" when it did not run; the ratios
			// when the client did not.
			rd := []string{"-", "-", "-", "-", fmtCPU(r.ClientCPUPerCycle), "-", "-"}
			if r.RedisCyclesPerS > 0 || len(r.RedisReps) > 0 {
				rd = []string{fmt.Sprintf("%.0f", r.RedisCyclesPerS), fmtLatency(r.RedisAdmitP50), fmtRatio(r.ClientXRedis),
					fmtRatio(r.ClientP50XRedis), fmtCPU(r.ClientCPUPerCycle), fmtCPU(r.RedisCPUPerCycle), fmtCPU(r.RedisServerCPUPerCycle)}
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
				r.Scenario, r.Callers, r.Conns, r.CyclesPerS,
				fmtLatency(r.AdmitP50), fmtLatency(r.AdmitP99), fmtLatency(r.AdmitP999), r.OverAdmissions,
				strings.Join(floor, "\t"), strings.Join(naive, "\t"), strings.Join(cl, "\t"), strings.Join(rd, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, `
cycle = admit (unique request id, amount %s, ttl %s) + settle (actual %s), each a NATS request-reply (JSON);
  every event is committed to the ledger stream before the reply. Latencies are admit round trips.
scenarios:`+"\n", benchAmount, benchTTL, benchAmount)
		for _, r := range rows {
			fmt.Fprintf(w, "  %-9s %s\n", r.Scenario, r.Description)
		}
		fmt.Fprintf(w, `over-admissions: per scenario, a cap burst on fresh budgets whose limits hold exactly N = callers admits
  (spread64: over %d budgets): 4N concurrent admits from the scenario's callers; count admitted beyond each limit.
  multi3 caps its org scope. (The timed runs use limits of %s, so they never deny.)
floor: the same callers and connections calling micro service "spendgate-floor" (%s, %s), dispatched
  as spendgate dispatches (each request handed to its own goroutine, which decodes it with codec.DecodeRequest
  into AdmitRequest/SettleRequest and publishes a small JSON reply); a floor cycle is also two requests.
naive: the same callers calling KV directly (no service hop, no events): get, parse decimals, check the limit,
  Update(key, revision), again on a revision conflict; a second get-then-CAS settles. spread64 spreads over
  %d keys; multi3 does 3 sequential get-then-CAS per reserve and per settle (NOT atomic). naive p99 = reserve.
client: the same callers and connections through the Go client (package client, one per connection), whose
  concurrent calls share batch messages (admit.batch, settle.batch, or batch when admits and settles are gathered
  together; a lone call goes at once, others wait at most its 200µs linger or 64 items); its own cap burst counts
  client over-adm.
batched floor: the same callers through the same Go client pointed at the floor's batch endpoints (%sadmit.batch,
  %ssettle.batch, %sbatch: each item decoded and answered as the floor answers it): what NATS and the client cost
  with coalescing, without the ledger.
x floor = cycles/s / floor cycles/s; x naive = cycles/s / naive cycles/s; client x floor = client cycles/s / floor;
  client x batched floor = client cycles/s / batched floor cycles/s.
`, benchSpreadCapBudgets, benchBigLimit, benchFloorAdmit, benchFloorSettle, benchSpreadBudgets, benchFloorPrefix, benchFloorPrefix, benchFloorPrefix)
		b.writeRedisNotes(w, rows)
		var conf []string
		for _, r := range rows {
			conf = append(conf, fmt.Sprintf("%s %.0f%%", r.Scenario, r.NaiveConflictPct))
		}
		if b.o.Baselines {
			fmt.Fprintf(w, "naive CAS conflicts: %s\n", strings.Join(conf, ", "))
		}
		for _, r := range rows {
			if r.RedisErrors > 0 {
				fmt.Fprintf(w, "ERRORS %s: redis %d (first: %s)\n", r.Scenario, r.RedisErrors, r.RedisFirstError)
			}
			if r.Errors > 0 || r.FloorErrors > 0 || r.NaiveErrors > 0 || r.capResult.Errors > 0 {
				fmt.Fprintf(w, "ERRORS %s: spendgate %d, floor %d, naive %d, cap burst %d (first: %s)\n",
					r.Scenario, r.Errors, r.FloorErrors, r.NaiveErrors, r.capResult.Errors, firstNonEmpty(r.FirstError, r.capResult.FirstErr))
			}
			if r.Admitted < r.Callers {
				fmt.Fprintf(w, "NOTE %s: the cap burst admitted %d of the %d that fit\n", r.Scenario, r.Admitted, r.Callers)
			}
		}
	}
	if mem != nil {
		verdict := "ok"
		if mem.Over {
			verdict = fmt.Sprintf("OVER %d MB", benchMemLimitMB)
		}
		fmt.Fprintf(w, "mem: %d open reservations (ttl %s) over %d budgets, opened in %s (%d errors): held RSS %.0f MB (%.0f MB before, %.0f MB right after the burst), Go heap in use %.0f MB, limit %d MB: %s\n  %s\n",
			mem.Open, benchMemTTL, mem.Budgets, fmtSeconds(mem.OpenSeconds), mem.Errors, mem.RSSMB, mem.RSSBeforeMB, mem.PeakRSSMB, mem.HeapInuseMB, benchMemLimitMB, verdict, mem.Note)
	}
	if b.flood != nil {
		writeFlood(w, b.flood)
	}
	if b.gw != nil {
		writeGateway(w, b.gw)
	}
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func (b *bencher) printJSON(w io.Writer, rows []benchRow, mem *memResult) error {
	out := make([]any, 0, len(rows)+1)
	for _, r := range rows {
		out = append(out, r)
	}
	if mem != nil {
		out = append(out, mem)
	}
	if b.flood != nil {
		out = append(out, b.flood)
	}
	if b.gw != nil {
		out = append(out, b.gw)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// fmtLatency formats µs.
func fmtLatency(us float64) string {
	switch {
	case us == 0:
		return "-" // not measured (--baselines=false)
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
}

// fmtCPU formats a CPU time per cycle in µs ("-": not measured).
func fmtCPU(us float64) string {
	if us == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", us)
}

func fmtRatio(x float64) string {
	if x == 0 {
		return "-" // no baseline to compare with (--baselines=false)
	}
	if x >= 10 {
		return fmt.Sprintf("%.0fx", x)
	}
	return fmt.Sprintf("%.2fx", x)
}

func fmtSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}
