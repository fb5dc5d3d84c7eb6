package ledger_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/testenv"
)

// TestPrune_AuditAgrees: a replica with a 1 s retention drops the past
// minutes of a per-minute budget (admitted on a clock two hours behind
// the server, a minute apart) once they can no longer change, but keeps
// the minute whose reservation is still open; its snapshot then leaves
// them out, and the audit (projector.Check, from the stream's start and
// from the snapshot) agrees with it; a replica started from the snapshot
// holds the same numbers and admits on. It can fail: a snapshot that
// lacks a balance the projector does not call sealed (here the open
// minute, dropped by hand as a wrong prune would) fails the audit.
func TestPrune_AuditAgrees(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := testenv.New(t)
	opts := []ledger.Option{ledger.WithRetention(time.Second, time.Second)}
	l := startLedger(t, env, opts...)
	var ns atomic.Int64
	ns.Store(time.Now().Add(-2 * time.Hour).Truncate(time.Minute).UnixNano())
	clk := func() time.Time { return time.Unix(0, ns.Load()).UTC() }
	a, err := admit.New(l, admit.WithClock(clk))
	require.NoError(t, err)
	s, err := settle.New(l, settle.WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.PutBudget(ctx, events.BudgetRef{Scope: "key:k-rpm", Period: events.PeriodMinute}, events.MustMoney("5"), events.UnitRequests, clk())
	require.NoError(t, err)
	n := 0
	call := func(settleIt bool) events.BalanceRef {
		n++
		rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("r-%d", n), Scopes: []string{"key:k-rpm"}, Amount: "1", TTL: "1h"})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
		if settleIt {
			_, err = s.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "1"})
			require.NoError(t, err)
		}
		return rep.Balances[0]
	}
	var minutes []events.BalanceRef
	var open events.BalanceRef
	for m := range 20 {
		minutes = append(minutes, call(true))
		if m == 5 {
			open = call(false)
		}
		ns.Add(int64(time.Minute))
	}
	// Each poll writes (the follower stamps and prunes as it folds, on
	// the server's clock): the 19 settled past minutes go, the open one
	// and the current ones stay.
	testenv.WaitFor(t, 30*time.Second, "the past minutes to be dropped", func() bool {
		call(true)
		ns.Add(int64(time.Minute))
		for _, ref := range minutes {
			if ref != open && l.Balance(ref).Spent.Sign() != 0 {
				return false
			}
		}
		return true
	})
	require.Equal(t, 1, l.Balance(open).Open, "the minute with an open reservation is kept")
	for _, ref := range minutes {
		require.Equal(t, ref == open, ledger.HasBalance(l, ref), "of the first 20 minutes only the open one is kept: %s", ref.Instance)
	}

	info, err := l.Snapshot(ctx)
	require.NoError(t, err)
	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	require.True(t, rep.Snapshot.Verified, "the snapshot without the dropped minutes equals the replay")
	rep, err = projector.Check(ctx, env.JS, env.Layout, projector.WithFromSnapshot())
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	require.Equal(t, info.Seq, rep.From.Seq)

	fromSnap := startLedger(t, env, opts...)
	require.Equal(t, info.Seq, fromSnap.SnapshotStats().Loaded)
	require.Equal(t, l.Balance(open), fromSnap.Balance(open))
	cur := call(true)
	require.NoError(t, fromSnap.Sync(ctx))
	require.Equal(t, l.Balance(cur), fromSnap.Balance(cur))

	// A wrong prune: the open minute dropped. The audit refuses the
	// snapshot.
	ledger.DropBalanceForTesting(l, open)
	_, err = l.Snapshot(ctx)
	require.NoError(t, err)
	rep, err = projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Contains(t, rep.String(), "is missing")
}
