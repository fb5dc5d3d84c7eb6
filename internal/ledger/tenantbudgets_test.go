package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// budgetsLimit is a BudgetLimit of max whose refusal is tenant_limit.
func budgetsLimit(max int) ledger.BudgetLimit {
	return ledger.BudgetLimit{Max: max, Refusal: func(have int) error {
		return events.TenantLimitError("acme", "budgets", int64(max), fmt.Sprintf("has %d", have))
	}}
}

func putWithin(ctx context.Context, l *ledger.Ledger, scope events.Scope, limit string, lim ledger.BudgetLimit, now time.Time) (ledger.BudgetChange, error) {
	def := ledger.Budget{Ref: events.BudgetRef{Scope: scope, Period: events.PeriodMonth}, Limit: events.MustMoney(limit), Unit: "USD"}
	return l.EditBudgetWithin(ctx, def.Ref, "USD", func(ledger.Budget, bool) (ledger.Budget, error) { return def, nil }, lim, now)
}

// TestEditBudgetWithin_CountsCreationsInFlight: 20 puts of new budgets of
// one tenant at once, with a limit of 5, create exactly 5 on one replica,
// and the others write nothing. How it can fail: without the budgets
// being created counted with those folded, every put reads the book's
// count before any of the others has folded its write, and (measured by
// undoing the reservation) all 20 are created.
func TestEditBudgetWithin_CountsCreationsInFlight(t *testing.T) {
	env := testenv.New(t)
	l := startLedger(t, env)
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = putWithin(ctx, l, events.Scope(fmt.Sprintf("acme/team:t%d", i)), "10", budgetsLimit(5), now)
		}()
	}
	wg.Wait()
	created, refused := 0, 0
	for _, err := range errs {
		if err == nil {
			created++
			continue
		}
		require.Equal(t, events.CodeTenantLimit, events.CodeOf(err), "%v", err)
		refused++
	}
	require.Equal(t, 5, created, "exactly the limit is created")
	require.Equal(t, 15, refused)
	require.Equal(t, 5, l.TenantBudgets("acme"))
	require.NoError(t, l.Sync(ctx))
	require.Len(t, l.Budgets(), 5, "a refused put writes nothing")
}

// TestEditBudgetWithin_UpdatesRetirementAndOtherTenants: at its limit a
// tenant still changes the budgets it has; a new one is refused and
// writes nothing; retiring one makes room; another tenant and the
// untenanted deployment are not held to it; and a second replica folds
// the same count (and its book's recount agrees, bookOf).
// How it can fail: a change of an existing budget refused at the limit
// (the tenant could no longer lower a limit), a retired budget kept in the
// count (the tenant could never make room), or the count kept by what a
// replica served instead of the stream.
func TestEditBudgetWithin_UpdatesRetirementAndOtherTenants(t *testing.T) {
	env := testenv.New(t)
	l := startLedger(t, env)
	other := startLedger(t, env)
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	lim := budgetsLimit(2)

	for _, s := range []events.Scope{"acme/team:a", "acme/team:b"} {
		_, err := putWithin(ctx, l, s, "10", lim, now)
		require.NoError(t, err)
	}
	before := l.Budgets()
	_, err := putWithin(ctx, l, "acme/team:c", "10", lim, now)
	require.Equal(t, events.CodeTenantLimit, events.CodeOf(err), "the third new budget: %v", err)
	require.NoError(t, l.Sync(ctx))
	require.Equal(t, before, l.Budgets(), "nothing was written")

	ch, err := putWithin(ctx, l, "acme/team:a", "20", lim, now)
	require.NoError(t, err, "a change of a budget it has is never refused")
	require.True(t, ch.Existed)
	require.Equal(t, []string{"limit"}, ch.Changed)

	for _, s := range []events.Scope{"globex/team:a", "globex/team:b", "team:a", "team:b", "team:c"} {
		_, err := putWithin(ctx, l, s, "10", lim, now)
		require.NoError(t, err, "%s is not acme", s)
	}
	require.Equal(t, 2, l.TenantBudgets("globex"))

	_, _, err = l.RetireBudget(ctx, events.BudgetRef{Scope: "acme/team:b", Period: events.PeriodMonth}, "", "over", now)
	require.NoError(t, err)
	require.Equal(t, 1, l.TenantBudgets("acme"), "a retired budget leaves the count")
	_, err = putWithin(ctx, l, "acme/team:c", "10", lim, now)
	require.NoError(t, err, "retiring one made room")
	_, err = putWithin(ctx, l, "acme/team:d", "10", lim, now)
	require.Equal(t, events.CodeTenantLimit, events.CodeOf(err))

	testenv.WaitFor(t, 10*time.Second, "the other replica folded every put", func() bool {
		return len(other.Budgets()) == len(l.Budgets())
	})
	counts := map[string]ledger.TenantCount{}
	for _, c := range other.TenantCounts() {
		counts[c.Tenant] = c
	}
	require.Equal(t, 2, counts["acme"].Budgets)
	require.Equal(t, 2, counts["globex"].Budgets)
	require.Equal(t, 2, other.TenantBudgets("acme"))
	bookOf(t, other)
	_, err = putWithin(ctx, other, "acme/team:d", "10", lim, now)
	require.Equal(t, events.CodeTenantLimit, events.CodeOf(err), "the other replica holds acme to the same count")
}
