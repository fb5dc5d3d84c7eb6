package feed_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// seed writes budgets and n reservations through r (admits, settles,
// releases, some over two scopes): revisions of several events each.
func seed(t *testing.T, ctx context.Context, r *replica.Replica, tag string, n int) {
	t.Helper()
	now := time.Now()
	for _, s := range []string{"org:acme", "team:search", "team:ads"} {
		_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(s), Period: events.Period("month")}, events.MustMoney("1000000"), "USD", now)
		require.NoError(t, err)
	}
	for i := range n {
		scopes := []string{"org:acme", "team:search"}
		if i%3 == 0 {
			scopes = []string{"team:ads"}
		}
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: tag + "-" + strconv.Itoa(i), Scopes: scopes, Amount: "1.50",
			Metadata: map[string]string{"model": "m<&>" + strconv.Itoa(i%2)}})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
		if i%2 == 0 {
			_, err = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "1.25"})
		} else {
			_, err = r.Settler.Release(ctx, events.ReleaseRequest{ReservationID: rep.ReservationID})
		}
		require.NoError(t, err)
	}
}

// ledgerEvents lists every event of the ledger stream up to its current
// end, in commit order: what the feed must hold.
func ledgerEvents(t *testing.T, ctx context.Context, js jetstream.JetStream, l streams.Layout) []feed.Message {
	t.Helper()
	return ledgerEventsExcept(t, ctx, js, l, nil)
}

// ledgerEventsExcept is ledgerEvents but for the revisions at skip (which
// the replicas skip).
func ledgerEventsExcept(t *testing.T, ctx context.Context, js jetstream.JetStream, l streams.Layout, skip map[uint64]bool) []feed.Message {
	t.Helper()
	s, err := js.Stream(ctx, l.StreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []feed.Message
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		if skip[seq] {
			continue
		}
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		key, _ := l.KeyOf(m.Subject)
		ms, err := feed.Split(seq, key, m.Time, m.Data)
		require.NoError(t, err)
		out = append(out, ms...)
	}
	return out
}

// feedMessages reads the whole feed stream.
func feedMessages(t *testing.T, ctx context.Context, js jetstream.JetStream, l streams.Layout) []feed.Message {
	t.Helper()
	s, err := js.Stream(ctx, l.FeedStreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []feed.Message
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		fm, err := feed.Decode(m.Data)
		require.NoError(t, err)
		id, _, _ := strings.Cut(m.Header.Get(nats.MsgIdHdr), ".") // then the signature's start
		require.Equal(t, fm.ID, id)
		require.Equal(t, l.FeedSubject(fm.Type, subjectScope(t, fm)), m.Subject)
		out = append(out, fm)
	}
	return out
}

func subjectScope(t *testing.T, m feed.Message) events.Scope {
	if m.Balance != nil {
		return m.Balance.Ref.Scope
	}
	e, err := m.Decoded()
	require.NoError(t, err)
	switch e := e.(type) {
	case events.BudgetDefinedV2:
		return e.Budget.Scope
	case events.BudgetDefined:
		return e.Budget.Scope
	case events.PricingDefined, events.DefaultDefined:
		return events.Scope(feed.NoScope + ":" + feed.NoScope)
	}
	t.Fatalf("an event with no balance and no budget: %T", e)
	return ""
}

