package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// Named bounds and constants of spendgate bench.
const (
	// benchAmount is the amount of every admit and the actual of every
	// settle.
	benchAmount = "0.000001"
	// benchTTL is the TTL of every cycle's reservation.
	benchTTL = "1m"
	// benchBigLimit is the limit of every budget a scenario runs on: large
	// enough never to deny.
	benchBigLimit = "1000000000000"
	// benchRequestTimeout bounds one request-reply.
	benchRequestTimeout = 10 * time.Second
	// benchSetupWorkers define budgets concurrently.
	benchSetupWorkers = 16
	// benchMaxLatSamples bounds the admit latencies kept per run (a
	// reservoir per caller beyond that).
	benchMaxLatSamples = 1 << 20
	// benchCapFactor: the cap burst fires this many admits per unit of
	// capacity.
	benchCapFactor = 4
	// benchSpreadBudgets is the budget count of spread64 (and of mem).
	benchSpreadBudgets = 1000
	// benchMultiWidth is the count of users and of keys of multi3.
	benchMultiWidth = 64
	// benchSpreadCapBudgets is the count of capped budgets of spread64's
	// cap burst.
	benchSpreadCapBudgets = 8
	// benchMemReservations and benchMemLimitMB: the mem check.
	benchMemReservations = 100_000
	benchMemLimitMB      = 300
	// benchMemSettle is how long the mem check lets the process settle
	// before it reads the held RSS (the server's block caches expire after
	// 10 s idle).
	benchMemSettle = 12 * time.Second
	// benchMemTTL keeps the mem check's reservations open.
	benchMemTTL = "24h"
	// benchErrorBackoff paces a caller whose request failed, so a dead
	// endpoint does not turn the run into a busy loop.
	benchErrorBackoff = time.Millisecond
	// Floor service subjects.
	benchFloorPrefix = "bench.floor."
	benchFloorAdmit  = benchFloorPrefix + streams.EndpointAdmit
	benchFloorSettle = benchFloorPrefix + streams.EndpointSettle
)

// benchScenario is one load shape.
type benchScenario struct {
	name    string
	callers int
	desc    string
}

var benchScenarios = []benchScenario{
	{"hot1", 1, "1 caller, one budget"},
	{"hot16", 16, "16 callers, one budget"},
	{"hot64", 64, "64 callers, one budget"},
	{"spread64", 64, "64 callers over 1,000 budgets, a random budget per cycle"},
	{"multi3", 64, "64 callers, 3-scope admits: org + user (1 of 64, by caller) + key (1 of 64, random) (one lane revision per group with one lane; an atomic batch over lanes otherwise)"},
}

// Usage describes the command for its help text: what it does, the
// scenarios and the exit status.
const Usage = `Drives admit+settle cycles over NATS request-reply, as remote callers do, and
prints, per scenario, cycles/s and admit latency: as single requests, through the
Go client (which gathers concurrent calls into batch messages; --client=false
leaves it out), and for two baselines of the same run: the request-reply floor
(an endpoint that only decodes and replies) and a naive get-then-CAS ledger on a
KV key. By default it embeds its own
NATS server (temp dir, random port) and its own spendgate replica.

Scenarios: hot1, hot16, hot64, spread64, multi3 (default all of them),
mem (100,000 open reservations over 1,000 budgets; only when named),
flood (16 callers' cycles with and without 5,000/s settles of unknown
reservation ids from another connection; target admit p99 < 50 ms; only
when named), gateway (what spendgate gateway adds to a call against a fake
provider, and 200 streaming calls at once through it; target at most 1 ms
added at p50; only when named), and history (a history of --history reservations, default
1,000,000, written straight to a ledger stream of its own server: restart
to first admit, replica heap, disk bytes per reservation, audit check,
expiry of 100,000; only when named), and restart (--restart-reservations
reservations, default 1,000,000, written by 64 callers through the Go client
to a replica that is a child process (spendgate serve --nats-url); then the
time to the first admit and the replica's RSS after a SIGKILL (target < 5 s),
after a graceful stop (target < 2 s) and with no snapshot; only when named),
and month (a synthetic month of --month-calls LLM calls, default 60,000, with
heavy-tailed costs, replayed in memory through the backtest against a daily
budget under maximum reservations and under a fixed slot: calls admitted,
how many more than with the maximum, and the largest overrun; only when
named).

When redis-server is on PATH, every hot, spread and multi scenario also runs
a Redis Lua baseline (one script reserving on one hash per budget, one
settling) against a redis-server child with appendonly yes, appendfsync
everysec (always with --sync-always); --redis=false leaves it out.

Exit status: 0 ok; 1 on any error (a failed request included), on any
over-admission, or on mem over 300 MB; 64 on a usage error.`

