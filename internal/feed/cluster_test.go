package feed_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/testenv"
)

// feedCluster is a 3-node cluster (the feed stream R3) and the keys its
// relaying replicas sign with, each its own, all trusted.
type feedCluster struct {
	c       *testenv.Cluster
	logs    *testenv.LogBuffer
	signers []*signing.Signer
	keys    *signing.KeySet
}

func newFeedCluster(t *testing.T, replicas int) *feedCluster {
	t.Helper()
	fc := &feedCluster{logs: &testenv.LogBuffer{}}
	c, err := testenv.StartCluster(testenv.ClusterConfig{Nodes: 3, Dir: t.TempDir(), Name: t.Name(),
		Log: slog.New(slog.NewTextHandler(fc.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(c.Shutdown)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's warnings and errors:\n%s", fc.logs.String())
		}
	})
	fc.c = c
	var keys []signing.Key
	for range replicas {
		s, err := signing.NewEphemeral()
		require.NoError(t, err)
		fc.signers = append(fc.signers, s)
		keys = append(keys, signing.Key{Public: s.PublicKey()})
	}
	fc.keys, err = signing.NewKeySet(keys, 0)
	require.NoError(t, err)
	return fc
}

// start starts replica i, relaying, connected to node i first.
func (fc *feedCluster) start(t *testing.T, i int, log *slog.Logger, opts ...feed.Option) *replica.Replica {
	t.Helper()
	nc, err := nats.Connect(fc.c.Servers[i].ClientURL()+","+fc.c.URLs(), nats.MaxReconnects(-1), nats.Name(fmt.Sprintf("replica-%d", i)))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: fc.c.Layout, SweepInterval: -1, Feed: true, Log: log,
		FeedOptions:   append([]feed.Option{feed.WithRetry(50 * time.Millisecond)}, opts...),
		LedgerOptions: []ledger.Option{ledger.WithSigner(fc.signers[i]), ledger.WithTrust(fc.keys)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// waitFeed waits until the feed holds want messages, failing at once if a
// node stopped the feed stream.
func (fc *feedCluster) waitFeed(t *testing.T, ctx context.Context, want int) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, "the feed to hold every event", func() bool {
		require.NotContains(t, fc.logs.String(), "critical write error", "the feed stream stopped")
		return feedLen(ctx, fc.c.JS, fc.c.Layout) >= uint64(want)
	})
	require.NotContains(t, fc.logs.String(), "critical write error", "the feed stream stopped")
}

// holdUntil returns an append fault that holds the relay's first append
// until every channel is closed (at most 30 s).
func holdUntil(chs ...chan struct{}) feed.Option {
	var calls atomic.Int64
	return feed.UnsafeAppendFaultForTesting(func() error {
		if calls.Add(1) == 1 {
			for _, ch := range chs {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					return fmt.Errorf("the test's hold timed out")
				}
			}
		}
		return nil
	})
}

