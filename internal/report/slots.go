package report

import (
	"strings"

	"github.com/spendgate/spendgate/events"
)

// slots are the metadata keys, and the values of each dimension (scopes,
// or one metadata key's values), that a live report groups by, kept per
// tenant: each tenant ("" for the untenanted deployment) has its own
// MaxReportKeys keys and MaxReportValues values per metadata key, the
// first ones it meets in stream order, and its own MaxReportValues scopes
// of each of MaxReportKinds scope kinds (the part of a scope before ':'),
// the first ones of the kind it meets. So no tenant's many keys or values
// can make another's report by a key unavailable or push another's values
// into its Other group, and a tenant's many scopes of one kind (a scope
// per agent run) cannot push its scopes of another kind (its orgs and
// teams) into one: they add up in their kind's Other group instead.
// Tracking only grows: a value tracked when a reservation was counted is
// tracked when it is counted again, and one that was not is not.
type slots map[string]*tenantSlots

// tenantSlots are one tenant's slots: keys the metadata keys tracked,
// each with its dimension's name (MetadataColumnPrefix + key, made once:
// the concatenation on every reservation counted was a tenth of a
// report's fold), overKeys whether a key was met past them; values the
// values tracked per dimension; kinds how many scopes of each kind
// values[dimScope] holds, others the names of the kinds' Other groups
// (KindOther, made once); legacy, for a tenant loaded from a snapshot
// before per-kind scopes, what it had counted in the one Other group.
type tenantSlots struct {
	keys     map[string]string
	overKeys bool
	values   map[string]map[string]bool
	kinds    map[string]int
	others   map[string]string
	legacy   *legacyScopes
}

// legacyScopes are what a snapshot before version 7 left of a tenant
// whose scopes past its first MaxReportValues (of every kind together)
// had been counted in the one Other group: which scopes that was is not
// known. A scope tracked since (not in known) may have spent in that
// group before, so a report that covers a bucket before until (the end of
// the last bucket holding that group when the snapshot was loaded) counts
// it in its kind's Other group: it names only scopes it has all of.
type legacyScopes struct {
	until int64
	known map[string]bool
}

func newTenantSlots() *tenantSlots {
	return &tenantSlots{keys: map[string]string{}, values: map[string]map[string]bool{}, kinds: map[string]int{}, others: map[string]string{}}
}

// track tracks metadata key k.
func (t *tenantSlots) track(k string) string {
	dim := MetadataColumnPrefix + k
	t.keys[k] = dim
	return dim
}

// of returns tenant's slots, made empty on first use.
func (s slots) of(tenant string) *tenantSlots {
	t := s[tenant]
	if t == nil {
		t = newTenantSlots()
		s[tenant] = t
	}
	return t
}

// key reports whether tenant's reports group by metadata key k, tracking
// it while there is room, with the name of k's dimension.
func (s slots) key(tenant, k string) (string, bool) {
	t := s.of(tenant)
	if dim, ok := t.keys[k]; ok {
		return dim, true
	}
	if len(t.keys) >= MaxReportKeys {
		t.overKeys = true
		return "", false
	}
	return t.track(k), true
}

// value maps tenant's value v of dimension dim to its tracked value, or
// to an Other group (value, true). A metadata key's values past
// MaxReportValues go to its one Other group (""). A scope past
// MaxReportValues of its kind goes to its kind's Other group, named as
// the kind's default is ("run:*", KindOther); a scope of a kind met past
// MaxReportKinds kinds goes to the one Other group ("").
func (s slots) value(tenant, dim, v string) (string, bool) {
	t := s.of(tenant)
	vs := t.values[dim]
	if vs == nil {
		vs = map[string]bool{}
		t.values[dim] = vs
	}
	if vs[v] {
		return v, false
	}
	if dim == dimScope {
		return t.scope(vs, v)
	}
	if len(vs) < MaxReportValues {
		vs[v] = true
		return v, false
	}
	return "", true
}

// scope is value for a scope v not tracked yet (vs are the tracked ones).
func (t *tenantSlots) scope(vs map[string]bool, v string) (string, bool) {
	kind := scopeKind(v)
	n, ok := t.kinds[kind]
	if !ok && len(t.kinds) >= MaxReportKinds {
		return "", true
	}
	if n >= MaxReportValues {
		o, ok := t.others[kind]
		if !ok {
			// Made once per kind: every reservation of a run past the
			// cap asks for it twice (taken out, put back) per event.
			o = KindOther(v)
			t.others[kind] = o
		}
		return o, true
	}
	vs[v] = true
	t.kinds[kind] = n + 1
	return v, false
}

// scopeKind is the kind of stored scope v, without its tenant.
func scopeKind(v string) string { return events.Scope(v).Local().Kind() }

// KindOther names the Other group of stored scope v's kind: v's tenant
// (if any) and kind, and the id events.DefaultScopeID, which no scope has
// ("acme/run:17" gives "acme/run:*").
func KindOther(v string) string {
	s := events.Scope(v)
	local := s.Local()
	return strings.TrimSuffix(v, string(local)) + local.Kind() + ":" + events.DefaultScopeID
}

// countKinds counts t's tracked scopes per kind (t.kinds), as a snapshot
// does not write them.
func (t *tenantSlots) countKinds() {
	t.kinds = map[string]int{}
	for v := range t.values[dimScope] {
		t.kinds[scopeKind(v)]++
	}
}

// legacyFold returns what a report from from (unix seconds;
// math.MinInt64 for no bound) counts a tracked stored scope v under: its
// kind's Other group (KindOther(v), true) for a scope its tenant tracked
// since a snapshot of the older slots when the report covers a bucket
// that snapshot's one Other group may hold its spend in (legacyScopes),
// else v. Nil when no tenant was loaded from such a snapshot. What it
// reads is not changed after a load, so it may be called without the
// Aggregate's lock.
func (s slots) legacyFold(from int64) func(v string) (string, bool) {
	var ls map[string]*legacyScopes
	for tenant, t := range s {
		if t.legacy != nil && from < t.legacy.until {
			if ls == nil {
				ls = map[string]*legacyScopes{}
			}
			ls[tenant] = t.legacy
		}
	}
	if ls == nil {
		return nil
	}
	return func(v string) (string, bool) {
		l := ls[events.Scope(v).Tenant()]
		if l == nil || l.known[v] {
			return v, false
		}
		return KindOther(v), true
	}
}

// untracked reports whether a report by metadata key k, of f's tenant
// when f.OneTenant and of every tenant otherwise, would miss what it
// counts: k is not tracked for a tenant that met keys past its slots.
func (s slots) untracked(k string, f Filter) bool {
	if f.OneTenant {
		t := s[f.Tenant]
		return t != nil && t.overKeys && t.keys[k] == ""
	}
	for _, t := range s {
		if t.overKeys && t.keys[k] == "" {
			return true
		}
	}
	return false
}

func (t *tenantSlots) clone() *tenantSlots {
	c := newTenantSlots()
	c.overKeys = t.overKeys
	for k, dim := range t.keys {
		c.keys[k] = dim
	}
	for d, vs := range t.values {
		m := make(map[string]bool, len(vs))
		for v := range vs {
			m[v] = true
		}
		c.values[d] = m
	}
	for k, n := range t.kinds {
		c.kinds[k] = n
	}
	if t.legacy != nil {
		l := &legacyScopes{until: t.legacy.until, known: make(map[string]bool, len(t.legacy.known))}
		for v := range t.legacy.known {
			l.known[v] = true
		}
		c.legacy = l
	}
	return c
}
