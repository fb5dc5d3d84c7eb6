package ledger

import (
	"sort"
	"sync"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Per-tenant counts of the book, for the tenant limits (admit's
// WithTenantLimits): how many reservations each tenant holds open and how
// many budgets were created for it from defaults, and how many it has
// put for their scopes (not retired). They are kept by the one
// fold (applyEvent's openChanged, book.setBudget, a snapshot's load), so every
// replica derives them from the stream, not from what it served itself.
// The tenant of a reservation or budget is its scope's (events.Scope.Tenant);
// the untenanted deployment is tenant "".

// tenantCounts is the book's per-tenant counts; a count that falls to 0 is
// deleted, so two books of the same state hold equal maps.
type tenantCounts struct {
	open     map[string]int // open reservations per tenant
	defaults map[string]int // budgets created from a default per tenant
	// budgets are the budgets put for their scopes (not created from a
	// default), not retired, per tenant.
	budgets map[string]int
}

func newTenantCounts() tenantCounts {
	return tenantCounts{open: map[string]int{}, defaults: map[string]int{}, budgets: map[string]int{}}
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

// budgetClass is what a budget definition counts toward in its tenant's
// counts.
type budgetClass int

const (
	budgetNone    budgetClass = iota // none (no budget, or a retired one)
	budgetDefault                    // the budgets created from defaults
	budgetOwn                        // the budgets put for their scopes
)

// budgetClassOf is the class of a budget created from the default
// fromDefault (0: put for its scope), retired or not.
func budgetClassOf(fromDefault uint64, retired bool) budgetClass {
	switch {
	case retired:
		return budgetNone
	case fromDefault != 0:
		return budgetDefault
	}
	return budgetOwn
}

// budgetChanged records a budget definition of scope replacing another
// of class before (budgetNone: none, or a retired one) with one of class
// now. A put changing a budget created from a default makes it one put
// for its scope (its FromDefault is 0): it moves from one count to the
// other.
func (b *book) budgetChanged(scope events.Scope, before, now budgetClass) {
	if before == now {
		return
	}
	if m := b.tenants.of(before); m != nil {
		addCount(m, scope.Tenant(), -1)
	}
	if m := b.tenants.of(now); m != nil {
		addCount(m, scope.Tenant(), 1)
	}
}

// of is the count of the budgets of class c (nil for budgetNone).
func (t tenantCounts) of(c budgetClass) map[string]int {
	switch c {
	case budgetDefault:
		return t.defaults
	case budgetOwn:
		return t.budgets
	}
	return nil
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

// TenantBudgets returns how many budgets tenant has that were put for
// their scopes (not created from defaults) and are not retired, as this
// replica has folded the stream (see EditBudgetWithin).
func (l *Ledger) TenantBudgets(tenant string) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.tenants.budgets[tenant]
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
	// created for it from defaults; Budgets those put for their scopes
	// (not retired).
	Open, DefaultBudgets, Budgets int
}

// TenantCounts returns the counts of every tenant that holds an open
// reservation or a budget (from a default or its own), by tenant name; the
// untenanted deployment ("") is left out.
func (l *Ledger) TenantCounts() []TenantCount {
	l.mu.RLock()
	byName := make(map[string]*TenantCount, len(l.bk.tenants.open)+len(l.bk.tenants.defaults)+len(l.bk.tenants.budgets))
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
	for t, n := range l.bk.tenants.budgets {
		get(t).Budgets = n
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

// BudgetLimit bounds the budgets one tenant has put for their scopes (not
// created from defaults, not retired): see EditBudgetWithin.
type BudgetLimit struct {
	// Max is how many the budget's tenant may have; 0 or less: no limit.
	Max int
	// Refusal is the error refusing a put that would create one more
	// when the tenant has have (folded and being created on this
	// replica).
	Refusal func(have int) error
}

// creatingBudgets holds, per tenant, the budgets this replica is creating
// by a put right now (EditBudgetWithin), by budget key, each with how many
// puts are creating it: with the book's count of those it has folded,
// what a new one is checked against.
type creatingBudgets struct {
	mu sync.Mutex
	m  map[string]map[string]int
}

// reserve decides, against b (read locked by the caller), whether the
// tenant may create the budget under key past its count, and if so takes
// it as being created; release gives it back. A budget is counted once:
// folded (in the book's count), or being created and not folded yet, so
// the count is exact on this replica even while creations land. It
// returns the refusal of lim, or nil.
func (c *creatingBudgets) reserve(b *book, tenant, key string, lim BudgetLimit) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	mine := c.m[tenant]
	have := b.tenants.budgets[tenant]
	for k := range mine {
		if k != key && b.budgets[k] == nil {
			have++ // being created by another put, not folded yet
		}
	}
	if have >= lim.Max {
		return lim.Refusal(have)
	}
	if mine == nil {
		if c.m == nil {
			c.m = map[string]map[string]int{}
		}
		mine = map[string]int{}
		c.m[tenant] = mine
	}
	mine[key]++
	return nil
}

// release gives back a budget reserve took.
func (c *creatingBudgets) release(tenant, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mine := c.m[tenant]
	if mine[key]--; mine[key] <= 0 {
		delete(mine, key)
	}
	if len(mine) == 0 {
		delete(c.m, tenant)
	}
}
