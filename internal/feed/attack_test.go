package feed_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// genuineFeed reads the whole feed and returns the messages pub signed,
// as a consumer that verifies Spendgate-Sig does (feed.Verify), and how
// many it refused.
func genuineFeed(t *testing.T, ctx context.Context, env *testenv.Env, pub string) (genuine []feed.Message, forged int) {
	t.Helper()
	ks, err := signing.NewKeySet([]signing.Key{{Public: pub}}, 0)
	require.NoError(t, err)
	s, err := env.JS.Stream(ctx, env.Layout.FeedStreamName())
	if err != nil {
		return nil, 0
	}
	info, err := s.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		fm, err := feed.Verify(ks, m.Subject, m.Header, m.Data)
		if err != nil {
			forged++
			continue
		}
		genuine = append(genuine, fm)
	}
	return genuine, forged
}

// waitGenuine waits until the messages pub signed are every event of the
// ledger, once each and in order, and returns them.
func waitGenuine(t *testing.T, ctx context.Context, env *testenv.Env, pub string, within time.Duration) []feed.Message {
	t.Helper()
	want := strings.Join(ids(ledgerEvents(t, ctx, env.JS, env.Layout)), ",")
	var got []feed.Message
	testenv.WaitFor(t, within, "the feed to hold every event once, in order", func() bool {
		got, _ = genuineFeed(t, ctx, env, pub)
		return strings.Join(ids(got), ",") == want
	})
	return got
}

// forge publishes an unsigned feed message claiming event id, with
// Nats-Msg-Id set as the relay used to set it (squatting that id).
func forge(t *testing.T, ctx context.Context, env *testenv.Env, seq uint64, index int) {
	t.Helper()
	m := feed.Message{Schema: streams.FeedSchema, ID: events.EventID(seq, index), SourceSeq: seq, Index: index, Key: "lane.0",
		CommittedAt: time.Now().UTC(), Type: events.TypeReservationSettled, Event: json.RawMessage(`{"type":"reservation.settled.v1","forged":true}`)}
	body, err := json.Marshal(m)
	require.NoError(t, err)
	msg := nats.NewMsg(env.Layout.FeedSubject(events.TypeReservationSettled, events.TenantScope("acme", "team:search")))
	msg.Data = body
	msg.Header.Set(nats.MsgIdHdr, m.ID)
	_, err = env.JS.PublishMsg(ctx, msg)
	require.NoError(t, err)
}

// Unsigned messages published with the Nats-Msg-Id of the events the
// relay appends next ("<next ledger seq>-<index>") neither stall the feed
// nor lose those events: each is appended once after the forgeries, the
// relay counts each forged message once and logs the incident once, and
// the queue never holds the fold back. How we know it can fail: with the
// id "<seq>-<index>" as Nats-Msg-Id, JetStream deduplicated the relay's
// appends against the forgeries for the 10-minute duplicate window; the
// relay re-read the feed's end and tried again at once, for ever (the
// attack trial: ~6,500 log lines a replica in 70 s, the forged count at
// 320k): this test then times out waiting for the feed, with the forged
// count in the thousands.
func TestRelay_SquattedMsgIDsDoNotStallTheFeed(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	var logs testenv.LogBuffer
	r := signedReplica(t, env, s, slog.New(slog.NewTextHandler(&logs, nil)))
	seed(t, ctx, r, "a", 2)
	waitGenuine(t, ctx, env, s.PublicKey(), time.Minute)

	// Squat the ids of the next revisions' events.
	ls, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)
	info, err := ls.Info(ctx)
	require.NoError(t, err)
	const revs, perRev = 8, 4
	for seq := info.State.LastSeq + 1; seq <= info.State.LastSeq+revs; seq++ {
		for i := range perRev {
			forge(t, ctx, env, seq, i)
		}
	}
	seed(t, ctx, r, "b", 3)
	got := waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
	_, forged := genuineFeed(t, ctx, env, s.PublicKey())
	require.Equal(t, revs*perRev, forged, "the forgeries stay in the feed (no delete), each refused by a verifying consumer")
	for _, m := range got {
		require.NotContains(t, string(m.Event), "forged")
	}
	require.Equal(t, uint64(revs*perRev), r.Relay.Forged(), "each forged message counted once")
	require.LessOrEqual(t, strings.Count(logs.String(), "no trusted key signed"), 1, "the incident logged once:\n%s", logs.String())
	require.Zero(t, r.Relay.Queued())

	// And a replica started now relays the next events too.
	require.NoError(t, r.Stop())
	r2 := signedReplica(t, env, s, nil)
	seed(t, ctx, r2, "c", 2)
	waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
}