// Options configure Run. DefaultOptions returns the defaults.
type Options struct {
	// NATSURL drives a spendgate service already running on this NATS
	// server instead of embedding one.
	NATSURL string
	// Prefix is the service subject prefix (with NATSURL).
	Prefix string
	// Replicas of the ledger stream (embedded) and of the naive baseline's
	// bucket, 1..5; more than 1 needs Cluster or NATSURL.
	Replicas int
	// SyncAlways makes the single embedded server fsync every write.
	SyncAlways bool
	// Cluster embeds an N-node cluster (3..5) instead of one server.
	Cluster int
	// ServiceReplicas is the number of embedded spendgate replicas, 1..16.
	ServiceReplicas int
	// Lanes is the embedded ledger stream's commit lanes.
	Lanes int
	// Duration of each run (per scenario, per rep, per baseline).
	Duration time.Duration
	// Reps is the number of repetitions; every number is their median.
	Reps int
	// Conns is the number of client connections callers share.
	Conns int
	// ConnPerCaller gives every caller its own connection (overrides Conns).
	ConnPerCaller bool
	// JSON prints a JSON array instead of the table.
	JSON bool
	// Scenarios names the scenarios to run (ScenarioNames lists them).
	Scenarios []string
	// History is the history scenario's number of reservations
	// (HistoryDefault when 0).
	History int
	// RestartReservations is the restart scenario's number of
	// reservations (RestartDefault when 0).
	RestartReservations int
	// MonthCalls is the month scenario's number of calls
	// (MonthDefaultCalls when 0); MonthSeed seeds its generator.
	MonthCalls int
	MonthSeed  uint64
	// Redis also runs the Redis Lua baseline when redis-server is on
	// PATH.
	Redis bool
	// Self is the spendgate binary the history scenario runs its audits
	// with, as child processes whose peak RSS is their own ("": in this
	// process), and the restart scenario its replicas (required).
	Self string
	// CPUProfile and MemProfile, when set, are files to write a CPU
	// profile of the whole run and a heap profile at its end to.
	CPUProfile, MemProfile string
	// ProfileWay, when set (single, client, floor or naive), narrows the
	// CPU profile to that way's timed run of the first rep of the first
	// scenario: the process's whole CPU (server, replica and callers)
	// while only that way runs.
	ProfileWay string
	// BlockProfile and MutexProfile, when set, are files to write the
	// run's blocking and mutex contention profiles to (every event
	// sampled, so they cost throughput: compare only with each other).
	BlockProfile, MutexProfile string
	// Baselines also runs the floor and naive baselines.
	Baselines bool
	// Client also runs every scenario through the Go client (one client
	// per connection, coalescing concurrent calls into batch messages),
	// and its cap burst.
	Client bool
	// Brief makes the Go client ask for brief admit replies
	// (client.WithBriefReplies: no per-budget balances).
	Brief bool
}

// DefaultScenarios are the scenarios run when none are named.
var DefaultScenarios = []string{"hot1", "hot16", "hot64", "spread64", "multi3"}

