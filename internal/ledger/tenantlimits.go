package ledger

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TenantLimits is a tenant's own limits as the ledger keeps them (see
// events.TenantLimitValues for what a value means).
type TenantLimits struct {
	Tenant string
	events.TenantLimitValues
	// Version is the stream sequence of the tenant's current revision.
	Version uint64
}

// tenantLimits is the replica's folded state of one tenant limits key.
type tenantLimits struct {
	def TenantLimits
	src events.TenantLimitsRevision
}

// setTenantLimits makes rev, at seq, the tenant limits key's definition.
func (b *book) setTenantLimits(key string, seq uint64, rev *events.TenantLimitsRevision) {
	if b.tenantLimits == nil {
		b.tenantLimits = map[string]*tenantLimits{}
	}
	b.tenantLimits[key] = &tenantLimits{def: TenantLimits{Tenant: rev.Tenant, TenantLimitValues: rev.TenantLimitValues.Clone(), Version: seq}, src: *rev}
}

// publishTenantLimits makes the book's tenant limits those
// TenantLimitsOf answers: a new map, so readers need no lock. l.mu must
// be held.
func (l *Ledger) publishTenantLimits() {
	m := make(map[string]TenantLimits, len(l.bk.tenantLimits))
	for _, t := range l.bk.tenantLimits {
		m[t.def.Tenant] = t.def
	}
	l.tenantLimits.Store(&m)
}

// TenantLimitsOf returns tenant's own limits as this replica has folded
// them, and false if the ledger never held any for it. Limits that set
// nothing (Empty: removed by a put of nothing) are returned too, with
// their version. It takes no lock: the
// admit path asks it for every request of a tenant. The values are
// shared: not to be changed.
func (l *Ledger) TenantLimitsOf(tenant string) (TenantLimits, bool) {
	m := l.tenantLimits.Load()
	if m == nil {
		return TenantLimits{}, false
	}
	t, ok := (*m)[tenant]
	return t, ok
}

// AllTenantLimits returns every tenant's own limits in the ledger, sorted
// by tenant; limits removed (Empty) are left out.
func (l *Ledger) AllTenantLimits() []TenantLimits {
	m := l.tenantLimits.Load()
	if m == nil {
		return []TenantLimits{}
	}
	out := slices.DeleteFunc(slices.Collect(maps.Values(*m)), func(t TenantLimits) bool { return t.Empty() })
	slices.SortFunc(out, func(a, b TenantLimits) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// TenantLimitsChange is what DefineTenantLimits did.
type TenantLimitsChange struct {
	// Limits are the tenant's limits now (their Version the revision).
	Limits TenantLimits
	// Existed is true when the tenant had limits in the ledger (not
	// removed); Prev is then what they were.
	Existed bool
	Prev    TenantLimits
	// Changed names the changed fields (events.TenantLimitValues.Changes);
	// empty for a tenant's first definition and when nothing changed.
	Changed []string
}

// DefineTenantLimits sets tenant's own limits to v (the whole set): one
// TenantLimitsDefined event in one compare-and-set write of the tenant's
// limits key, chained to the key's previous revision. Putting the limits
// it already has changes nothing and returns them. All attempts share one
// deadline, as in DefineBudget. The caller validates tenant and v.
//
// Errors: *events.Error with CodeLedgerUnavailable or CodeLedgerBusy.
func (l *Ledger) DefineTenantLimits(ctx context.Context, tenant string, v events.TenantLimitValues, now time.Time) (TenantLimitsChange, error) {
	key := streams.TenantLimitsKey(tenant)
	v = v.Clone()
	var cur TenantLimits
	var existed bool
	var changed []string
	seq, wrote, err := l.define(ctx, "limits of tenant "+tenant, func(b *book) (string, func(events.Chain) any, bool, error) {
		cur, existed, changed = TenantLimits{}, false, []string{}
		if t := b.tenantLimits[key]; t != nil {
			cur, existed = t.def, !t.def.Empty()
			if changed = v.Changes(cur.TenantLimitValues); len(changed) == 0 {
				return key, nil, true, nil
			}
		} else if v.Empty() {
			return key, nil, true, nil // nothing to remove
		}
		return key, func(ch events.Chain) any {
			ev := events.TenantLimitsDefined{Tenant: tenant, TenantLimitValues: v, Changed: nilIfEmpty(changed), At: now.UTC()}
			return events.TenantLimitsRevision{Schema: events.SchemaTenantLimits, Chain: ch, Tenant: tenant,
				TenantLimitValues: v, Events: events.Events{ev}}
		}, false, nil
	})
	if err != nil {
		return TenantLimitsChange{}, err
	}
	if !wrote {
		if cur.Tenant == "" {
			cur.Tenant = tenant
		}
		return TenantLimitsChange{Limits: cur, Existed: !cur.Empty(), Prev: cur, Changed: []string{}}, nil
	}
	return TenantLimitsChange{Limits: TenantLimits{Tenant: tenant, TenantLimitValues: v, Version: seq}, Existed: existed, Prev: cur, Changed: changed}, nil
}