func ids(ms []feed.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func feedLen(ctx context.Context, js jetstream.JetStream, l streams.Layout) uint64 {
	s, err := js.Stream(ctx, l.FeedStreamName())
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// Two replicas relay at once while both write: the feed holds every event
// of the ledger exactly once, in commit order, and each message body holds
// the event's bytes as stored. It fails if the relays append without the
// expected-last-sequence compare-and-set and the Msg-Id dedupe (each
// relay would append every event: twice the count), or if a relay skips
// or reorders events (the id lists differ).
func TestRelay_TwoReplicasExactlyOnceInOrder(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	r1 := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Feed: true})
	r2 := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Feed: true})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, r := range []*replica.Replica{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("w%d-%d", i, j), Scopes: []string{"org:acme", "team:search"}, Amount: "1"})
				if err == nil && rep.Admitted {
					_, err = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "0.5"})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	seed(t, ctx, r1, "s", 4) // defines the budgets the writers need
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	want := ledgerEvents(t, ctx, env.JS, env.Layout)
	testenv.WaitFor(t, time.Minute, "the feed to hold every event", func() bool {
		return feedLen(ctx, env.JS, env.Layout) >= uint64(len(want))
	})
	got := feedMessages(t, ctx, env.JS, env.Layout)
	require.Equal(t, ids(want), ids(got))
	for i := range want {
		require.JSONEq(t, string(want[i].Event), string(got[i].Event))
		require.Equal(t, string(want[i].Event), string(got[i].Event), "event bytes as stored (no HTML escaping)")
	}
	require.Equal(t, uint64(len(want)), r1.Relay.Relayed()+r2.Relay.Relayed())
	t.Logf("%d events; relayed %d + %d, lost %d + %d", len(want), r1.Relay.Relayed(), r2.Relay.Relayed(), r1.Relay.Lost(), r2.Relay.Lost())
}

// A relay turned on late back-fills from the ledger's start (its replica
// folds the whole stream for it), and one stopped and started again
// resumes after the feed's last event, from a snapshot no later than it.
func TestRelay_ResumesAfterRestart(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	seed(t, ctx, r, "a", 5)
	_, err := r.Ledger.Snapshot(ctx) // a snapshot past where the feed will stand
	require.NoError(t, err)
	run := func() {
		rr, err := replica.Start(ctx, env.Connect(t), env.JS, replica.Config{Layout: env.Layout, SweepInterval: -1, Feed: true})
		require.NoError(t, err)
		want := ledgerEvents(t, ctx, env.JS, env.Layout)
		testenv.WaitFor(t, time.Minute, "the relay to catch up", func() bool {
			return feedLen(ctx, env.JS, env.Layout) >= uint64(len(want))
		})
		require.NoError(t, rr.Stop())
		require.Equal(t, ids(want), ids(feedMessages(t, ctx, env.JS, env.Layout)))
	}
	run()
	seed(t, ctx, r, "b", 5)
	_, err = r.Ledger.Snapshot(ctx)
	require.NoError(t, err)
	run()
}

// A durable consumer killed mid-stream (events processed but not
// acknowledged) and started again on a new connection sees every event
// exactly once after deduplication with a Cursor, in order. It fails if
// the consumer config let a redelivery come after a newer event (the
// Cursor would then drop it: an event missing), or without the Cursor (the
// redelivered events would be processed twice).
func TestConsumer_KilledAndRestarted(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Feed: true})
	seed(t, ctx, r, "a", 6)

	cfg := feed.ConsumerConfig(env.Layout, "billing")
	cfg.AckWait = time.Second // the redelivery after the kill
	var cursor feed.Cursor    // stored with the consumer's own state
	var processed []string
	skipped := 0
	handle := func(msg jetstream.Msg, ack bool) {
		m, err := feed.Decode(msg.Data())
		require.NoError(t, err)
		if cursor.Next(m) {
			processed = append(processed, m.ID)
		} else {
			skipped++
		}
		if ack {
			require.NoError(t, msg.Ack())
		}
	}
	// First life: process 7 events, acknowledge only the first 5, die.
	nc1 := env.Connect(t)
	js1, err := jetstream.New(nc1)
	require.NoError(t, err)
	require.NoError(t, streamsEnsureFeed(ctx, js1, env.Layout))
	c1, err := js1.CreateOrUpdateConsumer(ctx, env.Layout.FeedStreamName(), cfg)
	require.NoError(t, err)
	for i := range 7 {
		msg, err := c1.Next(jetstream.FetchMaxWait(10 * time.Second))
		require.NoError(t, err)
		handle(msg, i < 5)
		if i >= 5 {
			// Process it again as if the ack were lost: the cursor must
			// refuse it.
			handle(msg, false)
		}
	}
	nc1.Close()
	seed(t, ctx, r, "b", 4) // the ledger moves on while the consumer is down

	// Second life: a new connection, the same durable.
	nc2 := env.Connect(t)
	js2, err := jetstream.New(nc2)
	require.NoError(t, err)
	c2, err := js2.Consumer(ctx, env.Layout.FeedStreamName(), "billing")
	require.NoError(t, err)
	want := ledgerEvents(t, ctx, env.JS, env.Layout)
	last := want[len(want)-1].Position()
	deadline := time.Now().Add(time.Minute)
	for cursor.Last.Before(last) {
		require.True(t, time.Now().Before(deadline), "the consumer did not reach the feed's end")
		msg, err := c2.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			continue
		}
		handle(msg, true)
	}
	require.Equal(t, ids(want), processed)
	require.GreaterOrEqual(t, skipped, 2+1, "the killed consumer's unacknowledged event must have been redelivered and skipped")
}

