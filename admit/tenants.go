package admit

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
)

// Default per-tenant limits of an Admitter (WithTenantLimits). They apply
// to every tenant but the untenanted deployment ("").
const (
	// DefaultTenantMaxOpen is how many reservations one tenant may hold
	// open at once. A replica holds every open reservation in memory (a
	// few KB each with its read models), so this bounds what one tenant
	// can make every replica hold: about 40 MB.
	DefaultTenantMaxOpen = 10000
	// DefaultTenantMaxDefaultBudgets is how many budgets may be created
	// for one tenant from its scope kinds' defaults (a "user:*" default
	// creates one per user on the user's first admit).
	DefaultTenantMaxDefaultBudgets = 10000
)

// TenantLimits are an Admitter's per-tenant limits. A zero field takes
// its default; a negative one turns that limit off.
type TenantLimits struct {
	// MaxOpen bounds the reservations one tenant holds open
	// (DefaultTenantMaxOpen). An admit past it is refused
	// events.CodeTenantLimit. It is decided in the admit's Tx, against
	// the ledger's own count (ledger.View.TenantOpen): exact across
	// replicas with one commit lane.
	MaxOpen int
	// MaxDefaultBudgets bounds the budgets created for one tenant from
	// defaults (DefaultTenantMaxDefaultBudgets). An admit that would
	// create one past it is refused events.CodeTenantLimit, and creates
	// nothing.
	MaxDefaultBudgets int
	// Source names, for a tenant's own limits (WithTenantOwnLimits),
	// where they were set, as a refusal quotes it ("": serve
	// --tenant-limits).
	Source string
}

func (t TenantLimits) withDefaults() TenantLimits {
	if t.MaxOpen == 0 {
		t.MaxOpen = DefaultTenantMaxOpen
	}
	if t.MaxDefaultBudgets == 0 {
		t.MaxDefaultBudgets = DefaultTenantMaxDefaultBudgets
	}
	return t
}

// WithTenantLimits sets the per-tenant limits (default: TenantLimits{},
// every limit at its default).
func WithTenantLimits(l TenantLimits) Option {
	return func(o *options) error {
		o.tenants = l.withDefaults()
		return nil
	}
}

// WithTenantOwnLimits gives some tenants limits of their own: own returns
// a tenant's, which replace WithTenantLimits' field by field (a zero field
// keeps the common limit, a negative one turns the limit off for that
// tenant), or false for a tenant that has none. It is asked at every
// admit, so what it returns may change while the Admitter runs (serve
// --tenant-limits, read again on SIGHUP).
func WithTenantOwnLimits(own func(tenant string) (TenantLimits, bool)) Option {
	return func(o *options) error {
		if own == nil {
			return errors.New("admit: nil tenant limits")
		}
		o.tenantOwn = own
		return nil
	}
}

// Limits returns the Admitter's per-tenant limits (negative: off).
func (a *Admitter) Limits() TenantLimits { return a.opts.tenants }

// limit is one of a tenant's limits as an admit applies it: its value
// (negative: off), its key in --tenant-limits (serve's flag is the key
// with "tenant-" before it) and whether it is the tenant's own.
type limit struct {
	max int
	key string
	own bool
	src string // where its own was set ("": --tenant-limits)
}

// source names the setting l comes from, for a refusal.
func (l limit) source() string {
	if l.own {
		src := l.src
		if src == "" {
			src = "--tenant-limits"
		}
		return fmt.Sprintf("its own, %s %s=%d", src, l.key, max(l.max, 0))
	}
	return fmt.Sprintf("serve --tenant-%s %d", l.key, l.max)
}

// limitsOf returns tenant's two limits: its own where WithTenantOwnLimits
// gives one, else the common ones.
func (a *Admitter) limitsOf(tenant string) (open, defaults limit) {
	open = limit{max: a.opts.tenants.MaxOpen, key: "max-open"}
	defaults = limit{max: a.opts.tenants.MaxDefaultBudgets, key: "max-default-budgets"}
	if tenant == "" || a.opts.tenantOwn == nil {
		return open, defaults
	}
	own, ok := a.opts.tenantOwn(tenant)
	if !ok {
		return open, defaults
	}
	if own.MaxOpen != 0 {
		open.max, open.own, open.src = own.MaxOpen, true, own.Source
	}
	if own.MaxDefaultBudgets != 0 {
		defaults.max, defaults.own, defaults.src = own.MaxDefaultBudgets, true, own.Source
	}
	return open, defaults
}

// openLimit returns the refusal of tenant's admit if the tenant holds
// open, at or past its limit l, reservations; nil otherwise (and for the
// untenanted deployment or a limit that is off).
func openLimit(tenant string, l limit, open int) error {
	if tenant == "" || l.max < 0 || open < l.max {
		return nil
	}
	return events.TenantLimitError(tenant, events.LimitOpenReservations, int64(l.max), fmt.Sprintf(
		"tenant %s holds %d open %s, its limit (%s): settle or release some first; nothing was reserved",
		tenant, open, plural(open, "reservation", "reservations"), l.source()))
}

// plural is one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// preCheckOpen refuses r before any ledger work if its tenant already
// holds its limit of open reservations as this replica has folded them,
// unless the request id is one the book knows (its replay is answered
// whatever the limit). The Tx decides again, exactly (admitTx.Decide).
func (a *Admitter) preCheckOpen(tenant string, r request) error {
	l, _ := a.limitsOf(tenant)
	if tenant == "" || l.max < 0 {
		return nil
	}
	err := openLimit(tenant, l, a.l.TenantOpen(tenant))
	if err == nil {
		return nil
	}
	if _, known := a.l.ByRequest(r.id); known {
		return nil
	}
	return err
}

