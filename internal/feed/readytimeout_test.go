package feed_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// A replica with a feed far behind folds the ledger at the feed's pace at
// start (it loads no snapshot past the feed's end, and a full relay queue
// holds the fold back): when that outlasts its ready timeout, the error
// says how far the fold got, that the feed's back-fill paces it, and which
// flag to raise. How we know it can fail: the error said only "ledger fold
// did not finish in time"; live, a replica restarted with --feed on an R3
// cluster whose feed stream had been recreated exited with it after a
// minute of back-filling, with nothing pointing at the feed or the flag.
func TestReplica_FoldPacedByTheFeedSaysSo(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	seed(t, ctx, replicatest.Start(t, env, replica.Config{SweepInterval: -1}), "s", 10)

	// The feed takes nothing while the replica starts (past its ready
	// timeout; the start's failure waits for the relay).
	hold := feed.UnsafeAppendFaultForTesting(func() error {
		time.Sleep(3 * time.Second)
		return nil
	})
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := replica.Start(sctx, env.Connect(t), env.JS, replica.Config{Layout: env.Layout, SweepInterval: -1, Feed: true,
		ReadyTimeout: time.Second, FeedOptions: []feed.Option{hold, feed.WithQueue(1), feed.WithQueueWait(time.Minute)}})
	if err == nil {
		_ = r.Stop()
	}
	require.Error(t, err)
	require.Contains(t, err.Error(), "ledger fold did not finish in time (1s, --ready-timeout): folded to stream sequence")
	require.Contains(t, err.Error(), "give the replica a longer --ready-timeout")
	require.Contains(t, err.Error(), "the fold waits for the feed relay")
}
