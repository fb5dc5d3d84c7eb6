package report

import (
	"sort"
	"sync"

	"github.com/spendgate/spendgate/events"
)

// Bounds of a DenialRing. Each tenant (and the untenanted deployment)
// keeps its own newest denials, so one tenant denied in a loop cannot push
// another's out of the dashboard: a ring shared by all kept the last 256 of
// anyone's, and 300 denials of one tenant left another's 50 at none.
const (
	// RecentDenialsSize bounds the untenanted deployment's denials kept.
	RecentDenialsSize = 256
	// RecentDenialsPerTenant bounds the denials kept per tenant.
	RecentDenialsPerTenant = 64
	// RecentDenialTenants bounds the tenants kept: past it the tenant
	// whose newest denial is the oldest is forgotten.
	RecentDenialTenants = 256
)

// DenialRing keeps the newest denials of each tenant (RecentDenialsPerTenant
// each; the untenanted deployment's RecentDenialsSize) for up to
// RecentDenialTenants tenants; the zero value is ready. Safe for concurrent
// use.
type DenialRing struct {
	mu      sync.Mutex
	seq     uint64
	tenants map[string]*tenantRing
}

// tenantRing is one tenant's newest denials, each with the order it was
// added in (so that Newest merges the tenants' in that order).
type tenantRing struct {
	buf  []keptDenial
	next int
	last uint64
}

type keptDenial struct {
	seq uint64
	d   events.AdmitDenied
}

// Add keeps d, forgetting its tenant's oldest past its bound.
func (r *DenialRing) Add(d events.AdmitDenied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tenants == nil {
		r.tenants = map[string]*tenantRing{}
	}
	t := r.tenants[d.Tenant]
	if t == nil {
		if len(r.tenants) >= RecentDenialTenants+1 { // the untenanted one besides
			r.forgetStalest()
		}
		t = &tenantRing{}
		r.tenants[d.Tenant] = t
	}
	size := RecentDenialsPerTenant
	if d.Tenant == "" {
		size = RecentDenialsSize
	}
	r.seq++
	k := keptDenial{seq: r.seq, d: d}
	if len(t.buf) < size {
		t.buf = append(t.buf, k)
	} else {
		t.buf[t.next] = k
		t.next = (t.next + 1) % size
	}
	t.last = r.seq
}

// forgetStalest drops the tenant whose newest denial is the oldest.
func (r *DenialRing) forgetStalest() {
	stalest, first := "", true
	for name, t := range r.tenants {
		if name == "" {
			continue
		}
		if first || t.last < r.tenants[stalest].last {
			stalest, first = name, false
		}
	}
	delete(r.tenants, stalest)
}

// Newest returns the denials kept, every tenant's, newest first: up to
// RecentDenialsSize of the untenanted deployment's and
// RecentDenialsPerTenant of each tenant's. A reader showing one tenant's
// filters them (and caps what it shows).
func (r *DenialRing) Newest() []events.AdmitDenied {
	r.mu.Lock()
	var all []keptDenial
	for _, t := range r.tenants {
		all = append(all, t.buf...)
	}
	r.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].seq > all[j].seq })
	out := make([]events.AdmitDenied, len(all))
	for i, k := range all {
		out[i] = k.d
	}
	return out
}
