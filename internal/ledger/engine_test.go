package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/logbound"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// watchdog bounds a wait that must end (a hang is a failure), never a
// performance assertion.
const watchdog = 20 * time.Second

// other is a balance no test Tx declares.
var other = events.BalanceRef{Scope: "org:other", Period: events.PeriodMonth, Instance: "2026-11"}

func opened(id, rid, hash string, in events.BalanceRef, amount string) events.ReservationOpened {
	return events.ReservationOpened{
		ReservationID: id, RequestID: rid, RequestHash: hash, Balance: in, Amount: events.MustMoney(amount), Unit: "USD",
		Balances: []events.BalanceRef{in}, ExpiresAt: t0.Add(time.Hour), At: t0,
	}
}

// evsTx declares bal and returns fixed events.
type evsTx struct{ evs events.Events }

func (t evsTx) Balances() []events.BalanceRef             { return []events.BalanceRef{bal} }
func (t evsTx) Decide(ledger.View) (events.Events, error) { return t.evs, nil }

// requestTx opens reservation id for request rid with body hash, or
// answers idempotency_mismatch if rid is already taken with another hash
// (the way package admit decides).
type requestTx struct{ id, rid, hash string }

func (t requestTx) Balances() []events.BalanceRef { return []events.BalanceRef{bal} }
func (t requestTx) Decide(v ledger.View) (events.Events, error) {
	if r, ok := v.ByRequest(t.rid); ok {
		if r.RequestHash != t.hash {
			return nil, events.Errorf(events.CodeIdempotencyMismatch, "request id reused")
		}
		return nil, nil
	}
	return events.Events{opened(t.id, t.rid, t.hash, bal, "0.01")}, nil
}

func lastSeq(t *testing.T, env *testenv.Env) uint64 {
	t.Helper()
	s, err := env.JS.Stream(context.Background(), env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

// submitAsync runs Submit on its own goroutine; the result arrives on the
// channel (no require off the test goroutine).
func submitAsync(ctx context.Context, l *ledger.Ledger, tx ledger.Tx) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- l.Submit(ctx, tx) }()
	return ch
}

func await(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(watchdog):
		t.Fatal("Submit did not return")
		return nil
	}
}

// waitFor polls cond until it holds or the watchdog fires.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSubmit_AllOrNone: a Tx whose second event falls outside its keys
// gets an internal error, and its first event, which applied cleanly, is
// not written either: no commit, no reservation, the stream unchanged.
// How we know it can fail: before the view applied a Tx's events all or
// none, event 1 stayed in the view and was written with the group (the
// reservation showed open and one commit was counted).
func TestSubmit_AllOrNone(t *testing.T) {
	env := testenv.New(t)
	l := startLedger(t, env)
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	before := lastSeq(t, env)
	err = l.Submit(context.Background(), evsTx{events.Events{opened("r1", "q1", "h", bal, "0.1"), opened("r1", "q1", "h", other, "0.1")}})
	require.Equal(t, events.CodeInternal, events.CodeOf(err))
	require.Equal(t, before, lastSeq(t, env))
	require.Zero(t, l.Balance(bal).Open)
	require.Zero(t, l.Stats().Commits)
	_, ok := l.Reservation("r1")
	require.False(t, ok)
	// A good Tx after it commits alone.
	require.NoError(t, l.Submit(context.Background(), evsTx{events.Events{opened("r2", "q2", "h", bal, "0.1")}}))
	require.Equal(t, 1, l.Balance(bal).Open)
	check(t, env)
}

