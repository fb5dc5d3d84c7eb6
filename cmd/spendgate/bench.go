package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spendgate/spendgate/internal/bench"
)

var benchCommand = command{
	name:     "spendgate bench",
	synopsis: "[flags]",
	about:    bench.Usage,
}

// benchCmd is spendgate bench: flags into bench.Options, then bench.Run.
func benchCmd(args []string) int {
	o := bench.DefaultOptions()
	fs := newFlagSet("bench")
	fs.StringVar(&o.NATSURL, "nats-url", "", "drive a spendgate service already running on this NATS server instead of embedding one")
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "service subject prefix (with --nats-url)")
	fs.IntVar(&o.Replicas, "replicas", o.Replicas, "stream replicas of the ledger (embedded) and of the naive baseline's bucket; >1 needs --cluster or --nats-url to a cluster")
	fs.BoolVar(&o.SyncAlways, "sync-always", false, "embedded server: fsync every write before acknowledging it")
	fs.IntVar(&o.Cluster, "cluster", 0, "embed an N-node JetStream cluster (3..5) instead of one server; streams at N replicas (production's R3 shape, all nodes on this machine)")
	fs.IntVar(&o.ServiceReplicas, "service-replicas", o.ServiceReplicas, "embedded: spendgate replicas (each its own in-process connection, one queue group); they arbitrate by compare-and-set")
	fs.IntVar(&o.Lanes, "lanes", o.Lanes, "embedded: commit lanes of the ledger stream (with --nats-url the running service's stream decides)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "duration of each run (per scenario, per rep, per baseline)")
	fs.IntVar(&o.Reps, "reps", o.Reps, "repetitions; every number is the median of the reps")
	fs.IntVar(&o.Conns, "conns", o.Conns, "client connections the callers are spread over")
	fs.BoolVar(&o.ConnPerCaller, "conn-per-caller", false, "one client connection per caller (overrides --conns)")
	fs.BoolVar(&o.JSON, "json", false, "print a JSON array of objects instead of the table")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run (server, replica and callers) to this file")
	fs.StringVar(&o.Trace, "trace", "", "write a runtime execution trace of the run to this file (go tool trace; -pprof=sched and -pprof=syscall summarize it)")
	fs.StringVar(&o.ProfileWay, "profile-way", "", "narrow --cpuprofile and --trace to one way's timed run (single, client, floor, batched-floor or naive), first rep of the first scenario")
	fs.StringVar(&o.BlockProfile, "blockprofile", "", "write a blocking profile of the run to this file (samples every event: slows the run)")
	fs.StringVar(&o.MutexProfile, "mutexprofile", "", "write a mutex contention profile of the run to this file (samples every event: slows the run)")
	fs.StringVar(&o.MemProfile, "memprofile", "", "write a heap profile at the end of the run to this file")
	fs.BoolVar(&o.Baselines, "baselines", o.Baselines, "also run the floor and naive baselines (false: spendgate only, e.g. to profile it; their columns print as -)")
	fs.IntVar(&o.History, "history", bench.HistoryDefault, "history scenario: reservations of history (10000000 for the 10M figure)")
	fs.IntVar(&o.RestartReservations, "restart-reservations", bench.RestartDefault, "restart scenario: reservations the 64 callers write before the replica is restarted")
	fs.StringVar(&o.RestartShape, "restart-shape", o.RestartShape, "restart scenario: how each reservation is made: hot (an amount on one budget) or gateway (priced from a model on an org, a team and a user, with metadata; settled from usage)")
	fs.StringVar(&o.RestartKeep, "restart-keep", "", "restart scenario: keep the server's data (ledger stream, snapshots) in this new directory instead of a temp dir removed at the end")
	fs.IntVar(&o.MonthCalls, "month-calls", bench.MonthDefaultCalls, "month scenario: synthetic calls over the month")
	fs.Uint64Var(&o.MonthSeed, "month-seed", 1, "month scenario: the generator's seed")
	fs.BoolVar(&o.Redis, "redis", o.Redis, "also run the Redis Lua baseline (hot, spread and multi scenarios) when redis-server is on PATH (its columns print as - when false or not installed)")
	fs.BoolVar(&o.Brief, "brief", false, "the Go client asks for brief admit replies (no per-budget balances), as client.WithBriefReplies does")
	fs.BoolVar(&o.Client, "client", o.Client, "also run every scenario through the Go client, which coalesces concurrent calls into batch messages (its columns print as - when false)")
	list := fs.String("scenarios", strings.Join(bench.DefaultScenarios, ","), "comma-separated scenarios: "+strings.Join(bench.ScenarioNames, ",")+" (mem, flood, history, gateway, restart and month only when named)")
	if code, ok := benchCommand.parse(fs, args); !ok {
		return code
	}
	o.Scenarios = strings.Split(*list, ",")
	if self, err := os.Executable(); err == nil {
		o.Self = self
	}
	if err := o.Validate(); err != nil {
		return benchCommand.usageError(fs, err.Error())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.Run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "spendgate bench: FAIL: %v\n", err)
		return exitError
	}
	return exitOK
}
