package feed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/feed"
	"github.com/spendgate/spendgate/ledger"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/service"
	"github.com/spendgate/spendgate/signing"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// logBuf is a log destination the test reads while the relay writes.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// chainEnv is a replica signing with one key that it trusts, a relay
// that can be started and stopped with the same key set, and what the
// relays log.
type chainEnv struct {
	t     *testing.T
	ctx   context.Context
	env   *testenv.Env
	r     *service.Replica
	trust *signing.KeySet
	logs  logBuf
	// replays are the stream sequences of the replays written.
	replays []uint64
}

func newChainEnv(t *testing.T, opts ...testenv.Option) *chainEnv {
	env := testenv.New(t, opts...)
	k1, err := signing.NewEphemeral()
	require.NoError(t, err)
	trust, err := signing.NewKeySet([]signing.Key{{Public: k1.PublicKey()}}, 0)
	require.NoError(t, err)
	r := env.StartSpendgate(t, service.ReplicaConfig{SweepInterval: -1,
		LedgerOptions: []ledger.Option{ledger.WithSigner(k1), ledger.WithTrust(trust)}})
	return &chainEnv{t: t, ctx: ctxT(t), env: env, r: r, trust: trust}
}

// firstRevisions returns the first budget revision and the first lane
// revision of the stream as an attacker would copy them: payload and
// signature headers.
func (c *chainEnv) firstRevisions() (budget, lane *nats.Msg) {
	t := c.t
	s, err := c.env.JS.Stream(c.ctx, c.env.Layout.StreamName())
	require.NoError(t, err)
	for seq := uint64(1); budget == nil || lane == nil; seq++ {
		m, err := s.GetMsg(c.ctx, seq)
		require.NoError(t, err)
		key, _ := c.env.Layout.KeyOf(m.Subject)
		msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		for _, h := range []string{streams.HeaderSigKey, streams.HeaderSig} {
			msg.Header.Set(h, m.Header.Get(h))
		}
		require.NotEmpty(t, msg.Header.Get(streams.HeaderSig), "seq %d is signed", seq)
		switch {
		case budget == nil && streams.IsBudgetKey(key):
			budget = msg
		case lane == nil && streams.IsLaneKey(key):
			lane = msg
		}
	}
	return budget, lane
}

// replay writes m straight into the ledger stream (no compare-and-set)
// and waits for the replica to skip it.
func (c *chainEnv) replay(m *nats.Msg) {
	c.t.Helper()
	ack, err := c.env.JS.PublishMsg(c.ctx, &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header})
	require.NoError(c.t, err)
	c.replays = append(c.replays, ack.Sequence)
	testenv.WaitFor(c.t, 30*time.Second, "the replica to skip the replay", func() bool {
		return c.r.Ledger.Stats().Rejected == int64(len(c.replays))
	})
}

// legit lists the ids of the events of the ledger's revisions from seq
// from on, but the replays'.
func (c *chainEnv) legit(from uint64) []string {
	t := c.t
	s, err := c.env.JS.Stream(c.ctx, c.env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(c.ctx)
	require.NoError(t, err)
	var out []string
	for seq := from; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(c.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // trimmed
		}
		require.NoError(t, err)
		key, _ := c.env.Layout.KeyOf(m.Subject)
		if slices.Contains(c.replays, seq) || !streams.IsLaneKey(key) && !streams.IsBudgetKey(key) {
			continue
		}
		ms, err := feed.Split(seq, key, m.Time, m.Data)
		require.NoError(t, err)
		for _, m := range ms {
			out = append(out, m.ID)
		}
	}
	return out
}

// caughtUp waits until the feed holds as many events as want, then
// checks it holds exactly want.
func (c *chainEnv) caughtUp(want []string) {
	c.t.Helper()
	testenv.WaitFor(c.t, time.Minute, "the feed to hold every legitimate event", func() bool {
		return feedLen(c.ctx, c.env.JS, c.env.Layout) >= uint64(len(want))
	})
	require.Equal(c.t, want, ids(feedMessages(c.t, c.ctx, c.env.JS, c.env.Layout)))
}

// start runs a relay with the replica's keys until the returned stop.
func (c *chainEnv) start() (*feed.Relay, func()) { return c.startOn(c.env.JS) }

// startOn is start on js.
func (c *chainEnv) startOn(js jetstream.JetStream, opts ...feed.Option) (*feed.Relay, func()) {
	opts = append([]feed.Option{feed.WithTrust(func() *signing.KeySet { return c.trust }),
		feed.WithLogger(slog.New(slog.NewTextHandler(&c.logs, nil)))}, opts...)
	rl, err := feed.NewRelay(js, c.env.Layout, opts...)
	require.NoError(c.t, err)
	return rl, c.run(rl)
}

