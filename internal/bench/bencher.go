package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/streams"
)

// The bencher: one run's embedded server, replica, connections and
// callers, and each scenario it drives.

// bencher holds what every scenario shares: the server, the replica, the
// floor service, the client connections and the naive bucket.
type bencher struct {
	o   config
	ctx context.Context
	log io.Writer
	// run makes the scope ids and the naive bucket of this run unique.
	run string

	url        string
	serverDesc string
	layout     streams.Layout
	conns      []*nats.Conn
	clients    []*client.Client // one per connection
	// floorClients are the clients of the floor's batch endpoints, one
	// per connection: the batched floor.
	floorClients []*client.Client
	kvs          []jetstream.KeyValue
	naiveName    string
	floor        *floorService
	replicas     []*replica.Replica // none with --nats-url
	cleanups     []func()
	flood        *floodResult // the flood scenario's result, when run
	// profileWay is the way whose first timed run is CPU-profiled
	// (--profile-way); profiled is set once it has been.
	profileWay string
	profiled   bool

	// gw is the gateway scenario's result, when run (gateway.go).
	gw *gatewayResult

	// redis is the Redis Lua baseline (redis.go), nil when it does not
	// run; redisNote then says why ("" when --redis=false).
	redis       *redisBaseline
	redisNote   string
	redisAmount int64 // benchAmount in micro-units
}

// driveWay is drive, CPU-profiled and traced (as asked) when way is the
// one --profile-way names and it has not been profiled yet.
func (b *bencher) driveWay(way string, callers int, f cycleFunc) runResult {
	if way != b.profileWay || b.profiled {
		return b.drive(callers, f)
	}
	b.profiled = true
	stop, err := startProfiles(b.o.Options)
	if err != nil {
		fmt.Fprintf(b.log, "%v\n", err)
		return b.drive(callers, f)
	}
	defer func() {
		stop()
		for _, file := range []string{b.o.CPUProfile, b.o.Trace} {
			if file != "" {
				fmt.Fprintf(b.log, "profile of the %s run written to %s\n", way, file)
			}
		}
	}()
	return b.drive(callers, f)
}

// startProfiles starts the CPU profile and the execution trace o asks for
// and returns what stops them.
func startProfiles(o Options) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			return stop, fmt.Errorf("cpu profile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); _ = f.Close() })
	}
	if o.Trace != "" {
		f, err := os.Create(o.Trace)
		if err == nil {
			if err = trace.Start(f); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("trace: %w", err)
		}
		stops = append(stops, func() { trace.Stop(); _ = f.Close() })
	}
	return stop, nil
}

// endpointCounts sums the answers of every embedded replica by micro
// endpoint name; a batch counts once under its own name and once per item
// under its items' endpoint.
func (b *bencher) endpointCounts() map[string]int64 {
	out := map[string]int64{}
	for _, r := range b.replicas {
		for name, st := range r.Service.Stats() {
			out[name] += st.NumRequests
		}
	}
	return out
}

// ledgerStats returns the embedded replicas' commit counters, summed (zero
// with --nats-url).
func (b *bencher) ledgerStats() ledger.Stats {
	var st ledger.Stats
	for _, r := range b.replicas {
		s := r.Ledger.Stats()
		st.Commits += s.Commits
		st.Batches += s.Batches
		st.Txs += s.Txs
		st.Conflicts += s.Conflicts
		st.SyncReads += s.SyncReads
		st.Timeouts += s.Timeouts
		st.AttemptTime += s.AttemptTime
		st.WriteTime += s.WriteTime
	}
	return st
}

func (b *bencher) close() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
	b.cleanups = nil
}

func (b *bencher) onClose(f func()) { b.cleanups = append(b.cleanups, f) }

