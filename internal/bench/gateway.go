package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/fakellm"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/streams"
)

// Named bounds of the gateway scenario.
const (
	// benchGatewayCallers are the latency runs' callers: one alone (what
	// the gateway adds to a call), and a busy service's worth.
	benchGatewayBusy = 16
	// benchGatewayChunks and benchGatewayChunkEvery shape each stream:
	// its fake upstream sends that many content chunks, one per interval
	// (a stream of about a second, as a short LLM answer is).
	benchGatewayChunks = 50
	// benchGatewayTarget is the most the gateway may add to a lone call
	// at p50.
	benchGatewayTarget = time.Millisecond
	// benchGatewayUpstreamKey is the fake upstream's credential.
	benchGatewayUpstreamKey = "sk-bench-upstream"
)

// benchGatewayStreams is how many streaming calls run at once, and
// benchGatewayChunkEvery the interval between a stream's chunks (variables
// only so that the package's test runs fewer and shorter).
var (
	benchGatewayStreams    = 200
	benchGatewayChunkEvery = 20 * time.Millisecond
)

// gatewayResult is the gateway scenario's report (one object of --json).
type gatewayResult struct {
	Scenario string `json:"scenario"`
	// Lone caller, plain chat calls: p50 and p99 straight to the fake
	// upstream and through the gateway, µs, medians of the reps; Added is
	// the gateway's p50 minus the direct p50.
	DirectP50  float64 `json:"direct_p50_us"`
	DirectP99  float64 `json:"direct_p99_us"`
	GatewayP50 float64 `json:"gateway_p50_us"`
	GatewayP99 float64 `json:"gateway_p99_us"`
	AddedP50   float64 `json:"added_p50_us"`
	TargetUS   float64 `json:"target_added_p50_us"`
	Met        bool    `json:"target_met"`
	// The same through a gateway that settles after the reply
	// (gateway.Config.SettleAfterReply): one ledger round trip less.
	AfterP50      float64 `json:"settle_after_reply_p50_us"`
	AfterP99      float64 `json:"settle_after_reply_p99_us"`
	AfterAddedP50 float64 `json:"settle_after_reply_added_p50_us"`
	// The same with benchGatewayBusy callers at once: calls/s too.
	BusyCallers     int     `json:"busy_callers"`
	BusyDirectRate  float64 `json:"busy_direct_calls_per_s"`
	BusyDirectP50   float64 `json:"busy_direct_p50_us"`
	BusyGatewayRate float64 `json:"busy_gateway_calls_per_s"`
	BusyGatewayP50  float64 `json:"busy_gateway_p50_us"`
	BusyGatewayP99  float64 `json:"busy_gateway_p99_us"`
	// BusyDirectCPU and BusyGatewayCPU are the process's CPU per call
	// (µs: the callers, the fake, and for the gateway the gateway, the
	// replica and the server too), and BusyCores its mean cores in use
	// through the gateway.
	BusyDirectCPU  float64 `json:"busy_direct_cpu_per_call_us"`
	BusyGatewayCPU float64 `json:"busy_gateway_cpu_per_call_us"`
	BusyCores      float64 `json:"busy_gateway_cores_in_use"`
	// Streams: benchGatewayStreams streaming calls at once, each of
	// benchGatewayChunks chunks; time to the first event and to the end,
	// µs, for both ways; the streams done, and the process's CPU per
	// stream and its mean cores in use through the gateway.
	Streams          int     `json:"concurrent_streams"`
	StreamsDone      int64   `json:"streams_done"`
	DirectFirstP50   float64 `json:"direct_first_event_p50_us"`
	GatewayFirstP50  float64 `json:"gateway_first_event_p50_us"`
	GatewayFirstP99  float64 `json:"gateway_first_event_p99_us"`
	DirectStreamP50  float64 `json:"direct_stream_p50_us"`
	GatewayStreamP50 float64 `json:"gateway_stream_p50_us"`
	GatewayStreamP99 float64 `json:"gateway_stream_p99_us"`
	CPUPerStreamMS   float64 `json:"gateway_cpu_per_stream_ms"`
	Cores            float64 `json:"gateway_cores_in_use"`
	// LeftReserved is what the run's budget still held reserved at the
	// end (must be "0").
	LeftReserved string  `json:"left_reserved"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	Reps         int     `json:"reps"`
	DurationS    float64 `json:"duration_s"`
}

// gatewayBench is what the scenario's runs share.
type gatewayBench struct {
	b                       *bencher
	hc                      *http.Client
	direct, through, secret string
	after                   string // the gateway that settles after the reply
	plain, stream           []byte
	mu                      sync.Mutex
	streamTimes             []int64 // ns, the current run's whole streams
}

// gatewayCheck measures what spendgate gateway adds to a call: a fake
// provider on loopback (internal/fakellm), the gateway in front of it
// with its own NATS connection to the bench's replica, and an HTTP client
// with keep-alive calling either. Per rep: a lone caller's plain calls
// straight and through the gateway, the same with benchGatewayBusy
// callers, then benchGatewayStreams streaming calls at once both ways.
// Everything runs in this one process on this machine's cores (server,
// replica, gateway, fake, callers), so the CPU figures are all of them.
func (b *bencher) gatewayCheck() (gatewayResult, error) {
	res := gatewayResult{Scenario: "gateway", TargetUS: float64(benchGatewayTarget.Microseconds()), BusyCallers: benchGatewayBusy,
		Streams: benchGatewayStreams, Reps: b.o.Reps, DurationS: b.o.Duration.Seconds()}
	g, closeAll, err := b.startGateway()
	if err != nil {
		return res, err
	}
	defer closeAll()

	var lone, loneGW, loneAfter, busy, busyGW, st, stGW []runResult
	var streamTotal, streamTotalGW [][]int64
	var streamsGW int64
	var cpuGW time.Duration
	var wall time.Duration
	for rep := 0; rep < b.o.Reps; rep++ {
		fmt.Fprintf(b.log, "gateway rep %d/%d: lone caller\n", rep+1, b.o.Reps)
		lone = append(lone, b.drive(1, g.plainCall(g.direct, false)))
		loneGW = append(loneGW, b.drive(1, g.plainCall(g.through, true)))
		loneAfter = append(loneAfter, b.drive(1, g.plainCall(g.after, true)))
		fmt.Fprintf(b.log, "gateway rep %d/%d: %d callers\n", rep+1, b.o.Reps, benchGatewayBusy)
		busy = append(busy, b.drive(benchGatewayBusy, g.plainCall(g.direct, false)))
		busyGW = append(busyGW, b.drive(benchGatewayBusy, g.plainCall(g.through, true)))
		fmt.Fprintf(b.log, "gateway rep %d/%d: %d streams at once\n", rep+1, b.o.Reps, benchGatewayStreams)
		g.streamTimes = nil
		st = append(st, b.drive(benchGatewayStreams, g.streamCall(g.direct, false)))
		streamTotal = append(streamTotal, g.sortedTimes())
		g.streamTimes = nil
		r := b.drive(benchGatewayStreams, g.streamCall(g.through, true))
		stGW = append(stGW, r)
		streamTotalGW = append(streamTotalGW, g.sortedTimes())
		streamsGW += r.cycles
		cpuGW += r.cpu
		wall += r.elapsed
	}
	p := func(rs []runResult, q float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = r.percentile(q)
		}
		return median(v)
	}
	rate := func(rs []runResult) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = r.rate()
		}
		return median(v)
	}
	pt := func(runs [][]int64, q float64) float64 {
		v := make([]float64, len(runs))
		for i, ts := range runs {
			v[i] = percentileNS(ts, q)
		}
		return median(v)
	}
	res.DirectP50, res.DirectP99 = p(lone, 0.5), p(lone, 0.99)
	res.GatewayP50, res.GatewayP99 = p(loneGW, 0.5), p(loneGW, 0.99)
	res.AddedP50 = res.GatewayP50 - res.DirectP50
	res.Met = res.AddedP50 <= res.TargetUS
	res.AfterP50, res.AfterP99 = p(loneAfter, 0.5), p(loneAfter, 0.99)
	res.AfterAddedP50 = res.AfterP50 - res.DirectP50
	res.BusyDirectRate, res.BusyDirectP50 = rate(busy), p(busy, 0.5)
	res.BusyGatewayRate, res.BusyGatewayP50, res.BusyGatewayP99 = rate(busyGW), p(busyGW, 0.5), p(busyGW, 0.99)
	cpu := func(rs []runResult) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = r.cpuPerCycle()
		}
		return median(v)
	}
	res.BusyDirectCPU, res.BusyGatewayCPU = cpu(busy), cpu(busyGW)
	cores := make([]float64, len(busyGW))
	for i, r := range busyGW {
		cores[i] = r.cpu.Seconds() / r.elapsed.Seconds()
	}
	res.BusyCores = median(cores)
	res.DirectFirstP50, res.GatewayFirstP50, res.GatewayFirstP99 = p(st, 0.5), p(stGW, 0.5), p(stGW, 0.99)
	res.DirectStreamP50, res.GatewayStreamP50, res.GatewayStreamP99 = pt(streamTotal, 0.5), pt(streamTotalGW, 0.5), pt(streamTotalGW, 0.99)
	res.StreamsDone = streamsGW
	if streamsGW > 0 {
		res.CPUPerStreamMS = float64(cpuGW.Microseconds()) / 1e3 / float64(streamsGW)
	}
	if wall > 0 {
		res.Cores = cpuGW.Seconds() / wall.Seconds()
	}
	for _, rs := range [][]runResult{lone, loneGW, loneAfter, busy, busyGW, st, stGW} {
		for _, r := range rs {
			res.Errors += r.errors
			if res.FirstError == "" {
				res.FirstError = r.firstErr
			}
		}
	}
	// Nothing stays reserved: every call through the gateway was settled
	// (or released) before its caller had its answer's end.
	v, err := b.clients[0].GetBudget(b.ctx, events.BudgetGetRequest{Scope: "team:gwbench-" + b.run, Period: "month"})
	if err != nil {
		return res, fmt.Errorf("the gateway's budget: %w", err)
	}
	res.LeftReserved = v.Reserved
	return res, nil
}

// startGateway starts the fake provider and the gateway, each on a
// loopback listener, and defines the model's price, a budget and a key.
func (b *bencher) startGateway() (*gatewayBench, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	serve := func(h http.Handler) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		closers = append(closers, func() { _ = srv.Close() })
		return "http://" + ln.Addr().String(), nil
	}
	upstream, err := serve(fakellm.New(benchGatewayUpstreamKey))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	model, scope := "gwbench-"+b.run, "team:gwbench-"+b.run
	admin := b.clients[0]
	if _, err := admin.PutPrice(b.ctx, events.PricingPutRequest{Model: model, Input: "2.5", Output: "10"}); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("price: %w", err)
	}
	if _, err := admin.PutBudget(b.ctx, events.BudgetPutRequest{Scope: scope, Period: "month", Limit: benchBigLimit, Unit: "USD"}); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("budget: %w", err)
	}
	id, secret, err := events.NewAPIKey()
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	_, err = benchRequest(b.ctx, b.conns[0], b.layout.Endpoint(streams.EndpointAPIKeyCreate),
		[]byte(fmt.Sprintf(`{"id":%q,"hash":%q,"scopes":[%q]}`, id, events.HashAPIKey(secret), scope)))
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	// The gateway is a client of its own, on its own connection, as a
	// separate process would be.
	gnc, err := nats.Connect(b.url, nats.Name("spendgate-bench-gateway"))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	closers = append(closers, gnc.Close)
	cs, err := gateway.NewClientSet(gnc, b.layout.Prefix(), client.WithTimeout(benchRequestTimeout), client.WithRetries(2), client.WithBriefReplies())
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	root, _ := cs.For("")
	var urls []string
	for _, after := range []bool{false, true} {
		gw, err := gateway.New(cs, gateway.NewKeys(root, 0), gateway.Config{SettleAfterReply: after, Upstreams: []gateway.Upstream{
			{Kind: gateway.KindOpenAI, BaseURL: upstream + "/v1", Key: benchGatewayUpstreamKey}}})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		mux := http.NewServeMux()
		gw.Register(mux)
		u, err := serve(mux)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, gw.Wait)
		urls = append(urls, u)
	}
	through := urls[0]
	tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true}
	closers = append(closers, tr.CloseIdleConnections)
	g := &gatewayBench{b: b, hc: &http.Client{Transport: tr}, direct: upstream, through: through, after: urls[1], secret: secret,
		plain:  []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"Say hi in five words."}],"max_tokens":64}`),
		stream: []byte(fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"Tell a short story. fake:out=%d fake:slow=%s"}],"max_tokens":256}`, model, benchGatewayChunks, benchGatewayChunkEvery))}
	// Warm both ways up: connections, the key cache, the replica's book.
	for range 50 {
		for _, way := range []struct {
			url string
			gw  bool
		}{{upstream, false}, {through, true}, {urls[1], true}} {
			if _, err := g.plainCall(way.url, way.gw)(b.ctx, 0, 0, nil); err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	return g, closeAll, nil
}

func (g *gatewayBench) request(ctx context.Context, base string, gw bool, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if gw {
		req.Header.Set("Authorization", "Bearer "+g.secret)
	} else {
		req.Header.Set("Authorization", "Bearer "+benchGatewayUpstreamKey)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp, nil
}

// plainCall is one plain chat call, its latency the whole call's.
func (g *gatewayBench) plainCall(base string, gw bool) cycleFunc {
	return func(_ context.Context, _, _ int, _ *rand.Rand) (time.Duration, error) {
		t0 := time.Now()
		resp, err := g.request(g.b.ctx, base, gw, g.plain)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(t0), err
	}
}

// streamCall is one streaming call read to its end; its latency is the
// time to its first event, and the whole stream's is kept apart. Each
// stream must come whole: every content chunk and [DONE], and no usage
// chunk (the gateway asks for it and takes it out).
func (g *gatewayBench) streamCall(base string, gw bool) cycleFunc {
	return func(_ context.Context, _, _ int, _ *rand.Rand) (time.Duration, error) {
		t0 := time.Now()
		resp, err := g.request(g.b.ctx, base, gw, g.stream)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var first time.Duration
		events, done := 0, false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			if first == 0 {
				first = time.Since(t0)
			}
			if line == "data: [DONE]" {
				done = true
				continue
			}
			events++
		}
		if err := sc.Err(); err != nil {
			return 0, err
		}
		// The role chunk, the content chunks and the finish chunk.
		if want := benchGatewayChunks + 2; !done || events != want {
			return 0, fmt.Errorf("a stream came with %d events (want %d) and done %v", events, want, done)
		}
		g.mu.Lock()
		g.streamTimes = append(g.streamTimes, int64(time.Since(t0)))
		g.mu.Unlock()
		return first, nil
	}
}

func (g *gatewayBench) sortedTimes() []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := append([]int64(nil), g.streamTimes...)
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts
}

// percentileNS is the q-quantile of sorted ns samples, in µs.
func percentileNS(ts []int64, q float64) float64 {
	if len(ts) == 0 {
		return 0
	}
	i := max(0, min(int(q*float64(len(ts))+0.5)-1, len(ts)-1))
	return float64(ts[i]) / 1e3
}

// gatewayErr is the run's failure, if any: a call that failed, or
// something left reserved.
func (r *gatewayResult) err() error {
	var errs []error
	if r.Errors > 0 {
		errs = append(errs, fmt.Errorf("%w: gateway: %d calls failed (first: %s)", ErrRequests, r.Errors, r.FirstError))
	}
	if r.LeftReserved != "0" {
		errs = append(errs, fmt.Errorf("%w: gateway: %s left reserved", ErrRequests, r.LeftReserved))
	}
	return errors.Join(errs...)
}

func writeGateway(w io.Writer, r *gatewayResult) {
	verdict := "met"
	if !r.Met {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, `gateway: plain chat calls against a fake provider on loopback, straight and through spendgate gateway, %s per run, %d reps (medians):
  a lone caller: direct p50 %s p99 %s; through the gateway p50 %s p99 %s: adds %s at p50; target at most %s: %s
    through a gateway that settles after the reply: p50 %s p99 %s: adds %s at p50
  %d callers: direct %.0f calls/s p50 %s, %.0fµs CPU a call; through the gateway %.0f calls/s p50 %s p99 %s, %.0fµs CPU a call, %.2f cores in use
  %d streaming calls at once (%d chunks, one per %s): first event p50 direct %s, through the gateway %s (p99 %s);
    whole stream p50 direct %s, through the gateway %s (p99 %s); %d streams through the gateway, %.2f ms CPU each, %.2f cores in use (the whole process)
  left reserved: %s; failed calls: %d
`, fmtSeconds(r.DurationS), r.Reps, fmtLatency(r.DirectP50), fmtLatency(r.DirectP99), fmtLatency(r.GatewayP50), fmtLatency(r.GatewayP99),
		fmtLatency(r.AddedP50), fmtLatency(r.TargetUS), verdict, fmtLatency(r.AfterP50), fmtLatency(r.AfterP99), fmtLatency(r.AfterAddedP50),
		r.BusyCallers, r.BusyDirectRate, fmtLatency(r.BusyDirectP50), r.BusyDirectCPU, r.BusyGatewayRate, fmtLatency(r.BusyGatewayP50),
		fmtLatency(r.BusyGatewayP99), r.BusyGatewayCPU, r.BusyCores,
		r.Streams, benchGatewayChunks, benchGatewayChunkEvery, fmtLatency(r.DirectFirstP50), fmtLatency(r.GatewayFirstP50), fmtLatency(r.GatewayFirstP99),
		fmtLatency(r.DirectStreamP50), fmtLatency(r.GatewayStreamP50), fmtLatency(r.GatewayStreamP99), r.StreamsDone, r.CPUPerStreamMS, r.Cores,
		r.LeftReserved, r.Errors)
}
