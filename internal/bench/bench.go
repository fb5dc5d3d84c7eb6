package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

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
after a graceful stop (target < 2 s) and with no snapshot; each reservation
an amount on one budget, or with --restart-shape gateway an admit priced
from a model on an org, a team and a user, settled from usage; only when
named),
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
	// RestartShape is how the restart scenario makes each reservation:
	// RestartShapeHot (the default, also "": an amount on one budget) or
	// RestartShapeGateway (priced from a model on an org, a team and a
	// user, with metadata, settled from usage).
	RestartShape string
	// RestartKeep, when set, is a directory that must not exist: the
	// restart scenario's server keeps its data there (the ledger stream
	// and the snapshot the last graceful stop wrote) instead of in a temp
	// dir removed at the end, to load again or inspect.
	RestartKeep string
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
	// Trace, when set, is a file to write a runtime execution trace of the
	// run to (go tool trace; -pprof=sched shows who waited for a core,
	// -pprof=syscall how long each fsync took).
	Trace string
	// ProfileWay, when set (single, client, floor or naive), narrows the
	// CPU profile and the trace to that way's timed run of the first rep
	// of the first scenario: the process's whole CPU (server, replica and
	// callers) while only that way runs.
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
		History: HistoryDefault, RestartReservations: RestartDefault, RestartShape: RestartShapeHot,
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
	case o.ProfileWay != "" && o.CPUProfile == "" && o.Trace == "":
		return c, errors.New("--profile-way narrows --cpuprofile and --trace: give one of them")
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
	switch c.RestartShape {
	case "":
		c.RestartShape = RestartShapeHot
	case RestartShapeHot, RestartShapeGateway:
	default:
		return c, fmt.Errorf("--restart-shape must be %s, not %q", strings.Join(RestartShapes, " or "), o.RestartShape)
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
	if o.ProfileWay != "" {
		b.profileWay = o.ProfileWay
	} else {
		stop, err := startProfiles(o.Options)
		if err != nil {
			return err
		}
		b.onClose(stop)
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
