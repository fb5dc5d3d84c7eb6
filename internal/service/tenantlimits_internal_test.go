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
	b := newTenantBuckets(10, 5, func() time.Time { return now }, nil)
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
	require.Nil(t, newTenantBuckets(0, 10, time.Now, nil), "rate 0 is no limit")

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
	b := newTenantBuckets(l.Rate, l.Burst, func() time.Time { return time.Unix(0, 0) }, nil)
	for i := range events.MaxBatchItems {
		require.True(t, b.take("acme", 1), "item %d of an idle tenant's full batch", i)
	}
	require.False(t, b.take("acme", 1), "the burst is spent")
	require.Error(t, TenantLimits{Burst: MaxTenantRate + 1}.Validate())
}

// A tenant's own limits replace the common ones field by field: a rate of
// its own brings a burst of its own (a tenth of a second's worth, at least
// a batch), a burst alone keeps the common rate, a negative field turns
// that limit off; a tenant without a line, and every tenant after Set
// drops it, keeps the common limits.
func TestTenantTable_Of(t *testing.T) {
	t.Parallel()
	common := TenantLimits{MaxOpen: 10000, MaxDefaultBudgets: 10000, Rate: 500}.WithDefaults()
	tab := NewTenantTable(map[string]TenantLimits{
		"big":   {MaxOpen: 50000, Rate: 20000},
		"burst": {Burst: 900},
		"free":  {Rate: -1, MaxDefaultBudgets: -1, DenialBytes: -1, MaxBudgets: -1},
		"many":  {MaxBudgets: 20000},
	})
	require.Equal(t, DefaultTenantMaxBudgets, common.MaxBudgets, "the default")
	require.Equal(t, common, tab.Of("small", common))
	require.Equal(t, common, tab.Of("", common), "the untenanted deployment has none")
	big := tab.Of("big", common)
	require.Equal(t, TenantLimits{MaxOpen: 50000, MaxDefaultBudgets: 10000, MaxBudgets: DefaultTenantMaxBudgets, Rate: 20000, Burst: 2000,
		DenialBytes: common.DenialBytes}, big)
	require.Equal(t, TenantLimits{MaxOpen: 10000, MaxDefaultBudgets: 10000, MaxBudgets: DefaultTenantMaxBudgets, Rate: 500, Burst: 900,
		DenialBytes: common.DenialBytes}, tab.Of("burst", common))
	require.Equal(t, 20000, tab.Of("many", common).MaxBudgets)
	free := tab.Of("free", common)
	require.Equal(t, -1, free.Rate)
	require.Equal(t, -1, free.MaxDefaultBudgets)
	require.Equal(t, -1, free.DenialBytes)
	require.Equal(t, -1, free.MaxBudgets)
	require.Equal(t, 4, tab.Len())
	tab.Set(nil)
	require.Equal(t, common, tab.Of("big", common))
	var none *TenantTable
	require.Equal(t, common, none.Of("big", common))
	require.Zero(t, none.Len())
}

// The request buckets with tenants' own rates: a tenant with a rate of its
// own gets its burst, one whose own rate is off is never refused, and the
// others share the common terms; a rate refusal names where the tenant's
// rate comes from. Without own rates, "big" would be refused after 5.
func TestTenantBuckets_OwnRates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	common := TenantLimits{Rate: 10, Burst: 5}.WithDefaults()
	tab := NewTenantTable(map[string]TenantLimits{"big": {Rate: 1000, Burst: 100}, "free": {Rate: -1}})
	b := newTenantBuckets(common.Rate, common.Burst, func() time.Time { return now }, tab.rateOf(common))
	require.True(t, b.take("big", 100))
	require.False(t, b.take("big", 1))
	require.True(t, b.take("free", 1<<20))
	require.True(t, b.take("small", 5))
	require.False(t, b.take("small", 1))

	// The common rate off, one tenant limited all the same.
	off := newTenantBuckets(-1, 0, func() time.Time { return now }, tab.rateOf(TenantLimits{Rate: -1}))
	require.NotNil(t, off)
	require.True(t, off.take("small", 1<<20))
	require.False(t, off.take("big", 101))

	s := &Service{limits: common, own: tab}
	require.Contains(t, s.rateRefusal("big", "admit", nil).Message, "1000 per second (its own, --tenant-limits rate=1000)")
	require.Contains(t, s.rateRefusal("small", "admit", nil).Message, "10 per second (serve --tenant-rate 10)")

	// Denial bytes of its own.
	d := newTenantBuckets(16, 16*TenantDenialBurst, func() time.Time { return now }, NewTenantTable(map[string]TenantLimits{"big": {DenialBytes: 1 << 20}}).bytesOf())
	require.True(t, d.take("big", 1<<20))
	require.False(t, d.take("small", 16*TenantDenialBurst+1))
}

// A settle, a release or a void may run a tenant's bucket one burst into
// debt: the admits that opened those reservations took their tokens
// already, and a settle refused leaves a paid call unrecorded. The admits
// after it are refused until the rate pays the debt back, and closings
// alone are still held to the rate. How we know it can fail: with closings
// taking tokens as admits do, the first settle after five admits was
// refused.
func TestTenantBuckets_ClosingsRunIntoDebt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b := newTenantBuckets(10, 5, func() time.Time { return now }, nil)
	for i := range 5 {
		require.True(t, b.take("acme", 1), "admit %d", i)
	}
	require.False(t, b.take("acme", 1), "a sixth admit: the burst is spent")
	for i := range 5 {
		require.True(t, b.takeClosing("acme"), "the settle of admit %d", i)
	}
	require.False(t, b.takeClosing("acme"), "a closing past the second burst")
	now = now.Add(500 * time.Millisecond) // five tokens back: the debt paid
	require.False(t, b.take("acme", 1), "admits wait until the debt is paid back")
	now = now.Add(100 * time.Millisecond)
	require.True(t, b.take("acme", 1))
	var none *tenantBuckets
	require.True(t, none.takeClosing("acme"), "no limit")
}
