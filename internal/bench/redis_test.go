package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// redisTestLimit is the limit, in micro-units, of the atomicity check's
// budget: far fewer than the callers, so most admits are denied.
const redisTestLimit = 16

// reserveFunc is a way of reserving on the Redis baseline's hashes.
type reserveFunc func(ctx context.Context, keys []string, amount int64) error

// TestRedisBaseline_NeverOverAdmits checks the Redis baseline's own
// atomicity, which its figures rest on: 64 callers contend for a budget
// of 16 micro-units for 250 ms (reserve, hold it over one more round
// trip, give it back), and never hold more than 16 at once; then they
// spend it, and exactly 16 are admitted. The non-atomic subtest shows that
// the check can fail: the same reserve done as HMGET then HINCRBY from Go
// (what the script exists to avoid) admits more than the limit. (Contending
// through that reserve, the callers held 27 to 58 at once in each of 10
// runs of 100 ms under the race detector: 250 ms is ample; it was 1 s.)
func TestRedisBaseline_NeverOverAdmits(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH (apt-get install redis-server): the Redis baseline is not checked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchTestBudget)
	defer cancel()
	rb, err := startRedis(ctx, t.TempDir(), false)
	require.NoError(t, err)
	t.Cleanup(rb.close)
	require.NotEmpty(t, rb.version)

	t.Run("script", func(t *testing.T) {
		keys := []string{redisKey("org:atomic")}
		require.NoError(t, rb.define(ctx, keys, redisTestLimit))
		maxHeld, denied := redisContend(t, ctx, rb, keys, rb.reserveMicros, 250*time.Millisecond)
		t.Logf("at most %d of %d held at once, %d denials", maxHeld, redisTestLimit, denied)
		require.LessOrEqual(t, maxHeld, int64(redisTestLimit), "more reservations held at once than the limit allows")
		require.Positive(t, denied, "the budget never denied: the check tested nothing")
		require.Equal(t, map[string]string{"limit": "16", "spent": "0", "reserved": "0"}, rb.rdb.HGetAll(ctx, keys[0]).Val())

		admitted := redisSpendAll(t, ctx, rb, keys, rb.reserveMicros)
		require.Equal(t, int64(redisTestLimit), admitted, "spending the budget to its limit admitted another count than the limit")
		require.Equal(t, map[string]string{"limit": "16", "spent": "16", "reserved": "0"}, rb.rdb.HGetAll(ctx, keys[0]).Val())
	})

	t.Run("non-atomic reserve over-admits", func(t *testing.T) {
		nonAtomic := func(ctx context.Context, keys []string, amount int64) error {
			v, err := rb.rdb.HMGet(ctx, keys[0], "limit", "spent", "reserved").Result()
			if err != nil {
				return err
			}
			var n [3]int64
			for i := range n {
				if n[i], err = strconv.ParseInt(v[i].(string), 10, 64); err != nil {
					return err
				}
			}
			if n[0]-n[1]-n[2] < amount {
				return errRedisDenied
			}
			return rb.rdb.HIncrBy(ctx, keys[0], "reserved", amount).Err()
		}
		var admitted int64
		for try := 0; try < 5 && admitted <= redisTestLimit; try++ {
			keys := []string{redisKey(fmt.Sprintf("org:nonatomic-%d", try))}
			require.NoError(t, rb.define(ctx, keys, redisTestLimit))
			admitted = redisSpendAll(t, ctx, rb, keys, nonAtomic)
		}
		t.Logf("the non-atomic reserve admitted %d on a limit of %d", admitted, redisTestLimit)
		require.Greater(t, admitted, int64(redisTestLimit), "a reserve that checks and increments in two round trips never over-admitted: the check could not tell")
	})
}

// redisContend runs 64 callers for d: each reserves one micro-unit with
// reserve, holds it over one more round trip to Redis, and settles it
// with an actual of 0. It returns the most reservations the callers held
// at once (counted after a reserve returned and before its settle was
// sent, so never more than Redis held) and the denials.
func redisContend(t *testing.T, ctx context.Context, rb *redisBaseline, keys []string, reserve reserveFunc, d time.Duration) (maxHeld, denied int64) {
	t.Helper()
	var held, most, deny atomic.Int64
	errs := make(chan error, 64)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := 0; c < 64; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				err := reserve(ctx, keys, 1)
				if errors.Is(err, errRedisDenied) {
					deny.Add(1)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				h := held.Add(1)
				for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
				}
				err = rb.rdb.Ping(ctx).Err() // the call the reservation pays for
				held.Add(-1)
				if err == nil {
					err = rb.settleMicros(ctx, keys, 1, 0)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return most.Load(), deny.Load()
}

// redisSpendAll has 64 callers, started at once, reserve one micro-unit
// and settle it in full until each is denied; it returns how many were
// admitted.
func redisSpendAll(t *testing.T, ctx context.Context, rb *redisBaseline, keys []string, reserve reserveFunc) int64 {
	t.Helper()
	var admitted atomic.Int64
	errs := make(chan error, 64)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < 64; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				err := reserve(ctx, keys, 1)
				if errors.Is(err, errRedisDenied) {
					return
				}
				if err == nil {
					admitted.Add(1)
					err = rb.settleMicros(ctx, keys, 1, 1)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return admitted.Load()
}

// Amounts reach Redis as whole micro-units, exactly, or not at all.
func TestMicros(t *testing.T) {
	for in, want := range map[string]int64{"0.000001": 1, "1": 1_000_000, "0.5": 500_000, "1000000000": redisBigLimit} {
		got, err := micros(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := micros("0.0000001")
	require.Error(t, err)
	_, err = micros("abc")
	require.Error(t, err)
}
