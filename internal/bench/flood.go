package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Named bounds of the flood scenario.
const (
	// benchFloodRate is the flood's settles of unknown reservation ids per
	// second.
	benchFloodRate = 5000
	// benchFloodCallers run good admit+settle cycles during the flood.
	benchFloodCallers = 16
	// benchFloodTargetP99 is the good admits' p99 the flood must not push
	// past.
	benchFloodTargetP99 = 50 * time.Millisecond
	// benchFloodTick paces the flood's publishes.
	benchFloodTick = 2 * time.Millisecond
	// benchFloodDrain bounds the wait for the flood's last replies.
	benchFloodDrain = 10 * time.Second
)

// floodResult is the flood scenario's report (one object of --json).
type floodResult struct {
	Scenario      string  `json:"scenario"`
	Callers       int     `json:"callers"`
	Rate          int     `json:"flood_rate_per_s"`
	CalmCyclesPS  float64 `json:"calm_cycles_per_s"`
	CalmP50       float64 `json:"calm_admit_p50_us"`
	CalmP99       float64 `json:"calm_admit_p99_us"`
	FloodCyclesPS float64 `json:"flood_cycles_per_s"`
	FloodP50      float64 `json:"flood_admit_p50_us"`
	FloodP99      float64 `json:"flood_admit_p99_us"`
	FloodMax      float64 `json:"flood_admit_max_us"`
	Sent          int64   `json:"flood_sent"`
	Unknown       int64   `json:"flood_unknown_reservation"`
	Busy          int64   `json:"flood_ledger_busy"`
	Other         int64   `json:"flood_other"`
	Unanswered    int64   `json:"flood_unanswered"`
	// SyncReads is how many stream reads the replicas made for misses
	// during the flood runs (0 with --nats-url).
	SyncReads int64 `json:"sync_reads"`
	// CalmConflicts, FloodConflicts, CalmTimeouts and FloodTimeouts are
	// the replicas' lost compare-and-sets and timed-out writes (outcome
	// unknown, sent again after ledger.DefaultCommitTimeout) in the runs
	// without and with the flood (0 with --nats-url).
	CalmConflicts  int64   `json:"calm_cas_conflicts"`
	FloodConflicts int64   `json:"flood_cas_conflicts"`
	CalmTimeouts   int64   `json:"calm_write_timeouts"`
	FloodTimeouts  int64   `json:"flood_write_timeouts"`
	Errors         int64   `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`
	TargetP99      float64 `json:"target_p99_us"`
	Met            bool    `json:"target_met"`
	Reps           int     `json:"reps"`
	DurationS      float64 `json:"duration_s"`
}

