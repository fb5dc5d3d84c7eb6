package feed_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/feed"
	"github.com/spendgate/spendgate/ledger"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

type hookJS struct {
	jetstream.JetStream
	n    atomic.Int32
	hook func()
}

func (h *hookJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if h.n.Add(1) == 1 && h.hook != nil {
		h.hook()
	}
	return h.JetStream.PublishMsgAsync(m, opts...)
}

// inject appends the feed message of ledger seq directly, without a
// Nats-Msg-Id: what another relay appended longer ago than the dedupe window.
func inject(t *testing.T, ctx context.Context, js jetstream.JetStream, l streams.Layout, seq uint64, scope string) {
	s, err := js.Stream(ctx, l.StreamName())
	require.NoError(t, err)
	raw, err := s.GetMsg(ctx, seq)
	require.NoError(t, err)
	key, _ := l.KeyOf(raw.Subject)
	ms, err := feed.Split(seq, key, raw.Time, raw.Data)
	require.NoError(t, err)
	for _, m := range ms {
		body, _ := json.Marshal(m)
		msg := nats.NewMsg(l.FeedSubject(m.Type, events.Scope(scope)))
		msg.Data = body
		msg.Header.Set(streams.HeaderFeedSchema, streams.FeedSchema)
		msg.Header.Set(streams.HeaderFeedSourceSeq, strconv.FormatUint(m.SourceSeq, 10))
		msg.Header.Set(streams.HeaderFeedIndex, strconv.Itoa(m.Index))
		msg.Header.Set(streams.HeaderFeedType, string(m.Type))
		_, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
}

// TestRelay_FeedMovedAheadAppendsNothingTwice: another relay appended
// past this relay's window longer ago than the dedupe window (injected
// here without a Nats-Msg-Id), so this relay's first append is lost and
// the feed's tail is ahead of it. The relay must carry on after the tail:
// before the fix it published the events between its window and the tail
// again, each expecting the new tail's sequence, and the feed read
// 1 2 3 4 5 3 4 5 (this test fails on that build).
func TestRelay_FeedMovedAheadAppendsNothingTwice(t *testing.T) {
	ctx := ctxT(t)
	env := testenv.New(t)
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := ledger.New(ctx, nc, js, env.Layout)
	require.NoError(t, err)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-l.Ready()
	put := func(s string) uint64 {
		b, err := l.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(s), Period: events.PeriodMonth}, events.MustMoney("1"), "USD", time.Now())
		require.NoError(t, err)
		return b.Revision
	}
	seqs := map[string]uint64{}
	seqs["org:a1"] = put("org:a1")
	seqs["org:a2"] = put("org:a2")
	_, err = streams.EnsureFeed(ctx, js, env.Layout)
	require.NoError(t, err)
	inject(t, ctx, js, env.Layout, seqs["org:a1"], "org:a1") // the feed already holds e1
	hj := &hookJS{JetStream: js}
	hooked := make(chan struct{})
	hj.hook = func() {
		defer close(hooked)
		// While the relay appends e2, another relay (long ago, past the
		// dedupe window) has appended e2..e5, and the ledger has e3..e5.
		for _, s := range []string{"org:a3", "org:a4", "org:a5"} {
			seqs[s] = put(s)
		}
		for _, s := range []string{"org:a2", "org:a3", "org:a4", "org:a5"} {
			inject(t, ctx, js, env.Layout, seqs[s], s)
		}
	}
	r, err := feed.NewRelay(hj, env.Layout)
	require.NoError(t, err)
	rctx, rcancel := context.WithCancel(ctx)
	rdone := make(chan struct{})
	go func() { defer close(rdone); _ = r.Run(rctx) }()
	// Once the other relay's appends are in, one more ledger event: the
	// relay appends in ledger order, so when e6 is in the feed, any event
	// it would append twice is in already.
	select {
	case <-hooked:
	case <-ctx.Done():
		t.Fatal("the relay never appended")
	}
	seqs["org:a6"] = put("org:a6")
	fs, err := js.Stream(ctx, env.Layout.FeedStreamName())
	require.NoError(t, err)
	want := strconv.FormatUint(seqs["org:a6"], 10)
	require.Eventually(t, func() bool {
		m, err := fs.GetLastMsgForSubject(ctx, ">")
		return err == nil && m.Header.Get(streams.HeaderFeedSourceSeq) == want
	}, 10*time.Second, 20*time.Millisecond, "e6 never reached the feed")
	rcancel()
	<-rdone
	info, err := fs.Info(ctx)
	require.NoError(t, err)
	var order []string
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := fs.GetMsg(ctx, seq)
		require.NoError(t, err)
		order = append(order, m.Header.Get(streams.HeaderFeedSourceSeq))
	}
	t.Logf("feed source seqs in order: %v", order)
	require.Len(t, order, 6, "every ledger event exactly once")
}