// ScenarioNames are every scenario's name, mem and flood included.
var ScenarioNames = []string{"hot1", "hot16", "hot64", "spread64", "multi3", "mem", "flood", "history", "gateway", "restart", "month"}

// DefaultOptions returns the defaults of spendgate bench.
func DefaultOptions() Options {
	return Options{
		Prefix: streams.DefaultPrefix, Replicas: 1, ServiceReplicas: 1, Lanes: streams.DefaultLanes,
		Duration: 3 * time.Second, Reps: 3, Conns: 4, Scenarios: DefaultScenarios, Baselines: true, Client: true, Redis: true,
		History: HistoryDefault, RestartReservations: RestartDefault,
	}
}

// config is Options validated, with the scenarios resolved.
type config struct {
	Options
	scenarios []benchScenario
	mem       bool
	flood     bool
	history   bool
	gateway   bool // gateway.go
	restart   bool // restart.go
	month     bool // month.go
}

// Validate checks the options as Run does and returns the first problem,
// in the words of the command's flags.
func (o Options) Validate() error {
	_, err := o.resolve()
	return err
}

func (o Options) resolve() (config, error) {
	c := config{Options: o}
	switch {
	case o.Duration <= 0:
		return c, errors.New("--duration must be positive")
	case o.Reps < 1:
		return c, errors.New("--reps must be at least 1")
	case o.Conns < 1:
		return c, errors.New("--conns must be at least 1")
	case o.Replicas < 1 || o.Replicas > 5:
		return c, errors.New("--replicas must be 1..5")
	case o.Cluster != 0 && (o.Cluster < 3 || o.Cluster > 5):
		return c, errors.New("--cluster must be 3..5 nodes")
	case o.Cluster != 0 && o.NATSURL != "":
		return c, errors.New("--cluster embeds a cluster; it cannot be combined with --nats-url")
	case o.Cluster != 0 && o.SyncAlways:
		return c, errors.New("--sync-always is for the single embedded server")
	case o.Cluster != 0 && o.Replicas != 1 && o.Replicas != o.Cluster:
		return c, errors.New("--cluster N puts the streams at N replicas; leave --replicas out")
	case o.NATSURL == "" && o.Cluster == 0 && o.Replicas != 1:
		return c, errors.New("--replicas > 1 needs --cluster or --nats-url (the embedded server is a single node)")
	case o.NATSURL != "" && o.SyncAlways:
		return c, errors.New("--sync-always is for the embedded server; with --nats-url the server's own setting applies")
	case o.ServiceReplicas < 1 || o.ServiceReplicas > 16:
		return c, errors.New("--service-replicas must be 1..16")
	case o.NATSURL != "" && o.ServiceReplicas != 1:
		return c, errors.New("--service-replicas is for the embedded server; with --nats-url run the replicas yourself")
	case o.Lanes < 1 || o.Lanes > streams.MaxLanes:
		return c, fmt.Errorf("--lanes must be 1..%d", streams.MaxLanes)
	case o.ProfileWay != "" && o.CPUProfile == "":
		return c, errors.New("--profile-way narrows --cpuprofile: give both")
	}
	switch o.ProfileWay {
	case "", "single", "client":
	case "batched-floor":
		if !o.Baselines || !o.Client {
			return c, errors.New("--profile-way batched-floor needs the baselines and --client")
		}
	case "floor", "naive":
		if !o.Baselines {
			return c, fmt.Errorf("--profile-way %s needs the baselines", o.ProfileWay)
		}
	default:
		return c, fmt.Errorf("--profile-way must be single, client, floor, batched-floor or naive, not %q", o.ProfileWay)
	}
	if o.ProfileWay == "client" && !o.Client {
		return c, errors.New("--profile-way client needs --client")
	}
	if o.Cluster != 0 {
		c.Replicas = o.Cluster
	}
	seen := map[string]bool{}
	for _, name := range o.Scenarios {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if name == "mem" {
			c.mem = true
			continue
		}
		if name == "flood" {
			c.flood = true
			continue
		}
		if name == "history" {
			c.history = true
			continue
		}
		if name == "gateway" {
			c.gateway = true
			continue
		}
		if name == "restart" {
			c.restart = true
			continue
		}
		if name == "month" {
			c.month = true
			continue
		}
		found := false
		for _, sc := range benchScenarios {
			if sc.name == name {
				found = true
			}
		}
		if !found {
			return c, fmt.Errorf("unknown scenario %q (want %s)", name, strings.Join(ScenarioNames, ", "))
		}
	}
	for _, sc := range benchScenarios { // in the canonical order
		if seen[sc.name] {
			c.scenarios = append(c.scenarios, sc)
		}
	}
	if c.History == 0 {
		c.History = HistoryDefault
	}
	if c.History < historyBudgets*historyGroup {
		return c, fmt.Errorf("--history must be at least %d", historyBudgets*historyGroup)
	}
	if c.history && (o.NATSURL != "" || o.Cluster != 0) {
		return c, errors.New("the history scenario embeds its own server: leave out --nats-url and --cluster")
	}
	if c.RestartReservations == 0 {
		c.RestartReservations = RestartDefault
	}
	if c.RestartReservations < 1 {
		return c, errors.New("--restart-reservations must be at least 1")
	}
	if c.restart && (o.NATSURL != "" || o.Cluster != 0) {
		return c, errors.New("the restart scenario embeds its own server: leave out --nats-url and --cluster")
	}
	if c.restart && o.Self == "" {
		return c, errors.New("the restart scenario runs its replica as a child process of the spendgate binary (Options.Self): run it as spendgate bench --scenarios restart")
	}
	if c.MonthCalls == 0 {
		c.MonthCalls = MonthDefaultCalls
	}
	if c.MonthCalls < MonthDays*MonthBursts {
		return c, fmt.Errorf("--month-calls must be at least %d", MonthDays*MonthBursts)
	}
	if len(c.scenarios) == 0 && !c.mem && !c.flood && !c.history && !c.gateway && !c.restart && !c.month {
		return c, errors.New("--scenarios names no scenario")
	}
	return c, nil
}