// junk publishes n messages to a feed subject that are not feed messages
// at all, as any login that may publish to the feed can.
func junk(t *testing.T, ctx context.Context, env *testenv.Env, n int) {
	t.Helper()
	subj := env.Layout.FeedPrefix() + "x.y.z.a.b"
	for i := range n {
		_, err := env.JS.PublishAsync(subj, []byte("junk"+strconv.Itoa(i)))
		require.NoError(t, err)
	}
	select {
	case <-env.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}

// checkpointIsGenuine checks that the relays' checkpoint names a message
// of the feed that pub signed, and that it is the checkpoint's event.
func checkpointIsGenuine(t *testing.T, ctx context.Context, env *testenv.Env, pub string) {
	t.Helper()
	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	require.NoError(t, err)
	data, err := store.GetBytes(ctx, streams.FeedCheckpointName)
	require.NoError(t, err)
	var ck struct {
		Seq     uint64 `json:"seq"`
		Index   int    `json:"index"`
		FeedSeq uint64 `json:"feed_seq"`
	}
	require.NoError(t, json.Unmarshal(data, &ck))
	s, err := env.JS.Stream(ctx, env.Layout.FeedStreamName())
	require.NoError(t, err)
	m, err := s.GetMsg(ctx, ck.FeedSeq)
	require.NoError(t, err)
	ks, err := signing.NewKeySet([]signing.Key{{Public: pub}}, 0)
	require.NoError(t, err)
	fm, err := feed.Verify(ks, m.Subject, m.Header, m.Data)
	require.NoError(t, err, "the checkpoint's feed sequence %d holds a message pub signed", ck.FeedSeq)
	require.Equal(t, events.EventID(ck.Seq, ck.Index), fm.ID)
}

// More junk at the feed's end than the relay used to look back over
// (1,024 messages) neither loses events nor stalls the relay: it finds
// the last message a trusted key signed below the junk and appends every
// later event once, after it; the checkpoint it writes when it stops
// names that genuine message, not the junk; a replica started afterwards
// relays on without a hole. How we know it can fail: the relay used to
// look back 1,024 messages, then start from its stale checkpoint and
// count every message after it, junk included, as an event already in
// the feed: it dropped the next events silently (the attack trial lost
// ledger seqs 425-429), the wait below times out, and its checkpoint named
// a junk message.
func TestRelay_JunkPastTheLookBackLosesNothing(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	r := signedReplica(t, env, s, nil, feed.WithCheckpointEvery(4))
	seed(t, ctx, r, "a", 3) // a checkpoint or more, then events after it
	waitGenuine(t, ctx, env, s.PublicKey(), time.Minute)

	junk(t, ctx, env, 1100)
	seed(t, ctx, r, "b", 3)
	waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
	require.False(t, r.Relay.Stalled())
	require.NoError(t, r.Stop())
	checkpointIsGenuine(t, ctx, env, s.PublicKey())

	// Junk again, and a replica that starts afterwards (from its
	// checkpoint, the junk above it).
	junk(t, ctx, env, 1100)
	r2 := signedReplica(t, env, s, nil)
	seed(t, ctx, r2, "c", 2)
	waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
	require.NoError(t, r2.Stop())
	checkpointIsGenuine(t, ctx, env, s.PublicKey())
	_, forged := genuineFeed(t, ctx, env, s.PublicKey())
	require.Equal(t, 2200, forged)
}

// More junk after the last genuine message than a relay reads back
// (WithMaxTailScan) stalls it loudly: Stalled, one error logged for the
// incident (not one a retry), nothing appended past the junk, and the
// ledger keeps serving. No event is lost: a relay that reads further
// (here the default bound) appends them all. How we know it can fail:
// before, such a relay started from its checkpoint and counted the junk
// as events: it reported nothing and the last wait finds events missing.
func TestRelay_TooMuchJunkStallsLoudly(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := signedReplica(t, env, s, log, feed.WithMaxTailScan(1024), feed.WithRetry(50*time.Millisecond))
	seed(t, ctx, r, "a", 2)
	genuine := waitGenuine(t, ctx, env, s.PublicKey(), time.Minute)
	// The relay counts an append once its acknowledgement is back, which
	// may be after the feed already shows it.
	testenv.WaitFor(t, 30*time.Second, "the relay to count what the feed holds", func() bool {
		return r.Relay.Relayed() == uint64(len(genuine))
	})
	relayed := r.Relay.Relayed()

	junk(t, ctx, env, 1100)
	seed(t, ctx, r, "b", 2) // the ledger keeps serving
	testenv.WaitFor(t, 30*time.Second, "the relay to say it is stalled", r.Relay.Stalled)
	// Some retries later, still one error line for the incident.
	testenv.WaitFor(t, 30*time.Second, "the relay to retry", func() bool { return strings.Count(logs.String(), "feed relay: restarting") >= 5 })
	require.Equal(t, relayed, r.Relay.Relayed(), "nothing appended past the junk")
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR msg=\"feed relay: restarting\""), logs.String())
	require.NoError(t, r.Stop())

	r2 := signedReplica(t, env, s, nil)
	waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
	require.False(t, r2.Relay.Stalled())
}

