package feed_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// An append the feed never answers (a feed stream without a leader, or
// stopped on its nodes, swallows it) does not hold the relay for good:
// once the feed answers again the relay appends every event. Here the
// feed stream stops taking its subjects for a while and a plain
// subscriber receives the appends instead, so none is acknowledged. How
// we know it can fail: a relay that waited for each acknowledgement with
// no bound (nats.go's asynchronous publish has none by default) stayed in
// that wait after the stream took its subjects back, and relayed nothing
// more until its replica restarted; live, two replicas on an R3 cluster
// whose feed stream had lost its leader relayed nothing after the
// operator recreated it.
func TestRelay_UnansweredAppendDoesNotHoldTheRelay(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Feed: true,
		FeedOptions: []feed.Option{feed.WithAppendWait(time.Second), feed.WithRetry(100 * time.Millisecond)}})
	seed(t, ctx, r, "a", 2)
	testenv.WaitFor(t, time.Minute, "the feed to hold every event", func() bool {
		return feedLen(ctx, env.JS, env.Layout) >= uint64(len(ledgerEvents(t, ctx, env.JS, env.Layout)))
	})

	// The feed stops answering: its stream leaves the subjects, and a
	// subscriber that never replies takes the appends.
	s, err := env.JS.Stream(ctx, env.Layout.FeedStreamName())
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	subjects := slices.Clone(cfg.Subjects)
	cfg.Subjects = []string{"unanswered.feed.>"}
	_, err = env.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	sink, err := env.Conn.SubscribeSync(env.Layout.FeedFilter())
	require.NoError(t, err)
	seed(t, ctx, r, "b", 2)
	_, err = sink.NextMsg(10 * time.Second)
	require.NoError(t, err, "an append reached the subscriber, unanswered")
	time.Sleep(1500 * time.Millisecond)

	// The feed answers again.
	require.NoError(t, sink.Unsubscribe())
	cfg.Subjects = subjects
	_, err = env.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	want := ledgerEvents(t, ctx, env.JS, env.Layout)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	testenv.WaitFor(t, 30*time.Second, "the feed to hold every event again", func() bool {
		return feedLen(wctx, env.JS, env.Layout) >= uint64(len(want))
	})
	require.Equal(t, ids(want), ids(feedMessages(t, ctx, env.JS, env.Layout)))
}