// Run runs the benchmark: it writes the report to stdout and progress to
// stderr. It returns an error when the options are invalid, when anything
// fails to start or write, and, after the report, when any request failed
// (ErrRequests), any scenario over-admitted (ErrOverAdmission) or the mem
// check held too much (ErrMemOver); errors.Join joins several.
func Run(ctx context.Context, opts Options, stdout, stderr io.Writer) error {
	o, err := opts.resolve()
	if err != nil {
		return err
	}
	if o.month {
		// In memory: no server, no replica.
		res, err := Month(ctx, MonthOptions{Calls: o.MonthCalls, Seed: o.MonthSeed})
		if err == nil {
			err = WriteMonth(stdout, res, o.JSON)
		}
		if err != nil {
			return fmt.Errorf("month: %w", err)
		}
		if len(o.scenarios) == 0 && !o.mem && !o.flood && !o.history && !o.gateway && !o.restart {
			return nil
		}
	}
	if o.history {
		if err := runHistory(ctx, o, stdout, stderr); err != nil {
			return fmt.Errorf("history: %w", err)
		}
		if len(o.scenarios) == 0 && !o.mem && !o.flood && !o.gateway && !o.restart {
			return nil
		}
	}
	if o.restart {
		if err := runRestart(ctx, o, stdout, stderr); err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		if len(o.scenarios) == 0 && !o.mem && !o.flood && !o.gateway {
			return nil
		}
	}
	b := &bencher{o: o, ctx: ctx, log: stderr, run: fmt.Sprintf("%08x", rand.Uint32())}
	defer b.close()
	if o.CPUProfile != "" && o.ProfileWay != "" {
		b.profileWay = o.ProfileWay
	} else if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		b.onClose(func() { pprof.StopCPUProfile(); _ = f.Close() })
	}
	if err := b.start(); err != nil {
		return err
	}
	// After start: the embedded server sets the block profile rate (to
	// its option's, none) when it starts.
	if o.BlockProfile != "" {
		runtime.SetBlockProfileRate(1)
		b.onClose(func() { runtime.SetBlockProfileRate(0) })
	}
	if o.MutexProfile != "" {
		runtime.SetMutexProfileFraction(1)
		b.onClose(func() { runtime.SetMutexProfileFraction(0) })
	}
	var rows []benchRow
	for _, sc := range o.scenarios {
		row, err := b.scenario(sc)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		rows = append(rows, row)
	}
	var mem *memResult
	if o.mem {
		m, err := b.memCheck()
		if err != nil {
			return fmt.Errorf("mem: %w", err)
		}
		mem = &m
	}
	if o.flood {
		f, err := b.floodCheck()
		if err != nil {
			return fmt.Errorf("flood: %w", err)
		}
		b.flood = &f
	}
	if o.gateway {
		g, err := b.gatewayCheck()
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		b.gw = &g
	}
	if o.MemProfile != "" {
		if err := writeHeapProfile(o.MemProfile); err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
	}
	for name, file := range map[string]string{"block": o.BlockProfile, "mutex": o.MutexProfile} {
		if file == "" {
			continue
		}
		if err := writeProfile(name, file); err != nil {
			return fmt.Errorf("%s profile: %w", name, err)
		}
	}
	if o.JSON {
		err = b.printJSON(stdout, rows, mem)
	} else {
		err = b.printTable(stdout, rows, mem)
	}
	if err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	err = verdict(rows, mem)
	if f := b.flood; f != nil && f.Errors > 0 {
		err = errors.Join(err, fmt.Errorf("%w: flood: %d good cycles failed (first: %s)", ErrRequests, f.Errors, f.FirstError))
	}
	if b.gw != nil {
		err = errors.Join(err, b.gw.err())
	}
	return err
}

