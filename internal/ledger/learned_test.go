package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/settle"
)

// TestLearned_ReplicasAgreeAndRestartKeeps: two replicas admit and settle
// calls of one model in a budget with a learn rule (p90 of the last 8,
// cold until 3), alternating which replica admits and which settles, with
// actual costs that vary. After every call each replica's window of the
// scope and model holds the same costs, and a check admit on each
// reserves the same amount. A snapshot is then taken and more calls made:
// a replica that starts from the snapshot and one that folds the whole
// stream hold the same window as the writers (and the same book), and
// reserve the same amount.
//
// How it can fail: a fold that learns from the overlay as well as the
// book, from a settle twice, or in another order on one replica makes the
// windows differ; a snapshot that drops the windows makes the restarted
// replica cold (it would reserve the priced maximum, 0.5).
func TestLearned_ReplicasAgreeAndRestartKeeps(t *testing.T) {
	env := snapLayout(t)
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	w1 := startLedger(t, env, snapOpts...)
	w2 := startLedger(t, env, snapOpts...)
	_, err := w1.DefinePrice(ctx, ledger.Price{Model: "m", Unit: "USD", Input: events.MustMoney("0"), Output: events.MustMoney("1000")}, now)
	require.NoError(t, err)
	rule := events.LearnRule{Percentile: 90, Window: 8, MinSamples: 3}
	capAmt := events.MustMoney("100")
	_, err = w1.DefineBudget(ctx, ledger.Budget{Ref: events.BudgetRef{Scope: "team:l", Period: events.PeriodMonth},
		Limit: events.MustMoney("1000"), Unit: "USD", Learn: &rule, ExposureCap: &capAmt}, now)
	require.NoError(t, err)
	key := learn.Key{Scope: "team:l", Model: "m"}

	type side struct {
		l *ledger.Ledger
		a *admit.Admitter
		s *settle.Settler
	}
	var sides []side
	for _, l := range []*ledger.Ledger{w1, w2} {
		a, err := admit.New(l, admit.WithClock(clock))
		require.NoError(t, err)
		s, err := settle.New(l, settle.WithClock(clock))
		require.NoError(t, err)
		sides = append(sides, side{l, a, s})
	}
	req := func(id string, mode string) events.AdmitRequest {
		return events.AdmitRequest{RequestID: id, Scopes: []string{"team:l"}, Model: "m", MaxOutputTokens: 500, TTL: "1h", Mode: mode}
	}
	// agree checks every ledger's window and check admit against the
	// first's, and returns the amount they reserve.
	agree := func(ls []*ledger.Ledger, tag string) string {
		t.Helper()
		var costs []events.Money
		amount := ""
		for i, l := range ls {
			require.NoError(t, l.Sync(ctx))
			got := l.Learned(key).Costs()
			a, err := admit.New(l, admit.WithClock(clock))
			require.NoError(t, err)
			r, err := a.Admit(ctx, req("check-"+tag, events.ModeCheck))
			require.NoError(t, err)
			require.True(t, r.Admitted)
			if i == 0 {
				costs, amount = got, r.Budgets[0].Amount
				continue
			}
			require.Equal(t, fmt.Sprint(costs), fmt.Sprint(got), "%s: replica %d's window", tag, i)
			require.Equal(t, amount, r.Budgets[0].Amount, "%s: replica %d's reservation", tag, i)
		}
		return amount
	}
	call := func(i int) {
		t.Helper()
		by, to := sides[i%2], sides[(i/2)%2]
		r, err := by.a.Admit(ctx, req(fmt.Sprintf("c-%d", i), ""))
		require.NoError(t, err)
		require.True(t, r.Admitted, "%+v", r.Denial)
		// Costs 0.01 .. 0.12, in an order that is not sorted.
		actual := events.MoneyFromInt(int64((i*7)%12 + 1)).Mul(events.MustMoney("0.01"))
		require.NoError(t, to.l.Sync(ctx))
		_, err = to.s.Settle(ctx, events.SettleRequest{ReservationID: r.ReservationID, Actual: actual.String()})
		require.NoError(t, err)
	}

	require.Equal(t, "0.5", agree([]*ledger.Ledger{w1, w2}, "cold"), "cold start: the priced maximum")
	for i := 0; i < 12; i++ {
		call(i)
		agree([]*ledger.Ledger{w1, w2}, fmt.Sprint(i))
	}
	require.Equal(t, 12, w1.Learned(key).Len(), "a replica keeps the last events.MaxLearnWindow; the rule reads the last 8")
	learned := agree([]*ledger.Ledger{w1, w2}, "learned")
	require.Equal(t, "0.12", learned, "p90 (nearest rank) of the last 8 costs: 0.02 0.04 0.05 0.06 0.07 0.09 0.11 0.12")

	snap, err := w1.Snapshot(ctx)
	require.NoError(t, err)
	for i := 12; i < 15; i++ {
		call(i)
	}
	fromSnap := startLedger(t, env, snapOpts...)
	whole := startLedger(t, env, append(snapOpts, ledger.WithSnapshotLoad(false))...)
	require.Equal(t, snap.Seq, fromSnap.SnapshotStats().Loaded)
	agree([]*ledger.Ledger{w1, w2, fromSnap, whole}, "restarted")
	got, _ := bookOf(t, fromSnap)
	full, _ := bookOf(t, whole)
	require.Equal(t, full, got, "snapshot + tail equals the whole fold, learned windows included")
	require.Contains(t, full, "learned team:l m [")
	check(t, env)
}