// run runs rl until the returned stop.
func (c *chainEnv) run(rl *feed.Relay) func() {
	rctx, cancel := context.WithCancel(c.ctx)
	done := make(chan error, 1)
	go func() { done <- rl.Run(rctx) }()
	return func() {
		cancel()
		require.ErrorIs(c.t, <-done, context.Canceled)
	}
}

// requireLogged checks that a relay logged the replay at seq as skipped.
// writeAndTrim writes reservations, a snapshot and more reservations,
// archives the ledger and trims it up to that snapshot.
func (c *chainEnv) writeAndTrim(t *testing.T) projector.TrimResult {
	t.Helper()
	seed(t, c.ctx, c.r, "b", 4)
	_, err := c.r.Ledger.Snapshot(c.ctx)
	require.NoError(t, err)
	seed(t, c.ctx, c.r, "b2", 2)
	dir := t.TempDir()
	_, err = projector.Archive(c.ctx, c.env.JS, c.env.Layout, dir, projector.ArchiveOptions{})
	require.NoError(t, err)
	res, err := projector.Trim(c.ctx, c.env.JS, c.env.Layout, dir)
	require.NoError(t, err)
	return res
}

func (c *chainEnv) requireLogged(seq uint64) {
	c.t.Helper()
	if c.logged(seq) == 0 {
		c.t.Fatalf("replay %d not logged:\n%s", seq, c.logs.String())
	}
}

// logged counts the lines that log the replay at seq as skipped.
func (c *chainEnv) logged(seq uint64) int {
	n := 0
	for _, line := range strings.Split(c.logs.String(), "\n") {
		if strings.Contains(line, "revision skipped; not relayed") && strings.Contains(line, fmt.Sprintf("seq=%d ", seq)) &&
			strings.Contains(line, "reason="+string(signing.ReasonReplay)) {
			n++
		}
	}
	return n
}

// TestRelay_SkipsReplayedRevisions: an identity with write access to the
// ledger stream writes an old revision again, signature and all, straight
// into the stream past the service (no compare-and-set): once while the
// relay runs, and once while it is stopped, so that the relay that starts
// next meets the replay before the next legitimate revision of the key.
// The replicas skip every replay (it names a revision older than its key's
// last valid one); the relay must skip it too and log it, and still relay
// every legitimate revision after it exactly once: the feed holds exactly
// the ledger's events minus the replays', in order. How we know it can
// fail: with the chain check taken out of the relay (chain.check ignoring
// events.CheckChain's error), the replays verify and are relayed with new
// event ids, and the id lists differ; a relay that resumes from the feed's
// tail with no chain state skips the lane's next legitimate revision as a
// gap, and the feed never holds every legitimate event (both checked by
// hand).
func TestRelay_SkipsReplayedRevisions(t *testing.T) {
	c := newChainEnv(t)
	seed(t, c.ctx, c.r, "a", 3)
	// Both signed by the replica; the seeding wrote later revisions of
	// both keys.
	oldBudget, oldLane := c.firstRevisions()

	// 1. The relay runs: replays of both keys, then legitimate revisions
	// of both.
	rl, stop := c.start()
	c.caughtUp(c.legit(1))
	c.replay(oldLane)
	c.replay(oldBudget)
	seed(t, c.ctx, c.r, "b", 3)
	c.caughtUp(c.legit(1))
	require.Equal(t, uint64(2), rl.Skipped())
	c.requireLogged(c.replays[0])
	c.requireLogged(c.replays[1])

	// 2. A replay while the relay is stopped; the relay starts again
	// (its chain rebuilt from the ledger) before the next legitimate
	// revision of the key.
	stop()
	c.replay(oldLane)
	rl, stop = c.start()
	seed(t, c.ctx, c.r, "c", 3)
	c.caughtUp(c.legit(1))
	require.Equal(t, uint64(3), rl.Skipped(), "the new relay decided every replay")
	c.requireLogged(c.replays[2])
	stop()

	// 3. Two relays race (each starts again from the feed's tail, behind
	// its own chain, when it loses) while replays and legitimate
	// revisions interleave: a relay that decided a revision again against
	// a chain already past it would skip legitimate revisions (a race
	// does not always make that happen; TestRelay_StartsAgainBehindItsChain
	// forces it).
	rl1, stop1 := c.start()
	rl2, stop2 := c.start()
	for i := range 3 {
		seed(t, c.ctx, c.r, fmt.Sprintf("d%d", i), 4)
		c.replay(oldLane)
	}
	seed(t, c.ctx, c.r, "e", 4)
	c.caughtUp(c.legit(1))
	testenv.WaitFor(t, 30*time.Second, "both relays to decide every replay", func() bool {
		return rl1.Skipped() == uint64(len(c.replays)) && rl2.Skipped() == uint64(len(c.replays))
	})
	stop1()
	stop2()
	t.Logf("racing relays: lost %d + %d", rl1.Lost(), rl2.Lost())
}

