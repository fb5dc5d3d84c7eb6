package admit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
)

// These tests decide admits against ledger.Memory: the ledger's own book,
// View and rules, with no JetStream. What they pin is the Admitter's
// decisions; the commit path is the ledger's and is tested there.

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func memLedger(t *testing.T, budgets ...ledger.Budget) (*ledger.Memory, *admit.Admitter) {
	t.Helper()
	m := ledger.NewMemory()
	for _, b := range budgets {
		require.NoError(t, m.Define(b))
	}
	a, err := admit.New(m, admit.WithClock(func() time.Time { return t0 }))
	require.NoError(t, err)
	return m, a
}

func usd(scope string, period events.Period, limit string) ledger.Budget {
	return ledger.Budget{Ref: events.BudgetRef{Scope: events.Scope(scope), Period: period}, Limit: events.MustMoney(limit), Unit: "USD"}
}

func req(id, amount string, scopes ...string) events.AdmitRequest {
	return events.AdmitRequest{RequestID: id, Scopes: scopes, Amount: amount}
}

func TestDecide_LimitCountsWhatIsReserved(t *testing.T) {
	m, a := memLedger(t, usd("org:acme", events.PeriodMonth, "1"))
	ctx := context.Background()
	r, err := a.Admit(ctx, req("r1", "0.4", "org:acme"))
	require.NoError(t, err)
	require.True(t, r.Admitted)
	require.Equal(t, events.StatusOpen, r.Status)

	r, err = a.Admit(ctx, req("r2", "0.7", "org:acme"))
	require.NoError(t, err)
	require.False(t, r.Admitted, "0.4 reserved + 0.7 > 1")
	require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
	require.Equal(t, "0.4", r.Denial.Reserved)
	require.Equal(t, "1", r.Denial.Limit)

	r, err = a.Admit(ctx, req("r3", "0.6", "org:acme"))
	require.NoError(t, err)
	require.True(t, r.Admitted, "0.4 + 0.6 is exactly the limit")

	b := m.Balance(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"})
	require.Equal(t, "1", b.Reserved.String())
	require.Equal(t, 2, b.Open)
}

func TestDecide_ReplayAndMismatch(t *testing.T) {
	_, a := memLedger(t, usd("org:acme", events.PeriodMonth, "1"))
	ctx := context.Background()
	first, err := a.Admit(ctx, req("r1", "0.4", "org:acme"))
	require.NoError(t, err)
	again, err := a.Admit(ctx, req("r1", "0.4", "org:acme"))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.ReservationID, again.ReservationID)

	_, err = a.Admit(ctx, req("r1", "0.5", "org:acme"))
	require.ErrorIs(t, err, &events.Error{Code: events.CodeIdempotencyMismatch})
}

func TestDecide_TheBlockingBudgetIsNamed(t *testing.T) {
	_, a := memLedger(t, usd("org:acme", events.PeriodMonth, "10"), usd("team:search", events.PeriodDay, "0.5"))
	r, err := a.Admit(context.Background(), req("r1", "0.6", "org:acme", "team:search"))
	require.NoError(t, err)
	require.False(t, r.Admitted)
	require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
	require.Equal(t, events.Scope("team:search"), r.Denial.Scope)
	require.Equal(t, events.PeriodDay, r.Denial.Period)
	require.Equal(t, "team:search per day: requested 0.6 exceeds the whole limit 0.5 USD: it can never be admitted in this budget (ask less, or raise the limit)",
		r.Denial.Message, "no wait makes it fit, and the message says so")
}

func TestDecide_DisabledAndUnknownBudgets(t *testing.T) {
	off := usd("org:off", events.PeriodMonth, "10")
	off.Disabled = true
	_, a := memLedger(t, off)
	ctx := context.Background()
	r, err := a.Admit(ctx, req("r1", "0.1", "org:off"))
	require.NoError(t, err)
	require.False(t, r.Admitted)
	require.Equal(t, events.ReasonBudgetDisabled, r.Denial.Reason)

	r, err = a.Admit(ctx, req("r2", "0.1", "org:nobody"))
	require.NoError(t, err)
	require.False(t, r.Admitted)
	require.Equal(t, events.ReasonUnknownBudget, r.Denial.Reason)
}