// Two relays on a 3-node cluster (the feed stream R3), the second
// appending ahead of the first's window: the feed stream stays writable
// and ends holding every event once, in order. On a clustered stream
// nats-server checks Nats-Expected-Last-Msg-Id only when each node applies
// the entry, and a mismatch there is a critical write error that stops the
// stream on every node for good (it stays in the raft log: a restarted
// node applies it again). A relay that pipelined its appends under that
// header wedged the feed as soon as another relay appended k events after
// the tail it read and its own window held more than k: its first k
// appends failed on the expected sequence, the next passed it and failed
// on the message id when applied. Two `serve --feed` replicas on an R3
// cluster did so within seconds of traffic.
func TestRelay_TwoReplicasOnClusterKeepTheFeed(t *testing.T) {
	t.Parallel()
	fc := newFeedCluster(t, 2)
	ctx := ctxT(t)
	// The relays read the feed through its leader, never by direct get,
	// which a replica whose copy lags may answer: a relay that found the
	// feed's last message missing there took an older event for the end
	// and appended the next one a second time.
	direct, err := fc.c.Conn.SubscribeSync(jetstream.DefaultAPIPrefix + "DIRECT.GET." + fc.c.Layout.FeedStreamName() + ".>")
	require.NoError(t, err)
	direct1, err := fc.c.Conn.SubscribeSync(jetstream.DefaultAPIPrefix + "DIRECT.GET." + fc.c.Layout.FeedStreamName())
	require.NoError(t, err)

	// b appends 5 events and holds its 6th; a, whose tail is older, holds
	// its first append until then and until every event is queued, so its
	// window holds more than the 5 that b appended ahead of it.
	bHeld, written, aMoved := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var a atomic.Pointer[replica.Replica]
	var bCalls atomic.Int64
	// a reads the feed's tail before its first append, so b appends
	// nothing until a is at its first append: a's tail is then older
	// than b's 5 appends.
	aEntered := make(chan struct{})
	var aCalls atomic.Int64
	holdA := feed.UnsafeAppendFaultForTesting(func() error {
		if aCalls.Add(1) == 1 {
			close(aEntered)
			for _, ch := range []chan struct{}{bHeld, written} {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					return fmt.Errorf("the test's hold timed out")
				}
			}
		}
		return nil
	})
	holdB := feed.UnsafeAppendFaultForTesting(func() error {
		if bCalls.Add(1) == 1 {
			select {
			case <-aEntered:
			case <-time.After(30 * time.Second):
				return fmt.Errorf("the test's hold timed out")
			}
		}
		if bCalls.Load() == 6 {
			// b's 5 appends are asynchronous: a goes on only once the
			// feed holds them, so that a's window (expecting the tail
			// it read before) loses to them rather than racing them.
			if !testenv.Within(30*time.Second, func() bool { return feedLen(ctx, fc.c.JS, fc.c.Layout) >= 5 }) {
				return fmt.Errorf("the test's hold timed out: b's 5 appends not in the feed")
			}
			close(bHeld)
			// Until a has sent its window and heard back.
			if !testenv.Within(30*time.Second, func() bool { r := a.Load(); return r != nil && r.Relay.Lost()+r.Relay.Relayed() > 0 }) {
				return fmt.Errorf("the test's hold timed out: a did not move")
			}
			close(aMoved)
		}
		return nil
	})
	ra := fc.start(t, 0, nil, holdA)
	a.Store(ra)
	rb := fc.start(t, 1, nil, holdB)
	seed(t, ctx, rb, "s", 20)
	close(written)
	<-aMoved

	want := ledgerEvents(t, ctx, fc.c.JS, fc.c.Layout)
	fc.waitFeed(t, ctx, len(want))
	n1, _, err := direct.Pending()
	require.NoError(t, err)
	n2, _, err := direct1.Pending()
	require.NoError(t, err)
	require.Zero(t, n1+n2, "direct gets of the feed")
	require.Equal(t, ids(want), ids(feedMessages(t, ctx, fc.c.JS, fc.c.Layout)))
	// a's window lost to b's appends: its first appends expected the
	// empty feed's sequence and b's 5 were there (the race the
	// Nats-Expected-Last-Msg-Id header wedged the stream on). a counts
	// the loss once it has taken every acknowledgement of that window,
	// after the feed holds every event (reading it at once found 0 under
	// -race, and the race was wrongly taken for not exercised).
	testenv.WaitFor(t, 30*time.Second, "a's window lost to b's appends", func() bool { return ra.Relay.Lost() >= 1 })
	require.Zero(t, ra.Relay.Forged()+rb.Relay.Forged())
	t.Logf("%d events; relayed %d + %d, lost %d + %d", len(want), ra.Relay.Relayed(), rb.Relay.Relayed(), ra.Relay.Lost(), rb.Relay.Lost())
}

// A message no trusted key signed, appended to a clustered feed just
// ahead of a relay's window, neither stops the feed stream nor goes
// unnoticed. A clustered feed stream's appends cannot expect the previous
// append's Nats-Msg-Id (see TestRelay_TwoReplicasOnClusterKeepTheFeed), so
// the window's first append fails, the second lands after the forgery,
// and the first event is missing from the feed: the relay counts the
// forgery and logs the event it lost, and the events after it reach the
// feed. How we know it can fail: with the Msg-Id expectation the forgery
// stopped the stream on every node (critical write error).
func TestRelay_ForgedMessageOnClusterIsCounted(t *testing.T) {
	t.Parallel()
	fc := newFeedCluster(t, 1)
	ctx := ctxT(t)
	written, forged := make(chan struct{}), make(chan struct{})
	var logs testenv.LogBuffer
	r := fc.start(t, 0, slog.New(slog.NewTextHandler(&logs, nil)), holdUntil(written, forged))
	seed(t, ctx, r, "s", 5)
	close(written)
	m := nats.NewMsg(fc.c.Layout.FeedPrefix() + "reservation.settled.v1.team.search")
	m.Data = []byte(`{"forged":true}`)
	_, err := fc.c.JS.PublishMsg(ctx, m)
	require.NoError(t, err)
	close(forged)

	want := ledgerEvents(t, ctx, fc.c.JS, fc.c.Layout)
	fc.waitFeed(t, ctx, len(want)) // every event but one, and the forgery
	testenv.WaitFor(t, 10*time.Second, "the forgery counted", func() bool { return r.Relay.Forged() == 1 })
	require.Contains(t, logs.String(), "the event is missing from it")
	var genuine []feed.Message
	s, err := fc.c.JS.Stream(ctx, fc.c.Layout.FeedStreamName())
	require.NoError(t, err)
	for seq := uint64(1); seq <= uint64(len(want)); seq++ {
		sm, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		if fm, err := feed.Verify(fc.keys, sm.Subject, sm.Header, sm.Data); err == nil {
			genuine = append(genuine, fm)
		}
	}
	require.Len(t, genuine, len(want)-1)
	require.Equal(t, ids(want[1:]), ids(genuine), "the window's first event is the one missing")
}