// start brings up the server (unless --nats-url), the replica, the floor
// service, the client connections and the naive bucket.
func (b *bencher) start() error {
	layout, err := streams.New(streams.Config{Prefix: b.o.Prefix, Replicas: b.o.Replicas, Lanes: b.o.Lanes})
	if err != nil {
		return err
	}
	b.layout = layout
	b.url = b.o.NATSURL
	if b.url == "" {
		dir, err := os.MkdirTemp("", "spendgate-bench-")
		if err != nil {
			return err
		}
		b.onClose(func() { _ = os.RemoveAll(dir) })
		var replicaOpts []nats.Option
		if b.o.Cluster > 0 {
			c, err := startCluster(b.o.Cluster, dir, layout)
			if err != nil {
				return fmt.Errorf("embedded NATS cluster: %w", err)
			}
			b.onClose(c.shutdown)
			b.url = c.urls()
			b.serverDesc = fmt.Sprintf("embedded %d-node cluster %s, file storage, streams R%d, sync=interval (server default, 2m)", b.o.Cluster, b.url, b.o.Cluster)
		} else {
			srv, err := embedded.Start(dir, embedded.WithServerName("spendgate-bench"), embedded.WithSyncAlways(b.o.SyncAlways))
			if err != nil {
				return err
			}
			b.onClose(srv.Shutdown)
			b.url = srv.ClientURL()
			syncDesc := "sync=interval (server default, 2m)"
			if b.o.SyncAlways {
				syncDesc = "sync=always (fsync every write)"
			}
			b.serverDesc = "embedded server " + b.url + ", file storage, " + syncDesc
			// As `spendgate serve` does with its embedded server.
			replicaOpts = append(replicaOpts, nats.InProcessServer(srv))
		}
		// Each replica connects on its own (in process to a single
		// embedded server; to every node of a cluster); the callers reach
		// them over TCP request-reply exactly as remote callers would (a
		// queue group spreads requests over the replicas).
		for i := 0; i < b.o.ServiceReplicas; i++ {
			snc, err := nats.Connect(b.url, append([]nats.Option{nats.Name(fmt.Sprintf("spendgate-bench-replica-%d", i))}, replicaOpts...)...)
			if err != nil {
				return err
			}
			b.onClose(snc.Close)
			sjs, err := jetstream.New(snc)
			if err != nil {
				return err
			}
			r, err := replica.Start(b.ctx, snc, sjs, replica.Config{Layout: layout, SweepInterval: -1})
			if err != nil {
				return fmt.Errorf("spendgate replica: %w", err)
			}
			b.onClose(func() { _ = r.Stop() })
			b.replicas = append(b.replicas, r)
		}
	} else {
		b.serverDesc = "server " + b.o.NATSURL + " (its own sync setting), spendgate service already running there (prefix " + b.o.Prefix + ")"
	}
	if b.o.Baselines {
		fnc, err := nats.Connect(b.url, nats.Name("spendgate-bench-floor"))
		if err != nil {
			return fmt.Errorf("connect %s: %w", b.url, err)
		}
		b.onClose(fnc.Close)
		fl, err := startFloor(fnc)
		if err != nil {
			return fmt.Errorf("floor service: %w", err)
		}
		b.floor = fl
		b.onClose(fl.Stop)
	}

	n := b.o.Conns
	if b.o.ConnPerCaller {
		n = 0
		for _, sc := range b.o.scenarios {
			n = max(n, sc.callers)
		}
		if b.o.mem {
			n = max(n, 64)
		}
	}
	for i := 0; i < n; i++ {
		nc, err := nats.Connect(b.url, nats.Name(fmt.Sprintf("spendgate-bench-client-%d", i)))
		if err != nil {
			return fmt.Errorf("connect %s: %w", b.url, err)
		}
		b.onClose(nc.Close)
		b.conns = append(b.conns, nc)
		copts := []client.Option{client.WithPrefix(b.layout.Prefix()), client.WithTimeout(benchRequestTimeout), client.WithRetries(1)}
		if b.o.Brief {
			copts = append(copts, client.WithBriefReplies())
		}
		cl, err := client.New(nc, copts...)
		if err != nil {
			return err
		}
		b.clients = append(b.clients, cl)
		if b.o.Baselines {
			fcl, err := client.New(nc, client.WithPrefix(benchFloorPrefix), client.WithTimeout(benchRequestTimeout), client.WithRetries(1))
			if err != nil {
				return err
			}
			b.floorClients = append(b.floorClients, fcl)
		}
	}
	if len(b.o.scenarios) == 0 {
		return nil
	}
	if err := b.startRedis(); err != nil {
		return err
	}
	if b.o.Baselines {
		if err := b.startNaive(); err != nil {
			return err
		}
	}
	// Fail early, and clearly, if no spendgate service answers.
	if _, err := benchRequest(b.ctx, b.conns[0], b.layout.Endpoint(streams.EndpointBudgetList), []byte(`{"kind":"nosuchkind"}`)); err != nil {
		return fmt.Errorf("spendgate service on %s: %w", b.layout.Endpoint(streams.EndpointBudgetList), err)
	}
	return nil
}

