package report

// slots are the metadata keys, and the values of each dimension (scopes,
// or one metadata key's values), that a live report groups by, kept per
// tenant: each tenant ("" for the untenanted deployment) has its own
// MaxReportKeys keys and MaxReportValues values per dimension, the first
// ones it meets in stream order. So no tenant's many keys or values can
// make another's report by a key unavailable or push another's values
// into its Other group. Tracking only grows: a value tracked when a
// reservation was counted is tracked when it is counted again.
type slots map[string]*tenantSlots

// tenantSlots are one tenant's slots: keys the metadata keys tracked,
// each with its dimension's name (MetadataColumnPrefix + key, made once:
// the concatenation on every reservation counted was a tenth of a
// report's fold), overKeys whether a key was met past them; values the
// values tracked per dimension.
type tenantSlots struct {
	keys     map[string]string
	overKeys bool
	values   map[string]map[string]bool
}

func newTenantSlots() *tenantSlots {
	return &tenantSlots{keys: map[string]string{}, values: map[string]map[string]bool{}}
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
// to Other ("", true) once the dimension holds MaxReportValues others.
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
	if len(vs) < MaxReportValues {
		vs[v] = true
		return v, false
	}
	return "", true
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
	return c
}
