package service

import (
	"bytes"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// Per-tenant limits of a replica (replica.Config.TenantLimits). Three live
// here: the request rate (checked before a request takes an in-flight
// slot) and the bytes of denial records (DenialRecorder), per replica, and
// the budgets a tenant puts (budget.put, decided against the ledger). The
// open reservations and the budgets from defaults are the admitter's
// (admit.TenantLimits), decided against the ledger.
const (
	// DefaultTenantMaxBudgets is how many budgets one tenant may have put
	// for their scopes (not created from defaults, not retired). A
	// platform's tenant defines its budgets per team, project, key or
	// model, in a period or two: hundreds, a few thousand for a large one
	// (a budget per user or per run comes from a default, counted apart).
	// Each budget stays in every replica's book and every snapshot.
	DefaultTenantMaxBudgets = 5000
	// DefaultTenantRate is how many requests per second one tenant may
	// send one replica (each item of a batch counts), with a burst of
	// TenantBurst(DefaultTenantRate).
	DefaultTenantRate = 500
	// DefaultTenantDenialBytes is how many bytes per second of denial
	// records one replica stores for one tenant, with a burst of
	// TenantDenialBurst seconds' worth.
	DefaultTenantDenialBytes = 16 << 10
	// TenantDenialBurst is the burst of the denial bytes, in seconds of
	// the tenant's rate.
	TenantDenialBurst = 16
	// MaxTenantRate bounds a rate (requests or bytes per second).
	MaxTenantRate = 1 << 30
)

// TenantLimits are a replica's per-tenant limits. A zero field takes its
// default; a negative one turns that limit off. The untenanted deployment
// (plain subjects) has none of them.
type TenantLimits struct {
	// MaxOpen and MaxDefaultBudgets are admit.TenantLimits': the
	// reservations one tenant holds open, and the budgets created for it
	// from defaults (admit.DefaultTenantMaxOpen,
	// admit.DefaultTenantMaxDefaultBudgets).
	MaxOpen, MaxDefaultBudgets int
	// MaxBudgets is the budgets one tenant may have put for their scopes
	// (DefaultTenantMaxBudgets): not created from defaults, not retired.
	// A budget.put on a tenant's subject that would create one past it is
	// refused tenant_limit and writes nothing; a change of one it has is
	// never refused.
	MaxBudgets int
	// Rate is the requests per second one tenant may send this replica
	// (DefaultTenantRate); past it a request is answered tenant_limit at
	// once, before any ledger work. Burst is how many it may send at once
	// after a pause (0: TenantBurst's default).
	Rate, Burst int
	// DenialBytes is the bytes per second of denial records this replica
	// stores for one tenant (DefaultTenantDenialBytes); past it a denial
	// is answered as ever but not recorded, and counted.
	DenialBytes int
	// Source names, in a refusal, where a tenant's own limits were set
	// ("": serve --tenant-limits); the common limits have none.
	Source string
}

// SourceLedger is the Source of the limits kept in the ledger.
const SourceLedger = "tenant-limits put"

// LedgerLimits returns the limits kept in the ledger for a tenant as a
// TenantTable holds them: a value left out keeps the common limit (0), a
// value of 0 is no limit (negative), a Burst left out is a tenth of a
// second's worth of the tenant's own rate.
func LedgerLimits(v events.TenantLimitValues) TenantLimits {
	get := func(p *int64) int {
		switch {
		case p == nil:
			return 0
		case *p == 0:
			return -1
		}
		return int(*p)
	}
	l := TenantLimits{MaxOpen: get(v.MaxOpen), MaxDefaultBudgets: get(v.MaxDefaultBudgets), MaxBudgets: get(v.MaxBudgets), Rate: get(v.Rate),
		DenialBytes: get(v.DenialBytes), Source: SourceLedger}
	if v.Burst != nil {
		l.Burst = int(*v.Burst)
	}
	return l
}

// source names where a tenant's own limit key=value was set, for a
// refusal.
func (t TenantLimits) source(key string, value int) string {
	src := t.Source
	if src == "" {
		src = "--tenant-limits"
	}
	return fmt.Sprintf("its own, %s %s=%d", src, key, value)
}

// WithDefaults fills the zero fields of the replica's own limits
// (MaxBudgets, Rate, DenialBytes; the admitter fills its own).
func (t TenantLimits) WithDefaults() TenantLimits {
	if t.MaxBudgets == 0 {
		t.MaxBudgets = DefaultTenantMaxBudgets
	}
	if t.Rate == 0 {
		t.Rate = DefaultTenantRate
	}
	if t.Burst <= 0 {
		t.Burst = TenantBurst(t.Rate)
	}
	if t.DenialBytes == 0 {
		t.DenialBytes = DefaultTenantDenialBytes
	}
	return t
}

// TenantBurst is the default burst of a request rate: a tenth of a
// second's worth, and at least a full batch (events.MaxBatchItems), so an
// idle tenant's batch is never cut. A burst of a whole second's worth let
// a flooding tenant through at its own pace for a third of every second
// (1,500 requests a second against a rate of 500), and its neighbours'
// admit p99 felt that more than the refusals.
func TenantBurst(rate int) int {
	return max(rate/10, events.MaxBatchItems)
}

// rateOf returns, for tenantBuckets, the request rate and burst of the
// tenants whose own limits set either, over common; nil for the nil
// table.
func (t *TenantTable) rateOf(common TenantLimits) func(tenant string) (rate, burst int, ok bool) {
	if t == nil {
		return nil
	}
	return func(tenant string) (int, int, bool) {
		own, ok := t.Get(tenant)
		if !ok || own.Rate == 0 && own.Burst == 0 {
			return 0, 0, false
		}
		l := t.Of(tenant, common)
		return l.Rate, l.Burst, true
	}
}

// bytesOf is rateOf for the denial-record bytes (DenialBytes, with a
// burst of TenantDenialBurst seconds' worth).
func (t *TenantTable) bytesOf() func(tenant string) (rate, burst int, ok bool) {
	if t == nil {
		return nil
	}
	return func(tenant string) (int, int, bool) {
		own, ok := t.Get(tenant)
		if !ok || own.DenialBytes == 0 {
			return 0, 0, false
		}
		return own.DenialBytes, own.DenialBytes * TenantDenialBurst, true
	}
}

// Validate refuses a rate or burst past MaxTenantRate.
func (t TenantLimits) Validate() error {
	if t.Rate > MaxTenantRate || t.DenialBytes > MaxTenantRate || t.Burst > MaxTenantRate {
		return fmt.Errorf("service: tenant rates must be at most %d per second", MaxTenantRate)
	}
	return nil
}

// TenantTable holds the tenants that have limits of their own (serve
// --tenant-limits). A tenant's own TenantLimits replace the replica's
// common ones field by field: a zero field keeps the common limit, a
// negative one turns the limit off for that tenant; a Burst of zero with
// a Rate of its own is TenantBurst of that rate. Set replaces the whole
// table at once, so a SIGHUP can read its file again while requests run.
// The nil *TenantTable holds none. Safe for concurrent use.
type TenantTable struct {
	p atomic.Pointer[map[string]TenantLimits]
	// ledger and base, set by OverLedger: the limits kept in the ledger,
	// which replace base's for every tenant they name.
	ledger func(tenant string) (TenantLimits, bool)
	base   *TenantTable
}

// OverLedger returns a table holding, for every tenant the ledger names
// (ledger returns true), the limits kept in the ledger, and base's own
// limits (nil: none) for the others: a tenant's limits put in the ledger
// replace its line of --tenant-limits whole. base's Set still takes
// effect; the returned table's Set is not to be called.
func OverLedger(base *TenantTable, ledger func(tenant string) (TenantLimits, bool)) *TenantTable {
	return &TenantTable{ledger: ledger, base: base}
}

// NewTenantTable returns a table holding own.
func NewTenantTable(own map[string]TenantLimits) *TenantTable {
	t := &TenantTable{}
	t.Set(own)
	return t
}

// Set replaces the table with own (a copy).
func (t *TenantTable) Set(own map[string]TenantLimits) {
	m := maps.Clone(own)
	t.p.Store(&m)
}

// Get returns tenant's own limits, and false if it has none.
func (t *TenantTable) Get(tenant string) (TenantLimits, bool) {
	if t == nil || tenant == "" {
		return TenantLimits{}, false
	}
	if t.ledger != nil {
		if l, ok := t.ledger(tenant); ok {
			return l, true
		}
		return t.base.Get(tenant)
	}
	m := t.p.Load()
	if m == nil {
		return TenantLimits{}, false
	}
	l, ok := (*m)[tenant]
	return l, ok
}

// Len is how many tenants have limits of their own.
func (t *TenantTable) Len() int {
	if t == nil {
		return 0
	}
	if m := t.p.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Of returns the limits tenant is held to: common (the replica's, with
// their defaults) with the tenant's own in place of the fields it sets.
func (t *TenantTable) Of(tenant string, common TenantLimits) TenantLimits {
	own, ok := t.Get(tenant)
	if !ok {
		return common
	}
	return own.over(common)
}

// over returns common with own's fields in place of those own sets.
func (own TenantLimits) over(common TenantLimits) TenantLimits {
	if own.MaxOpen != 0 {
		common.MaxOpen = own.MaxOpen
	}
	if own.MaxDefaultBudgets != 0 {
		common.MaxDefaultBudgets = own.MaxDefaultBudgets
	}
	if own.MaxBudgets != 0 {
		common.MaxBudgets = own.MaxBudgets
	}
	if own.Rate != 0 {
		common.Rate, common.Burst = own.Rate, own.Burst
		if common.Burst == 0 && own.Rate > 0 {
			common.Burst = TenantBurst(own.Rate)
		}
	} else if own.Burst != 0 {
		common.Burst = own.Burst
	}
	if own.DenialBytes != 0 {
		common.DenialBytes = own.DenialBytes
	}
	return common
}

// tenantBuckets is a token bucket per tenant, kept as the generic cell
// rate algorithm: per tenant only the time at which its bucket is full
// again (tat). A take of n tokens at now is allowed if, after it, the
// bucket would be full again no later than burst tokens' worth from now.
// Nothing is stored for a tenant whose bucket is full, beyond a bounded
// map swept when it grows. Safe for concurrent use.
type tenantBuckets struct {
	per   time.Duration // the time one token takes to come back; 0: no limit
	burst time.Duration // per * burst tokens
	now   func() time.Time
	// own, if set, gives a tenant a rate and burst of its own (ok), which
	// replace per and burst for it; a rate that is not positive is no
	// limit.
	own func(tenant string) (rate, burst int, ok bool)

	mu  sync.Mutex
	tat map[string]time.Time
}

// tenantBucketsSweep is the map size past which full buckets are dropped.
const tenantBucketsSweep = 1024

// newTenantBuckets returns buckets of rate tokens per second and burst
// tokens, or nil (no limit) for a rate that is not positive when no
// tenant has a rate of its own (own nil).
func newTenantBuckets(rate, burst int, now func() time.Time, own func(tenant string) (rate, burst int, ok bool)) *tenantBuckets {
	if rate <= 0 && own == nil {
		return nil
	}
	per, b := rateTerms(rate, burst)
	return &tenantBuckets{per: per, burst: b, now: now, own: own, tat: map[string]time.Time{}}
}

// rateTerms are the bucket terms of rate tokens per second with burst
// tokens (per 0: no limit).
func rateTerms(rate, burst int) (per, b time.Duration) {
	if rate <= 0 {
		return 0, 0
	}
	per = max(time.Second/time.Duration(rate), 1)
	return per, per * time.Duration(max(burst, 1))
}

// take takes n tokens from tenant's bucket and reports whether it had
// them (if not, it takes none). A nil *tenantBuckets always has them.
func (b *tenantBuckets) take(tenant string, n int) bool { return b.takeWithin(tenant, n, 1) }

// takeClosing takes one token for a request that closes a reservation (a
// settle, a release, a void), which may run the bucket a second burst
// into debt: the admits that follow are refused until the rate has paid
// it back, but the record of money already spent is not. Refused, a
// settle left its paid call's cost unrecorded (the reservation expired),
// while the admits that opened those reservations had each taken a token
// already; a flood of closings alone is still held to the rate.
func (b *tenantBuckets) takeClosing(tenant string) bool { return b.takeWithin(tenant, 1, 2) }

// takeWithin is take with the burst multiplied by bursts.
func (b *tenantBuckets) takeWithin(tenant string, n int, bursts time.Duration) bool {
	if b == nil {
		return true
	}
	per, burst := b.per, b.burst
	if b.own != nil {
		if rate, bu, ok := b.own(tenant); ok {
			per, burst = rateTerms(rate, bu)
		}
	}
	if per == 0 {
		return true
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	tat, ok := b.tat[tenant]
	if !ok || tat.Before(now) {
		tat = now
	}
	next := tat.Add(per * time.Duration(n))
	if next.Sub(now) > burst*bursts {
		return false
	}
	if !ok && len(b.tat) >= tenantBucketsSweep {
		for t, at := range b.tat {
			if !at.After(now) {
				delete(b.tat, t)
			}
		}
	}
	b.tat[tenant] = next
	return true
}

// budgetLimit is the limit of tenant's budgets put for their scopes, as
// this replica holds it (its own, or the common one), for
// Ledger.EditBudgetWithin; none for the untenanted deployment.
func (s *Service) budgetLimit(tenant string) ledger.BudgetLimit {
	if tenant == "" {
		return ledger.BudgetLimit{}
	}
	n, source := s.limits.MaxBudgets, fmt.Sprintf("serve --tenant-max-budgets %d", s.limits.MaxBudgets)
	if own, ok := s.own.Get(tenant); ok && own.MaxBudgets != 0 {
		n, source = own.MaxBudgets, own.source("max-budgets", max(own.MaxBudgets, 0))
	}
	if n <= 0 {
		return ledger.BudgetLimit{}
	}
	return ledger.BudgetLimit{Max: n, Refusal: func(have int) error {
		return events.TenantLimitError(tenant, events.LimitBudgets, int64(n), fmt.Sprintf(
			"tenant %s has %d %s of its own, its limit (%s): this put would define a new one; nothing was written; retire budgets it no longer needs first",
			tenant, have, plural(have, "budget", "budgets"), source))
	}}
}

// plural is one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// allowRate takes one request to endpoint of tenant's rate; the
// untenanted deployment is not limited. A settle, a release or a void
// may take it a burst further than an admit (takeClosing).
func (s *Service) allowRate(tenant, endpoint string) bool {
	if tenant == "" {
		return true
	}
	switch endpoint {
	case streams.EndpointSettle, streams.EndpointRelease, streams.EndpointVoid:
		return s.rate.takeClosing(tenant)
	}
	return s.rate.take(tenant, 1)
}

// rateRefusal is the answer to a request of tenant past its rate on
// endpoint, whose body is data: tenant_limit, or for a retry of an admit
// (events.AdmitRequest.Retry) ledger_unavailable, since an earlier attempt
// of it may still commit (as admit answers a denied retry).
func (s *Service) rateRefusal(tenant, endpoint string, data []byte) *events.Error {
	rate, source := s.limits.Rate, fmt.Sprintf("serve --tenant-rate %d", s.limits.Rate)
	if own, ok := s.own.Get(tenant); ok && own.Rate > 0 {
		rate, source = own.Rate, own.source("rate", own.Rate)
	}
	e := events.TenantLimitError(tenant, events.LimitRequestRate, int64(rate), fmt.Sprintf(
		"tenant %s is past its request rate on this replica, %d per second (%s); nothing changed; retry with back-off",
		tenant, rate, source))
	// Only a body that names "retry" (or escapes a character of a key)
	// can be a retry: the others are refused without being decoded (this
	// runs on micro's goroutine, which every tenant's requests share).
	if endpoint != "admit" || !bytes.Contains(data, retryField) && !bytes.Contains(data, escapeField) {
		return e
	}
	var req events.AdmitRequest
	if codec.DecodeRequest(data, &req) != nil || !req.Retry || (req.Mode != "" && req.Mode != events.ModeAdmit) {
		return e
	}
	return &events.Error{Code: events.CodeLedgerUnavailable, Err: e, Message: fmt.Sprintf(
		"request_id %s: this retry is refused (%s), but an earlier attempt of it may still commit, so its outcome is unknown: retry with the same request, or void the request id",
		req.RequestID, e.Message)}
}

// retryField is an admit's retry flag in its body, escapeField how an
// escaped spelling of it would start.
var retryField, escapeField = []byte(`"retry"`), []byte(`\u`)

// refuseRate answers r, a request of tenant past its rate, on micro's own
// goroutine: no ledger work, no slot, no goroutine.
func (s *Service) refuseRate(r micro.Request, endpoint, tenant string) {
	e := s.rateRefusal(tenant, endpoint, r.Data())
	s.m.TenantLimited(tenant, events.LimitRequestRate)
	s.m.ObserveRequest(endpoint, string(e.Code), 0)
	s.stats.observe(endpoint, string(e.Code), e.Message, 0)
	if r.Reply() == "" {
		return
	}
	body := codec.AppendErrorReply(nil, &events.ErrorReply{Error: &events.Error{Code: e.Code, Message: e.Message}})
	if err := r.Error(statusOf(e.Code), string(e.Code), body); err != nil {
		s.log.Warn("reply failed", "subject", r.Subject(), "err", err)
	}
}
