package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

var (
	t0  = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	bal = events.BalanceRef{Scope: "org:l", Period: events.PeriodMonth, Instance: "2026-11"}
)

// openTx reserves amount in bal unless it would pass the limit (a minimal
// admission, to exercise the commit path without package admit).
type openTx struct {
	id     string
	amount events.Money
	denied bool
}

func (t *openTx) Balances() []events.BalanceRef { return []events.BalanceRef{bal} }

func (t *openTx) Decide(v ledger.View) (events.Events, error) {
	b := v.Balance(streams.BalanceKey(bal))
	t.denied = b.Spent.Add(b.Reserved).Add(t.amount).Cmp(b.Limit) > 0
	if t.denied {
		return nil, nil
	}
	return events.Events{events.ReservationOpened{
		ReservationID: t.id, RequestID: t.id, RequestHash: "h", Balance: bal, Amount: t.amount, Unit: "USD",
		Balances: []events.BalanceRef{bal}, ExpiresAt: t0.Add(time.Hour), At: t0,
	}}, nil
}

// failTx always refuses.
type failTx struct{}

func (failTx) Balances() []events.BalanceRef { return []events.BalanceRef{bal} }
func (failTx) Decide(ledger.View) (events.Events, error) {
	return nil, events.Errorf(events.CodeInvalidAmount, "no")
}

func startLedger(t testing.TB, env *testenv.Env, opts ...ledger.Option) *ledger.Ledger {
	t.Helper()
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := ledger.New(context.Background(), nc, js, env.Layout, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready():
	case <-time.After(testenv.SetupTimeout):
		t.Fatal("ledger not ready")
	}
	return l
}