// startNaive creates the naive baseline's own bucket, with one KV handle
// per client connection.
func (b *bencher) startNaive() error {
	b.naiveName = "spendgate_bench_naive_" + b.run
	ctx, cancel := context.WithTimeout(b.ctx, embedded.DefaultReadyTimeout)
	defer cancel()
	for i, nc := range b.conns {
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		var kv jetstream.KeyValue
		if i == 0 {
			kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.naiveName, History: 1, Storage: jetstream.FileStorage, Replicas: b.o.Replicas})
			if err == nil {
				b.onClose(func() {
					dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer dcancel()
					_ = js.DeleteKeyValue(dctx, b.naiveName)
				})
			}
		} else {
			kv, err = js.KeyValue(ctx, b.naiveName)
		}
		if err != nil {
			return fmt.Errorf("naive baseline bucket: %w", err)
		}
		b.kvs = append(b.kvs, kv)
	}
	return nil
}

// startRedis starts the Redis Lua baseline's redis-server, when asked for
// and installed.
func (b *bencher) startRedis() error {
	if !b.o.Redis {
		return nil
	}
	amount, err := micros(benchAmount)
	if err != nil {
		return err
	}
	b.redisAmount = amount
	dir, err := redisDir()
	if err != nil {
		return err
	}
	b.onClose(func() { _ = os.RemoveAll(dir) })
	rb, err := startRedis(b.ctx, dir, b.o.SyncAlways)
	if errors.Is(err, errRedisMissing) {
		b.redisNote = err.Error()
		fmt.Fprintf(b.log, "redis baseline: %s; its columns print as -\n", b.redisNote)
		return nil
	}
	if err != nil {
		return fmt.Errorf("redis baseline: %w", err)
	}
	b.onClose(rb.close)
	b.redis = rb
	return nil
}

// connFor returns caller c's connection in a scenario of n callers.
func (b *bencher) connFor(c int) int { return c % len(b.conns) }

// connsUsed is the connection count n callers are spread over.
func (b *bencher) connsUsed(n int) int { return min(n, len(b.conns)) }

// benchPlan is a scenario's budgets: the scopes and, for the naive
// baseline, the KV key of each.
type benchPlan struct {
	sc     benchScenario
	base   string
	scopes []string
	keys   []string
	// redisKeys are the Redis baseline's budget hashes, one per scope.
	redisKeys []string
}

func (b *bencher) newPlan(sc benchScenario) *benchPlan {
	p := &benchPlan{sc: sc, base: "bench-" + b.run + "-" + sc.name}
	add := func(scope string) {
		p.scopes = append(p.scopes, scope)
		p.keys = append(p.keys, "b."+strings.Replace(scope, ":", ".", 1))
		p.redisKeys = append(p.redisKeys, redisKey(scope))
	}
	switch sc.name {
	case "spread64":
		for i := 0; i < benchSpreadBudgets; i++ {
			add("org:" + p.base + "-" + strconv.Itoa(i))
		}
	case "multi3":
		add("org:" + p.base)
		for i := 0; i < benchMultiWidth; i++ {
			add("user:" + p.base + "-u" + strconv.Itoa(i))
		}
		for i := 0; i < benchMultiWidth; i++ {
			add("key:" + p.base + "-k" + strconv.Itoa(i))
		}
	default:
		add("org:" + p.base)
	}
	return p
}

// pick returns the indexes (into scopes and keys) of caller c's next cycle.
func (p *benchPlan) pick(c int, rng *rand.Rand) []int {
	switch p.sc.name {
	case "spread64":
		return []int{rng.IntN(len(p.scopes))}
	case "multi3":
		return []int{0, 1 + c%benchMultiWidth, 1 + benchMultiWidth + rng.IntN(benchMultiWidth)}
	}
	return []int{0}
}

