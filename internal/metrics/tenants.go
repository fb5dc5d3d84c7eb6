package metrics

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
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
	limited *prometheus.CounterVec
	// unknownScope counts
	// spendgate_tenant_unknown_scope_denials_total{tenant}.
	unknownScope *prometheus.CounterVec
}

func newTenantFamilies() *tenantFamilies {
	return &tenantFamilies{
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_tenant_limited_total",
			Help: "Requests refused tenant_limit (limit open_reservations, request_rate, default_budgets, budgets), and denial records not stored past a tenant's bytes per second (limit denial_bytes), by tenant (past " + strconv.Itoa(MaxTenantSeries) + " tenants: " + TenantOther + ")."},
			[]string{"tenant", "limit"}),
		unknownScope: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_tenant_unknown_scope_denials_total",
			Help: "Admits a tenant sent naming a scope it has no budget for (denied unknown_budget): counted here, never recorded on the denial stream."},
			[]string{"tenant"}),
	}
}

// TenantLimited counts one refusal of tenant's request past limit (an
// events.Limit* name), or one denial record of tenant not stored past its
// bytes per second (events.LimitDenialBytes).
func (s *Set) TenantLimited(tenant, limit string) {
	s.tenants.limited.WithLabelValues(s.tenants.labels.label(tenant), limit).Inc()
}

// TenantUnknownScopeDenial counts one denial of tenant's admit for a scope
// the tenant has no budget for.
func (s *Set) TenantUnknownScopeDenial(tenant string) {
	s.tenants.unknownScope.WithLabelValues(s.tenants.labels.label(tenant)).Inc()
}

// TenantSample is one tenant's counts, as the replica's book has them.
type TenantSample struct {
	Tenant string
	// Open is the reservations it holds open; DefaultBudgets the budgets
	// created for it from defaults; Budgets those it put for their scopes
	// (not retired).
	Open, DefaultBudgets, Budgets int
	// MaxOpen, MaxDefaultBudgets and MaxBudgets are the tenant's limits on
	// this replica (0: no limit, no series).
	MaxOpen, MaxDefaultBudgets, MaxBudgets int64
}

// RegisterTenants adds spendgate_tenant_open_reservations{tenant},
// spendgate_tenant_default_budgets{tenant} and
// spendgate_tenant_budgets{tenant}, with the limits of each, read from f
// once a scrape (f must not block: it reads the book). Each names at most
// MaxTenantSeries tenants, those with the most open reservations (then the
// most budgets from defaults, then the most budgets of their own, then by
// name). Call it once.
func (s *Set) RegisterTenants(f func() []TenantSample) {
	s.Registry.MustRegister(&tenantCollector{f: f,
		open: prometheus.NewDesc("spendgate_tenant_open_reservations",
			"Reservations each tenant holds open, as this replica's book has them (limit: serve --tenant-max-open).", []string{"tenant"}, nil),
		defaults: prometheus.NewDesc("spendgate_tenant_default_budgets",
			"Budgets created for each tenant from its scope kinds' defaults (limit: serve --tenant-max-default-budgets).", []string{"tenant"}, nil),
		maxOpen: prometheus.NewDesc("spendgate_tenant_max_open_reservations",
			"The open reservations each tenant may hold on this replica: its own limit (tenant-limits put, --tenant-limits) or serve --tenant-max-open; absent: no limit.", []string{"tenant"}, nil),
		maxDefaults: prometheus.NewDesc("spendgate_tenant_max_default_budgets",
			"The budgets that may be created for each tenant from defaults on this replica: its own limit or serve --tenant-max-default-budgets; absent: no limit.", []string{"tenant"}, nil),
		budgets: prometheus.NewDesc("spendgate_tenant_budgets",
			"Budgets each tenant has put for their scopes (not created from defaults, not retired), as this replica's book has them (limit: serve --tenant-max-budgets).", []string{"tenant"}, nil),
		maxBudgets: prometheus.NewDesc("spendgate_tenant_max_budgets",
			"The budgets each tenant may put for their scopes on this replica: its own limit or serve --tenant-max-budgets; absent: no limit.", []string{"tenant"}, nil),
	})
}

// tenantCollector writes the per-tenant gauges from one read of the book
// per scrape.
type tenantCollector struct {
	f                                    func() []TenantSample
	open, defaults, maxOpen, maxDefaults *prometheus.Desc
	budgets, maxBudgets                  *prometheus.Desc
}

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.defaults
	ch <- c.maxOpen
	ch <- c.maxDefaults
	ch <- c.budgets
	ch <- c.maxBudgets
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range topTenants(c.f()) {
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(t.Open), t.Tenant)
		ch <- prometheus.MustNewConstMetric(c.defaults, prometheus.GaugeValue, float64(t.DefaultBudgets), t.Tenant)
		if t.MaxOpen > 0 {
			ch <- prometheus.MustNewConstMetric(c.maxOpen, prometheus.GaugeValue, float64(t.MaxOpen), t.Tenant)
		}
		if t.MaxDefaultBudgets > 0 {
			ch <- prometheus.MustNewConstMetric(c.maxDefaults, prometheus.GaugeValue, float64(t.MaxDefaultBudgets), t.Tenant)
		}
		ch <- prometheus.MustNewConstMetric(c.budgets, prometheus.GaugeValue, float64(t.Budgets), t.Tenant)
		if t.MaxBudgets > 0 {
			ch <- prometheus.MustNewConstMetric(c.maxBudgets, prometheus.GaugeValue, float64(t.MaxBudgets), t.Tenant)
		}
	}
}

// topTenants returns the MaxTenantSeries tenants of all with the most open
// reservations (then budgets from defaults, then budgets of their own,
// then by name); all is not
// modified.
func topTenants(all []TenantSample) []TenantSample {
	if len(all) <= MaxTenantSeries {
		return all
	}
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b TenantSample) int {
		return cmp.Or(cmp.Compare(b.Open, a.Open), cmp.Compare(b.DefaultBudgets, a.DefaultBudgets), cmp.Compare(b.Budgets, a.Budgets),
			strings.Compare(a.Tenant, b.Tenant))
	})
	return all[:MaxTenantSeries]
}