func check(t *testing.T, env *testenv.Env) {
	t.Helper()
	rep, err := projector.Check(context.Background(), env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
}

// TestLedger_GroupCommitFolds: concurrent Txs on one balance share
// revisions (fewer commits than Txs), and the limit holds for all of them.
func TestLedger_GroupCommitFolds(t *testing.T) {
	env := testenv.New(t)
	l := startLedger(t, env)
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	txs := make([]*openTx, 100)
	errs := make([]error, len(txs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range txs {
		txs[i] = &openTx{id: fmt.Sprint("r", i), amount: events.MustMoney("0.05")}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = l.Submit(context.Background(), txs[i])
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "tx %d", i)
	}
	admitted := 0
	for _, tx := range txs {
		if !tx.denied {
			admitted++
		}
	}
	require.Equal(t, 20, admitted)
	st := l.Stats()
	require.Greater(t, st.Txs, st.Commits, "concurrent Txs were folded into shared revisions: %+v", st)
	require.Equal(t, "1", l.Balance(bal).Reserved.String())
	check(t, env)
}

// TestLedger_ConflictCatchUp: two replicas write the same balance. Each
// write of replica b is made to lose its compare-and-set exactly once:
// between b's decision and b's write, replica a commits to the same lane
// (from b's write hook). b must then fold what it missed from the stream
// leader and decide again; the limit holds and both books agree. Both
// replicas took part (each committed) and b conflicted on every one of its
// writes: the test asserts both, so it cannot pass on a run with no race.
// How we know it can fail: with b's compare-and-set removed
// (UnsafeBlindWritesForTesting) b overwrites a's revision; replicas then
// skip the fork and the counts below differ (see
// TestLedger_ConflictCatchUp_BlindControl).
func TestLedger_ConflictCatchUp(t *testing.T) {
	env := testenv.New(t)
	rounds, conflicts, aErrs := runConflictRace(t, env, false)
	for i, err := range aErrs {
		require.NoError(t, err, "a's write %d", i)
	}
	require.Equal(t, 5, rounds)
	require.EqualValues(t, 5, conflicts, "every write of b lost one compare-and-set to a")
	check(t, env)
}

// TestLedger_ConflictCatchUp_BlindControl is the negative control of
// TestLedger_ConflictCatchUp: without b's revision check, b's write lands on
// top of a's and no conflict happens; replicas skip the revision as off
// its chain (a fork), and the audit reports it.
func TestLedger_ConflictCatchUp_BlindControl(t *testing.T) {
	env := testenv.New(t)
	// a may meet the fork first (its catch-up or its follower refuses
	// b's blind revision), so a's writes may fail: that is detection too.
	_, conflicts, aErrs := runConflictRace(t, env, true, ledger.UnsafeBlindWritesForTesting())
	t.Logf("a's writes after the fork: %v", aErrs)
	require.Zero(t, conflicts)
	rep, err := projector.Check(context.Background(), env.JS, env.Layout)
	require.NoError(t, err)
	require.False(t, rep.OK(), "a blind write must show as a fork: %s", rep)
	require.NotEmpty(t, rep.Skipped, "skipped as off its chain: %s", rep)
}

// runConflictRace alternates writes of a and b (b with bOpts); before each
// of b's writes, a commits first. It returns how many of b's Txs were
// answered, b's conflicts, and the answers to a's writes. Unless control,
// it checks that both books agree once every write was answered.
func runConflictRace(t *testing.T, env *testenv.Env, control bool, bOpts ...ledger.Option) (int, int64, []error) {
	t.Helper()
	a := startLedger(t, env)
	var aErrs []error
	var inject atomic.Bool
	n := 0
	hook := ledger.UnsafeWriteFaultForTesting(func(ctx context.Context, _ []string) error {
		if inject.Swap(false) {
			// Runs on b's committer: a's write lands between b's
			// decision and b's write.
			n++
			aErrs = append(aErrs, a.Submit(ctx, &openTx{id: fmt.Sprint("a", n), amount: events.MustMoney("0.01")}))
		}
		return nil
	})
	b := startLedger(t, env, append([]ledger.Option{hook}, bOpts...)...)
	_, err := a.PutBudget(context.Background(), bal.Budget(), events.MustMoney("0.1"), "USD", t0)
	require.NoError(t, err)
	require.NoError(t, b.Sync(context.Background()))
	rounds := 0
	for i := 0; i < 5; i++ {
		inject.Store(true)
		err := b.Submit(context.Background(), &openTx{id: fmt.Sprint("b", i), amount: events.MustMoney("0.01")})
		if err != nil {
			break
		}
		rounds++
	}
	if !control && rounds == 5 && !slices.ContainsFunc(aErrs, func(err error) bool { return err != nil }) {
		require.NoError(t, a.Sync(context.Background()))
		require.NoError(t, b.Sync(context.Background()))
		require.Equal(t, "0.1", a.Balance(bal).Reserved.String())
		require.Equal(t, "0.1", b.Balance(bal).Reserved.String())
		require.Equal(t, 10, a.Balance(bal).Open)
		require.EqualValues(t, 5, a.Stats().Commits, "a committed its five")
		// The eleventh no longer fits on either replica.
		tx := &openTx{id: "c10", amount: events.MustMoney("0.01")}
		require.NoError(t, b.Submit(context.Background(), tx))
		require.True(t, tx.denied)
	}
	return rounds, b.Stats().Conflicts, aErrs
}

// TestLedger_DecideErrorCommitsNothing: a Tx that refuses gets its error
// back and the stream does not move.
func TestLedger_DecideErrorCommitsNothing(t *testing.T) {
	env := testenv.New(t)
	l := startLedger(t, env)
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	s, err := env.JS.Stream(context.Background(), env.Layout.StreamName())
	require.NoError(t, err)
	before, err := s.Info(context.Background())
	require.NoError(t, err)
	err = l.Submit(context.Background(), failTx{})
	require.Equal(t, events.CodeInvalidAmount, events.CodeOf(err))
	after, err := s.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, before.State.LastSeq, after.State.LastSeq)
}

// A replica measures its clock against the server's, from the stream
// info it reads when it starts and the messages it folds: on one machine,
// within a second of zero, and not corrected.
func TestLedger_ClockSkew(t *testing.T) {
	env := testenv.New(t)
	l := startLedger(t, env)
	d, ok := l.ClockSkew()
	require.True(t, ok, "measured at start")
	require.Less(t, d.Abs(), time.Second, "%s", d)
	ref := events.BudgetRef{Scope: "org:skew", Period: events.PeriodMonth}
	_, err := l.PutBudget(context.Background(), ref, events.MustMoney("1"), "USD", time.Now())
	require.NoError(t, err)
	require.NoError(t, l.Sync(context.Background()))
	d, _ = l.ClockSkew()
	require.Less(t, d.Abs(), time.Second, "%s", d)
	before := time.Now()
	now := l.Now()
	require.False(t, now.Before(before), "within a second of the server's: the machine's clock, uncorrected")
	require.WithinDuration(t, time.Now(), now, time.Second)
}

// A machine clock minutes behind (or ahead of) the server's is corrected:
// the ledger's Now is the server's time. How we know it can fail: Now
// returning the machine's clock was ten minutes off.
func TestLedger_ClockOffIsCorrected(t *testing.T) {
	env := testenv.New(t)
	for _, off := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		l := startLedger(t, env, ledger.WithMachineClock(func() time.Time { return time.Now().Add(off) }))
		d, ok := l.ClockSkew()
		require.True(t, ok)
		require.InDelta(t, off.Seconds(), d.Seconds(), 5, "%s", off)
		require.WithinDuration(t, time.Now(), l.Now(), 5*time.Second, "%s", off)
	}
}
