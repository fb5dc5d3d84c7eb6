package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Driving callers: the timed runs, the cycle of each way (service, floor,
// naive CAS, client), and the cap bursts that count over-admissions.

// runResult is one run of one kind (spendgate, floor or naive).
type runResult struct {
	cycles  int64
	elapsed time.Duration
	cpu     time.Duration // the process's CPU time (user + system) during the run
	// allocs and allocBytes are the process's heap allocations during the
	// run (runtime.MemStats Mallocs and TotalAlloc).
	allocs, allocBytes uint64
	lat                []int64 // admit (naive: reserve) latencies in ns, sorted
	errors             int64
	firstErr           string
	// naive only
	attempts, conflicts int64
	// redis only: redis-server's CPU time during the run
	serverCPU time.Duration
}

// serverCPUPerCycle is the Redis baseline's redis-server CPU time per
// cycle in µs.
func (r runResult) serverCPUPerCycle() float64 {
	if r.cycles == 0 {
		return 0
	}
	return float64(r.serverCPU.Microseconds()) / float64(r.cycles)
}

// cpuPerCycle is the process's CPU time per cycle in µs (server, replica
// and callers together): what a cycle costs, whatever else the machine
// runs.
func (r runResult) cpuPerCycle() float64 {
	if r.cycles == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / float64(r.cycles)
}

// allocsPerCycle returns the heap allocations and bytes per cycle.
func (r runResult) allocsPerCycle() (n, bytes float64) {
	if r.cycles == 0 {
		return 0, 0
	}
	return float64(r.allocs) / float64(r.cycles), float64(r.allocBytes) / float64(r.cycles)
}

// cost formats a run's CPU and allocations per cycle.
func (r runResult) cost() string {
	n, b := r.allocsPerCycle()
	return fmt.Sprintf("%.0fµs CPU, %.0f allocs, %.1f KB per cycle", r.cpuPerCycle(), n, b/1024)
}

// processCPU returns the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (r runResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.cycles) / r.elapsed.Seconds()
}

// percentile returns the q-quantile of the admit latencies in µs.
func (r runResult) percentile(q float64) float64 {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(r.lat)))) - 1
	i = max(0, min(i, len(r.lat)-1))
	return float64(r.lat[i]) / 1e3
}

func (r runResult) conflictPct() float64 {
	if r.attempts == 0 {
		return 0
	}
	return 100 * float64(r.conflicts) / float64(r.attempts)
}

// cycleFunc runs one cycle of caller c and returns its admit latency. ctx
// ends at the run's deadline.
type cycleFunc func(ctx context.Context, c, seq int, rng *rand.Rand) (time.Duration, error)

// drive runs callers goroutines looping f until the duration has passed;
// a cycle in flight at the deadline finishes (and counts; the elapsed time
// runs until the last caller stops). Every goroutine has returned when
// drive returns.
func (b *bencher) drive(callers int, f cycleFunc) runResult {
	runCtx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	perCaller := max(1024, benchMaxLatSamples/callers)
	type callerResult struct {
		cycles, errors int64
		firstErr       string
		lat            []int64
	}
	res := make([]callerResult, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), rand.Uint64()))
			r := &res[c]
			<-start
			for seq := 0; runCtx.Err() == nil; seq++ {
				lat, err := f(runCtx, c, seq, rng)
				if err != nil {
					if runCtx.Err() != nil {
						break // cut off by the deadline: not a failure
					}
					r.errors++
					if r.firstErr == "" {
						r.firstErr = err.Error()
					}
					time.Sleep(benchErrorBackoff)
					continue
				}
				r.cycles++
				if len(r.lat) < perCaller {
					r.lat = append(r.lat, int64(lat))
				} else if j := rng.Int64N(r.cycles); j < int64(perCaller) {
					r.lat[j] = int64(lat) // reservoir
				}
			}
		}()
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	t0, cpu0 := time.Now(), processCPU()
	timer := time.AfterFunc(b.o.Duration, cancel)
	close(start)
	wg.Wait()
	timer.Stop()
	out := runResult{elapsed: time.Since(t0), cpu: processCPU() - cpu0}
	runtime.ReadMemStats(&ms1)
	out.allocs, out.allocBytes = ms1.Mallocs-ms0.Mallocs, ms1.TotalAlloc-ms0.TotalAlloc
	for _, r := range res {
		out.cycles += r.cycles
		out.errors += r.errors
		if out.firstErr == "" {
			out.firstErr = r.firstErr
		}
		out.lat = append(out.lat, r.lat...)
	}
	sort.Slice(out.lat, func(i, j int) bool { return out.lat[i] < out.lat[j] })
	return out
}