// failJS fails the n-th feed append (counting from 1) once.
type failJS struct {
	jetstream.JetStream
	calls  atomic.Int64
	n      int64
	failed atomic.Bool
}

func (f *failJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if f.calls.Add(1) == f.n {
		f.failed.Store(true)
		return nil, errors.New("test: append failed")
	}
	return f.JetStream.PublishMsgAsync(m, opts...)
}

// TestRelay_StartsAgainBehindItsChain: a relay that starts again after an
// error reads the ledger from the feed's tail, behind the revisions its
// chain has already decided (here: a replay and the legitimate revision
// after it, whose first append fails). It must relay that revision after
// all and not decide anything twice: the replay is logged and counted
// once. How we know it can fail: with every revision decided again
// (runOnce's decided forced false), the legitimate revision, already the
// last valid one of its key, is taken for a replay of itself and skipped,
// and the feed never holds its events (checked by hand).
func TestRelay_StartsAgainBehindItsChain(t *testing.T) {
	c := newChainEnv(t)
	seed(t, c.ctx, c.r, "a", 2)
	_, oldLane := c.firstRevisions()
	c.replay(oldLane)
	before := len(c.legit(1))
	seed(t, c.ctx, c.r, "b", 1)
	fj := &failJS{JetStream: c.env.JS, n: int64(before) + 1}
	rl, stop := c.startOn(fj, feed.WithRetry(10*time.Millisecond))
	c.caughtUp(c.legit(1))
	stop()
	require.True(t, fj.failed.Load(), "the append after the replay failed")
	require.Equal(t, uint64(1), rl.Skipped())
	require.Equal(t, 1, c.logged(c.replays[0]))
}

// TestRelay_ChainAfterTrim: on a trimmed ledger stream, the first revision
// of each key a relay meets after the trim names a revision the trim
// dropped. Two relays run at once after the trim: a new one, and one that
// ran before the trim and stopped behind it (its chain is older than the
// revisions the trim dropped; started again, it reads on from where it
// stopped). Both must take each key's kept revision as the start of its
// chain (the trim keeps each key's last valid revision), relay the same
// events exactly once (all the stream still holds, but a replay written
// after the trim, which both skip and log). How we know it can fail:
// without the case of a revision gone from the stream in chain.check,
// both relays skip every key's kept revision as a gap, then every later
// revision of the key, and the feed never holds the new events (checked
// by hand).
func TestRelay_ChainAfterTrim(t *testing.T) {
	layout, err := streams.New(streams.Config{Trimmable: true})
	require.NoError(t, err)
	c := newChainEnv(t, testenv.WithLayout(layout))
	seed(t, c.ctx, c.r, "a", 6)
	_, oldLane := c.firstRevisions()
	old, stop := c.start()
	before := c.legit(1)
	c.caughtUp(before)
	stop()
	s, err := c.env.JS.Stream(c.ctx, c.env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(c.ctx)
	require.NoError(t, err)
	stopped := info.State.LastSeq

	// Revisions the stopped relay never read, some of them trimmed.
	res := c.writeAndTrim(t)
	require.Less(t, res.After, res.Before, "the trim dropped revisions")
	gone := 0
	for seq := stopped + 1; seq <= res.Snapshot.Seq; seq++ {
		if _, err := s.GetMsg(c.ctx, seq); errors.Is(err, jetstream.ErrMsgNotFound) {
			gone++
		}
	}
	require.Positive(t, gone, "the trim dropped revisions the stopped relay never read")

	c.replay(oldLane) // its key's revisions before the trim are gone
	stopOld := c.run(old)
	fresh, stopFresh := c.start()
	seed(t, c.ctx, c.r, "c", 3)
	c.caughtUp(append(before, c.legit(stopped+1)...))
	testenv.WaitFor(t, 30*time.Second, "both relays to decide the replay", func() bool {
		return old.Skipped() == 1 && fresh.Skipped() == 1
	})
	c.requireLogged(c.replays[0])
	stopOld()
	stopFresh()
}
