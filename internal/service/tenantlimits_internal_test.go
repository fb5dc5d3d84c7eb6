package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/stretchr/testify/require"
)

// A tenant's bucket holds burst tokens and gets rate per second back; a
// take it cannot pay takes nothing; tenants do not share a bucket; full
// buckets are forgotten once the map grows past its sweep size. How we
// know it can fail: each assertion is the exact count of one step.
func TestTenantBuckets_Take(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b := newTenantBuckets(10, 5, func() time.Time { return now })
	for i := range 5 {
		require.True(t, b.take("acme", 1), "token %d of the burst", i)
	}
	require.False(t, b.take("acme", 1), "the burst is spent")
	require.True(t, b.take("globex", 5), "another tenant has its own bucket")
	now = now.Add(100 * time.Millisecond) // one token back at 10/s
	require.True(t, b.take("acme", 1))
	require.False(t, b.take("acme", 1))
	now = now.Add(250 * time.Millisecond) // two and a half back
	require.False(t, b.take("acme", 3), "three cost more than two and a half")
	require.True(t, b.take("acme", 2), "a refused take took nothing")
	now = now.Add(time.Hour)
	require.False(t, b.take("acme", 6), "never more than the burst at once")
	require.True(t, b.take("acme", 5))

	var none *tenantBuckets
	require.True(t, none.take("acme", 1<<20), "no limit")
	require.Nil(t, newTenantBuckets(0, 10, time.Now), "rate 0 is no limit")

	for i := range tenantBucketsSweep + 10 {
		require.True(t, b.take(fmt.Sprint("t", i), 1))
		now = now.Add(time.Second) // every earlier bucket is full again
	}
	require.LessOrEqual(t, len(b.tat), tenantBucketsSweep+1, "full buckets are forgotten")
}

// The default burst is a tenth of a second's worth of the rate, but never
// less than a full batch: an idle tenant's batch of MaxBatchItems passes
// whole, and a flood past the rate is let through at its own pace for at
// most a tenth of a second. How we know it can fail: with the burst at a
// second's worth (as it was) the default would be 500.
func TestTenantLimits_DefaultBurst(t *testing.T) {
	t.Parallel()
	l := TenantLimits{}.WithDefaults()
	require.Equal(t, events.MaxBatchItems, l.Burst)
	require.Equal(t, 5000, TenantLimits{Rate: 50000}.WithDefaults().Burst)
	require.Equal(t, 7, TenantLimits{Burst: 7}.WithDefaults().Burst, "a burst set is kept")
	b := newTenantBuckets(l.Rate, l.Burst, func() time.Time { return time.Unix(0, 0) })
	for i := range events.MaxBatchItems {
		require.True(t, b.take("acme", 1), "item %d of an idle tenant's full batch", i)
	}
	require.False(t, b.take("acme", 1), "the burst is spent")
	require.Error(t, TenantLimits{Burst: MaxTenantRate + 1}.Validate())
}