// TestSubmit_GroupWriteFailureReplacesAnswers: Txs A (opens request q) and
// B (the same request id with another body) are decided in one group, so B's
// idempotency_mismatch rests on A's uncommitted open. The group's write
// fails: both must get the write's error, not a definitive answer. How we
// know it can fail: before, B kept its own decision (idempotency_mismatch)
// although A's reservation was never written; the test checks B's code.
func TestSubmit_GroupWriteFailureReplacesAnswers(t *testing.T) {
	env := testenv.New(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	l := startLedger(t, env, ledger.UnsafeWriteFaultForTesting(func(ctx context.Context, _ []string) error {
		if calls.Add(1) == 1 {
			// The first group: hold it while A and B queue behind it.
			close(entered)
			<-release
		}
		return errors.New("injected: the stream is gone")
	}))
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	before := lastSeq(t, env)
	first := submitAsync(context.Background(), l, requestTx{id: "r0", rid: "q0", hash: "h0"})
	<-entered
	a := submitAsync(context.Background(), l, requestTx{id: "ra", rid: "q", hash: "h1"})
	b := submitAsync(context.Background(), l, requestTx{id: "rb", rid: "q", hash: "h2"})
	waitFor(t, "A and B queued behind the first group", func() bool { return l.Stats().Queued == 2 })
	close(release)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(await(t, first)))
	errA, errB := await(t, a), await(t, b)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(errA), "A: %v", errA)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(errB), "B must not get a definitive answer: %v", errB)
	require.EqualValues(t, 2, calls.Load(), "A and B were decided in one group")
	require.Equal(t, before, lastSeq(t, env))
	require.Zero(t, l.Balance(bal).Open)
}

// TestSubmit_FailsClosedAfterFollowerStops: once Run has returned, Submit,
// PutBudget and Sync answer ledger_unavailable and write nothing. How we
// know it can fail: before, Submit kept deciding and writing after Run
// returned (the test checks the stream did not move).
func TestSubmit_FailsClosedAfterFollowerStops(t *testing.T) {
	env := testenv.New(t)
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := ledger.New(context.Background(), nc, js, env.Layout)
	require.NoError(t, err)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(l.Submit(context.Background(), &openTx{id: "early", amount: events.MustMoney("0.1")})), "not running yet")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	<-l.Ready()
	_, err = l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	require.NoError(t, l.Submit(context.Background(), &openTx{id: "r1", amount: events.MustMoney("0.1")}))
	cancel()
	select {
	case <-done:
	case <-time.After(watchdog):
		t.Fatal("Run did not return")
	}
	before := lastSeq(t, env)
	err = l.Submit(context.Background(), &openTx{id: "r2", amount: events.MustMoney("0.1")})
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(err), "%v", err)
	_, err = l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("2"), "USD", t0)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(err), "%v", err)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(l.Sync(context.Background())))
	require.Equal(t, before, lastSeq(t, env))
}