func TestDecide_FixedSlotAndThresholds(t *testing.T) {
	b := usd("org:acme", events.PeriodMonth, "1")
	slot := events.MustMoney("0.25")
	b.FixedSlot = &slot
	b.Thresholds = []events.Money{events.MustMoney("0.5")}
	m, a := memLedger(t, b)
	ctx := context.Background()
	for i, want := range []bool{true, true, true, true, false} {
		r, err := a.Admit(ctx, req("r"+string(rune('a'+i)), "0.01", "org:acme"))
		require.NoError(t, err)
		require.Equal(t, want, r.Admitted, "admit %d reserves the slot, not its amount", i)
	}
	bal := m.Balance(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"})
	require.Equal(t, "1", bal.Reserved.String())
	require.Len(t, bal.Alerted, 1, "the 0.5 threshold is crossed once")
	require.Equal(t, "0.5", bal.Alerted[0].String())
}

// TestDecide_TenantOpenLimitInTheTx: the limit of a tenant's open
// reservations is decided in each admit's Tx, against the ledger's count
// plus what the Txs decided before it opened. AdmitAll prepares every
// request first (each one's pre-check sees 0 open), so only the Tx's check
// can refuse the third. How we know it can fail: without admitTx.checkOpen
// all three are admitted. Another tenant and the untenanted deployment are
// not counted with acme.
func TestDecide_TenantOpenLimitInTheTx(t *testing.T) {
	m := ledger.NewMemory()
	require.NoError(t, m.Define(usd(string(events.TenantScope("acme", "team:a")), events.PeriodMonth, "10")))
	require.NoError(t, m.Define(usd(string(events.TenantScope("globex", "team:a")), events.PeriodMonth, "10")))
	require.NoError(t, m.Define(usd("team:a", events.PeriodMonth, "10")))
	a, err := admit.New(m, admit.WithClock(func() time.Time { return t0 }), admit.WithTenantLimits(admit.TenantLimits{MaxOpen: 2}))
	require.NoError(t, err)
	acme := events.ContextWithTenant(context.Background(), "acme")
	out, errs := a.AdmitAll(acme, []events.AdmitRequest{req("a1", "1", "team:a"), req("a2", "1", "team:a"), req("a3", "1", "team:a")})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.True(t, out[0].Admitted)
	require.True(t, out[1].Admitted)
	var e *events.Error
	require.ErrorAs(t, errs[2], &e)
	require.Equal(t, events.CodeTenantLimit, e.Code)
	require.Equal(t, 2, m.TenantOpen("acme"))

	// A retry past the limit has an unknown outcome, not a refusal.
	retry := req("a4", "1", "team:a")
	retry.Retry = true
	_, err = a.Admit(acme, retry)
	require.ErrorAs(t, err, &e)
	require.Equal(t, events.CodeLedgerUnavailable, e.Code)

	// globex has a limit of its own; the untenanted deployment has none.
	for ctx, n := range map[context.Context]int{events.ContextWithTenant(context.Background(), "globex"): 2, context.Background(): 3} {
		for i := range n {
			r, err := a.Admit(ctx, req(fmt.Sprint("g", i), "1", "team:a"))
			require.NoError(t, err)
			require.True(t, r.Admitted)
		}
	}
	require.Equal(t, 2, m.TenantOpen("globex"))
	require.Equal(t, 2, m.TenantOpen("acme"))
	require.Equal(t, 3, m.TenantOpen(""))
}

// TestDecide_DenialSaysWhenItResets: a limit_reached denial by a budget of
// a period says when that period instance ends, in UTC, from the budget's
// own time zone; a lifetime budget never resets, a request above the
// whole limit is never lifted by a reset, and a disabled budget is not
// lifted by one either: none of those says a time.
func TestDecide_DenialSaysWhenItResets(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	day := usd("team:ny", events.PeriodDay, "0.5")
	day.TZ, day.Loc = "America/New_York", ny
	off := usd("org:off", events.PeriodMonth, "10")
	off.Disabled = true
	_, a := memLedger(t, usd("org:acme", events.PeriodMonth, "1"), day, usd("key:k", events.PeriodLifetime, "0.2"), off)
	ctx := context.Background()
	for i, c := range []struct {
		scope, amount string
		reason        events.Code
		resets        string // "" none
	}{
		{"org:acme", "0.8", "", ""},
		{"org:acme", "0.3", events.ReasonLimitReached, "2027-01-01T00:00:00Z"},
		{"team:ny", "0.4", "", ""},
		// 12:00 UTC is 07:00 in New York: its day ends at 05:00 UTC.
		{"team:ny", "0.2", events.ReasonLimitReached, "2026-12-02T05:00:00Z"},
		{"team:ny", "0.6", events.ReasonLimitReached, ""},
		{"key:k", "0.2", "", ""},
		{"key:k", "0.1", events.ReasonLimitReached, ""},
		{"org:off", "0.1", events.ReasonBudgetDisabled, ""},
	} {
		r, err := a.Admit(ctx, req(fmt.Sprint("r", i), c.amount, c.scope))
		require.NoError(t, err)
		if c.reason == "" {
			require.True(t, r.Admitted, "%d", i)
			continue
		}
		require.Equal(t, c.reason, r.Denial.Reason, "%d", i)
		if c.resets == "" {
			require.Nil(t, r.Denial.ResetsAt, "%d", i)
			continue
		}
		require.NotNil(t, r.Denial.ResetsAt, "%d", i)
		require.Equal(t, c.resets, r.Denial.ResetsAt.Format(time.RFC3339), "%d", i)
		require.Equal(t, time.UTC, r.Denial.ResetsAt.Location(), "%d", i)
	}
}

// TestDecide_AReasonNoResetLiftsIsNamedFirst: an admit denied both by a
// spent limit and by a budget no reset lifts (disabled, in another
// currency, none at all) names the latter, whichever scope comes first:
// told when the limit resets, its caller would be denied again then.
// Before, the first failing budget in the scopes' order was named:
// org:a's limit_reached, with a reset time.
func TestDecide_AReasonNoResetLiftsIsNamedFirst(t *testing.T) {
	off := usd("team:off", events.PeriodMonth, "10")
	off.Disabled = true
	eur := usd("team:eur", events.PeriodMonth, "10")
	eur.Unit = "EUR"
	_, a := memLedger(t, usd("org:a", events.PeriodMonth, "1"), off, eur)
	ctx := context.Background()
	r, err := a.Admit(ctx, req("fill", "1", "org:a"))
	require.NoError(t, err)
	require.True(t, r.Admitted)
	for i, c := range []struct {
		other  string
		reason events.Code
	}{
		{"team:off", events.ReasonBudgetDisabled},
		{"team:eur", events.ReasonUnitMismatch},
		{"team:none", events.ReasonUnknownBudget},
	} {
		r, err := a.Admit(ctx, req(fmt.Sprint("x", i), "0.1", "org:a", c.other))
		require.NoError(t, err)
		require.False(t, r.Admitted)
		require.Equal(t, c.reason, r.Denial.Reason, c.other)
		require.Equal(t, events.Scope(c.other), r.Denial.Scope)
		require.Nil(t, r.Denial.ResetsAt, c.other)
	}
}
