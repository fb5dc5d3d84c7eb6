package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
)

// TestSnapshot_CarriesArmGenerations: the arm generations (a budget's,
// which the fold computes from the definitions before it, and a balance's
// crossings') travel in snapshots: a snapshot taken after a limit change,
// a re-armed crossing and a disable/enable loads as the whole fold at its
// sequence, and a replica started from it re-arms as the writer does.
// How it can fail: a snapshot without the budget's generation loads it as
// 0 (the book views differ, and the balance's crossings of the current
// generation would count as stale: the next admit would cross 1 again).
func TestSnapshot_CarriesArmGenerations(t *testing.T) {
	env := snapLayout(t)
	w := startLedger(t, env, snapOpts...)
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	ref := events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}
	edit := func(f func(*ledger.Budget)) {
		t.Helper()
		_, err := w.EditBudget(ctx, ref, "", func(cur ledger.Budget, existed bool) (ledger.Budget, error) {
			if !existed {
				cur = ledger.Budget{Ref: ref, Limit: events.MustMoney("4"), Unit: "USD", Thresholds: []events.Money{events.MustMoney("1")}}
			}
			f(&cur)
			return cur, nil
		}, now)
		require.NoError(t, err)
	}
	a, err := admit.New(w, admit.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	admitted := func(id, amount string) {
		t.Helper()
		r, err := a.Admit(ctx, events.AdmitRequest{RequestID: id, Scopes: []string{"org:acme"}, Amount: amount})
		require.NoError(t, err)
		require.True(t, r.Admitted)
	}
	edit(func(*ledger.Budget) {})
	admitted("r1", "4")
	edit(func(b *ledger.Budget) { b.Limit = events.MustMoney("20") })
	admitted("r2", "16")
	edit(func(b *ledger.Budget) { b.Disabled = true })
	edit(func(b *ledger.Budget) { b.Disabled = false })
	def, ok := w.Budget(ref)
	require.True(t, ok)
	require.NotZero(t, def.Arm)
	require.Less(t, def.Arm, def.Revision)
	bal := w.Balance(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"})
	require.Equal(t, def.Arm, bal.Arm)
	require.Len(t, bal.Alerted, 1)

	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	got, err := ledger.SnapshotView(ctx, env.JS, env.Layout, info.Name, snapOpts...)
	require.NoError(t, err)
	fold, err := ledger.FoldView(ctx, env.JS, env.Layout, info.Seq, snapOpts...)
	require.NoError(t, err)
	require.Equal(t, fold, got)
	require.Contains(t, got, "Arm:")

	r := startLedger(t, env, snapOpts...)
	require.Equal(t, info.Seq, r.SnapshotStats().Loaded)
	rdef, ok := r.Budget(ref)
	require.True(t, ok)
	require.Equal(t, def.Arm, rdef.Arm)
	require.Equal(t, bal, r.Balance(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"}))
}
