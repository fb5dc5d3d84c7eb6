package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spendgate/spendgate/events"
)

// The Redis Lua baseline: a spend cap as users build it today on Redis, one
// hash per budget (limit, spent, reserved, in integer micro-units), one
// Lua script that checks and reserves, one that settles. It runs against a
// redis-server child process (appendonly, fsync every second, or on every
// write with --sync-always) through go-redis, driven by the same callers
// as every other way of a scenario.
const (
	// redisBigLimit is the limit of every budget of the timed runs, in
	// micro-units: large enough never to deny, and below 2^53, so the
	// script's arithmetic (Lua numbers are doubles) is exact.
	redisBigLimit = 1_000_000_000_000_000
	// redisStartBound bounds redis-server's start.
	redisStartBound = 10 * time.Second
	// redisStopBound bounds its graceful stop.
	redisStopBound = 10 * time.Second
	// redisPoolPerCaller: the go-redis client has a connection per caller
	// of the widest scenario, so no caller waits for a connection.
	redisPool = 64
	// redisKeyPrefix prefixes each budget's hash key.
	redisKeyPrefix = "budget:"
)

// errRedisMissing: redis-server is not on PATH.
var errRedisMissing = errors.New("redis-server not installed (not on PATH)")

// redisReserveScript reserves ARGV[1] micro-units in every budget hash of
// KEYS, all or none: 1 reserved, 0 a budget's limit would be passed, -1 a
// budget is not defined.
const redisReserveScript = `
local amount = tonumber(ARGV[1])
for _, k in ipairs(KEYS) do
  local v = redis.call('HMGET', k, 'limit', 'spent', 'reserved')
  if not v[1] then return -1 end
  if tonumber(v[1]) - tonumber(v[2]) - tonumber(v[3]) < amount then return 0 end
end
for _, k in ipairs(KEYS) do
  redis.call('HINCRBY', k, 'reserved', ARGV[1])
end
return 1
`

// redisSettleScript moves a reservation from reserved to spent in every
// budget hash of KEYS: ARGV[1] is the reserved amount, negated, ARGV[2]
// the actual.
const redisSettleScript = `
for _, k in ipairs(KEYS) do
  redis.call('HINCRBY', k, 'reserved', ARGV[1])
  redis.call('HINCRBY', k, 'spent', ARGV[2])
end
return 1
`

// redisBaseline is a running redis-server child and a client to it.
type redisBaseline struct {
	ch   *child
	rdb  *redis.Client
	addr string
	// fsync is the appendfsync setting: everysec or always.
	fsync           string
	version         string
	reserve, settle *redis.Script
}