// verdict returns the failures of a finished run, or nil.
func verdict(rows []benchRow, mem *memResult) error {
	var errs []error
	for _, r := range rows {
		if r.OverAdmissions > 0 {
			errs = append(errs, fmt.Errorf("%w: %s over-admitted %d reservations", ErrOverAdmission, r.Scenario, r.OverAdmissions))
		}
		if r.ClientOverAdmissions > 0 {
			errs = append(errs, fmt.Errorf("%w: %s through the client over-admitted %d reservations", ErrOverAdmission, r.Scenario, r.ClientOverAdmissions))
		}
		if r.ClientErrors > 0 {
			errs = append(errs, fmt.Errorf("%w: %s through the client: %d failed (first: %s)", ErrRequests, r.Scenario, r.ClientErrors, r.ClientFirstError))
		}
		if r.RedisErrors > 0 {
			errs = append(errs, fmt.Errorf("%w: %s on the Redis baseline: %d failed (first: %s)", ErrRequests, r.Scenario, r.RedisErrors, r.RedisFirstError))
		}
		if n := r.Errors + r.FloorErrors + r.NaiveErrors + int64(r.capResult.Errors); n > 0 {
			errs = append(errs, fmt.Errorf("%w: %s: %d failed (spendgate %d, floor %d, naive %d, cap burst %d; first: %s)",
				ErrRequests, r.Scenario, n, r.Errors, r.FloorErrors, r.NaiveErrors, r.capResult.Errors,
				firstNonEmpty(r.FirstError, r.capResult.FirstErr)))
		}
	}
	if mem != nil {
		if mem.Errors > 0 {
			errs = append(errs, fmt.Errorf("%w: mem: %d failed", ErrRequests, mem.Errors))
		}
		if mem.Over {
			errs = append(errs, fmt.Errorf("%w: RSS %.0f MB is over %d MB", ErrMemOver, mem.RSSMB, benchMemLimitMB))
		}
	}
	return errors.Join(errs...)
}

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

