package feed_test

import (
	"context"
	"encoding/json"
	"log/slog"
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
