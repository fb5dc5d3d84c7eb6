package ledger

import (
	"sort"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Per-tenant counts of the book, for the tenant limits (admit's
// WithTenantLimits): how many reservations each tenant holds open and how
// many budgets were created for it from defaults. They are kept by the one
// fold (applyEvent's openChanged, book.setBudget, a snapshot's load), so every
// replica derives them from the stream, not from what it served itself.
// The tenant of a reservation or budget is its scope's (events.Scope.Tenant);
// the untenanted deployment is tenant "".

// tenantCounts is the book's per-tenant counts; a count that falls to 0 is
// deleted, so two books of the same state hold equal maps.
type tenantCounts struct {
	open     map[string]int // open reservations per tenant
	defaults map[string]int // budgets created from a default per tenant
}

func newTenantCounts() tenantCounts {
	return tenantCounts{open: map[string]int{}, defaults: map[string]int{}}
}

func addCount(m map[string]int, tenant string, d int) {
	if n := m[tenant] + d; n > 0 {
		m[tenant] = n
	} else {
		delete(m, tenant)
	}
}

// reservationTenant is the tenant of r (every balance of a reservation is
// of one tenant: admit qualifies every scope of a request by its tenant).
func reservationTenant(r *Reservation) string {
	if len(r.Balances) == 0 {
		return ""
	}
	return r.Balances[0].Scope.Tenant()
}

// openChanged records that r became open (d = 1) or stopped being open
// (d = -1) in the book.
func (b *book) openChanged(r *Reservation, d int) {
	addCount(b.tenants.open, reservationTenant(r), d)
}

// budgetChanged records a budget definition of scope replacing another
// (existed, fromDefault before) with one whose FromDefault is now.
func (b *book) budgetChanged(scope events.Scope, existed, before bool, now bool) {
	switch {
	case now && (!existed || !before):
		addCount(b.tenants.defaults, scope.Tenant(), 1)
	case !now && existed && before:
		addCount(b.tenants.defaults, scope.Tenant(), -1)
	}
}

// TenantOpen returns how many reservations tenant holds open, as this
// replica has folded the stream. A decision reads it through the View
// (View.TenantOpen), which is exact at the revisions the write requires.
func (l *Ledger) TenantOpen(tenant string) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.tenants.open[tenant]
}

// TenantDefaultBudgets returns how many budgets were created for tenant
// from its scope kinds' defaults (Budget.FromDefault set), as this replica
// has folded the stream.
func (l *Ledger) TenantDefaultBudgets(tenant string) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.tenants.defaults[tenant]
}

// TenantDefaultBudgetsAnd returns, read at one instant, how many budgets
// were created for tenant from defaults as this replica has folded the
// stream, and for each of refs (budgets being created from defaults)
// whether it is missing: the book holds no budget under it yet. Read
// apart, a creation folded between the two reads would be counted twice
// or not at all.
func (l *Ledger) TenantDefaultBudgetsAnd(tenant string, refs []events.BudgetRef) (folded int, missing []bool) {
	keys := make([]string, len(refs))
	for i, ref := range refs {
		keys[i] = streams.BudgetKey(ref)
	}
	missing = make([]bool, len(refs))
	l.mu.RLock()
	defer l.mu.RUnlock()
	for i, key := range keys {
		missing[i] = l.bk.budgets[key] == nil
	}
	return l.bk.tenants.defaults[tenant], missing
}

// TenantCount is one tenant's counts (see Ledger.TenantCounts).
type TenantCount struct {
	Tenant string
	// Open is the reservations it holds open; DefaultBudgets the budgets
	// created for it from defaults.
	Open, DefaultBudgets int
}

// TenantCounts returns the counts of every tenant that holds an open
// reservation or a budget created from a default, by tenant name; the
// untenanted deployment ("") is left out.
func (l *Ledger) TenantCounts() []TenantCount {
	l.mu.RLock()
	byName := make(map[string]*TenantCount, len(l.bk.tenants.open)+len(l.bk.tenants.defaults))
	get := func(t string) *TenantCount {
		c := byName[t]
		if c == nil {
			c = &TenantCount{Tenant: t}
			byName[t] = c
		}
		return c
	}
	for t, n := range l.bk.tenants.open {
		get(t).Open = n
	}
	for t, n := range l.bk.tenants.defaults {
		get(t).DefaultBudgets = n
	}
	l.mu.RUnlock()
	out := make([]TenantCount, 0, len(byName))
	for t, c := range byName {
		if t != "" {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

// TenantOpen returns how many reservations tenant holds open as of this
// decision: the book's count plus the reservations the Txs decided before
// this one in the group opened, minus those they closed.
//
// With one commit lane (streams.DefaultLanes) it is exact: every
// reservation is in the one lane, whose revision the write requires, and a
// book folded past that revision makes the group decide again (the view
// goes stale). With several lanes the reservations in the lanes this
// decision does not write are read as this replica has folded them, so
// another replica's admits in another lane, committed but not yet folded
// here, are missed: a limit of n then holds exactly per lane, and at most
// lanes x n in all (in practice n plus what the tenant committed in other
// lanes during the follower's lag).
func (v *group) TenantOpen(tenant string) int {
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	for lane, at := range v.lanes {
		if v.l.bk.rev(lane) != at {
			v.stale = true
		}
	}
	return v.l.bk.tenants.open[tenant] + v.tenantOpen[tenant]
}

// openDelta journals and records that the group's copy of reservation r
// became open (d = 1) or stopped being open (d = -1): what TenantOpen adds
// to the book's count.
func (v *group) openDelta(r *Reservation, d int) {
	t := reservationTenant(r)
	if v.tenantOpen == nil {
		v.tenantOpen = map[string]int{}
	}
	v.tenantOpen[t] += d
	v.journal = append(v.journal, undoEntry{op: undoTenant, id: t, n: d})
}