// driveWay is drive, CPU-profiled when way is the one --profile-way names
// and it has not been profiled yet.
func (b *bencher) driveWay(way string, callers int, f cycleFunc) runResult {
	if way != b.profileWay || b.profiled {
		return b.drive(callers, f)
	}
	b.profiled = true
	file, err := os.Create(b.o.CPUProfile)
	if err == nil {
		if err = pprof.StartCPUProfile(file); err != nil {
			_ = file.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(b.log, "cpu profile: %v\n", err)
		return b.drive(callers, f)
	}
	defer func() {
		pprof.StopCPUProfile()
		_ = file.Close()
		fmt.Fprintf(b.log, "cpu profile of the %s run written to %s\n", way, b.o.CPUProfile)
	}()
	return b.drive(callers, f)
}

// ledgerStats returns the embedded replicas' commit counters, summed (zero
// with --nats-url).
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
		fcl, err := client.New(nc, client.WithPrefix(benchFloorPrefix), client.WithTimeout(benchRequestTimeout), client.WithRetries(1))
		if err != nil {
			return err
		}
		b.floorClients = append(b.floorClients, fcl)
	}
	if len(b.o.scenarios) == 0 {
		return nil
	}
	if err := b.startRedis(); err != nil {
		return err
	}
	// The naive baseline's own bucket, one KV handle per client connection.
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
	// Fail early, and clearly, if no spendgate service answers.
	if _, err := benchRequest(b.ctx, b.conns[0], b.layout.Endpoint(streams.EndpointBudgetList), []byte(`{"kind":"nosuchkind"}`)); err != nil {
		return fmt.Errorf("spendgate service on %s: %w", b.layout.Endpoint(streams.EndpointBudgetList), err)
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
	if err := b.defineNaive(p.keys); err != nil {
		return benchRow{}, err
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
				fmt.Fprintf(b.log, "%s rep %d/%d: client: ledger %d commits, %.1f txs per commit (%s), %d admits and settles, %d batch messages\n",
					sc.name, rep+1, b.o.Reps, commits, float64(txs)/float64(max(commits, 1)), commitTimes(st0, st, b.o.Duration), items, batches)
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
  concurrent calls share batch messages (admit.batch, settle.batch; a lone call goes at once, others wait at most
  its 200µs linger or 64 items); its own cap burst counts client over-adm.
batched floor: the same callers through the same Go client pointed at the floor's batch endpoints (%sadmit.batch,
  %ssettle.batch: each item decoded and answered as the floor answers it): what NATS and the client cost with
  coalescing, without the ledger.
x floor = cycles/s / floor cycles/s; x naive = cycles/s / naive cycles/s; client x floor = client cycles/s / floor;
  client x batched floor = client cycles/s / batched floor cycles/s.
`, benchSpreadCapBudgets, benchBigLimit, benchFloorAdmit, benchFloorSettle, benchSpreadBudgets, benchFloorPrefix, benchFloorPrefix)
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

// floorService is the request-reply floor: a micro service whose endpoints
// decode the request as spendgate does and reply at once.
type floorService struct {
	svc      micro.Service
	inflight chan struct{}
	wg       sync.WaitGroup
}

// startFloor registers "spendgate-floor" on nc. It dispatches exactly as
// the spendgate service does: the micro handler copies the request's data
// and reply subject and hands them to a goroutine of its own (bounded by
// service.MaxInFlight), which decodes the body with codec.DecodeRequest
// into the same request struct, marshals a small reply and publishes it on
// nc.
func startFloor(nc *nats.Conn) (*floorService, error) {
	f := &floorService{inflight: make(chan struct{}, service.MaxInFlight)}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "spendgate-floor",
		Version:     service.Version,
		Description: "spendgate bench: decodes the request and replies; what request-reply itself costs",
		QueueGroup:  "spendgate-floor",
	})
	if err != nil {
		return nil, err
	}
	f.svc = svc
	dispatch := func(h func([]byte) (any, error)) micro.Handler {
		return micro.HandlerFunc(func(r micro.Request) {
			data, reply := r.Data(), r.Reply()
			f.inflight <- struct{}{}
			f.wg.Add(1)
			go func() {
				defer func() { <-f.inflight; f.wg.Done() }()
				msg := &nats.Msg{Subject: reply}
				out, err := h(data)
				if err == nil {
					msg.Data, err = json.Marshal(out)
				}
				if err != nil {
					msg.Data, _ = json.Marshal(events.ErrorReply{Error: &events.Error{Code: events.CodeInvalidRequest, Message: err.Error()}})
					msg.Header = nats.Header{micro.ErrorHeader: []string{string(events.CodeInvalidRequest)}, micro.ErrorCodeHeader: []string{"400"}}
				}
				if reply != "" {
					_ = nc.PublishMsg(msg)
				}
			}()
		})
	}
	admit := func(data []byte) (any, error) {
		var req events.AdmitRequest
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
		return events.AdmitReply{Admitted: true, RequestID: req.RequestID, ReservationID: "rsv_floor_" + req.RequestID}, nil
	}
	settle := func(data []byte) (any, error) {
		var req events.SettleRequest
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
		return events.CloseReply{ReservationID: req.ReservationID, Status: events.StatusSettled, Reserved: req.Actual, Actual: req.Actual}, nil
	}
	if err := svc.AddEndpoint("admit", dispatch(admit), micro.WithEndpointSubject(benchFloorAdmit)); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	if err := svc.AddEndpoint("settle", dispatch(settle), micro.WithEndpointSubject(benchFloorSettle)); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	// The batch endpoints, for the Go client pointed at the floor: each
	// item decoded and answered as the single endpoint answers it.
	batch := func(h func([]byte) (any, error)) func([]byte) (any, error) {
		return func(data []byte) (any, error) {
			items, err := codec.DecodeBatch(data)
			if err != nil {
				return nil, err
			}
			out := make([]json.RawMessage, len(items))
			for i, item := range items {
				v, err := h(item)
				if err != nil {
					v = events.ErrorReply{Error: &events.Error{Code: events.CodeInvalidRequest, Message: err.Error()}}
				}
				if out[i], err = json.Marshal(v); err != nil {
					return nil, err
				}
			}
			return events.BatchReply{Items: out}, nil
		}
	}
	for name, ep := range map[string]struct {
		subject string
		h       func([]byte) (any, error)
	}{
		"admit_batch":  {benchFloorPrefix + streams.EndpointAdmitBatch, batch(admit)},
		"settle_batch": {benchFloorPrefix + streams.EndpointSettleBatch, batch(settle)},
	} {
		if err := svc.AddEndpoint(name, dispatch(ep.h), micro.WithEndpointSubject(ep.subject)); err != nil {
			_ = svc.Stop()
			return nil, err
		}
	}
	if err := nc.FlushTimeout(benchRequestTimeout); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return f, nil
}

// Stop stops the endpoints and waits for the requests in flight.
func (f *floorService) Stop() {
	_ = f.svc.Stop()
	f.wg.Wait()
}

// memResult is the mem check's report (one object of --json).
type memResult struct {
	Scenario    string  `json:"scenario"`
	Open        int64   `json:"open_reservations"`
	Budgets     int     `json:"budgets"`
	Errors      int64   `json:"errors"`
	OpenSeconds float64 `json:"open_seconds"`
	RSSBeforeMB float64 `json:"rss_before_mb"`
	RSSMB       float64 `json:"rss_mb"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
	HeapInuseMB float64 `json:"heap_inuse_mb"`
	LimitMB     int     `json:"limit_mb"`
	Over        bool    `json:"over_limit"`
	Note        string  `json:"note"`
}

