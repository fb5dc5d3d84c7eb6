package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/testenv"
)

// holdAck lands the first write to subject once armed, reports it stored,
// and holds its acknowledgement until released: the committer that wrote
// it has not folded it, so the follower waits for it (at most ownWait).
type holdAck struct {
	subject string
	armed   atomic.Bool
	stored  chan struct{}
	release chan struct{}
}

func (h *holdAck) publish(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error) {
	ack, err := send(ctx, m)
	if err == nil && m.Subject == h.subject && h.armed.CompareAndSwap(true, false) {
		close(h.stored)
		<-h.release
	}
	return ack, err
}

// TestSnapshot_LateSettleFoldedAheadOfFollower: the writer settles a
// reservation late, after the expired retention of its expiry has ended
// by the server time of the message before the settle, while its own
// follower has not reached that message yet (it waits for the writer's
// committer to fold its own write on another lane, whose acknowledgement
// the test holds). The committer folds the settle first, as it folds all
// its own writes; its book must still equal a fold of the stream in
// stream order, which has forgotten the expiry when it reaches the settle
// and holds nothing of the reservation, and so must its snapshot.
//
// How we know it can fail: on the code before the fix the writer's book
// kept the reservation, settled, in its closed ring ("window 1" against
// the fold's "window 0"), and its snapshot did too: the fault that made
// TestSnapshot_TailEqualsWholeFold fail under load, forced here.
func TestSnapshot_LateSettleFoldedAheadOfFollower(t *testing.T) {
	env := snapLayout(t)
	// The expired retention is a second; the closed one an hour, so that
	// a wrongly kept settle stays in the writer's window to be seen.
	opts := []ledger.Option{ledger.WithRetention(time.Hour, time.Second), ledger.WithSnapshotEvery(0, 0)}
	h := &holdAck{}
	w := startLedger(t, env, append(opts, ledger.PublishHookForTesting(h.publish))...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*watchdog)
	defer cancel()
	clk := &snapClock{}
	clk.ns.Store(t0.UnixNano())
	a, err := admit.New(w, admit.WithClock(clk.now))
	require.NoError(t, err)
	s, err := settle.New(w, settle.WithClock(clk.now))
	require.NoError(t, err)
	// Two scopes in two lanes: the settle's, and the held write's.
	month := func(sc string) events.BalanceRef {
		return events.BalanceRef{Scope: events.Scope(sc), Period: events.PeriodMonth, Instance: "2026-11"}
	}
	scA, scB := "org:fa0", ""
	for i := 1; scB == ""; i++ {
		if sc := fmt.Sprintf("org:fa%d", i); env.Layout.LaneKey(month(sc)) != env.Layout.LaneKey(month(scA)) {
			scB = sc
		}
	}
	for _, sc := range []string{scA, scB} {
		_, err := w.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(sc), Period: events.PeriodMonth}, events.MustMoney("1000"), "USD", clk.now())
		require.NoError(t, err)
	}
	h.subject = env.Layout.Subject(env.Layout.LaneKey(month(scB)))
	stream, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)

	// The follower waits for an own write at most a couple of seconds:
	// on a busy machine it may stop waiting before the settle is folded,
	// and then the attempt proves nothing and is made again.
	ahead := false
	for attempt := 0; attempt < 3 && !ahead; attempt++ {
		rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("late-%d", attempt), Scopes: []string{scA}, Amount: "5", TTL: "1m"})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
		clk.ns.Add(int64(2 * time.Minute))
		_, err = s.Expire(ctx, rep.ReservationID)
		require.NoError(t, err)
		msg, err := stream.GetLastMsgForSubject(ctx, env.Layout.Subject(env.Layout.LaneKey(month(scA))))
		require.NoError(t, err)
		expiredAt := msg.Time
		// The expiry's retention ends (server time and this clock are
		// the machine's) before the next message is written.
		testenv.WaitFor(t, watchdog, "the expired retention over", func() bool {
			return time.Since(expiredAt) > 1200*time.Millisecond
		})
		h.stored, h.release = make(chan struct{}), make(chan struct{})
		h.armed.Store(true)
		held := make(chan error, 1)
		go func() {
			_, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("held-%d", attempt), Scopes: []string{scB}, Amount: "1", TTL: "1m"})
			held <- err
		}()
		select {
		case <-h.stored:
		case <-ctx.Done():
			t.Fatal("the held write was never stored")
		}
		m := lastSeq(t, env)
		got, err := stream.GetMsg(ctx, m)
		require.NoError(t, err)
		require.Greater(t, got.Time.Sub(expiredAt), time.Second, "the held write ends the expiry's retention")
		srep, err := s.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "1.5"})
		require.NoError(t, err)
		require.True(t, srep.Late, "settled after its expiry")
		// The committer folded the settle before Settle returned: was
		// the follower still before the held write?
		ahead = w.Applied() < m
		close(h.release)
		require.NoError(t, <-held)
	}
	require.True(t, ahead, "in one of the attempts the settle was folded before the follower reached the held write")

	want, last := bookOf(t, w)
	whole := startLedger(t, env, append(opts, ledger.WithSnapshotLoad(false))...)
	full, seq := bookOf(t, whole)
	require.Equal(t, last, seq)
	require.Equal(t, full, want, "the writer's book equals a fold of the stream")
	require.NotContains(t, strings.Join(strings.Fields(full), " "), "Status:settled", "the fold settled nothing: the expiries were forgotten")
	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	snap, err := ledger.SnapshotView(ctx, env.JS, env.Layout, info.Name, opts...)
	require.NoError(t, err)
	fold, err := ledger.FoldView(ctx, env.JS, env.Layout, info.Seq, opts...)
	require.NoError(t, err)
	require.Equal(t, fold, snap, "the writer's snapshot loads as the fold at its sequence")
}