// TestSubmit_HonoursCallerDeadline: with every write hanging until its
// context ends, Submit returns ledger_unavailable once the caller's deadline
// has passed, and Run, stopped afterwards, returns without leaving a
// committer behind. How we know it can fail: before, Submit dropped the
// caller's deadline and retried up to 64 attempts of 5 s each; the watchdog
// (20 s, 60 times the deadline) fails the test.
func TestSubmit_HonoursCallerDeadline(t *testing.T) {
	env := testenv.New(t)
	var hang atomic.Bool
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := ledger.New(context.Background(), nc, js, env.Layout, ledger.UnsafeWriteFaultForTesting(func(ctx context.Context, _ []string) error {
		if !hang.Load() {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	<-l.Ready()
	_, err = l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	hang.Store(true)
	ctx, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	res := submitAsync(ctx, l, &openTx{id: "r1", amount: events.MustMoney("0.1")})
	err = await(t, res)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(err), "%v", err)
	d, _ := ctx.Deadline()
	require.False(t, time.Now().Before(d), "answered only once the deadline passed")
	cancel()
	select {
	case <-done:
	case <-time.After(watchdog):
		t.Fatal("Run did not return: a committer outlived it")
	}
}

// TestLedger_SkipsForkedLane: a lane revision that does not follow the
// last revision the replica folded (here a blind write naming an older
// revision) is skipped, counted, reported by the audit with its sequence,
// and the replica keeps deciding: its next write lands after the skipped
// revision and chains from the last valid one. How we know it can fail:
// the forked revision's numbers are valid on their own; before chains the
// follower folded it silently (r3 would see 0.3 reserved, and the audit
// would pass), and before skip-and-serve the follower stopped (r3 would be
// answered ledger_unavailable).
func TestLedger_SkipsForkedLane(t *testing.T) {
	env := testenv.New(t)
	l := startLedger(t, env)
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	require.NoError(t, l.Submit(context.Background(), &openTx{id: "r1", amount: events.MustMoney("0.1")}))
	require.NoError(t, l.Submit(context.Background(), &openTx{id: "r2", amount: events.MustMoney("0.1")}))
	lane := env.Layout.LaneKey(bal)
	// A writer that decided on the lane's first revision writes blindly.
	kv, err := env.JS.KeyValue(context.Background(), env.Layout.Bucket())
	require.NoError(t, err)
	hist, err := kv.History(context.Background(), lane)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	day := events.BalanceRef{Scope: bal.Scope, Period: events.PeriodDay, Instance: "2026-11-30"}
	rev := events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: hist[0].Revision(), PrevHash: events.HashPayload(hist[0].Value())},
		Balances: []events.BalanceRevision{{Schema: events.SchemaBalance, Balance: day, Unit: "USD", Limit: events.MustMoney("1"),
			Spent: events.Zero, Reserved: events.MustMoney("0.1"), Overrun: events.Zero, Open: 1,
			Events: events.Events{opened("f1", "qf", "h", day, "0.1")}}}}
	data, err := codec.AppendLane(nil, &rev)
	require.NoError(t, err)
	ack, err := env.JS.Publish(context.Background(), env.Layout.Subject(lane), data)
	require.NoError(t, err)
	waitFor(t, "the fork skipped", func() bool { return l.Stats().Rejected == 1 })
	_, ok := l.Reservation("f1")
	require.False(t, ok, "the fork was not folded")
	require.NoError(t, l.Submit(context.Background(), &openTx{id: "r3", amount: events.MustMoney("0.1")}))
	require.Equal(t, "0.3", l.Balance(bal).Reserved.String())
	rep, err := projector.Check(context.Background(), env.JS, env.Layout)
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Len(t, rep.Skipped, 1, rep.String())
	require.Equal(t, ack.Sequence, rep.Skipped[0].Seq)
	require.Equal(t, signing.ReasonReplay, rep.Skipped[0].Reason, "it names a revision older than the last valid one")
	require.Len(t, rep.Problems, 1, rep.String())
}

// TestSubmit_CallerDeadlineIsItsOwn: A and B queue behind a held write; A's
// deadline passes before their group is decided. A is answered
// ledger_unavailable with nothing committed, and B, whose ctx has no
// deadline, commits: one caller's ctx bounds only its own Tx. How we know
// it can fail: before, the caller's deadline was dropped (A committed
// anyway), and a group that used the leader's ctx for its writes would fail
// B with A's deadline.
func TestSubmit_CallerDeadlineIsItsOwn(t *testing.T) {
	env := testenv.New(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	l := startLedger(t, env, ledger.UnsafeWriteFaultForTesting(func(ctx context.Context, _ []string) error {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		return nil
	}))
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	first := submitAsync(context.Background(), l, &openTx{id: "r0", amount: events.MustMoney("0.1")})
	<-entered
	ctxA, cancelA := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelA()
	a := submitAsync(ctxA, l, &openTx{id: "ra", amount: events.MustMoney("0.1")})
	b := submitAsync(context.Background(), l, &openTx{id: "rb", amount: events.MustMoney("0.1")})
	waitFor(t, "A and B queued", func() bool { return l.Stats().Queued == 2 })
	<-ctxA.Done()
	close(release)
	require.NoError(t, await(t, first))
	errA := await(t, a)
	require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(errA), "%v", errA)
	require.NoError(t, await(t, b))
	_, ok := l.Reservation("ra")
	require.False(t, ok, "A committed nothing")
	_, ok = l.Reservation("rb")
	require.True(t, ok)
	check(t, env)
}

// TestSubmit_WriteFailuresLogBounded: with the stream refusing every write
// (out of disk), each failed commit was a warning line of its own: 9,000
// in 45 s under load, on the disk that was full. The first 20 a minute are
// logged one by one and the rest summed up. How we know it can fail:
// without the bound, 40 failed commits made 40 lines.
func TestSubmit_WriteFailuresLogBounded(t *testing.T) {
	env := testenv.New(t)
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l := startLedger(t, env, ledger.WithLogger(log), ledger.UnsafeWriteFaultForTesting(func(context.Context, []string) error {
		return errors.New("injected: insufficient resources")
	}))
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("100"), "USD", t0)
	require.NoError(t, err)
	for i := range 40 {
		err := l.Submit(context.Background(), &openTx{id: fmt.Sprint("w", i), amount: events.MustMoney("0.1")})
		require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(err))
	}
	require.Equal(t, logbound.DefaultBurst, strings.Count(logs.String(), "msg=\"ledger write failed\""), logs.String())
}
