package feed_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// signedReplica starts a replica that signs with its own key, trusts it,
// and relays the feed.
func signedReplica(t *testing.T, env *testenv.Env, s *signing.Signer, log *slog.Logger, opts ...feed.Option) *replica.Replica {
	t.Helper()
	ks, err := signing.NewKeySet([]signing.Key{{Public: s.PublicKey()}}, 0)
	require.NoError(t, err)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := replica.Start(ctxT(t), env.Connect(t), env.JS, replica.Config{Layout: env.Layout, SweepInterval: -1, Feed: true, Log: log, FeedOptions: opts,
		LedgerOptions: []ledger.Option{ledger.WithSigner(s), ledger.WithTrust(ks)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// A forged feed message (written by a login that may publish to the feed,
// unsigned, claiming a source sequence far ahead) does not blind the
// relays: they believe only the feed's messages a trusted key signed,
// skip the forged one and count it, and every later event still reaches
// the feed, after a restart too. How we know it can fail: a relay that
// took the feed's position from the last message's header skipped every
// event up to sequence 1,000,000 without a log line (the attack found
// before the feed was signed). And a relay that pipelined its appends by
// expected sequence alone lost the first event after the forgery about one
// run in 30 (its append failed, the next took the slot after the forged
// message, and nothing noticed): `go test -count=80 -run
// TestRelay_ForgedMessageDoesNotBlindTheFeed ./internal/feed/` fails
// without the expected-last-msg-id of Relay.runOnce.
func TestRelay_ForgedMessageDoesNotBlindTheFeed(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	r := signedReplica(t, env, s, nil)
	seed(t, ctx, r, "a", 3)
	waitFeed(t, ctx, env)

	forged := feed.Message{Schema: streams.FeedSchema, ID: events.EventID(1000000, 0), SourceSeq: 1000000, Key: "lane.0",
		CommittedAt: time.Now().UTC(), Type: events.TypeReservationSettled, Event: json.RawMessage(`{"type":"reservation.settled.v1"}`)}
	body, err := json.Marshal(forged)
	require.NoError(t, err)
	msg := nats.NewMsg(env.Layout.FeedSubject(events.TypeReservationSettled, "org:acme"))
	msg.Data = body
	msg.Header.Set(streams.HeaderFeedSourceSeq, "1000000")
	msg.Header.Set(streams.HeaderFeedIndex, "0")
	_, err = env.JS.PublishMsg(ctx, msg)
	require.NoError(t, err)

	seed(t, ctx, r, "b", 3) // appended after the forged message
	want := waitFeed(t, ctx, env)
	require.Positive(t, r.Relay.Forged(), "the relay met the forged message and counted it")

	// A replica started now finds the forged message in the feed too, and
	// still relays what comes next.
	require.NoError(t, r.Stop())
	r2 := signedReplica(t, env, s, nil)
	seq, last, err := r2.Relay.Tail(ctx)
	require.NoError(t, err)
	require.Equal(t, want[len(want)-1].Position(), last, "the tail is the last signed event, not the forged one")
	require.Equal(t, uint64(len(want)+1), seq, "and the next append expects the feed's real end")
	seed(t, ctx, r2, "c", 2)
	waitFeed(t, ctx, env)
}

// waitFeed waits until every event of the ledger is in the feed, in order
// (a forged message aside), and returns them.
func waitFeed(t *testing.T, ctx context.Context, env *testenv.Env) []feed.Message {
	t.Helper()
	want := ledgerEvents(t, ctx, env.JS, env.Layout)
	testenv.WaitFor(t, time.Minute, "the feed to hold every event", func() bool {
		var got []feed.Message
		for _, m := range feedMessagesAll(t, ctx, env.JS, env.Layout) {
			if m.SourceSeq < 1000000 {
				got = append(got, m)
			}
		}
		return len(got) == len(want) && strings.Join(ids(got), ",") == strings.Join(ids(want), ",")
	})
	return want
}

// feedMessagesAll reads the whole feed, forged messages included.
func feedMessagesAll(t *testing.T, ctx context.Context, js jetstream.JetStream, l streams.Layout) []feed.Message {
	t.Helper()
	s, err := js.Stream(ctx, l.FeedStreamName())
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []feed.Message
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		fm, err := feed.Decode(m.Data)
		require.NoError(t, err)
		out = append(out, fm)
	}
	return out
}

// The feed's limits changed under a running deployment (its max age set
// to one second by a login that may update the stream) are reported,
// counted and set back when a relay starts, and the relay does not loop:
// it relays what comes next. How we know it can fail: before, each relay
// set its own limits silently, and a forged message plus the change left
// the relay restarting for ever.
func TestRelay_FeedLimitsChangedUnderIt(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	r := signedReplica(t, env, s, nil)
	seed(t, ctx, r, "a", 2)
	waitFeed(t, ctx, env)
	require.NoError(t, r.Stop())

	st, err := env.JS.Stream(ctx, env.Layout.FeedStreamName())
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.MaxAge = time.Second
	cfg.Duplicates = time.Second
	_, err = env.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	var logs testenv.LogBuffer
	r2 := signedReplica(t, env, s, slog.New(slog.NewTextHandler(&logs, nil)))
	testenv.WaitFor(t, 30*time.Second, "the change reported", func() bool { return r2.Relay.Drift() > 0 })
	require.Contains(t, logs.String(), "limits were changed")
	st, err = env.JS.Stream(ctx, env.Layout.FeedStreamName())
	require.NoError(t, err)
	require.Equal(t, streams.DefaultFeedMaxAge, st.CachedInfo().Config.MaxAge, "set back")
	seed(t, ctx, r2, "b", 2)
	waitFeed(t, ctx, env)
}

// Every kind of event the ledger records reaches the feed: prices and
// defaults too, under the no-scope subject tokens; and nothing the
// replica skipped does (an unsigned lane revision written past the
// permissions). How we know it can fail: the relay used to read only
// budget and lane keys, and to check nothing but signatures itself.
func TestRelay_EveryEventKindAndNothingSkipped(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	r := signedReplica(t, env, s, nil)
	seed(t, ctx, r, "a", 2)
	_, err = r.Ledger.DefinePrice(ctx, ledger.Price{Model: "gpt-x", Unit: "USD", Input: events.MustMoney("1"), Output: events.MustMoney("2")}, time.Now())
	require.NoError(t, err)
	_, err = r.Ledger.DefineDefault(ctx, "user", ledger.Budget{Ref: events.BudgetRef{Period: events.PeriodMonth}, Limit: events.MustMoney("5"), Unit: "USD"}, time.Now())
	require.NoError(t, err)
	// Garbage and an unsigned copy of a valid lane revision, past the
	// permissions: the replica skips both.
	before := r.Ledger.Stats().Rejected
	lane := env.Layout.LaneKey(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth})
	last, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)
	lm, err := last.GetLastMsgForSubject(ctx, env.Layout.Subject(lane))
	require.NoError(t, err)
	replay, err := env.JS.Publish(ctx, env.Layout.Subject(lane), lm.Data) // a replay, unsigned
	require.NoError(t, err)
	junk, err := env.JS.Publish(ctx, env.Layout.Subject("budget.org.acme.month"), []byte("junk"))
	require.NoError(t, err)
	testenv.WaitFor(t, 30*time.Second, "the replica skips both", func() bool { return r.Ledger.Stats().Rejected == before+2 })
	seed(t, ctx, r, "b", 1)

	// What the feed must hold: the events of the revisions the gate passed.
	want := ledgerEventsExcept(t, ctx, env.JS, env.Layout, map[uint64]bool{replay.Sequence: true, junk.Sequence: true})
	testenv.WaitFor(t, time.Minute, "the feed to hold every passed event", func() bool {
		return feedLen(ctx, env.JS, env.Layout) >= uint64(len(want))
	})
	got := feedMessages(t, ctx, env.JS, env.Layout)
	require.Equal(t, ids(want), ids(got))
	types := map[events.Type]bool{}
	for _, m := range got {
		types[m.Type] = true
	}
	require.True(t, types[events.TypePricingDefined], "pricing events reach the feed")
	require.True(t, types[events.TypeDefaultDefined], "default events reach the feed")
}