// defineBudgets puts a monthly USD budget of limit for every scope, over
// the wire API.
func (b *bencher) defineBudgets(scopes []string, limit string) error {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < min(benchSetupWorkers, len(scopes)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := b.conns[w%len(b.conns)]
			for {
				i := int(next.Add(1)) - 1
				if i >= len(scopes) || b.ctx.Err() != nil {
					return
				}
				data, _ := json.Marshal(events.BudgetPutRequest{Scope: scopes[i], Period: string(events.PeriodMonth), Limit: limit, Unit: "USD"})
				if _, err := benchRequest(b.ctx, nc, b.layout.Endpoint(streams.EndpointBudgetPut), data); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("budget.put %s: %w", scopes[i], err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = b.ctx.Err()
	}
	return first
}

// naiveValue is the naive ledger's value of one key.
type naiveValue struct {
	Limit    string `json:"limit"`
	Spent    string `json:"spent"`
	Reserved string `json:"reserved"`
}

func (b *bencher) defineNaive(keys []string) error {
	data, _ := json.Marshal(naiveValue{Limit: benchBigLimit, Spent: "0", Reserved: "0"})
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(b.ctx, benchRequestTimeout)
		_, err := b.kvs[0].Put(ctx, k, data)
		cancel()
		if err != nil {
			return fmt.Errorf("naive put %s: %w", k, err)
		}
	}
	return nil
}

// scenario runs the cap burst once, then reps x (spendgate, floor, naive).
func (b *bencher) scenario(sc benchScenario) (benchRow, error) {
	p := b.newPlan(sc)
	if err := b.defineBudgets(p.scopes, benchBigLimit); err != nil {
		return benchRow{}, err
	}
	if b.o.Baselines {
		if err := b.defineNaive(p.keys); err != nil {
			return benchRow{}, err
		}
	}
	if b.redis != nil {
		if err := b.redis.define(b.ctx, p.redisKeys, redisBigLimit); err != nil {
			return benchRow{}, fmt.Errorf("redis baseline: %w", err)
		}
	}
	capRes, err := b.capBurst(p, "cap", b.requestAdmit)
	if err != nil {
		return benchRow{}, err
	}
	fmt.Fprintf(b.log, "%s: cap burst: %d budget(s) of %d, %d admits fired, %d admitted, %d denied, %d errors -> over-admissions %d\n",
		sc.name, capRes.Budgets, capRes.LimitEach, capRes.Fired, capRes.Admitted, capRes.Denied, capRes.Errors, capRes.Over)
	var clientCap capResult
	if b.o.Client {
		if clientCap, err = b.capBurst(p, "ccap", b.clientAdmit); err != nil {
			return benchRow{}, err
		}
		fmt.Fprintf(b.log, "%s: client cap burst: %d admits fired, %d admitted, %d denied, %d errors -> over-admissions %d\n",
			sc.name, clientCap.Fired, clientCap.Admitted, clientCap.Denied, clientCap.Errors, clientCap.Over)
	}
	var svc, floor, naive, cli, cfloor, rds []runResult
	admit, settle := b.layout.Endpoint(streams.EndpointAdmit), b.layout.Endpoint(streams.EndpointSettle)
	for rep := 0; rep < b.o.Reps; rep++ {
		tag := fmt.Sprintf("%s-%s-%d", b.run, sc.name, rep)
		st0 := b.ledgerStats()
		s := b.driveWay("single", sc.callers, func(_ context.Context, c, seq int, rng *rand.Rand) (time.Duration, error) {
			return benchCycle(b.ctx, b.conns[b.connFor(c)], admit, settle, p.scopesOf(p.pick(c, rng)), tag+"-s-"+strconv.Itoa(c)+"-"+strconv.Itoa(seq))
		})
		svc = append(svc, s)
		if len(b.replicas) > 0 {
			st := b.ledgerStats()
			commits, txs := st.Commits-st0.Commits, st.Txs-st0.Txs
			fmt.Fprintf(b.log, "%s rep %d/%d: ledger %d commits (%d atomic batches), %.1f txs per commit (%s), %d conflicts\n",
				sc.name, rep+1, b.o.Reps, commits, st.Batches-st0.Batches, float64(txs)/float64(max(commits, 1)), commitTimes(st0, st, b.o.Duration), st.Conflicts-st0.Conflicts)
		}
		var cr runResult
		if b.o.Client {
			st0, m0 := b.ledgerStats(), b.endpointCounts()
			cr = b.driveWay("client", sc.callers, func(_ context.Context, c, seq int, rng *rand.Rand) (time.Duration, error) {
				return clientCycle(b.ctx, b.clients[b.connFor(c)], p.scopesOf(p.pick(c, rng)), tag+"-c-"+strconv.Itoa(c)+"-"+strconv.Itoa(seq))
			})
			cli = append(cli, cr)
			if len(b.replicas) > 0 {
				st := b.ledgerStats()
				commits, txs := st.Commits-st0.Commits, st.Txs-st0.Txs
				m := b.endpointCounts()
				items := m["admit"] + m["settle"] - m0["admit"] - m0["settle"]
				batches := m["admit_batch"] + m["settle_batch"] - m0["admit_batch"] - m0["settle_batch"]
				mixed := m["batch"] - m0["batch"]
				fmt.Fprintf(b.log, "%s rep %d/%d: client: ledger %d commits, %.1f txs per commit (%s), %d admits and settles, %d batch messages of one kind and %d mixed\n",
					sc.name, rep+1, b.o.Reps, commits, float64(txs)/float64(max(commits, 1)), commitTimes(st0, st, b.o.Duration), items, batches, mixed)
			}
		}
		var f, n runResult
		if b.o.Baselines {
			f = b.driveWay("floor", sc.callers, func(_ context.Context, c, seq int, rng *rand.Rand) (time.Duration, error) {
				return benchCycle(b.ctx, b.conns[b.connFor(c)], benchFloorAdmit, benchFloorSettle, p.scopesOf(p.pick(c, rng)), tag+"-f-"+strconv.Itoa(c)+"-"+strconv.Itoa(seq))
			})
			var st naiveStats
			n = b.driveWay("naive", sc.callers, func(ctx context.Context, c, _ int, rng *rand.Rand) (time.Duration, error) {
				return naiveCycle(ctx, b.kvs[b.connFor(c)], p.keysOf(p.pick(c, rng)), &st)
			})
			n.attempts, n.conflicts = st.attempts.Load(), st.conflicts.Load()
			floor, naive = append(floor, f), append(naive, n)
		}
		var cf runResult
		if b.o.Baselines && b.o.Client {
			cf = b.driveWay("batched-floor", sc.callers, func(_ context.Context, c, seq int, rng *rand.Rand) (time.Duration, error) {
				return clientCycle(b.ctx, b.floorClients[b.connFor(c)], p.scopesOf(p.pick(c, rng)), tag+"-cf-"+strconv.Itoa(c)+"-"+strconv.Itoa(seq))
			})
			cfloor = append(cfloor, cf)
		}
		var rr runResult
		if b.redis != nil {
			srv0 := b.redis.cpu()
			rr = b.driveWay("redis", sc.callers, func(ctx context.Context, c, _ int, rng *rand.Rand) (time.Duration, error) {
				return redisCycle(ctx, b.redis, p.redisKeysOf(p.pick(c, rng)), b.redisAmount)
			})
			rr.serverCPU = b.redis.cpu() - srv0
			rds = append(rds, rr)
		}
		fmt.Fprintf(b.log, "%s rep %d/%d: spendgate %.0f cycles/s (p99 %s; %s), client %.0f (p99 %s; %s), floor %.0f (%s), batched floor %.0f (%s), naive %.0f (%.0f%% conflicts), redis %.0f (p50 %s; redis-server %.0fµs CPU per cycle)\n",
			sc.name, rep+1, b.o.Reps, s.rate(), fmtLatency(s.percentile(0.99)), s.cost(), cr.rate(), fmtLatency(cr.percentile(0.99)), cr.cost(),
			f.rate(), f.cost(), cf.rate(), cf.cost(), n.rate(), n.conflictPct(), rr.rate(), fmtLatency(rr.percentile(0.5)), rr.serverCPUPerCycle())
		if err := b.ctx.Err(); err != nil {
			return benchRow{}, err
		}
	}
	row := b.summarize(p, capRes, svc, floor, naive)
	if b.o.Client {
		b.summarizeClient(&row, clientCap, cli, cfloor)
	}
	summarizeRedis(&row, rds)
	return row, nil
}

// clientCycle is benchCycle through the Go client: Admit, then Settle of
// the reservation with the same actual.
func clientCycle(ctx context.Context, cl *client.Client, scopes []string, id string) (time.Duration, error) {
	t0 := time.Now()
	res, err := cl.Admit(ctx, events.AdmitRequest{RequestID: id, Scopes: scopes, Amount: benchAmount, TTL: benchTTL})
	lat := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("admit: %w", err)
	}
	cr, err := res.Settle(ctx, benchAmount)
	if err != nil {
		return 0, fmt.Errorf("settle: %w", err)
	}
	if cr.Status != events.StatusSettled {
		return 0, fmt.Errorf("settle: status %q", cr.Status)
	}
	return lat, nil
}

func (p *benchPlan) scopesOf(idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = p.scopes[j]
	}
	return out
}

func (p *benchPlan) redisKeysOf(idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = p.redisKeys[j]
	}
	return out
}

func (p *benchPlan) keysOf(idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = p.keys[j]
	}
	return out
}