// defaultBudgets holds, per tenant, the budgets this replica is creating
// from defaults right now, each with how many admits are creating it:
// with the ledger's count of those it has folded, what a new one is
// checked against.
type defaultBudgets struct {
	mu       sync.Mutex
	creating map[string]map[events.BudgetRef]int
}

// reserveDefault takes the budgets scope s would get from defaults ds for
// a creation, or refuses with CodeTenantLimit if they would take its
// tenant past max. done gives them back.
//
// A budget is counted once whatever the admits creating it (two first
// admits of one scope create it once), and once it is folded it counts in
// the ledger's count, not as being created: the two are read at one
// instant (Ledger.TenantDefaultBudgetsAnd), so the count is exact on one
// replica, even while creations land. Across replicas, creations another
// replica wrote and this one has not folded yet are missed (admit syncs
// with the stream before it creates, so that is only what they wrote
// since): the limit can be passed by about one creation per other replica
// creating at the same instant.
func (a *Admitter) reserveDefault(s events.Scope, ds []ledger.Default) (done func(), err error) {
	tenant := s.Tenant()
	_, l := a.limitsOf(tenant)
	if tenant == "" || l.max < 0 {
		return func() {}, nil
	}
	d := &a.defaults
	d.mu.Lock()
	defer d.mu.Unlock()
	refs, err := a.defaultsLimit(s, ds, l)
	if err != nil {
		return nil, err
	}
	if d.creating == nil {
		d.creating = map[string]map[events.BudgetRef]int{}
	}
	mine := d.creating[tenant]
	if mine == nil {
		mine = map[events.BudgetRef]int{}
		d.creating[tenant] = mine
	}
	for _, ref := range refs {
		mine[ref]++
	}
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, ref := range refs {
			if mine[ref]--; mine[ref] <= 0 {
				delete(mine, ref)
			}
		}
		if len(mine) == 0 {
			// mine is the tenant's map still: it is dropped only once
			// empty, when no creation holds it.
			delete(d.creating, tenant)
		}
	}, nil
}

// checkDefaults refuses, as reserveDefault would, the budgets scope s
// would get from defaults ds past its tenant's limit, without taking
// them.
func (a *Admitter) checkDefaults(s events.Scope, ds []ledger.Default) error {
	_, l := a.limitsOf(s.Tenant())
	if s.Tenant() == "" || l.max < 0 {
		return nil
	}
	a.defaults.mu.Lock()
	defer a.defaults.mu.Unlock()
	_, err := a.defaultsLimit(s, ds, l)
	return err
}

// defaultsLimit is the refusal of the budgets scope s would get from
// defaults ds if they take its tenant past its limit l, nil if they fit;
// refs are those budgets, distinct. A budget counts once: folded, or being
// created and not folded yet. The caller holds a.defaults.mu.
func (a *Admitter) defaultsLimit(s events.Scope, ds []ledger.Default, l limit) (refs []events.BudgetRef, err error) {
	tenant := s.Tenant()
	creating := a.defaults.creating[tenant]
	all := make([]events.BudgetRef, 0, len(creating)+len(ds))
	for ref := range creating {
		all = append(all, ref)
	}
	bs := a.l.BudgetsOf(s)
	for _, d := range ds {
		ref := d.For(s, bs).Ref
		if !slices.Contains(refs, ref) {
			refs = append(refs, ref)
			if _, ok := creating[ref]; !ok {
				all = append(all, ref)
			}
		}
	}
	folded, missing := a.l.TenantDefaultBudgetsAnd(tenant, all)
	have, more := folded, 0
	for i := range all {
		switch {
		case !missing[i]: // folded: in the ledger's count
		case i < len(creating):
			have++ // being created by another admit
		default:
			more++
		}
	}
	if have+more <= l.max {
		return refs, nil
	}
	return nil, events.TenantLimitError(tenant, events.LimitDefaultBudgets, int64(l.max), fmt.Sprintf(
		"tenant %s has %d %s created from defaults, its limit (%s): this scope's first admit would create %d more; nothing was created or reserved",
		tenant, have, plural(have, "budget", "budgets"), l.source(), more))
}

// retryRefusal is err as the answer to req: a tenant_limit refusal of a
// retry (req.Retry) of a real admit becomes CodeLedgerUnavailable, as a
// denied retry does (see answerDenial): an earlier attempt of it may still
// commit, so its outcome is unknown. The limit stays in the error's chain.
func retryRefusal(req events.AdmitRequest, err error) error {
	var e *events.Error
	if err == nil || !req.Retry || (req.Mode != "" && req.Mode != events.ModeAdmit) || !errors.As(err, &e) || e.Code != events.CodeTenantLimit {
		return err
	}
	return &events.Error{Code: events.CodeLedgerUnavailable, Err: e, Message: fmt.Sprintf(
		"request_id %s: this retry is refused (%s), but an earlier attempt of it may still commit, so its outcome is unknown: retry with the same request, or void the request id",
		req.RequestID, e.Message)}
}

// checkOpen is the decision's check of the open-reservation limit, against
// v (ledger.View.TenantOpen: the ledger's count at the revisions the write
// requires, plus what the group decided before this Tx).
func (t *admitTx) checkOpen(v ledger.View) error {
	if t.tenant == "" || t.maxOpen.max < 0 {
		return nil
	}
	return openLimit(t.tenant, t.maxOpen, v.TenantOpen(t.tenant))
}