func streamsEnsureFeed(ctx context.Context, js jetstream.JetStream, l streams.Layout) error {
	_, err := streams.EnsureFeed(ctx, js, l)
	return err
}

func TestParseID(t *testing.T) {
	p, err := feed.ParseID("12-3")
	require.NoError(t, err)
	require.Equal(t, feed.Position{Seq: 12, Index: 3}, p)
	require.Equal(t, "12-3", p.ID())
	for _, bad := range []string{"", "12", "x-1", "0-0", "1--1", "1-x"} {
		_, err := feed.ParseID(bad)
		require.Error(t, err, bad)
	}
	require.True(t, feed.Position{Seq: 3, Index: 9}.Before(feed.Position{Seq: 4}))
	require.False(t, feed.Position{Seq: 4}.Before(feed.Position{Seq: 4}))
}

// The feed keeps each message for its max age; once every message has
// aged out (the feed was quiet for longer), a relay started again must
// still append the next event at the next feed sequence, neither
// re-appending the ledger from its start nor skipping: its checkpoint
// (written when it stopped) says where the feed stood. Without it the relay
// cannot tell where the feed stands and appends nothing: the test fails at
// its wait.
func TestRelay_ResumesAfterEveryMessageAgedOut(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	seed(t, ctx, r, "a", 3)
	run := func(maxAge time.Duration, want int) {
		rr, err := replica.Start(ctx, env.Connect(t), env.JS, replica.Config{Layout: env.Layout, SweepInterval: -1, Feed: true, FeedMaxAge: maxAge})
		require.NoError(t, err)
		testenv.WaitFor(t, time.Minute, "the relay to catch up", func() bool {
			s, err := env.JS.Stream(ctx, env.Layout.FeedStreamName())
			return err == nil && s.CachedInfo().State.LastSeq >= uint64(want)
		})
		require.NoError(t, rr.Stop())
	}
	first := len(ledgerEvents(t, ctx, env.JS, env.Layout))
	run(time.Second, first)
	testenv.WaitFor(t, time.Minute, "every feed message to age out", func() bool {
		return feedLen(ctx, env.JS, env.Layout) == 0
	})
	seed(t, ctx, r, "b", 3)
	want := ledgerEvents(t, ctx, env.JS, env.Layout)
	run(time.Hour, len(want))
	s, err := env.JS.Stream(ctx, env.Layout.FeedStreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(want)), info.State.LastSeq, "each event appended once")
	require.Equal(t, time.Hour, info.Config.MaxAge)
	// The messages kept are the new events, each at its own sequence.
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		id, _, _ := strings.Cut(m.Header.Get(nats.MsgIdHdr), ".")
		require.Equal(t, want[seq-1].ID, id, "feed sequence %d", seq)
	}
	require.Greater(t, info.State.FirstSeq, uint64(first), "the old messages aged out")
}
