package feed_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/feed"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// ckEvery is the checkpoint interval of these tests: a few checkpoints
// over a seeded ledger of some 50 revisions.
const ckEvery = 10

// revisions counts the lane and budget revisions the ledger stream holds
// from sequence from on: what a relay that starts there decides.
func (c *chainEnv) revisions(from uint64) uint64 {
	t := c.t
	s, err := c.env.JS.Stream(c.ctx, c.env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(c.ctx)
	require.NoError(t, err)
	var n uint64
	for seq := max(from, 1); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(c.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		if key, _ := c.env.Layout.KeyOf(m.Subject); streams.IsLaneKey(key) || streams.IsBudgetKey(key) {
			n++
		}
	}
	return n
}

// checkpoints returns the snapshot bucket and the sequences of the relay
// checkpoints it holds, newest first.
func (c *chainEnv) checkpoints() (jetstream.ObjectStore, []uint64) {
	t := c.t
	store, err := c.env.JS.ObjectStore(c.ctx, c.env.Layout.SnapshotBucket())
	require.NoError(t, err)
	objs, err := store.List(c.ctx)
	require.NoError(t, err)
	var out []uint64
	for _, o := range objs {
		if seq, ok := streams.FeedChainSeq(o.Name); ok && !o.Deleted {
			out = append(out, seq)
		}
	}
	for i := range out { // newest first
		for j := i + 1; j < len(out); j++ {
			if out[j] > out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return store, out
}

// tailSeq is the ledger sequence of the feed's last event.
func (c *chainEnv) tailSeq() uint64 {
	rl, err := feed.NewRelay(c.env.JS, c.env.Layout)
	require.NoError(c.t, err)
	_, last, err := rl.Tail(c.ctx)
	require.NoError(c.t, err)
	return last.Seq
}

// checkpointed runs a relay that writes a checkpoint every ckEvery
// revisions until the feed holds every legitimate event and it wrote
// one, and stops it.
func (c *chainEnv) checkpointed() {
	rl, stop := c.startOn(c.env.JS, feed.WithCheckpointEvery(ckEvery))
	c.caughtUp(c.legit(1))
	testenv.WaitFor(c.t, 30*time.Second, "a checkpoint", func() bool { return rl.CheckpointStats().Written > 0 })
	stop()
}

// TestRelay_StartsFromCheckpoint: a relay that ran writes checkpoints of
// its chain; after it stops, replays of an old budget and an old lane
// revision are written (after every checkpoint) and more legitimate
// revisions follow. The relay that starts next must start from the
// newest checkpoint at or before the feed's tail, decide exactly the
// revisions after it (not the whole ledger), skip and log both replays,
// and relay every legitimate event exactly once. How we know it can fail:
// without loadCheckpoint (a relay that always folds from the first
// revision) Loaded is 0 and Decided counts the whole ledger; with the
// checkpoint's sequence loaded but its heads dropped (an empty chain at
// the checkpoint's sequence) the replay of the first lane revision
// follows "nothing" and each key's next legitimate revision is skipped as
// off its chain, and the feed never holds every legitimate event (both
// checked by hand).
func TestRelay_StartsFromCheckpoint(t *testing.T) {
	c := newChainEnv(t)
	seed(t, c.ctx, c.r, "a", 20)
	oldBudget, oldLane := c.firstRevisions()
	c.checkpointed()
	whole := c.revisions(1)

	c.replay(oldLane)
	c.replay(oldBudget)
	seed(t, c.ctx, c.r, "b", 3)
	tail := c.tailSeq()
	_, list := c.checkpoints()
	var from uint64
	for _, seq := range list {
		if seq <= tail {
			from = seq
			break
		}
	}
	require.Positive(t, from, "a checkpoint at or before the feed's tail %d (checkpoints %v)", tail, list)

	rl, stop := c.startOn(c.env.JS, feed.WithCheckpointEvery(ckEvery))
	c.caughtUp(c.legit(1))
	testenv.WaitFor(t, 30*time.Second, "the relay to skip both replays", func() bool { return rl.Skipped() == 2 })
	stop()
	require.Equal(t, from, rl.CheckpointStats().Loaded, "started from the newest checkpoint at or before the tail")
	require.Zero(t, rl.CheckpointStats().Skipped)
	require.Equal(t, c.revisions(from+1), rl.Decided(), "decided only the revisions after the checkpoint")
	require.Less(t, rl.Decided(), whole, "not the whole ledger")
	c.requireLogged(c.replays[0])
	c.requireLogged(c.replays[1])
	t.Logf("decided %d of the ledger's %d revisions after checkpoint %d", rl.Decided(), c.revisions(1), from)
}

// TestRelay_CorruptCheckpointFallsBack: every checkpoint the first relay
// left is replaced by a corrupt one: bytes that are not JSON, a
// well-formed body whose lane names the right revision with a wrong hash,
// and one whose body claims to cover one more revision than its name. The relay
// that starts next must refuse each (logged, counted), fold the whole
// ledger, skip the replay written after them, and relay every legitimate
// event exactly once. How we know it can fail: without the anchor check
// (checkAnchors) the lying checkpoint is loaded, its lane's next
// legitimate revision does not follow the wrong hash and is skipped, and
// the feed never holds every event; with the checkpoint's name not
// compared to its body, the third one loads and Loaded is not 0 (both
// checked by hand).
func TestRelay_CorruptCheckpointFallsBack(t *testing.T) {
	c := newChainEnv(t)
	seed(t, c.ctx, c.r, "a", 20)
	_, oldLane := c.firstRevisions()
	c.checkpointed()
	store, list := c.checkpoints()
	require.Len(t, list, feed.CheckpointsKept)

	corrupt := []func(body map[string]any) []byte{
		func(map[string]any) []byte { return []byte("not a checkpoint") },
		func(body map[string]any) []byte {
			keys := body["keys"].([]any)
			found := false
			for _, k := range keys {
				k := k.(map[string]any)
				if strings.HasPrefix(k["key"].(string), "lane.") {
					k["hash"] = strings.Repeat("0", 64)
					found = true
				}
			}
			require.True(t, found, "the checkpoint names a lane")
			b, err := json.Marshal(body)
			require.NoError(t, err)
			return b
		},
		func(body map[string]any) []byte {
			body["seq"] = body["seq"].(float64) + 1
			b, err := json.Marshal(body)
			require.NoError(t, err)
			return b
		},
	}
	for i, seq := range list {
		name := streams.FeedChainName(seq)
		data, err := store.GetBytes(c.ctx, name)
		require.NoError(t, err)
		var body map[string]any
		require.NoError(t, json.Unmarshal(data, &body))
		_, err = store.PutBytes(c.ctx, name, corrupt[i%len(corrupt)](body))
		require.NoError(t, err)
	}

	c.replay(oldLane)
	seed(t, c.ctx, c.r, "b", 3)
	tail := c.tailSeq()
	usable := 0
	for _, seq := range list {
		if seq <= tail {
			usable++
		}
	}
	require.Positive(t, usable)

	rl, stop := c.start()
	c.caughtUp(c.legit(1))
	testenv.WaitFor(t, 30*time.Second, "the relay to skip the replay", func() bool { return rl.Skipped() == 1 })
	stop()
	st := rl.CheckpointStats()
	require.Zero(t, st.Loaded, "no checkpoint loaded")
	require.Equal(t, int64(usable), st.Skipped, "every checkpoint at or before the tail refused")
	require.Equal(t, c.revisions(1), rl.Decided(), "the whole ledger folded")
	c.requireLogged(c.replays[0])
	require.Equal(t, usable, strings.Count(c.logs.String(), "feed relay: checkpoint skipped"), c.logs.String())
}

// TestRelay_CheckpointThenTrim: a relay writes checkpoints and stops; the
// ledger then grows and is trimmed past the newest checkpoint, so the
// revisions the checkpoint names and some after it are gone. The relay
// that starts next must still start from the checkpoint (a lane revision
// a trim dropped is not an anchor that fails), take each key's kept
// revision as the start of its chain as a relay without a checkpoint
// does, skip and log a replay written after the trim, and relay every
// event the stream still holds after the old tail exactly once. How we
// know it can fail: with a dropped lane revision taken for a failed anchor
// (checkAnchors without its not-found case) the checkpoint is skipped and
// Loaded is 0; without chain.check's case of a revision gone from the
// stream, each key's kept revision is skipped as a gap and the feed never
// holds the new events (both checked by hand).
func TestRelay_CheckpointThenTrim(t *testing.T) {
	layout, err := streams.New(streams.Config{Trimmable: true})
	require.NoError(t, err)
	c := newChainEnv(t, testenv.WithLayout(layout))
	seed(t, c.ctx, c.r, "a", 20)
	_, oldLane := c.firstRevisions()
	before := c.legit(1)
	c.checkpointed()
	s, err := c.env.JS.Stream(c.ctx, c.env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(c.ctx)
	require.NoError(t, err)
	stopped := info.State.LastSeq
	_, list := c.checkpoints()
	require.NotEmpty(t, list)

	res := c.writeAndTrim(t)
	require.Greater(t, res.Snapshot.Seq, list[0], "the trim reaches past the newest checkpoint")
	_, err = s.GetMsg(c.ctx, list[0])
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "the checkpoint's last revision is trimmed")

	c.replay(oldLane)
	tail := c.tailSeq()
	var from uint64
	for _, seq := range list {
		if seq <= tail {
			from = seq
			break
		}
	}
	require.Positive(t, from)
	rl, stop := c.startOn(c.env.JS, feed.WithCheckpointEvery(ckEvery))
	seed(t, c.ctx, c.r, "c", 3)
	c.caughtUp(append(before, c.legit(stopped+1)...))
	testenv.WaitFor(t, 30*time.Second, "the relay to skip the replay", func() bool { return rl.Skipped() == 1 })
	stop()
	require.Equal(t, from, rl.CheckpointStats().Loaded)
	require.Equal(t, c.revisions(from+1), rl.Decided())
	c.requireLogged(c.replays[0])
}

// TestRelay_CheckpointContradictedByStream: checkpoints that pass every
// check at load but lie: one gives a budget key a wrong hash (budget heads
// are not read back at load), one names an older revision of the lane
// than its last valid one (an older revision is in the stream with its
// hash, so the lane's anchor holds). Each would make the relay refuse
// every later legitimate revision of that key. The relay that starts from
// it must find the lie when the stream contradicts it (the key's next
// revision), drop the checkpoint, fold the whole ledger, and relay every
// legitimate event exactly once. How we know it can fail: without
// chain.checkHead, the key's next revision is skipped as off its chain
// and the feed never holds every legitimate event; without its second
// case, the older lane head is not found out the same way (both checked
// by hand).
func TestRelay_CheckpointContradictedByStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		lie  func(t *testing.T, c *chainEnv, key map[string]any)
	}{
		{"budget hash", func(t *testing.T, c *chainEnv, k map[string]any) {
			if strings.HasPrefix(k["key"].(string), "budget.") {
				k["hash"] = strings.Repeat("ab", 32)
			}
		}},
		{"older lane head", func(t *testing.T, c *chainEnv, k map[string]any) {
			if k["key"] != "lane.0" {
				return
			}
			// The lane's revision before its head: the newest revision
			// of lane.0 before it.
			s, err := c.env.JS.Stream(c.ctx, c.env.Layout.StreamName())
			require.NoError(t, err)
			for seq := uint64(k["seq"].(float64)) - 1; seq > 0; seq-- {
				m, err := s.GetMsg(c.ctx, seq)
				require.NoError(t, err)
				if m.Subject == c.env.Layout.Subject("lane.0") {
					k["seq"], k["hash"] = seq, events.HashPayload(m.Data)
					return
				}
			}
			t.Fatal("no older revision of lane.0")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChainEnv(t)
			seed(t, c.ctx, c.r, "a", 20)
			c.checkpointed()
			store, list := c.checkpoints()
			for _, seq := range list {
				name := streams.FeedChainName(seq)
				data, err := store.GetBytes(c.ctx, name)
				require.NoError(t, err)
				var body map[string]any
				require.NoError(t, json.Unmarshal(data, &body))
				for _, k := range body["keys"].([]any) {
					tc.lie(t, c, k.(map[string]any))
				}
				data, err = json.Marshal(body)
				require.NoError(t, err)
				_, err = store.PutBytes(c.ctx, name, data)
				require.NoError(t, err)
			}

			// A new revision of every key (seed puts the same budgets
			// again, which writes nothing).
			for _, scope := range []events.Scope{"org:acme", "team:search", "team:ads"} {
				_, err := c.r.Ledger.PutBudget(c.ctx, events.BudgetRef{Scope: scope, Period: events.Period("month")}, events.MustMoney("2000000"), "USD", time.Now())
				require.NoError(t, err)
			}
			seed(t, c.ctx, c.r, "b", 3)
			rl, stop := c.start()
			c.caughtUp(c.legit(1))
			stop()
			st := rl.CheckpointStats()
			require.Zero(t, st.Loaded, "the checkpoint dropped")
			require.Equal(t, int64(1), st.Skipped)
			require.Zero(t, rl.Skipped(), "no legitimate revision refused")
			require.Contains(t, c.logs.String(), "contradicts the checkpoint")
		})
	}
}
