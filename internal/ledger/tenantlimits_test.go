package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

func n64(n int64) *int64 { return &n }

// TestDefineTenantLimits_FoldedEverywhereAndSnapshotted: a tenant's limits
// are chained revisions that a second replica folds and serves without a
// lock; a put that changes nothing writes nothing; a put of the whole set
// clears what it leaves out; and a replica started from a snapshot holds
// them and folds a later change. How it can fail: limits the snapshot
// drops are unknown on the replica from the snapshot (it would hold the
// tenant to the common limits), and a chain it mangles stops that
// replica's fold of the change after it.
func TestDefineTenantLimits_FoldedEverywhereAndSnapshotted(t *testing.T) {
	env := snapLayout(t)
	w := startLedger(t, env, snapOpts...)
	other := startLedger(t, env, snapOpts...)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

	c, err := w.DefineTenantLimits(ctx, "acme", events.TenantLimitValues{MaxOpen: n64(50000), Rate: n64(2000)}, now)
	require.NoError(t, err)
	require.False(t, c.Existed)
	require.Equal(t, []string{}, c.Changed)
	v1 := c.Limits.Version
	require.NotZero(t, v1)
	got, ok := w.TenantLimitsOf("acme")
	require.True(t, ok, "the writer folded its own write")
	require.Equal(t, int64(50000), *got.MaxOpen)

	same, err := w.DefineTenantLimits(ctx, "acme", events.TenantLimitValues{MaxOpen: n64(50000), Rate: n64(2000)}, now)
	require.NoError(t, err)
	require.Equal(t, v1, same.Limits.Version, "nothing changed: nothing written")

	// The other replica's put: max_open off (0), rate left out (the
	// common rate again), burst set.
	r, err := other.DefineTenantLimits(ctx, "acme", events.TenantLimitValues{MaxOpen: n64(0), Burst: n64(300)}, now.Add(time.Hour))
	require.NoError(t, err, "the other replica changes the limits it folded")
	require.True(t, r.Existed)
	require.Equal(t, []string{"max_open", "rate", "burst"}, r.Changed)
	require.Equal(t, int64(50000), *r.Prev.MaxOpen)
	_, err = w.DefineTenantLimits(ctx, "free", events.TenantLimitValues{MaxOpen: n64(100)}, now)
	require.NoError(t, err, "the first replica's write of another key")

	testenv.WaitFor(t, 10*time.Second, "both replicas folded every change", func() bool {
		a, ok := w.TenantLimitsOf("acme")
		return ok && a.Version == r.Limits.Version && len(other.AllTenantLimits()) == 2
	})
	a, _ := w.TenantLimitsOf("acme")
	require.Equal(t, r.Limits, a)
	require.Nil(t, a.Rate, "left out of the put: cleared")
	require.Equal(t, []string{"acme", "free"}, tenantsOf(other.AllTenantLimits()))
	_, ok = other.TenantLimitsOf("globex")
	require.False(t, ok)

	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	fromSnap := startLedger(t, env, snapOpts...)
	require.Equal(t, info.Seq, fromSnap.SnapshotStats().Loaded)
	require.Equal(t, w.AllTenantLimits(), fromSnap.AllTenantLimits())
	gotBook, _ := bookOf(t, fromSnap)
	whole := startLedger(t, env, append(snapOpts, ledger.WithSnapshotLoad(false))...)
	full, _ := bookOf(t, whole)
	require.Equal(t, full, gotBook)

	// A change after the snapshot chains to the revision it holds.
	e, err := w.DefineTenantLimits(ctx, "free", events.TenantLimitValues{MaxOpen: n64(200)}, now)
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "the replica from the snapshot folded the change", func() bool {
		f, ok := fromSnap.TenantLimitsOf("free")
		return ok && f.Version == e.Limits.Version && *f.MaxOpen == 200
	})
	check(t, env)
}

func tenantsOf(ts []ledger.TenantLimits) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Tenant)
	}
	return out
}
