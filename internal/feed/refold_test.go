package feed_test

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/testenv"
)

// A sole relay whose feed took nothing for longer than its queue wait
// dropped events so that the ledger kept serving; once the feed takes
// appends again, it gets them back from its replica's fold and appends
// them, in order, before what came after, with no other relay and no
// restart. What the fold refused in the dropped range (here a signed lane
// revision replayed by a login that may write the ledger) stays out of
// the feed.
//
// How we know it can fail: without the refold (the relay before it, or
// refoldGap returning at once) the relay waits for another relay or a
// restart, and the wait for the whole feed below times out; with Refold
// not consulting the fold's refusals, the replayed revision's events
// reach the feed and the feed differs from the ledger's passed events.
func TestRelay_SoleRelayGetsDroppedEventsBack(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	var down atomic.Bool
	var logs testenv.LogBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	r := signedReplica(t, env, s, slog.New(slog.NewTextHandler(&logs, nil)),
		feed.WithRetry(50*time.Millisecond), feed.WithQueue(4), feed.WithQueueWait(100*time.Millisecond),
		feed.UnsafeAppendFaultForTesting(func() error {
			if down.Load() {
				return errors.New("the feed takes nothing (test)")
			}
			return nil
		}))
	seed(t, ctx, r, "a", 2)
	waitGenuine(t, ctx, env, s.PublicKey(), time.Minute)

	down.Store(true)
	seed(t, ctx, r, "b", 6) // far more events than the queue holds
	require.NoError(t, r.Ledger.Sync(ctx), "the fold is not held back")
	require.Positive(t, r.Relay.Dropped())
	require.True(t, r.Relay.Stalled())

	// A replay of the last lane revision, headers and signature included,
	// in the dropped range: the fold refuses it (off its chain).
	stream, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)
	last, err := stream.GetLastMsgForSubject(ctx, env.Layout.Subject("lane.0"))
	require.NoError(t, err)
	replay := nats.NewMsg(last.Subject)
	replay.Data = last.Data
	for k, v := range last.Header {
		if !strings.HasPrefix(k, "Nats-") {
			replay.Header[k] = v
		}
	}
	ack, err := env.JS.PublishMsg(ctx, replay)
	require.NoError(t, err)
	seed(t, ctx, r, "c", 3)
	require.NoError(t, r.Ledger.Sync(ctx))
	require.Greater(t, r.Ledger.Stats().Rejected, int64(0), "the replica refused the replay")

	down.Store(false)
	want := strings.Join(ids(ledgerEventsExcept(t, ctx, env.JS, env.Layout, map[uint64]bool{ack.Sequence: true})), ",")
	testenv.WaitFor(t, time.Minute, "the feed to hold every event the fold passed, once, in order", func() bool {
		got, _ := genuineFeed(t, ctx, env, s.PublicKey())
		return strings.Join(ids(got), ",") == want
	})
	require.Positive(t, r.Relay.Refolded())
	testenv.WaitFor(t, 10*time.Second, "the relay to resume", func() bool { return !r.Relay.Stalled() })
	require.Contains(t, logs.String(), "got the events it dropped back")

	// And it relays what comes next.
	seed(t, ctx, r, "d", 2)
	want = strings.Join(ids(ledgerEventsExcept(t, ctx, env.JS, env.Layout, map[uint64]bool{ack.Sequence: true})), ",")
	testenv.WaitFor(t, 30*time.Second, "the feed to hold the later events", func() bool {
		got, _ := genuineFeed(t, ctx, env, s.PublicKey())
		return strings.Join(ids(got), ",") == want
	})
}

// A login that may write the ledger (the replica's) floods it, while a
// sole relay's feed takes nothing and it drops events, with more junk than
// a replica remembers refusals of (65,536): the fold skips all of it.
// Once the feed takes appends again the relay still gets every dropped
// event back from its replica's fold, with no restart, and nothing of the
// junk. How we know it can fail: a relay that asked its replica's fold to
// refold the dropped range, whose refusals the replica no longer
// remembered that far back, got ErrRefoldForgotten and waited for a
// restart (spendgate_feed_stalled stayed 1), and the wait below times out.
func TestRelay_JunkFloodInTheGapLosesNothing(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	var down atomic.Bool
	r := signedReplica(t, env, s, nil, // no log: a line per junk message
		feed.WithRetry(50*time.Millisecond), feed.WithQueue(4), feed.WithQueueWait(100*time.Millisecond),
		feed.UnsafeAppendFaultForTesting(func() error {
			if down.Load() {
				return errors.New("the feed takes nothing (test)")
			}
			return nil
		}))
	seed(t, ctx, r, "a", 2)
	waitGenuine(t, ctx, env, s.PublicKey(), time.Minute)

	down.Store(true)
	seed(t, ctx, r, "b", 4)
	require.NoError(t, r.Ledger.Sync(ctx), "the fold is not held back")
	require.Positive(t, r.Relay.Dropped())

	junk := map[uint64]bool{}
	var acks []jetstream.PubAckFuture
	for i := range 1<<16 + 1000 {
		a, err := env.JS.PublishAsync(env.Layout.Subject("junk"), []byte("junk "+strconv.Itoa(i)))
		require.NoError(t, err)
		acks = append(acks, a)
		if i%1000 == 999 {
			select {
			case <-env.JS.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("the junk was not stored")
			}
		}
	}
	select {
	case <-env.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the junk was not stored")
	}
	for _, a := range acks {
		select {
		case ack := <-a.Ok():
			junk[ack.Sequence] = true
		case err := <-a.Err():
			t.Fatal(err)
		}
	}
	seed(t, ctx, r, "c", 3)
	require.NoError(t, r.Ledger.Sync(ctx))

	down.Store(false)
	want := strings.Join(ids(ledgerEventsExcept(t, ctx, env.JS, env.Layout, junk)), ",")
	testenv.WaitFor(t, time.Minute, "the feed to hold every event the fold passed, once, in order", func() bool {
		got, _ := genuineFeed(t, ctx, env, s.PublicKey())
		return strings.Join(ids(got), ",") == want
	})
	testenv.WaitFor(t, 10*time.Second, "the relay to resume", func() bool { return !r.Relay.Stalled() })
}