// TestLearned_RetiredScopeForgets: an agent run's budget with a learn rule
// learns from its settled calls on both replicas; once the run's budget is
// retired, both replicas drop the run's windows, a call still open
// settling after the retirement teaches nothing, and replicas started
// from a snapshot and from the whole stream agree (no window either). A
// team's window beside it stays. How it can fail: without the drop at the
// retirement the run's window stays on every replica (the first check);
// without the retired-scope check in the fold, the late settle makes it
// again (the second).
func TestLearned_RetiredScopeForgets(t *testing.T) {
	env := snapLayout(t)
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	w1 := startLedger(t, env, snapOpts...)
	w2 := startLedger(t, env, snapOpts...)
	_, err := w1.DefinePrice(ctx, ledger.Price{Model: "m", Unit: "USD", Input: events.MustMoney("0"), Output: events.MustMoney("1000")}, now)
	require.NoError(t, err)
	rule := events.LearnRule{Percentile: 90, Window: 8, MinSamples: 3}
	for _, ref := range []events.BudgetRef{{Scope: "run:r1", Period: events.PeriodLifetime}, {Scope: "team:t", Period: events.PeriodMonth}} {
		_, err = w1.DefineBudget(ctx, ledger.Budget{Ref: ref, Limit: events.MustMoney("1000"), Unit: "USD", Learn: &rule}, now)
		require.NoError(t, err)
	}
	a, err := admit.New(w1, admit.WithClock(clock))
	require.NoError(t, err)
	s, err := settle.New(w2, settle.WithClock(clock))
	require.NoError(t, err)
	var open string
	for i := range 5 {
		r, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprint("c-", i), Scopes: []string{"run:r1", "team:t"}, Model: "m", MaxOutputTokens: 500, TTL: "1h"})
		require.NoError(t, err)
		require.True(t, r.Admitted, "%+v", r.Denial)
		if i == 4 {
			open = r.ReservationID
			break
		}
		require.NoError(t, w2.Sync(ctx))
		_, err = s.Settle(ctx, events.SettleRequest{ReservationID: r.ReservationID, Actual: "0.01"})
		require.NoError(t, err)
	}
	run, team := learn.Key{Scope: "run:r1", Model: "m"}, learn.Key{Scope: "team:t", Model: "m"}
	for _, l := range []*ledger.Ledger{w1, w2} {
		require.NoError(t, l.Sync(ctx))
		require.Equal(t, 4, l.Learned(run).Len())
		require.Equal(t, 4, l.Learned(team).Len())
	}

	_, _, err = w2.RetireBudget(ctx, events.BudgetRef{Scope: "run:r1", Period: events.PeriodLifetime}, "", "run over", now)
	require.NoError(t, err)
	for i, l := range []*ledger.Ledger{w1, w2} {
		require.NoError(t, l.Sync(ctx))
		require.Nil(t, l.Learned(run), "replica %d: the retired run's window is dropped", i)
		require.Equal(t, 4, l.Learned(team).Len(), "replica %d: the team's stays", i)
	}
	require.NoError(t, w2.Sync(ctx))
	_, err = s.Settle(ctx, events.SettleRequest{ReservationID: open, Actual: "0.02"})
	require.NoError(t, err)
	for i, l := range []*ledger.Ledger{w1, w2} {
		require.NoError(t, l.Sync(ctx))
		require.Nil(t, l.Learned(run), "replica %d: a settle after the retirement teaches nothing", i)
		require.Equal(t, 5, l.Learned(team).Len(), "replica %d: it teaches the team", i)
	}

	_, err = w1.Snapshot(ctx)
	require.NoError(t, err)
	fromSnap := startLedger(t, env, snapOpts...)
	whole := startLedger(t, env, append(snapOpts, ledger.WithSnapshotLoad(false))...)
	got, _ := bookOf(t, fromSnap)
	full, _ := bookOf(t, whole)
	require.Equal(t, full, got, "snapshot + tail equals the whole fold")
	require.NotContains(t, full, "learned run:r1")
	require.Contains(t, full, "learned team:t m [")
	check(t, env)
}