// floodCheck runs, per rep, benchFloodCallers good admit+settle cycles on
// one budget for the duration without a flood, then again while a separate
// connection publishes benchFloodRate well-formed settles of unknown
// reservation ids per second; it reports the good admits' latencies of
// both (medians over the reps) and what the flood was answered.
func (b *bencher) floodCheck() (floodResult, error) {
	res := floodResult{Scenario: "flood", Callers: benchFloodCallers, Rate: benchFloodRate, Reps: b.o.Reps,
		DurationS: b.o.Duration.Seconds(), TargetP99: float64(benchFloodTargetP99.Microseconds())}
	scope := "org:bench-" + b.run + "-flood"
	if err := b.defineBudgets([]string{scope}, benchBigLimit); err != nil {
		return res, err
	}
	fnc, err := nats.Connect(b.url, nats.Name("spendgate-bench-flood"))
	if err != nil {
		return res, fmt.Errorf("connect %s: %w", b.url, err)
	}
	defer fnc.Close()
	admit, settle := b.layout.Endpoint(streams.EndpointAdmit), b.layout.Endpoint(streams.EndpointSettle)
	cycle := func(tag string) cycleFunc {
		return func(_ context.Context, c, seq int, _ *rand.Rand) (time.Duration, error) {
			return benchCycle(b.ctx, b.conns[b.connFor(c)], admit, settle, []string{scope}, tag+"-"+strconv.Itoa(c)+"-"+strconv.Itoa(seq))
		}
	}
	var calm, flood []runResult
	var maxLat float64
	for rep := 0; rep < b.o.Reps; rep++ {
		tag := fmt.Sprintf("%s-flood-%d", b.run, rep)
		sc := b.ledgerStats()
		c := b.drive(benchFloodCallers, cycle(tag+"-calm"))
		calm = append(calm, c)
		st0 := b.ledgerStats()
		res.CalmConflicts += st0.Conflicts - sc.Conflicts
		res.CalmTimeouts += st0.Timeouts - sc.Timeouts
		fl, err := startFlood(fnc, settle, tag)
		if err != nil {
			return res, err
		}
		f := b.drive(benchFloodCallers, cycle(tag+"-flood"))
		fr := fl.stop()
		st1 := b.ledgerStats()
		res.SyncReads += st1.SyncReads - st0.SyncReads
		res.FloodConflicts += st1.Conflicts - st0.Conflicts
		res.FloodTimeouts += st1.Timeouts - st0.Timeouts
		flood = append(flood, f)
		res.Sent += fr.sent
		res.Unknown += fr.unknown
		res.Busy += fr.busy
		res.Other += fr.other
		res.Unanswered += fr.sent - fr.unknown - fr.busy - fr.other
		if len(f.lat) > 0 {
			maxLat = max(maxLat, float64(f.lat[len(f.lat)-1])/1e3)
		}
		for _, r := range []runResult{c, f} {
			res.Errors += r.errors
			if res.FirstError == "" {
				res.FirstError = r.firstErr
			}
		}
		fmt.Fprintf(b.log, "flood rep %d/%d: calm %.0f cycles/s (p99 %s); flood of %d settles: %.0f cycles/s (p50 %s, p99 %s), flood answered %d unknown, %d busy, %d other\n",
			rep+1, b.o.Reps, c.rate(), fmtLatency(c.percentile(0.99)), fr.sent, f.rate(), fmtLatency(f.percentile(0.5)), fmtLatency(f.percentile(0.99)), fr.unknown, fr.busy, fr.other)
		if err := b.ctx.Err(); err != nil {
			return res, err
		}
	}
	med := func(rs []runResult, f func(runResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	p := func(q float64) func(runResult) float64 { return func(r runResult) float64 { return r.percentile(q) } }
	res.CalmCyclesPS, res.CalmP50, res.CalmP99 = med(calm, runResult.rate), med(calm, p(0.5)), med(calm, p(0.99))
	res.FloodCyclesPS, res.FloodP50, res.FloodP99 = med(flood, runResult.rate), med(flood, p(0.5)), med(flood, p(0.99))
	res.FloodMax = maxLat
	res.Met = res.FloodP99 > 0 && res.FloodP99 < res.TargetP99
	return res, nil
}

// flooder publishes settles of unknown reservation ids at benchFloodRate
// and counts their answers by code.
type flooder struct {
	nc     *nats.Conn
	sub    *nats.Subscription
	cancel context.CancelFunc
	done   chan struct{}

	sent                 atomic.Int64
	unknown, busy, other atomic.Int64
	answered             atomic.Int64
	mu                   sync.Mutex
	publishErr           error
}

type floodCounts struct{ sent, unknown, busy, other int64 }

func startFlood(nc *nats.Conn, subject, tag string) (*flooder, error) {
	f := &flooder{nc: nc, done: make(chan struct{})}
	inbox := nats.NewInbox()
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		switch m.Header.Get(micro.ErrorHeader) {
		case string(events.CodeUnknownReservation):
			f.unknown.Add(1)
		case string(events.CodeLedgerBusy):
			f.busy.Add(1)
		default:
			f.other.Add(1)
		}
		f.answered.Add(1)
	})
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	f.sub = sub
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		tick := time.NewTicker(benchFloodTick)
		defer tick.Stop()
		t0 := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			due := int64(time.Since(t0).Seconds()*benchFloodRate) - f.sent.Load()
			for i := int64(0); i < due; i++ {
				n := f.sent.Add(1)
				data, _ := json.Marshal(events.SettleRequest{ReservationID: "rsv_flood_" + tag + "_" + strconv.FormatInt(n, 10), Actual: benchAmount})
				if err := nc.PublishRequest(subject, inbox, data); err != nil {
					f.mu.Lock()
					f.publishErr = err
					f.mu.Unlock()
					return
				}
			}
		}
	}()
	return f, nil
}

// stop ends the flood, waits (bounded) for the answers of what was sent,
// and returns the counts.
func (f *flooder) stop() floodCounts {
	f.cancel()
	<-f.done
	deadline := time.Now().Add(benchFloodDrain)
	for f.answered.Load() < f.sent.Load() && time.Now().Before(deadline) {
		_ = f.nc.FlushTimeout(time.Second)
		if f.answered.Load() < f.sent.Load() {
			time.Sleep(10 * time.Millisecond) // polling the reply count, bounded by benchFloodDrain
		}
	}
	_ = f.sub.Unsubscribe()
	return floodCounts{sent: f.sent.Load(), unknown: f.unknown.Load(), busy: f.busy.Load(), other: f.other.Load()}
}

// writeFlood prints the flood scenario's report.
func writeFlood(w io.Writer, r *floodResult) {
	verdict := "met"
	if !r.Met {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, `flood: %d callers' admit+settle cycles on one budget, %s per run, %d reps (medians):
  without the flood: %.0f cycles/s, admit p50 %s, p99 %s
  with %d/s unknown settles: %.0f cycles/s, admit p50 %s, p99 %s (max %s); target p99 < %s: %s
  flood: %d settles sent; answered %d unknown_reservation, %d ledger_busy, %d other, %d unanswered; %d stream reads for misses
  replicas' writes, without / with the flood: %d / %d lost compare-and-set, %d / %d timed out (outcome unknown, sent again)
`, r.Callers, fmtSeconds(r.DurationS), r.Reps, r.CalmCyclesPS, fmtLatency(r.CalmP50), fmtLatency(r.CalmP99),
		r.Rate, r.FloodCyclesPS, fmtLatency(r.FloodP50), fmtLatency(r.FloodP99), fmtLatency(r.FloodMax),
		fmtLatency(r.TargetP99), verdict, r.Sent, r.Unknown, r.Busy, r.Other, r.Unanswered, r.SyncReads,
		r.CalmConflicts, r.FloodConflicts, r.CalmTimeouts, r.FloodTimeouts)
}
