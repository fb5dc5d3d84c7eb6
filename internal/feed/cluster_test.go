package feed_test

import (
	"fmt"
	"log/slog"
	"strings"
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
	logs := &testenv.LogBuffer{}
	c, err := testenv.StartCluster(testenv.ClusterConfig{Nodes: 3, Dir: t.TempDir(), Name: t.Name(),
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(c.Shutdown)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's warnings and errors:\n%s", logs.String())
		}
	})
	ctx := ctxT(t)

	// b appends 5 events and holds its 6th; a, whose tail is older, holds
	// its first append until then and until every event is queued, so its
	// window holds more than the 5 that b appended ahead of it.
	bHeld, written, aMoved := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var a atomic.Pointer[replica.Replica]
	var aCalls, bCalls atomic.Int64
	wait := func(ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("the test's hold timed out")
		}
	}
	holdA := feed.UnsafeAppendFaultForTesting(func() error {
		if aCalls.Add(1) == 1 {
			if err := wait(bHeld); err != nil {
				return err
			}
			return wait(written)
		}
		return nil
	})
	holdB := feed.UnsafeAppendFaultForTesting(func() error {
		if bCalls.Add(1) == 6 {
			close(bHeld)
			// Until a has sent its window and heard back.
			deadline := time.Now().Add(30 * time.Second)
			for r := a.Load(); r == nil || r.Relay.Lost()+r.Relay.Relayed() == 0; r = a.Load() {
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			close(aMoved)
		}
		return nil
	})
	// Each replica signs with its own key, as serve's do: the two relays
	// append each event under different Nats-Msg-Ids.
	var signers []*signing.Signer
	var keys []signing.Key
	for range 2 {
		s, err := signing.NewEphemeral()
		require.NoError(t, err)
		signers = append(signers, s)
		keys = append(keys, signing.Key{Public: s.PublicKey()})
	}
	ks, err := signing.NewKeySet(keys, 0)
	require.NoError(t, err)
	start := func(i int, hold feed.Option) *replica.Replica {
		nc, err := nats.Connect(c.Servers[i].ClientURL()+","+c.URLs(), nats.MaxReconnects(-1), nats.Name(fmt.Sprintf("replica-%d", i)))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		r, err := replica.Start(ctx, nc, js, replica.Config{Layout: c.Layout, SweepInterval: -1, Feed: true,
			FeedOptions:   []feed.Option{hold, feed.WithRetry(50 * time.Millisecond)},
			LedgerOptions: []ledger.Option{ledger.WithSigner(signers[i]), ledger.WithTrust(ks)}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Stop() })
		return r
	}
	ra := start(0, holdA)
	a.Store(ra)
	rb := start(1, holdB)
	seed(t, ctx, rb, "s", 20)
	close(written)
	require.NoError(t, wait(aMoved))

	want := ledgerEvents(t, ctx, c.JS, c.Layout)
	testenv.WaitFor(t, time.Minute, "the feed to hold every event", func() bool {
		require.NotContains(t, logs.String(), "critical write error", "the feed stream stopped")
		return feedLen(ctx, c.JS, c.Layout) >= uint64(len(want))
	})
	require.False(t, strings.Contains(logs.String(), "critical write error"), "the feed stream stopped")
	got := feedMessages(t, ctx, c.JS, c.Layout)
	require.Equal(t, ids(want), ids(got))
	require.NotZero(t, ra.Relay.Lost(), "a's window lost to b's appends")
	t.Logf("%d events; relayed %d + %d, lost %d + %d", len(want), ra.Relay.Relayed(), rb.Relay.Relayed(), ra.Relay.Lost(), rb.Relay.Lost())
}
