package ledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// setKey is a change of DefineAPIKey that sets the fields f sets on the
// current key (or a new one).
func setKey(f func(k *ledger.APIKey)) func(ledger.APIKey, bool) (ledger.APIKey, error) {
	return func(cur ledger.APIKey, _ bool) (ledger.APIKey, error) {
		cur.Scopes = append([]string(nil), cur.Scopes...)
		f(&cur)
		return cur, nil
	}
}

// TestDefineAPIKey_FoldedEverywhereAndSnapshotted: a key's create, rotate
// and disable are chained revisions that a second replica folds, a change
// that changes nothing writes nothing, and a replica started from a
// snapshot holds the keys, their end-user and run kinds too, and folds a
// later change of one. How it can fail: a key the snapshot drops is
// unknown on the replica from the snapshot, a field it drops (the run
// kind) lets that replica resolve the key without it, and a chain it
// mangles stops that replica's fold of the change after it.
func TestDefineAPIKey_FoldedEverywhereAndSnapshotted(t *testing.T) {
	env := snapLayout(t)
	w := startLedger(t, env, snapOpts...)
	other := startLedger(t, env, snapOpts...)
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h1, h2 := events.HashAPIKey("s1"), events.HashAPIKey("s2")

	c, err := w.DefineAPIKey(ctx, "k1", setKey(func(k *ledger.APIKey) {
		k.Hash, k.Scopes, k.Tenant, k.Name = h1, []string{"team:search", "user:u-17"}, "acme", "search"
		k.EndUser, k.Run = "customer", "run"
	}), now)
	require.NoError(t, err)
	require.False(t, c.Existed)
	require.Equal(t, []string{}, c.Changed)
	require.Equal(t, h1, c.Key.Hash)
	require.Equal(t, now, c.Key.CreatedAt)
	require.True(t, c.Key.RotatedAt.IsZero())
	v1 := c.Key.Version
	require.NotZero(t, v1)

	same, err := w.DefineAPIKey(ctx, "k1", setKey(func(k *ledger.APIKey) {}), now)
	require.NoError(t, err)
	require.Equal(t, v1, same.Key.Version, "nothing changed: nothing written")

	later := now.Add(time.Hour)
	r, err := other.DefineAPIKey(ctx, "k1", setKey(func(k *ledger.APIKey) { k.Hash = h2 }), later)
	require.NoError(t, err, "the other replica changes the key it folded")
	require.Equal(t, []string{"hash"}, r.Changed)
	require.Equal(t, later, r.Key.RotatedAt)
	require.Equal(t, now, r.Key.CreatedAt, "created stays")
	d, err := w.DefineAPIKey(ctx, "k1", setKey(func(k *ledger.APIKey) { k.Disabled = true }), later)
	require.NoError(t, err, "the first replica's write after a lost compare-and-set")
	require.Equal(t, []string{"disabled"}, d.Changed)
	require.Equal(t, h2, d.Key.Hash, "the rotation is kept")
	_, err = w.DefineAPIKey(ctx, "k2", setKey(func(k *ledger.APIKey) { k.Hash, k.Access = h1, events.AccessService }), now)
	require.NoError(t, err)

	testenv.WaitFor(t, 10*time.Second, "the other replica folded every change", func() bool {
		k, ok := other.APIKey("k1")
		return ok && k.Disabled && len(other.APIKeys()) == 2
	})
	k, _ := other.APIKey("k1")
	require.Equal(t, d.Key, k)

	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	fromSnap := startLedger(t, env, snapOpts...)
	require.Equal(t, info.Seq, fromSnap.SnapshotStats().Loaded)
	require.Equal(t, w.APIKeys(), fromSnap.APIKeys())
	snapped, _ := fromSnap.APIKey("k1")
	require.Equal(t, "customer", snapped.EndUser)
	require.Equal(t, "run", snapped.Run, "the run kind travels in the snapshot")
	got, _ := bookOf(t, fromSnap)
	whole := startLedger(t, env, append(snapOpts, ledger.WithSnapshotLoad(false))...)
	full, _ := bookOf(t, whole)
	require.Equal(t, full, got)

	// A change after the snapshot chains to the revision it holds.
	e, err := w.DefineAPIKey(ctx, "k1", setKey(func(k *ledger.APIKey) { k.Disabled = false }), later)
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "the replica from the snapshot folded the change", func() bool {
		k, ok := fromSnap.APIKey("k1")
		return ok && k.Version == e.Key.Version && !k.Disabled
	})
	check(t, env)
}

// TestDefineAPIKey_ConcurrentChangesAllLand: replicas change one key at
// once, each a different field; every change lands, none overwrites
// another. How it can fail: a blind write (no compare-and-set on the
// key's revision) would drop whichever change it raced.
func TestDefineAPIKey_ConcurrentChangesAllLand(t *testing.T) {
	env := snapLayout(t)
	a, b := startLedger(t, env, snapOpts...), startLedger(t, env, snapOpts...)
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, err := a.DefineAPIKey(ctx, "k", setKey(func(k *ledger.APIKey) { k.Hash, k.Scopes = events.HashAPIKey("s"), []string{"team:a"} }), now)
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))
	names := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	var wg sync.WaitGroup
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := a
			if i%2 == 1 {
				l = b
			}
			_, err := l.DefineAPIKey(ctx, "k", setKey(func(k *ledger.APIKey) { k.Scopes = append(k.Scopes, "user:"+names[i]) }), now)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.NoError(t, a.Sync(ctx))
	k, ok := a.APIKey("k")
	require.True(t, ok)
	require.Len(t, k.Scopes, 1+len(names), "every change landed: %v", k.Scopes)
	check(t, env)
}