// benchRequest sends data to subject and returns the reply, or the
// service's error reply as an error.
func benchRequest(ctx context.Context, nc *nats.Conn, subject string, data []byte) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, benchRequestTimeout)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, err
	}
	if msg.Header.Get(micro.ErrorHeader) != "" {
		var er events.ErrorReply
		if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
			return nil, fmt.Errorf("%s: %s", er.Error.Code, er.Error.Message)
		}
		return nil, fmt.Errorf("%s: %s", msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader))
	}
	return msg, nil
}

// benchCycle admits benchAmount in scopes and settles the reservation with
// the same actual, both over request-reply, and returns the admit's
// round-trip latency. The spendgate service and the floor are driven by
// this same function.
func benchCycle(ctx context.Context, nc *nats.Conn, admitSubj, settleSubj string, scopes []string, id string) (time.Duration, error) {
	data, err := json.Marshal(events.AdmitRequest{RequestID: id, Scopes: scopes, Amount: benchAmount, TTL: benchTTL})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	msg, err := benchRequest(ctx, nc, admitSubj, data)
	lat := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("admit: %w", err)
	}
	var ar events.AdmitReply
	if err := json.Unmarshal(msg.Data, &ar); err != nil {
		return 0, fmt.Errorf("admit reply: %w", err)
	}
	if !ar.Admitted {
		reason := "no reason"
		if ar.Denial != nil {
			reason = string(ar.Denial.Reason) + ": " + ar.Denial.Message
		}
		return 0, fmt.Errorf("admit denied: %s", reason)
	}
	data, err = json.Marshal(events.SettleRequest{ReservationID: ar.ReservationID, Actual: benchAmount})
	if err != nil {
		return 0, err
	}
	msg, err = benchRequest(ctx, nc, settleSubj, data)
	if err != nil {
		return 0, fmt.Errorf("settle: %w", err)
	}
	var cr events.CloseReply
	if err := json.Unmarshal(msg.Data, &cr); err != nil {
		return 0, fmt.Errorf("settle reply: %w", err)
	}
	if cr.Status != events.StatusSettled {
		return 0, fmt.Errorf("settle: status %q", cr.Status)
	}
	return lat, nil
}

// naiveStats counts the naive baseline's compare-and-set attempts.
type naiveStats struct{ attempts, conflicts atomic.Int64 }

var errNaiveDenied = errors.New("naive: limit reached")

// naiveCycle reserves benchAmount on every key (one get-then-CAS per key,
// in order, NOT atomic across keys), then settles each the same way. It
// returns the reserve latency (first Get to the last successful Update).
func naiveCycle(ctx context.Context, kv jetstream.KeyValue, keys []string, st *naiveStats) (time.Duration, error) {
	amount := events.MustMoney(benchAmount)
	t0 := time.Now()
	for _, k := range keys {
		err := naiveCAS(ctx, kv, k, st, func(limit, spent, reserved events.Money) (events.Money, events.Money, error) {
			if spent.Add(reserved).Add(amount).Cmp(limit) > 0 {
				return spent, reserved, errNaiveDenied
			}
			return spent, reserved.Add(amount), nil
		})
		if err != nil {
			return 0, fmt.Errorf("naive reserve %s: %w", k, err)
		}
	}
	lat := time.Since(t0)
	for _, k := range keys {
		err := naiveCAS(ctx, kv, k, st, func(_, spent, reserved events.Money) (events.Money, events.Money, error) {
			return spent.Add(amount), reserved.Sub(amount), nil
		})
		if err != nil {
			return 0, fmt.Errorf("naive settle %s: %w", k, err)
		}
	}
	return lat, nil
}

// naiveCAS is get, parse, decide, Update(revision), and again from the Get
// on a revision conflict, until ctx ends.
func naiveCAS(ctx context.Context, kv jetstream.KeyValue, key string, st *naiveStats, f func(limit, spent, reserved events.Money) (events.Money, events.Money, error)) error {
	for {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return err
		}
		var v naiveValue
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			return err
		}
		limit, err := events.ParseMoney(v.Limit)
		if err != nil {
			return err
		}
		spent, err := events.ParseMoney(v.Spent)
		if err != nil {
			return err
		}
		reserved, err := events.ParseMoney(v.Reserved)
		if err != nil {
			return err
		}
		spent, reserved, err = f(limit, spent, reserved)
		if err != nil {
			return err
		}
		data, err := json.Marshal(naiveValue{Limit: v.Limit, Spent: spent.String(), Reserved: reserved.String()})
		if err != nil {
			return err
		}
		st.attempts.Add(1)
		_, err = kv.Update(ctx, key, data, e.Revision())
		if err == nil {
			return nil
		}
		if !streams.IsConflict(err) {
			return err
		}
		st.conflicts.Add(1)
	}
}

