package metrics

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Per-tenant families. The tenant label's values are bounded: the first
// MaxTenantSeries tenants a replica counts are named, every later one is
// counted under TenantOther, and the gauges name the MaxTenantSeries
// tenants with the most open reservations.
const (
	// MaxTenantSeries bounds the distinct tenant label values of each
	// per-tenant family.
	MaxTenantSeries = 100
	// TenantOther is the tenant label of the tenants past MaxTenantSeries
	// (not a valid tenant name: tenants start with a letter).
	TenantOther = "_other"
)

// tenantLabels hands out the tenant label values of the per-tenant
// counters: a tenant's own name for the first MaxTenantSeries tenants,
// TenantOther for the rest.
type tenantLabels struct {
	mu    sync.Mutex
	named map[string]bool
}

func (l *tenantLabels) label(tenant string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.named[tenant] {
		return tenant
	}
	if len(l.named) >= MaxTenantSeries {
		return TenantOther
	}
	if l.named == nil {
		l.named = map[string]bool{}
	}
	l.named[tenant] = true
	return tenant
}

// tenantFamilies are the per-tenant counters every Set has.
type tenantFamilies struct {
	labels tenantLabels
	// limited counts spendgate_tenant_limited_total{tenant,limit}.
	limited *CounterVec
	// unknownScope counts
	// spendgate_tenant_unknown_scope_denials_total{tenant}.
	unknownScope *CounterVec
}

func newTenantFamilies() tenantFamilies {
	return tenantFamilies{
		limited: NewCounterVec("spendgate_tenant_limited_total",
			"Requests refused tenant_limit (limit open_reservations, request_rate, default_budgets), and denial records not stored past a tenant's bytes per second (limit denial_bytes), by tenant (past "+strconv.Itoa(MaxTenantSeries)+" tenants: "+TenantOther+").",
			"tenant", "limit"),
		unknownScope: NewCounterVec("spendgate_tenant_unknown_scope_denials_total",
			"Admits a tenant sent naming a scope it has no budget for (denied unknown_budget): counted here, never recorded on the denial stream.",
			"tenant"),
	}
}

// TenantLimited counts one refusal of tenant's request past limit (an
// events.Limit* name), or one denial record of tenant not stored past its
// bytes per second (events.LimitDenialBytes).
func (s *Set) TenantLimited(tenant, limit string) {
	s.tenants.limited.With(s.tenants.labels.label(tenant), limit).Inc()
}

// TenantUnknownScopeDenial counts one denial of tenant's admit for a scope
// the tenant has no budget for.
func (s *Set) TenantUnknownScopeDenial(tenant string) {
	s.tenants.unknownScope.With(s.tenants.labels.label(tenant)).Inc()
}

// TenantSample is one tenant's counts, as the replica's book has them.
type TenantSample struct {
	Tenant string
	// Open is the reservations it holds open; DefaultBudgets the budgets
	// created for it from defaults.
	Open, DefaultBudgets int
}

// RegisterTenants adds spendgate_tenant_open_reservations{tenant} and
// spendgate_tenant_default_budgets{tenant}, read from f at each scrape
// (f must not block: it reads the book). Each names at most
// MaxTenantSeries tenants, those with the most open reservations (then the
// most budgets from defaults, then by name). Call it once.
func (s *Set) RegisterTenants(f func() []TenantSample) {
	top := func() []TenantSample {
		all := f()
		if len(all) <= MaxTenantSeries {
			return all
		}
		all = slices.Clone(all)
		slices.SortFunc(all, func(a, b TenantSample) int {
			return cmp.Or(cmp.Compare(b.Open, a.Open), cmp.Compare(b.DefaultBudgets, a.DefaultBudgets), strings.Compare(a.Tenant, b.Tenant))
		})
		return all[:MaxTenantSeries]
	}
	family := func(name, help string, v func(TenantSample) int) *GaugeVecFunc {
		return NewGaugeVecFunc(name, help, []string{"tenant"}, func() []Sample {
			ts := top()
			out := make([]Sample, len(ts))
			for i, t := range ts {
				out[i] = Sample{LabelValues: []string{t.Tenant}, Value: Int(int64(v(t)))}
			}
			return out
		})
	}
	s.Registry.MustRegister(
		family("spendgate_tenant_open_reservations", "Reservations each tenant holds open, as this replica's book has them (limit: serve --tenant-max-open).",
			func(t TenantSample) int { return t.Open }),
		family("spendgate_tenant_default_budgets", "Budgets created for each tenant from its scope kinds' defaults (limit: serve --tenant-max-default-budgets).",
			func(t TenantSample) int { return t.DefaultBudgets }),
	)
}