// memCheck opens benchMemReservations reservations (never settled, TTL
// 24h) over benchSpreadBudgets fresh budgets with 64 callers, then reads
// this process's RSS and Go heap.
func (b *bencher) memCheck() (memResult, error) {
	res := memResult{Scenario: "mem", Budgets: benchSpreadBudgets, LimitMB: benchMemLimitMB}
	res.Note = "RSS of this process, which holds the embedded NATS server, the spendgate replica and the load driver"
	if b.o.NATSURL != "" {
		res.Note = "RSS of this process, the load driver only: the spendgate service runs elsewhere (--nats-url); measure its RSS there"
	}
	scopes := make([]string, benchSpreadBudgets)
	for i := range scopes {
		scopes[i] = "org:bench-" + b.run + "-mem-" + strconv.Itoa(i)
	}
	if err := b.defineBudgets(scopes, benchBigLimit); err != nil {
		return res, err
	}
	runtime.GC()
	res.RSSBeforeMB = rssMB()
	fmt.Fprintf(b.log, "mem: opening %d reservations over %d budgets\n", benchMemReservations, benchSpreadBudgets)
	const callers = 64
	var next, opened, failed atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	subj := b.layout.Endpoint(streams.EndpointAdmit)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := b.conns[b.connFor(c)]
			for b.ctx.Err() == nil && failed.Load() < 1000 {
				i := next.Add(1) - 1
				if i >= benchMemReservations {
					return
				}
				data, _ := json.Marshal(events.AdmitRequest{RequestID: fmt.Sprintf("%s-mem-%d", b.run, i), Scopes: []string{scopes[i%benchSpreadBudgets]}, Amount: benchAmount, TTL: benchMemTTL})
				msg, err := benchRequest(b.ctx, nc, subj, data)
				var ar events.AdmitReply
				if err == nil {
					err = json.Unmarshal(msg.Data, &ar)
				}
				if err != nil || !ar.Admitted {
					failed.Add(1)
					continue
				}
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	res.OpenSeconds = time.Since(t0).Seconds()
	res.Open, res.Errors = opened.Load(), failed.Load()
	if err := b.ctx.Err(); err != nil {
		return res, err
	}
	if res.Errors >= 1000 {
		return res, fmt.Errorf("%d admits failed; gave up", res.Errors)
	}
	runtime.GC()
	res.PeakRSSMB = rssMB()
	// "Held" is the steady state once the burst is over: the embedded
	// server's message-block caches expire after 10 s idle
	// (defaultCacheBufferExpiration), and the Go runtime returns freed
	// pages to the OS. Waiting for that is the measurement, not a
	// synchronization.
	select {
	case <-time.After(benchMemSettle):
	case <-b.ctx.Done():
		return res, b.ctx.Err()
	}
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInuseMB = float64(ms.HeapInuse) / (1 << 20)
	res.RSSMB = rssMB()
	res.Over = res.RSSMB > benchMemLimitMB
	return res, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// rssMB reads this process's VmRSS in MB (0 where there is none).
func rssMB() float64 { return float64(procStatusBytes(0, "VmRSS")) / (1 << 20) }

// writeProfile writes the runtime profile name (block, mutex) to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// commitTimes describes the commit path between two Stats of a run of d:
// time per commit, the part of it spent waiting for the write's ack, and
// how busy the commit path was (attempt time over d, per lane summed).
func commitTimes(st0, st ledger.Stats, d time.Duration) string {
	commits := max(st.Commits-st0.Commits, 1)
	at, wt := st.AttemptTime-st0.AttemptTime, st.WriteTime-st0.WriteTime
	return fmt.Sprintf("%s per commit, %s of it the write; commit path busy %.0f%%",
		(at / time.Duration(commits)).Round(time.Microsecond), (wt / time.Duration(commits)).Round(time.Microsecond), 100*at.Seconds()/d.Seconds())
}
