package roles_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/feed"
	"github.com/spendgate/spendgate/roles"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestRoles_ReplicaWritesFeedCheckpoints: a feed relay on a replica
// role's connection writes checkpoints of its chain (and deletes all but
// the newest feed.CheckpointsKept), and the relay that starts next on
// such a connection loads one: the checkpoints live in the ledger's
// snapshot bucket, which the role already reads and writes, so they need
// no permission of their own. The feed is not empty when either relay
// starts, so each reads the feed's last message first, by a direct get
// (the feed stream allows them). It fails if the role refused any subject
// a checkpoint's write, list, read or delete uses: the write is only
// logged and Written stays 0, or the start falls back to the whole ledger
// and Loaded stays 0; and it failed before the role granted the feed's
// direct get: the relay's read of the feed's last message timed out, and
// it retried for ever.
func TestRoles_ReplicaWritesFeedCheckpoints(t *testing.T) {
	l, s := tenantServer(t)
	ctx := context.Background()
	admin := newClient(t, dialRole(t, s, l, roles.Admin), l)
	svc := newClient(t, dialRole(t, s, l, roles.Service), l)
	_, err := admin.PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "1000", Unit: "USD"})
	require.NoError(t, err)
	admit := func(n int) {
		for range n {
			_, err := svc.Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "1"})
			require.NoError(t, err)
		}
	}
	admit(12)
	js, err := jetstream.New(dialRole(t, s, l, roles.Replica).nc)
	require.NoError(t, err)
	run := func() (*feed.Relay, func()) {
		rl, err := feed.NewRelay(js, l, feed.WithCheckpointEvery(2), feed.WithRetry(10*time.Millisecond))
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rl.Run(rctx) }()
		return rl, func() { cancel(); require.ErrorIs(t, <-done, context.Canceled) }
	}

	first, stop := run()
	testenv.WaitFor(t, waitBound, "checkpoints written", func() bool { return first.CheckpointStats().Written >= 8 })
	stop()
	store, err := js.ObjectStore(ctx, l.SnapshotBucket())
	require.NoError(t, err)
	objs, err := store.List(ctx)
	require.NoError(t, err)
	kept := 0
	for _, o := range objs {
		if _, ok := streams.FeedChainSeq(o.Name); ok && !o.Deleted {
			kept++
		}
	}
	require.Equal(t, feed.CheckpointsKept, kept, "the older checkpoints deleted")

	admit(1)
	next, stop := run()
	testenv.WaitFor(t, waitBound, "a start from a checkpoint", func() bool { return next.CheckpointStats().Loaded > 0 })
	stop()
	require.Zero(t, next.CheckpointStats().Skipped)
}
