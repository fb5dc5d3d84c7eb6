package admit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
)

// defaultsLedger is ledger.Memory with a day default for every scope kind
// and a CreateFromDefault that defines the scope's budget, counts it as
// the tenant's budget from a default (folded), and then calls hold, the
// test's hook, before it returns: the instant at which a replica has
// folded a creation whose admit has not given back its place yet.
type defaultsLedger struct {
	*ledger.Memory
	def ledger.Default
	// hold, if set, is called by CreateFromDefault once the budget is
	// folded (after) or before it is (before is true).
	hold func(s events.Scope, before bool)

	mu     sync.Mutex
	folded map[string]int
}

func newDefaultsLedger() *defaultsLedger {
	return &defaultsLedger{
		Memory: ledger.NewMemory(),
		def: ledger.Default{Kind: "user", Def: ledger.Budget{Ref: events.BudgetRef{Period: events.PeriodDay},
			Limit: events.MustMoney("10"), Unit: "USD"}},
		folded: map[string]int{},
	}
}

func (f *defaultsLedger) DefaultsOf(string) []ledger.Default { return []ledger.Default{f.def} }

func (f *defaultsLedger) CreateFromDefault(_ context.Context, s events.Scope, d ledger.Default, _ time.Time) (bool, error) {
	if f.hold != nil {
		f.hold(s, true)
	}
	b := d.For(s, nil)
	f.mu.Lock()
	_, had := f.Budget(b.Ref)
	if !had {
		if err := f.Define(b); err != nil {
			f.mu.Unlock()
			return false, err
		}
		f.folded[s.Tenant()]++
	}
	f.mu.Unlock()
	if f.hold != nil {
		f.hold(s, false)
	}
	return !had, nil
}

func (f *defaultsLedger) TenantDefaultBudgets(tenant string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.folded[tenant]
}

func (f *defaultsLedger) TenantDefaultBudgetsAnd(tenant string, refs []events.BudgetRef) (int, []bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	missing := make([]bool, len(refs))
	for i, ref := range refs {
		_, ok := f.Budget(ref)
		missing[i] = !ok
	}
	return f.folded[tenant], missing
}

// TestDefaultBudgets_CountedOnceWhileLanding: a tenant's budgets from
// defaults are counted once each, whether folded, being created, or both
// at once, so the limit refuses exactly what would pass it.
//
//   - A creation folded while its admit has not yet given its place back
//     is not counted twice: with a limit of 2, a second scope's first
//     admit at that instant is admitted.
//   - Two first admits of one scope create one budget and take one place:
//     with a limit of 1, both are admitted.
//   - A third scope past the limit is refused tenant_limit, and a check of
//     it is refused as its admit is, without taking a place.
//
// How we know it can fail: with the folded count and the creations in
// flight summed as two counters (the code before this test), the first
// case refuses the second scope (1 folded + 1 in flight + 1 > 2), the
// second refuses the second admit (1 in flight + 1 > 1); the service's
// test of 20 concurrent first admits saw 4 budgets created, not 5.
func TestDefaultBudgets_CountedOnceWhileLanding(t *testing.T) {
	acme := events.ContextWithTenant(context.Background(), "acme")
	admitOne := func(a *admit.Admitter, id, scope string) (events.AdmitReply, error) {
		return a.Admit(acme, req(id, "1", scope))
	}
	// admitInBackground admits id on scope in a goroutine; its error, or
	// one saying it was denied, comes on the channel.
	admitInBackground := func(a *admit.Admitter, id, scope string) <-chan error {
		done := make(chan error, 1)
		go func() {
			r, err := admitOne(a, id, scope)
			if err == nil && !r.Admitted {
				err = &events.Error{Code: events.CodeInternal, Message: id + " denied"}
			}
			done <- err
		}()
		return done
	}
	// limited is a defaultsLedger and an Admitter that lets a tenant
	// have max budgets from defaults (and any number of open
	// reservations).
	limited := func(t *testing.T, max int) (*defaultsLedger, *admit.Admitter) {
		f := newDefaultsLedger()
		a, err := admit.New(f, admit.WithClock(func() time.Time { return t0 }),
			admit.WithTenantLimits(admit.TenantLimits{MaxDefaultBudgets: max, MaxOpen: -1}))
		require.NoError(t, err)
		return f, a
	}

	t.Run("folded and in flight", func(t *testing.T) {
		f, a := limited(t, 2)
		landed, release := make(chan struct{}), make(chan struct{})
		f.hold = func(s events.Scope, before bool) {
			if s.Local() == "user:u1" && !before {
				close(landed)
				<-release
			}
		}
		done := admitInBackground(a, "r1", "user:u1")
		waitClosed(t, landed, "u1's budget to be created")
		r, err := admitOne(a, "r2", "user:u2")
		require.NoError(t, err, "u1's budget is counted once: 1 of 2 taken")
		require.True(t, r.Admitted)
		close(release)
		require.NoError(t, <-done)
		require.Equal(t, 2, f.TenantDefaultBudgets("acme"))

		// The limit is reached: a third scope is refused, its check too,
		// and neither creates anything.
		for _, mode := range []string{events.ModeCheck, events.ModeAdmit} {
			rq := req("r3-"+mode, "1", "user:u3")
			rq.Mode = mode
			_, err := a.Admit(acme, rq)
			var e *events.Error
			require.ErrorAs(t, err, &e, mode)
			require.Equal(t, events.CodeTenantLimit, e.Code, mode)
		}
		require.Equal(t, 2, f.TenantDefaultBudgets("acme"))
	})

	t.Run("one scope, two first admits", func(t *testing.T) {
		f, a := limited(t, 1)
		entered, release := make(chan struct{}), make(chan struct{})
		var first atomic.Bool
		f.hold = func(s events.Scope, before bool) {
			if before && first.CompareAndSwap(false, true) {
				close(entered)
				<-release
			}
		}
		done := admitInBackground(a, "first", "user:u1")
		waitClosed(t, entered, "the first admit to start its creation")
		// The first admit holds its place and has created nothing yet.
		r, err := admitOne(a, "second", "user:u1")
		require.NoError(t, err, "the same budget is one place, not two")
		require.True(t, r.Admitted)
		close(release)
		require.NoError(t, <-done)
		require.Equal(t, 1, f.TenantDefaultBudgets("acme"))
	})
}

// waitClosed waits, at most 10 s, for ch to be closed.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
