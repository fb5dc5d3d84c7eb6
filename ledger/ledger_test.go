package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/ledger"
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

func (t *openTx) Decide(v *ledger.View) (events.Events, error) {
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
func (failTx) Decide(*ledger.View) (events.Events, error) {
	return nil, events.Errorf(events.CodeInvalidAmount, "no")
}

func startLedger(t *testing.T, env *testenv.Env, opts ...ledger.Option) *ledger.Ledger {
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
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range txs {
		txs[i] = &openTx{id: fmt.Sprint("r", i), amount: events.MustMoney("0.05")}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			require.NoError(t, l.Submit(context.Background(), txs[i]))
		}()
	}
	close(start)
	wg.Wait()
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

// TestLedger_ConflictCatchUp: two replicas write the same balance in turn.
// Whenever one decides before its follower has folded the other's last
// write, its compare-and-set loses and it folds what it missed from the
// stream leader and decides again; either way the limit holds and both
// books agree. (The hot-budget tests in package service run the same race
// under load, with a negative control that removes the revision check.)
func TestLedger_ConflictCatchUp(t *testing.T) {
	env := testenv.New(t)
	a := startLedger(t, env)
	b := startLedger(t, env)
	_, err := a.PutBudget(context.Background(), bal.Budget(), events.MustMoney("0.1"), "USD", t0)
	require.NoError(t, err)
	require.NoError(t, b.Sync(context.Background()))
	// Interleave writes from both replicas as fast as they go: each write
	// of one makes the other's next decision stale.
	for i := 0; i < 10; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		require.NoError(t, l.Submit(context.Background(), &openTx{id: fmt.Sprint("c", i), amount: events.MustMoney("0.01")}))
	}
	// The eleventh no longer fits on either replica.
	tx := &openTx{id: "c10", amount: events.MustMoney("0.01")}
	require.NoError(t, b.Submit(context.Background(), tx))
	require.True(t, tx.denied)
	require.NoError(t, a.Sync(context.Background()))
	require.NoError(t, b.Sync(context.Background()))
	require.Equal(t, "0.1", a.Balance(bal).Reserved.String())
	require.Equal(t, "0.1", b.Balance(bal).Reserved.String())
	require.Equal(t, 10, a.Balance(bal).Open)
	check(t, env)
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