// A relay whose feed takes nothing (here: stalled by junk) holds its
// replica's fold back at most the queue wait, then drops events rather
// than stop the ledger: the ledger keeps folding and serving, the drop is
// counted and logged once, and no event is lost from the feed: another
// replica's relay appends them, and this one resumes after them. How we
// know it can fail: a full queue used to hold the fold back for as long as
// the feed took nothing (the attack trial: 65k events queued, readyz
// false, reads ledger_unavailable): Sync below then times out.
func TestRelay_FullQueueDoesNotHoldTheLedgerBack(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	var logs testenv.LogBuffer
	r := signedReplica(t, env, s, slog.New(slog.NewTextHandler(&logs, nil)),
		feed.WithMaxTailScan(1024), feed.WithRetry(50*time.Millisecond), feed.WithQueue(4), feed.WithQueueWait(100*time.Millisecond))
	seed(t, ctx, r, "a", 2)
	waitGenuine(t, ctx, env, s.PublicKey(), time.Minute)

	junk(t, ctx, env, 1100) // the relay cannot find where the feed stands
	seed(t, ctx, r, "b", 6) // far more events than its queue holds
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, r.Ledger.Sync(sctx), "the fold is not held back")
	require.Positive(t, r.Relay.Dropped())
	require.True(t, r.Relay.Stalled())
	require.Equal(t, 1, strings.Count(logs.String(), "dropping events"), logs.String())

	// Another replica's relay reads past the junk and appends every
	// event; this one then resumes, and relays what comes next.
	r2 := signedReplica(t, env, s, nil)
	waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
	testenv.WaitFor(t, 30*time.Second, "the relay to resume", func() bool { return !r.Relay.Stalled() })
	require.NoError(t, r2.Stop())
	before := r.Relay.Relayed()
	seed(t, ctx, r, "c", 2)
	waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
	require.Greater(t, r.Relay.Relayed(), before)
}

// An unsigned message alone in the feed (no checkpoint yet, nothing a
// trusted key signed), claiming an event far ahead, is not where a relay
// with trusted keys takes the feed to stand: every event is appended.
// How we know it can fail: the relay took the newest unsigned message's
// word for a feed written before relays signed, and skipped every event
// up to sequence 10^9.
func TestRelay_UnsignedMessageIsNoPosition(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	_, err := streams.EnsureFeed(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	forge(t, ctx, env, 1_000_000_000, 0)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	var logs testenv.LogBuffer
	r := signedReplica(t, env, s, slog.New(slog.NewTextHandler(&logs, nil)))
	seed(t, ctx, r, "a", 3)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	waitGenuine(t, ctx, env, s.PublicKey(), 30*time.Second)
}