// startRedis starts redis-server in dir on a free 127.0.0.1 port (append
// only file, fsync every second or, with syncAlways, on every write; no
// RDB saves) and connects to it. errRedisMissing if it is not installed.
func startRedis(ctx context.Context, dir string, syncAlways bool) (*redisBaseline, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errRedisMissing
	}
	fsync := "everysec"
	if syncAlways {
		fsync = "always"
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port may be taken between the look and the bind
		port, err := freeLocalPort()
		if err != nil {
			return nil, err
		}
		rb, err := tryRedis(ctx, path, dir, port, fsync)
		if err == nil {
			return rb, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func tryRedis(ctx context.Context, path, dir string, port int, fsync string) (*redisBaseline, error) {
	ch, err := startChild(path, filepath.Join(dir, "redis.log"),
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--daemonize", "no",
		"--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--logfile", "")
	if err != nil {
		return nil, err
	}
	rb := &redisBaseline{ch: ch, addr: fmt.Sprintf("127.0.0.1:%d", port), fsync: fsync,
		reserve: redis.NewScript(redisReserveScript), settle: redis.NewScript(redisSettleScript)}
	rb.rdb = redis.NewClient(&redis.Options{Addr: rb.addr, PoolSize: redisPool, MinIdleConns: redisPool})
	deadline := time.Now().Add(redisStartBound)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err = rb.rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case <-ch.done:
			_ = rb.rdb.Close()
			return nil, fmt.Errorf("redis-server exited: %v\n%s", ch.exitErr(), ch.logTail(1000))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			rb.close()
			return nil, fmt.Errorf("redis-server did not answer within %s: %w\n%s", redisStartBound, err, ch.logTail(1000))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a bound
	}
	if info, err := rb.rdb.InfoMap(ctx, "server").Result(); err == nil {
		rb.version = info["Server"]["redis_version"]
	}
	for _, s := range []*redis.Script{rb.reserve, rb.settle} {
		if err := s.Load(ctx, rb.rdb).Err(); err != nil {
			rb.close()
			return nil, fmt.Errorf("redis: load script: %w", err)
		}
	}
	return rb, nil
}

// close closes the client and stops redis-server.
func (rb *redisBaseline) close() {
	_ = rb.rdb.Close()
	_, _ = rb.ch.stop(syscall.SIGTERM, redisStopBound)
}

// cpu is the CPU time redis-server has used (every thread).
func (rb *redisBaseline) cpu() time.Duration { return procCPU(rb.ch.pid()) }

// describe names the server and its durability.
func (rb *redisBaseline) describe() string {
	return fmt.Sprintf("redis-server %s at %s, appendonly yes, appendfsync %s, no RDB saves", rb.version, rb.addr, rb.fsync)
}

// redisKey is scope's budget hash.
func redisKey(scope string) string { return redisKeyPrefix + scope }

// define puts a budget hash of limit micro-units, nothing spent or
// reserved, for every key.
func (rb *redisBaseline) define(ctx context.Context, keys []string, limit int64) error {
	pipe := rb.rdb.Pipeline()
	for _, k := range keys {
		pipe.HSet(ctx, k, "limit", limit, "spent", 0, "reserved", 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// errRedisDenied: the reserve script found a budget's limit reached.
var errRedisDenied = errors.New("redis: limit reached")

// reserveMicros runs the reserve script: nil when reserved,
// errRedisDenied when a limit would be passed.
func (rb *redisBaseline) reserveMicros(ctx context.Context, keys []string, amount int64) error {
	n, err := rb.reserve.Run(ctx, rb.rdb, keys, amount).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redis reserve: %w", err)
	case n == 0:
		return errRedisDenied
	case n != 1:
		return fmt.Errorf("redis reserve: budget not defined (%d)", n)
	}
	return nil
}

// settleMicros runs the settle script.
func (rb *redisBaseline) settleMicros(ctx context.Context, keys []string, reserved, actual int64) error {
	if err := rb.settle.Run(ctx, rb.rdb, keys, -reserved, actual).Err(); err != nil {
		return fmt.Errorf("redis settle: %w", err)
	}
	return nil
}

// redisCycle is benchCycle on Redis: reserve amount in every key, then
// settle it with the same actual. It returns the reserve's latency.
func redisCycle(ctx context.Context, rb *redisBaseline, keys []string, amount int64) (time.Duration, error) {
	t0 := time.Now()
	err := rb.reserveMicros(ctx, keys, amount)
	lat := time.Since(t0)
	if err != nil {
		return 0, err
	}
	return lat, rb.settleMicros(ctx, keys, amount, amount)
}

// micros is a decimal amount in integer micro-units; an amount finer than
// a micro-unit is an error.
func micros(amount string) (int64, error) {
	m, err := events.ParseMoney(amount)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(m.Mul(events.MoneyFromInt(1_000_000)).String(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("amount %s is not a whole number of micro-units", amount)
	}
	return n, nil
}

// freeLocalPort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redisDir makes redis-server's data directory.
func redisDir() (string, error) { return os.MkdirTemp("", "spendgate-bench-redis-") }

// redisP50Target: a lone caller's admit p50 through the Go client within
// this many times Redis's.
const redisP50Target = 3

// writeRedisNotes explains the CPU and Redis columns under the table and
// states spendgate's targets against the Redis baseline.
func (b *bencher) writeRedisNotes(w io.Writer, rows []benchRow) {
	fmt.Fprint(w, `CPU/cycle: user+system CPU time per cycle, median of the reps. client CPU/cycle: this process during the client
  runs: the embedded NATS server, the spendgate replica, and the callers with their Go clients (one process: the callers'
  share cannot be told apart). redis CPU/cycle: redis-server (/proc/<pid>/stat, all threads) plus this process during the
  redis runs (the callers and go-redis, beside an idle NATS server and replica): the same all-in figure.
  redis-server CPU/cycle: redis-server alone.
`)
	if b.redis == nil {
		why := "not run (--redis=false)"
		if b.redisNote != "" {
			why = b.redisNote
		}
		fmt.Fprintf(w, "redis: %s: its columns print as -\n", why)
		return
	}
	fmt.Fprintf(w, `redis: the same callers through one go-redis client (a pool of %d connections) to a child process, %s:
  a cycle is EVALSHA of a reserve script (each budget's hash: HMGET limit, spent, reserved; nothing reserved if
  limit - spent - reserved < amount in any; else HINCRBY reserved in each) and EVALSHA of a settle script (HINCRBY reserved
  -amount, spent +actual), amounts in integer micro-units. No request ids, idempotency, reservation records, TTLs or events:
  the check as users write it. spread64: a hash per budget; multi3: its three hashes in one script call.
  redis admit p50 = the reserve script's round trip. client x redis = client cycles/s / redis cycles/s;
  client p50 / redis p50 = client admit p50 / redis admit p50.
`, redisPool, b.redis.describe())
	fsync := "NATS sync=interval (2m), redis appendfsync everysec"
	if b.o.SyncAlways {
		fsync = "NATS sync=always, redis appendfsync always"
	}
	if b.o.NATSURL != "" {
		fsync = "NATS: the running server's sync setting, redis appendfsync " + b.redis.fsync
	}
	for _, r := range rows {
		if r.ClientCyclesPerS == 0 || r.RedisCyclesPerS == 0 {
			continue
		}
		switch r.Scenario {
		case "hot64":
			fmt.Fprintf(w, "target against redis, hot64, %s: client cycles/s >= redis cycles/s: %.0f vs %.0f (%s): met %s\n",
				fsync, r.ClientCyclesPerS, r.RedisCyclesPerS, fmtRatio(r.ClientXRedis), metStr(r.ClientCyclesPerS >= r.RedisCyclesPerS))
		case "hot1":
			fmt.Fprintf(w, "target against redis, hot1, %s: client admit p50 <= %dx redis admit p50: %s vs %s (%s): met %s\n",
				fsync, redisP50Target, fmtLatency(r.ClientAdmitP50), fmtLatency(r.RedisAdmitP50), fmtRatio(r.ClientP50XRedis),
				metStr(r.ClientP50XRedis <= redisP50Target))
		}
	}
}