// admitFunc sends caller c's admit and returns the service's answer: an
// admission or a denial; err for anything else.
type admitFunc func(c int, req events.AdmitRequest) (events.AdmitReply, error)

// requestAdmit admits over plain request-reply on caller c's connection.
func (b *bencher) requestAdmit(c int, req events.AdmitRequest) (events.AdmitReply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return events.AdmitReply{}, err
	}
	msg, err := benchRequest(b.ctx, b.conns[b.connFor(c)], b.layout.Endpoint(streams.EndpointAdmit), data)
	var ar events.AdmitReply
	if err == nil {
		err = json.Unmarshal(msg.Data, &ar)
	}
	return ar, err
}

// clientAdmit admits through caller c's Go client.
func (b *bencher) clientAdmit(c int, req events.AdmitRequest) (events.AdmitReply, error) {
	res, err := b.clients[b.connFor(c)].Admit(b.ctx, req)
	var de *client.DeniedError
	switch {
	case err == nil:
		return res.Reply(), nil
	case errors.As(err, &de) && de.Err == nil:
		d := de.Denial
		return events.AdmitReply{RequestID: de.RequestID, Denial: &d}, nil
	}
	return events.AdmitReply{}, err
}

// capResult is a scenario's cap burst.
type capResult struct {
	Budgets   int    `json:"cap_budgets"`
	LimitEach int    `json:"cap_limit_each"` // in units of benchAmount
	Fired     int    `json:"cap_fired"`
	Admitted  int    `json:"cap_admitted"`
	Denied    int    `json:"cap_denied"`
	Errors    int    `json:"cap_errors"`
	Over      int    `json:"-"`
	FirstErr  string `json:"cap_first_error,omitempty"`
}

// capBurst defines fresh budgets whose limits hold exactly N = callers
// admits of benchAmount in all (spread64: over 8 budgets), fires 4N admits at
// once from the scenario's callers and connections (4 concurrent admits
// per caller), and counts the admissions beyond each budget's limit. multi3
// caps the org scope; the user and key scopes are large.
func (b *bencher) capBurst(p *benchPlan, tag string, admit admitFunc) (capResult, error) {
	n := p.sc.callers
	nb := 1
	if p.sc.name == "spread64" {
		nb = benchSpreadCapBudgets
	}
	each := n / nb
	limit := events.MoneyFromInt(0)
	amount := events.MustMoney(benchAmount)
	for i := 0; i < each; i++ {
		limit = limit.Add(amount)
	}
	caps := make([]string, nb)
	for i := range caps {
		caps[i] = "org:" + p.base + "-" + tag + strconv.Itoa(i)
	}
	if err := b.defineBudgets(caps, limit.String()); err != nil {
		return capResult{}, err
	}
	res := capResult{Budgets: nb, LimitEach: each, Fired: benchCapFactor * n}
	admitted := make([]atomic.Int64, nb)
	var denied, failed atomic.Int64
	var mu sync.Mutex
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < n; c++ {
		for j := 0; j < benchCapFactor; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bi := (c*benchCapFactor + j) % nb
				scopes := []string{caps[bi]}
				if p.sc.name == "multi3" {
					scopes = append(scopes, p.scopes[1+c%benchMultiWidth], p.scopes[1+benchMultiWidth+(c+j)%benchMultiWidth])
				}
				req := events.AdmitRequest{RequestID: fmt.Sprintf("%s-%s-%s-%d-%d", b.run, p.sc.name, tag, c, j), Scopes: scopes, Amount: benchAmount, TTL: benchTTL}
				<-start
				ar, err := admit(c, req)
				switch {
				case err != nil:
					failed.Add(1)
					mu.Lock()
					if res.FirstErr == "" {
						res.FirstErr = err.Error()
					}
					mu.Unlock()
				case ar.Admitted:
					admitted[bi].Add(1)
				case ar.Denial != nil && ar.Denial.Reason == events.ReasonLimitReached:
					denied.Add(1)
				default:
					failed.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for i := range admitted {
		a := int(admitted[i].Load())
		res.Admitted += a
		res.Over += max(0, a-each)
	}
	res.Denied, res.Errors = int(denied.Load()), int(failed.Load())
	if res.Errors > 0 {
		fmt.Fprintf(b.log, "%s: cap burst: %d errors (first: %s)\n", p.sc.name, res.Errors, res.FirstErr)
	}
	return res, b.ctx.Err()
}
