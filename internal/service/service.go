package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/streams"
)

// Version is the service version reported to micro discovery.
const Version = "0.1.0"

// QueueGroup is the queue group of every endpoint, so replicas share load.
const QueueGroup = "spendgate"

// MaxInFlight is the default bound on the requests one replica handles at
// once (Config.MaxInFlight); each item of a batch counts as a request.
// micro calls a handler from one goroutine per endpoint; spendgate hands
// each request (and each batch item) to a worker of its own so concurrent
// admits on a hot budget reach the group commit together. Past the bound a
// request is answered ledger_busy at once, without touching the ledger, so
// an overloaded replica refuses fast instead of queueing every caller
// behind the backlog.
const MaxInFlight = 4096

// Service is a running micro service. Stop it with Stop.
type Service struct {
	svc micro.Service
	l   *ledger.Ledger
	a   *admit.Admitter
	s   *settle.Settler
	now func() time.Time
	log *slog.Logger
	// ctx is handed to handlers; it is never cancelled by Stop, so requests
	// in flight finish their commits.
	ctx      context.Context
	inflight chan struct{}
	pool     *workers
	nc       *nats.Conn
	// reportReplyMax is Config.ReportReplyMax.
	reportReplyMax int
	m              *metrics.Set
	// lastDispatch is when micro last handed a request to the service
	// (unix nanoseconds).
	lastDispatch atomic.Int64
	// stats counts every answer per endpoint, for micro's STATS data.
	stats endpointStats
	// failures bounds the log lines of failed requests (faillog.go).
	failures failLog

	// denials keeps this replica's recent denials (RecentDenials).
	denials report.DenialRing
	// reports answers the report endpoint; nil: report_unavailable.
	reports *report.Aggregator
	// denialRec records denied admits on the denial stream; nil: none.
	denialRec *DenialRecorder

	// tenants bounds each tenant's share of the in-flight limit.
	tenants tenantShare
	// limits are the per-tenant limits; rate is each tenant's request
	// rate on this replica (nil: none), tenantlimits.go.
	limits TenantLimits
	own    *TenantTable
	rate   *tenantBuckets

	mu      sync.Mutex
	running int // requests handed to goroutines and not yet answered
	idle    *sync.Cond
}

// tenantShare bounds how many of a replica's in-flight slots one tenant
// holds: at most half of them (at least one), so a tenant flooding its
// subjects leaves the other half to every other tenant and the untenanted
// deployment, which it shares the replica with.
type tenantShare struct {
	mu      sync.Mutex
	limit   int
	running map[string]int
}

// newTenantShare is the share of a replica with inflight slots.
func newTenantShare(inflight int) tenantShare {
	return tenantShare{limit: max(1, inflight/2), running: make(map[string]int)}
}

// enter takes a slot for tenant, or reports false if tenant already holds
// its share. The untenanted deployment ("") is not bounded.
func (t *tenantShare) enter(tenant string) bool {
	if tenant == "" {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running[tenant] >= t.limit {
		return false
	}
	t.running[tenant]++
	return true
}

// leave gives back a slot enter took.
func (t *tenantShare) leave(tenant string) {
	if tenant == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running[tenant]--; t.running[tenant] <= 0 {
		delete(t.running, tenant)
	}
}

// Config is what Start needs.
type Config struct {
	Ledger   *ledger.Ledger
	Admitter *admit.Admitter
	Settler  *settle.Settler
	// Now is the clock for budget definitions; default time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Metrics receives request and admission counts; default a private
	// set nobody reads.
	Metrics *metrics.Set
	// Reports, if set, answers the report endpoint from its maintained
	// aggregate; without it the endpoint answers report_unavailable.
	Reports *report.Aggregator
	// Denials, if set, records every admit this replica denies (not check
	// or shadow answers) on the denial stream, off the request path.
	Denials *DenialRecorder
	// MaxInFlight bounds the requests handled at once; beyond it a request
	// is answered ledger_busy (counted in spendgate_ledger_busy_total with
	// cause inflight_limit). 0 means MaxInFlight; negative is an error.
	MaxInFlight int
	// TenantLimits are the per-tenant limits; the service enforces the
	// request rate (TenantLimits.Rate) and names the others in its
	// refusals. Zero fields take their defaults, negative ones are off.
	TenantLimits TenantLimits
	// TenantOwn, if set, gives some tenants limits of their own, which
	// replace TenantLimits' for them (see TenantTable).
	TenantOwn *TenantTable
	// ReportReplyMax bounds the bytes of a report reply (0: the
	// connection's max payload less replyHeadroom): past it, the groups
	// with the least spend are summed into Other groups (fitReport).
	ReportReplyMax int
}

// Start registers the spendgate endpoints on nc under the ledger layout's
// prefix.
func Start(nc *nats.Conn, cfg Config) (*Service, error) {
	if cfg.Ledger == nil || cfg.Admitter == nil || cfg.Settler == nil {
		return nil, errors.New("service: ledger, admitter and settler are required")
	}
	limit := cfg.MaxInFlight
	if limit < 0 {
		return nil, errors.New("service: MaxInFlight must not be negative")
	}
	if limit == 0 {
		limit = MaxInFlight
	}
	limits := cfg.TenantLimits.WithDefaults()
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	s := &Service{l: cfg.Ledger, a: cfg.Admitter, s: cfg.Settler, now: cfg.Now, log: cfg.Log,
		ctx: context.Background(), inflight: make(chan struct{}, limit), pool: newWorkers(), nc: nc, reports: cfg.Reports, reportReplyMax: cfg.ReportReplyMax,
		tenants: newTenantShare(limit), denialRec: cfg.Denials,
		limits: limits, own: cfg.TenantOwn, rate: newTenantBuckets(limits.Rate, limits.Burst, time.Now, cfg.TenantOwn.rateOf(limits))}
	s.idle = sync.NewCond(&s.mu)
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.m = cfg.Metrics; s.m == nil {
		s.m = metrics.New(metrics.BuildInfo{})
	}
	layout := cfg.Ledger.Layout()
	svc, err := micro.AddService(nc, micro.Config{
		Name:         streams.ServiceName,
		Version:      Version,
		Description:  "spendgate: spend caps enforced before the money is spent",
		QueueGroup:   QueueGroup,
		Metadata:     map[string]string{"prefix": layout.Prefix(), "bucket": layout.Bucket()},
		StatsHandler: s.stats.handler,
	})
	if err != nil {
		return nil, err
	}
	s.svc = svc
	addForm := func(name, desc string, h handler, bh batchHandler, single string, tenants, held bool) error {
		endpoint, subject := microName(name), layout.Endpoint(name)
		if tenants {
			endpoint, subject = "tenant_"+endpoint, layout.TenantEndpoints(name)
			desc += " (for the tenant named by the subject)"
		}
		if held {
			endpoint, subject = "held_"+endpoint, layout.HeldEndpoint(name)
			if tenants {
				subject = layout.HeldTenantEndpoints(name)
			}
			desc += "; may close the gateway's held reservations"
		}
		return svc.AddEndpoint(endpoint, micro.HandlerFunc(func(r micro.Request) {
			// micro's Request is not safe to use after the handler returns
			// (its stats read it), so the worker gets copies and replies
			// on the connection itself.
			data, reply, subject := r.Data(), r.Reply(), r.Subject()
			if fromJetStream(reply, r.Headers()) {
				s.endDelivery(nc, subject, reply)
				return
			}
			arrived := time.Now()
			s.lastDispatch.Store(arrived.UnixNano())
			tenant := ""
			if tenants {
				tenant, _ = layout.TenantOf(subject)
			}
			// A batch's items are counted one by one (serveBatch).
			if single == "" && !s.allowRate(tenant, name) {
				s.refuseRate(r, name, tenant)
				return
			}
			if !s.takeSlot(tenant) {
				s.refuseBusy(r, name)
				return
			}
			s.pool.run(func() {
				// The slot is given back before the answer is sent: a
				// caller that sends its next request on the answer must
				// not find its own previous request still in flight. The
				// request counts as running (what Stop waits for) until
				// its answer is sent.
				freed := false
				release := func() {
					if !freed {
						freed = true
						s.releaseSlot(tenant)
					}
				}
				defer s.answered()
				defer release()
				if single != "" {
					s.serveBatch(nc, name, single, subject, reply, data, bh, arrived, release)
					return
				}
				s.serve(nc, name, subject, reply, data, h, arrived, release)
			})
		}),
			micro.WithEndpointSubject(subject),
			micro.WithEndpointMetadata(map[string]string{"description": desc}))
	}
	add := func(name, desc string, h handler, bh batchHandler, single string, tenants bool) error {
		return addForm(name, desc, h, bh, single, tenants, false)
	}
	for _, e := range []struct {
		name, desc string
		h          handler
		bh         batchHandler
		single     string // for a batch endpoint, the endpoint of its items
	}{
		{streams.EndpointAdmit, "reserve an amount in every budget of the named scopes, or in none", s.admit, nil, ""},
		{streams.EndpointSettle, "close a reservation with its actual cost", s.settle, nil, ""},
		{streams.EndpointRelease, "give a whole reservation back", s.release, nil, ""},
		{streams.EndpointVoid, "void an admit by its request id: release what it reserved, and make sure it never reserves", s.void, nil, ""},
		{streams.EndpointAdmitBatch, "many admits in one message ({\"items\":[...]}), each answered on its own", nil, s.admitBatch, streams.EndpointAdmit},
		{streams.EndpointSettleBatch, "many settles in one message ({\"items\":[...]}), each answered on its own", nil, s.settleBatch, streams.EndpointSettle},
		{streams.EndpointReleaseBatch, "many releases in one message ({\"items\":[...]}), each answered on its own", nil, s.releaseBatch, streams.EndpointRelease},
		{streams.EndpointBatch, "admits, settles and releases in one message ({\"items\":[{\"admit\":{...}},{\"settle\":{...}}]}), each answered on its own", nil, s.mixedBatch, streams.EndpointBatch},
		{streams.EndpointBudgetPut, "define or change a budget", s.budgetPut, nil, ""},
		{streams.EndpointBudgetGet, "read a budget and its current balance, or every budget of a scope", s.budgetGet, nil, ""},
		{streams.EndpointBudgetList, "list budgets", s.budgetList, nil, ""},
		{streams.EndpointBudgetRetire, "retire a budget for good: every admit naming its scope is denied, and its balances leave memory", s.budgetRetire, nil, ""},
		{streams.EndpointPricingPut, "set a model's prices per million tokens", s.pricingPut, nil, ""},
		{streams.EndpointPricingGet, "read a model's current prices", s.pricingGet, nil, ""},
		{streams.EndpointPricingList, "list every priced model", s.pricingList, nil, ""},
		{streams.EndpointReport, "spend by scope or metadata key over whole hours, from the replica's maintained aggregate", s.report, nil, ""},
	} {
		// Each endpoint twice: for the untenanted deployment on its plain
		// subject, and for every tenant on "<prefix>t.*.<name>" (see
		// withTenant, which takes the tenant from the subject).
		for _, tenants := range []bool{false, true} {
			if err := add(e.name, e.desc, e.h, e.bh, e.single, tenants); err != nil {
				_ = svc.Stop()
				return nil, err
			}
		}
		// The requests that open and close reservations, a third and
		// fourth time on the held subjects ("<prefix>held.<name>",
		// "<prefix>held.t.*.<name>"), which alone may close a gateway's
		// held reservations (events.HeldRequestPrefix; withTenant marks
		// them).
		if e.name == streams.EndpointAdmit || e.name == streams.EndpointSettle || e.name == streams.EndpointRelease ||
			e.name == streams.EndpointVoid || e.single != "" {
			for _, tenants := range []bool{false, true} {
				if err := addForm(e.name, e.desc, e.h, e.bh, e.single, tenants, true); err != nil {
					_ = svc.Stop()
					return nil, err
				}
			}
		}
	}
	if err := s.addAPIKeyEndpoints(add); err != nil { // apikeys.go
		_ = svc.Stop()
		return nil, err
	}
	if err := s.addTenantLimitsEndpoints(add); err != nil { // tenantlimitsapi.go
		_ = svc.Stop()
		return nil, err
	}
	// Make sure the server has registered every endpoint before callers are
	// told the service is up.
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return s, nil
}

// RequestTimeout is the deadline of one request: every commit attempt the
// request makes shares it (see ledger.Ledger.Submit), so a request answers
// ledger_unavailable rather than hang on a stalled JetStream.
const RequestTimeout = 10 * time.Second

// StopTimeout bounds how long Stop waits for requests in flight.
const StopTimeout = 30 * time.Second

// stopQuiet is how long the endpoints must have handed out no request
// before Stop considers their queues empty (see Stop).
const stopQuiet = 50 * time.Millisecond

// Stop drains the endpoints: no new requests are taken, every request the
// server already routed here is handled, and Stop returns once each has been
// answered (or StopTimeout passed).
//
// micro's Stop only starts draining its subscriptions and gives no signal
// when they are done. After it, a flush round trip proves the server has
// processed the unsubscribes, so every request routed here is already in
// the connection's local queues, which micro hands out back to back; Stop
// then waits until no request was handed out for stopQuiet and every
// handler has replied.
func (s *Service) Stop() error {
	err := s.svc.Stop()
	_ = s.nc.FlushTimeout(5 * time.Second)
	deadline := time.Now().Add(StopTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Since(time.Unix(0, s.lastDispatch.Load())) < stopQuiet && time.Now().Before(deadline) {
		<-tick.C
	}
	timer := time.AfterFunc(time.Until(deadline), func() {
		s.mu.Lock()
		s.idle.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	for s.running > 0 && time.Now().Before(deadline) {
		s.idle.Wait()
	}
	s.mu.Unlock()
	s.pool.stop()
	return err
}

// Info returns the micro service info.
func (s *Service) Info() micro.Info { return s.svc.Info() }

// handler answers one request body: a reply to encode, or an error.
type handler func(context.Context, []byte) (any, error)

// takeSlot takes an in-flight slot for tenant ("" untenanted), or reports
// that none is free or that tenant holds its share (tenantShare).
func (s *Service) takeSlot(tenant string) bool {
	if !s.tenants.enter(tenant) {
		return false
	}
	select {
	case s.inflight <- struct{}{}:
	default:
		s.tenants.leave(tenant)
		return false
	}
	s.mu.Lock()
	s.running++
	s.mu.Unlock()
	return true
}

// freeSlot gives back a slot taken by takeSlot, its request answered.
func (s *Service) freeSlot(tenant string) {
	s.releaseSlot(tenant)
	s.answered()
}

// releaseSlot gives back the in-flight slot of a request taken by
// takeSlot; answered then says its answer was sent.
func (s *Service) releaseSlot(tenant string) {
	s.tenants.leave(tenant)
	<-s.inflight
}

// answered counts a request taken by takeSlot as answered: Stop waits
// until none is running.
func (s *Service) answered() {
	s.mu.Lock()
	if s.running--; s.running == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

func (s *Service) serve(nc *nats.Conn, endpoint, subject, reply string, data []byte, h handler, arrived time.Time, release func()) {
	buf := replyBufs.Get().(*[]byte)
	body, e := s.answer((*buf)[:0], endpoint, subject, data, h, arrived)
	defer putReplyBuf(buf, body)
	release()
	if reply == "" {
		return
	}
	msg := &nats.Msg{Subject: reply, Data: body}
	if e != nil {
		msg.Header = nats.Header{
			micro.ErrorHeader:     []string{string(e.Code)},
			micro.ErrorCodeHeader: []string{statusOf(e.Code)},
		}
	}
	if err := nc.PublishMsg(msg); err != nil {
		s.log.Warn("reply failed", "subject", subject, "err", err)
	}
}

// answer handles one request with its own deadline, counts it, and
// returns the body of its answer appended to dst, with the error it
// carries (nil on success).
func (s *Service) answer(dst []byte, endpoint, subject string, data []byte, h handler, arrived time.Time) (body []byte, e *events.Error) {
	start := time.Now()
	s.m.Inflight.Inc()
	defer s.m.Inflight.Dec()
	ctx, cancel := context.WithTimeout(s.ctx, RequestTimeout)
	defer cancel()
	var out any
	ctx, err := s.withTenant(ctx, subject)
	if err == nil {
		out, err = h(ctx, data)
	}
	return s.encode(dst, endpoint, subject, out, err, start, arrived)
}

// withTenant returns ctx with the tenant of subject, if it names one.
//
// It is the one place the tenant is decided: from the subject the request
// arrived on, never from its body. A tenant account reaches only
// "<prefix>t.<its tenant>.<endpoint>" (its service import fixes the
// subject), so a caller cannot choose another tenant. Every handler and the
// engine read it with events.TenantFromContext.
func (s *Service) withTenant(ctx context.Context, subject string) (context.Context, error) {
	if _, held := s.l.Layout().Unheld(subject); held {
		// A held subject (streams.HeldToken): only the gateway and the
		// admin may publish it, and no tenant account imports it.
		ctx = events.ContextWithHeld(ctx)
	}
	tenant, ok := s.l.Layout().TenantOf(subject)
	if !ok {
		return ctx, nil
	}
	if err := events.ValidateTenant(tenant); err != nil {
		return ctx, err
	}
	return events.ContextWithTenant(ctx, tenant), nil
}

// encode counts one answer (a request's, or a batch item's) and returns
// its body appended to dst, with the error it carries (nil on success).
func (s *Service) encode(dst []byte, endpoint, subject string, out any, err error, start, arrived time.Time) (body []byte, e *events.Error) {
	code := metrics.CodeOK
	var errCode, errMsg string
	defer func() {
		s.m.ObserveRequest(endpoint, code, time.Since(start))
		s.stats.observe(endpoint, errCode, errMsg, time.Since(arrived))
	}()
	if err == nil {
		if body, err = marshalReply(dst, out); err == nil {
			max := int(s.nc.MaxPayload()) - replyHeadroom
			if len(body) <= max || max <= 0 {
				return body, nil
			}
			// Unsent, the caller would wait out its timeout as if no
			// replica answered: a refusal says why, at once.
			err = events.Errorf(events.CodeReplyTooLarge, "the reply would be %d bytes, past the %d a message may carry on this connection: ask for less (for a report: a narrower from and to, or without shadow; spendgate report --replay has no such bound)", len(body)-len(dst), max)
			dst = body[:len(dst)]
		}
	}
	// A refusal past a tenant's limit is counted, not logged (a retry's
	// is ledger_unavailable with the limit in its chain): a tenant at its
	// limits must not flood the log.
	var tl *events.TenantLimited
	limited := errors.As(err, &tl)
	if !errors.As(err, &e) {
		s.logFailure(subject, err)
		e = &events.Error{Code: events.CodeInternal, Message: "internal error"}
	} else if (e.Code == events.CodeInternal || e.Code == events.CodeLedgerUnavailable) && !limited {
		s.logFailure(subject, err)
	}
	code = string(e.Code)
	errCode, errMsg = code, e.Message
	if e.Code == events.CodeLedgerBusy {
		s.m.LedgerBusy.WithLabelValues(metrics.BusyConflicts).Inc()
	}
	if limited {
		s.m.TenantLimited(tl.Tenant, tl.Limit)
	}
	body = codec.AppendErrorReply(dst, &events.ErrorReply{Error: &events.Error{
		Code: e.Code, Message: e.Message, ReservationID: e.ReservationID, Status: e.Status,
	}})
	return body, e
}

// marshalReply appends the encoding of a reply to dst: the hot path's
// without reflection.
func marshalReply(dst []byte, out any) ([]byte, error) {
	switch r := out.(type) {
	case events.AdmitReply:
		return codec.AppendAdmitReply(dst, &r), nil
	case events.CloseReply:
		return codec.AppendCloseReply(dst, &r), nil
	}
	b, err := json.Marshal(out)
	return append(dst, b...), err
}

// replyBufs recycles the buffers replies are encoded into: a reply is
// copied into the connection's buffer when it is published, so its buffer
// is free again as soon as the publish returns.
var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// putReplyBuf gives back a buffer of replyBufs, grown to body if body was
// appended to it; one grown past 64 KB (a large batch) is left to the
// collector.
func putReplyBuf(buf *[]byte, body []byte) {
	if cap(body) > 64<<10 {
		return
	}
	if cap(body) > cap(*buf) {
		*buf = body
	}
	*buf = (*buf)[:0]
	replyBufs.Put(buf)
}

// batchHandler decodes every item of a batch, strictly, as its single
// endpoint would, and plans how they are answered.
type batchHandler func(items []json.RawMessage) batchPlan

// batchPlan is a decoded batch. errs[i] is items[i]'s decoding error, nil
// if it decoded. run answers the items at the indexes keep, each on its
// own: out[j] or rerrs[j] answers items[keep[j]]. singles and bodies, when
// set (a mixed batch), are each item's endpoint and request body; when
// nil, every item is a request of the batch endpoint's single endpoint.
type batchPlan struct {
	errs    []error
	run     batchRun
	singles []string
	bodies  []json.RawMessage
}

type batchRun func(ctx context.Context, keep []int) (out []any, rerrs []error)

// batchOf is the batchHandler of requests of type T answered by do (whose
// replies line up with its requests).
func batchOf[T, R any](items []json.RawMessage, do func(ctx context.Context, reqs []T) ([]R, []error)) batchPlan {
	reqs := make([]T, len(items))
	errs := make([]error, len(items))
	for i, item := range items {
		errs[i] = codec.DecodeRequest(item, &reqs[i])
	}
	return batchPlan{errs: errs, run: func(ctx context.Context, keep []int) ([]any, []error) {
		out, rerrs := make([]any, len(keep)), make([]error, len(keep))
		sel, at := make([]T, 0, len(keep)), make([]int, 0, len(keep))
		for j, i := range keep {
			if rerrs[j] = errs[i]; rerrs[j] == nil {
				sel, at = append(sel, reqs[i]), append(at, j)
			}
		}
		if len(sel) == 0 {
			return out, rerrs
		}
		replies, errsOf := do(ctx, sel)
		for k, j := range at {
			out[j], rerrs[j] = replies[k], errsOf[k]
		}
		return out, rerrs
	}}
}

// mixedBatch is the batchHandler of the mixed batch endpoint: each item is
// {"<endpoint>":<request>} for admit, settle or release. The items of each
// kind are decoded and answered as their own batch endpoint's would be,
// and the kinds run at once, so that an admit and a settle of one budget
// in the message fold into the same group commit.
func (s *Service) mixedBatch(items []json.RawMessage) batchPlan {
	kinds := []struct {
		name string
		h    batchHandler
	}{{streams.EndpointAdmit, s.admitBatch}, {streams.EndpointSettle, s.settleBatch}, {streams.EndpointRelease, s.releaseBatch}}
	p := batchPlan{errs: make([]error, len(items)), singles: make([]string, len(items)), bodies: make([]json.RawMessage, len(items))}
	// kindOf[i] is item i's kind (an index of kinds, -1 if none) and
	// posOf[i] its position among that kind's items.
	kindOf, posOf := make([]int, len(items)), make([]int, len(items))
	var bodiesOf [3][]json.RawMessage
	for i, item := range items {
		kindOf[i] = -1
		name, body, ok := codec.SplitMixedItem(item)
		p.singles[i], p.bodies[i] = streams.EndpointBatch, item
		for k, kd := range kinds {
			if ok && name == kd.name {
				kindOf[i], posOf[i] = k, len(bodiesOf[k])
				bodiesOf[k] = append(bodiesOf[k], body)
				p.singles[i], p.bodies[i] = name, body
			}
		}
		if kindOf[i] < 0 {
			p.errs[i] = events.Errorf(events.CodeInvalidRequest, `a batch item must be an object of one key, the request's endpoint: {"admit":{...}}, {"settle":{...}} or {"release":{...}}`)
		}
	}
	var plans [3]batchPlan
	for k, kd := range kinds {
		if len(bodiesOf[k]) > 0 {
			plans[k] = kd.h(bodiesOf[k])
		}
	}
	for i, k := range kindOf {
		if k >= 0 {
			p.errs[i] = plans[k].errs[posOf[i]]
		}
	}
	p.run = func(ctx context.Context, keep []int) ([]any, []error) {
		out, rerrs := make([]any, len(keep)), make([]error, len(keep))
		// keepOf[k] are the positions of kind k's kept items, at[k] where
		// each one's answer goes.
		var keepOf, at [3][]int
		for j, i := range keep {
			if k := kindOf[i]; k >= 0 {
				keepOf[k], at[k] = append(keepOf[k], posOf[i]), append(at[k], j)
			} else {
				rerrs[j] = p.errs[i]
			}
		}
		run := func(k int) {
			o, e := plans[k].run(ctx, keepOf[k])
			for x, j := range at[k] {
				out[j], rerrs[j] = o[x], e[x]
			}
		}
		// Each kind but the last runs on a goroutine of its own, the
		// last on this one.
		var wg sync.WaitGroup
		last := -1
		for k := range kinds {
			if len(keepOf[k]) == 0 {
				continue
			}
			if last >= 0 {
				wg.Add(1)
				go func(k int) {
					defer wg.Done()
					run(k)
				}(last)
			}
			last = k
		}
		if last >= 0 {
			run(last)
		}
		wg.Wait()
		return out, rerrs
	}
	return p
}

// serveBatch answers a batch request (events.BatchRequest) on endpoint:
// every item is handled as a single request of the endpoint single would
// be, with an in-flight slot and the request deadline of its own, all of
// them submitted to the ledger at once so that they fold into the same
// group commits, and the reply lists their answers in order. Only a
// malformed envelope, or an item that is not JSON at all, fails the whole
// message.
func (s *Service) serveBatch(nc *nats.Conn, endpoint, single, subject, reply string, data []byte, h batchHandler, arrived time.Time, release func()) {
	// Every item is decoded strictly before any is answered. An item that
	// decodes is valid JSON; only when one does not is the batch checked
	// as codec.DecodeBatch checks it, which refuses it whole if an item
	// is not valid JSON (so that check costs nothing on the hot path).
	items, err := codec.SplitBatch(data)
	var plan batchPlan
	if err == nil {
		plan = h(items)
		for _, e := range plan.errs {
			if e != nil {
				_, err = codec.DecodeBatch(data)
				break
			}
		}
	}
	if err == nil {
		_, err = s.withTenant(s.ctx, subject)
	}
	if err != nil {
		s.serve(nc, endpoint, subject, reply, data, func(context.Context, []byte) (any, error) { return nil, err }, arrived, release)
		return
	}
	s.stats.observe(endpoint, "", "", 0)
	start := time.Now()
	tenant, _ := s.l.Layout().TenantOf(subject)
	idx := make([]int, 0, len(items))
	// limited[i] is the refusal of item i past its tenant's request rate.
	var limited []*events.Error
	// singleOf is the endpoint of item i's request, bodyOf its body.
	singleOf := func(i int) string {
		if plan.singles != nil {
			return plan.singles[i]
		}
		return single
	}
	bodyOf := func(i int) []byte {
		if plan.bodies != nil {
			return plan.bodies[i]
		}
		return items[i]
	}
	for i := range items {
		if !s.allowRate(tenant, singleOf(i)) {
			if limited == nil {
				limited = make([]*events.Error, len(items))
			}
			limited[i] = s.rateRefusal(tenant, singleOf(i), bodyOf(i))
			continue
		}
		if !s.takeSlot(tenant) {
			s.m.LedgerBusy.WithLabelValues(metrics.BusyInflight).Inc()
			s.m.ObserveRequest(singleOf(i), string(events.CodeLedgerBusy), 0)
			s.stats.observe(singleOf(i), string(events.CodeLedgerBusy), "in-flight limit", 0)
			continue
		}
		idx = append(idx, i)
	}
	var outs []any
	var errs []error
	if len(idx) > 0 {
		s.m.Inflight.Add(float64(len(idx)))
		ctx, cancel := context.WithTimeout(s.ctx, RequestTimeout)
		ctx, _ = s.withTenant(ctx, subject)
		outs, errs = plan.run(ctx, idx)
		cancel()
		s.m.Inflight.Add(-float64(len(idx)))
	}
	// The reply (codec.EncodeBatchReply's envelope) is encoded item by
	// item straight into one recycled buffer: busyReply for the items
	// past the in-flight limit, each taken item's answer in its place.
	buf := replyBufs.Get().(*[]byte)
	body := append((*buf)[:0], `{"items":[`...)
	j := 0
	for i := range items {
		if i > 0 {
			body = append(body, ',')
		}
		if j < len(idx) && idx[j] == i {
			body, _ = s.encode(body, singleOf(i), subject, outs[j], errs[j], start, arrived)
			s.freeSlot(tenant)
			j++
			continue
		}
		if limited != nil && limited[i] != nil {
			body, _ = s.encode(body, singleOf(i), subject, nil, limited[i], start, arrived)
			continue
		}
		body = append(body, busyReply...)
	}
	body = append(body, "]}"...)
	defer putReplyBuf(buf, body)
	release()
	if reply == "" {
		return
	}
	if err := nc.Publish(reply, body); err != nil {
		s.log.Warn("reply failed", "subject", subject, "err", err)
	}
}

// busyReply is the body of the answer past the in-flight limit.
var busyReply, _ = json.Marshal(events.ErrorReply{Error: &events.Error{
	Code: events.CodeLedgerBusy, Message: "too many requests in flight on this replica; retry with back-off",
}})

// fromJetStream reports whether a request is a JetStream delivery rather
// than a caller's request: a push consumer's message (its reply is the ack
// subject, "$JS.ACK.<stream>.<consumer>...") or its heartbeat or flow
// control (a Status header). JetStream checks no permission on a push
// consumer's deliver subject, so anyone who may create a consumer on a
// stream in the replicas' account (the feed and finance roles; tenants may
// not, their feed consumers are made for them) could otherwise deliver
// that stream into an endpoint, as requests it cannot make itself, again
// at every ack wait.
func fromJetStream(reply string, h micro.Headers) bool {
	return strings.HasPrefix(reply, "$JS.ACK.") || nats.Header(h).Get("Status") != ""
}

// endDelivery ends a JetStream delivery that reached an endpoint without
// serving it: +TERM, so the consumer never delivers it again.
func (s *Service) endDelivery(nc *nats.Conn, subject, reply string) {
	s.log.Debug("JetStream delivery on an endpoint dropped", "subject", subject, "reply", reply)
	if strings.HasPrefix(reply, "$JS.ACK.") {
		if err := nc.Publish(reply, []byte("+TERM")); err != nil {
			s.log.Warn("terminating a JetStream delivery failed", "subject", subject, "err", err)
		}
	}
}

// refuseBusy answers r ledger_busy on micro's own goroutine: no ledger work,
// no goroutine, and micro counts it as an error of the endpoint.
func (s *Service) refuseBusy(r micro.Request, endpoint string) {
	s.m.LedgerBusy.WithLabelValues(metrics.BusyInflight).Inc()
	s.m.ObserveRequest(endpoint, string(events.CodeLedgerBusy), 0)
	s.stats.observe(endpoint, string(events.CodeLedgerBusy), "in-flight limit", 0)
	if r.Reply() == "" {
		return
	}
	if err := r.Error(statusOf(events.CodeLedgerBusy), string(events.CodeLedgerBusy), busyReply); err != nil {
		s.log.Warn("reply failed", "subject", r.Subject(), "err", err)
	}
}

func statusOf(c events.Code) string {
	switch c {
	case events.CodeInternal:
		return "500"
	case events.CodeLedgerBusy, events.CodeLedgerUnavailable:
		return "503"
	case events.CodeUnknownBudget, events.CodeUnknownReservation, events.CodeUnpricedModel, events.CodeReportUnavailable, events.CodeUnknownKey:
		return "404"
	case events.CodeIdempotencyMismatch, events.CodeAlreadySettled, events.CodeAlreadyReleased, events.CodeRequestVoided, events.CodeKeyExists,
		events.CodeReservationHeld, events.CodeBudgetRetired:
		return "409"
	case events.CodeKeyDisabled, events.CodeKeyForbidden:
		return "403"
	case events.CodePayloadTooLarge:
		return "413"
	case events.CodeReplyTooLarge:
		return "500"
	case events.CodeTenantLimit:
		return "429"
	}
	return "400"
}

func (s *Service) admit(ctx context.Context, data []byte) (any, error) {
	var req events.AdmitRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	reply, err := s.a.Admit(ctx, req)
	s.countAdmit(ctx, req, reply, err)
	return reply, err
}

// countAdmit counts an admit's answer in the metrics and keeps a denial in
// the recent denials.
func (s *Service) countAdmit(ctx context.Context, req events.AdmitRequest, reply events.AdmitReply, err error) {
	if err != nil {
		return
	}
	if reply.Mode != "" {
		// Check and shadow answers are counted apart from real admits,
		// and recorded apart from denials (events.AdmitChecked on the
		// denial stream: what reports show as shadow decisions).
		if reply.Admitted {
			s.m.AdmitChecks.WithLabelValues(reply.Mode, metrics.ResultAdmitted, "").Inc()
		} else if reply.Denial != nil {
			s.m.AdmitChecks.WithLabelValues(reply.Mode, metrics.ResultDenied, string(reply.Denial.Reason)).Inc()
		}
		if s.denialRec != nil && (reply.Admitted || reply.Denial != nil) {
			amount := reply.Amount
			if amount == "" {
				amount = req.Amount
			}
			if amount == "" && reply.Denial != nil {
				amount = reply.Denial.Requested
			}
			s.denialRec.RecordCheck(events.AdmitChecked{Type: events.TypeAdmitChecked, At: s.now().UTC(), Tenant: events.TenantFromContext(ctx),
				Mode: reply.Mode, RequestID: req.RequestID, Scopes: req.Scopes, Admitted: reply.Admitted, Amount: amount,
				Model: req.Model, Unit: admitUnit(req, reply), Metadata: req.Metadata, Denial: reply.Denial})
		}
		return
	}
	if reply.Admitted {
		s.m.Admits.WithLabelValues(metrics.ResultAdmitted, "").Inc()
	} else if reply.Denial != nil {
		s.m.Admits.WithLabelValues(metrics.ResultDenied, string(reply.Denial.Reason)).Inc()
		// One record of the denial: kept in the replica's ring (the
		// dashboard's recent denials) and appended to the denial stream
		// (the report's counts), with the unit the admit was in (the
		// request's, its price's, or the default).
		d := events.AdmitDenied{Type: events.TypeAdmitDenied, At: s.now().UTC(), Tenant: events.TenantFromContext(ctx),
			RequestID: req.RequestID, Scopes: req.Scopes, Amount: req.Amount, Model: req.Model, Unit: admitUnit(req, reply), Metadata: req.Metadata, Denial: *reply.Denial}
		d.Denial.ResetsAt = nil // derived from the budget; a record's readers decode strictly
		// A tenant's denial for a scope it has no budget for is counted,
		// never recorded, and kept in the ring without its metadata: the
		// scope is any name the tenant makes up, and recording it (with up
		// to 4 KB of metadata) would let a tenant fill the denial stream
		// and the report's groups at no cost.
		unknown := d.Tenant != "" && reply.Denial.Reason == events.ReasonUnknownBudget
		if unknown {
			s.m.TenantUnknownScopeDenial(d.Tenant)
			d.Metadata = nil
		}
		if s.denialRec != nil {
			d.Replica = s.denialRec.Replica()
			if !unknown {
				s.denialRec.Record(d)
			}
		}
		// The ring keeps when the budget resets: the dashboard's list of
		// denials says it (the record leaves it out, above).
		d.Denial.ResetsAt = reply.Denial.ResetsAt
		s.denials.Add(d)
	}
}

// admitUnit is the unit an admit was in: the reply's (its price's), the
// request's, or the default.
func admitUnit(req events.AdmitRequest, reply events.AdmitReply) string {
	switch {
	case reply.Unit != "":
		return reply.Unit
	case req.Unit != "":
		return req.Unit
	}
	return defaultAdmitUnit
}

func (s *Service) settle(ctx context.Context, data []byte) (any, error) {
	var req events.SettleRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	return s.s.Settle(ctx, req)
}

func (s *Service) release(ctx context.Context, data []byte) (any, error) {
	var req events.ReleaseRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	return s.s.Release(ctx, req)
}

func (s *Service) void(ctx context.Context, data []byte) (any, error) {
	var req events.VoidRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	return s.s.Void(ctx, req)
}

func (s *Service) admitBatch(items []json.RawMessage) batchPlan {
	return batchOf(items, func(ctx context.Context, reqs []events.AdmitRequest) ([]events.AdmitReply, []error) {
		replies, rerrs := s.a.AdmitAll(ctx, reqs)
		for j := range reqs {
			s.countAdmit(ctx, reqs[j], replies[j], rerrs[j])
		}
		return replies, rerrs
	})
}

func (s *Service) settleBatch(items []json.RawMessage) batchPlan {
	return batchOf(items, s.s.SettleAll)
}

func (s *Service) releaseBatch(items []json.RawMessage) batchPlan {
	return batchOf(items, s.s.ReleaseAll)
}

func (s *Service) budgetGet(ctx context.Context, data []byte) (any, error) {
	var req events.BudgetGetRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if kind, ok, err := events.ParseDefaultScope(req.Scope); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return s.defaultGet(ctx, kind, req.Period)
	}
	scope, err := events.ParseScope(req.Scope)
	if err != nil {
		return nil, err
	}
	scope = events.TenantScope(events.TenantFromContext(ctx), scope)
	var period events.Period
	if req.Period != "" {
		if period, err = events.ParsePeriod(req.Period); err != nil {
			return nil, err
		}
	}
	// Reads are read-your-writes across replicas: fold the stream up to
	// its current end before answering.
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	if req.Period != "" {
		ref := events.BudgetRef{Scope: scope, Period: period}
		if req.Unit != "" {
			if err := events.ValidateUnit(req.Unit); err != nil {
				return nil, err
			}
			if b, ok := s.l.Budget(ref); !ok || b.Unit != req.Unit {
				ref.Unit = req.Unit
			}
		}
		return s.BudgetView(ref)
	}
	// Only a scope: every budget of it, in period order.
	bs := s.l.BudgetsOf(scope)
	if len(bs) == 0 {
		return nil, events.Errorf(events.CodeUnknownBudget, "no budget is defined for scope %s", scope.Local())
	}
	out := events.BudgetListReply{Budgets: make([]events.BudgetView, 0, len(bs))}
	for _, b := range bs {
		v, err := s.BudgetView(b.Ref)
		if err != nil {
			return nil, err
		}
		out.Budgets = append(out.Budgets, v)
	}
	return out, nil
}

// BudgetView reads a budget and its balance in the current period instance, its
// scope as its tenant names it.
func (s *Service) BudgetView(ref events.BudgetRef) (events.BudgetView, error) {
	b, ok := s.l.Budget(ref)
	if !ok {
		if ref.Unit != "" {
			// A get that named a unit: say so, as the scope and period
			// may well have a budget in another one.
			return events.BudgetView{}, events.Errorf(events.CodeUnknownBudget, "no budget in %s is defined for %s per %s", ref.Unit, ref.Scope.Local(), ref.Period)
		}
		return events.BudgetView{}, events.Errorf(events.CodeUnknownBudget, "no budget is defined for %s per %s", ref.Scope.Local(), ref.Period)
	}
	at := s.now()
	if b.Retired && !b.RetiredAt.IsZero() {
		// Over for good: the period instance it was retired in, not one
		// it will never be used in.
		at = b.RetiredAt
	}
	bal := s.l.Balance(b.Balance(at))
	v := events.BudgetView{
		Scope: ref.Scope.Local(), Period: ref.Period, Limit: b.Limit.String(), Unit: b.Unit,
		Instance: bal.Ref.Instance, Spent: bal.Spent.String(), Reserved: bal.Reserved.String(),
		Overrun: bal.Overrun.String(), Available: bal.Available().String(), Open: int64(bal.Open),
		TZ: b.TZ, Disabled: b.Disabled, Retired: b.Retired, RetiredReason: b.RetiredReason, Thresholds: moneyStrings(b.Thresholds),
	}
	if b.Retired || s.l.ScopeRetired(ref.Scope) {
		// Every admit naming it (or its scope) is denied: nothing is
		// available.
		v.Available = "0"
	}
	if !b.RetiredAt.IsZero() {
		v.RetiredAt = b.RetiredAt.UTC().Format(time.RFC3339Nano)
	}
	if b.FixedSlot != nil {
		n := b.Limit.Slots(*b.FixedSlot)
		v.FixedSlot, v.MaxInFlight = b.FixedSlot.String(), n.String()
		v.OvershootBound = fmt.Sprintf("%s x (cost of one call - %s)", n, b.FixedSlot)
	}
	if b.ExposureCap != nil || !bal.Exposure.IsZero() {
		v.Exposure = bal.Exposure.String()
	}
	if b.ExposureCap != nil {
		v.ExposureCap = b.ExposureCap.String()
	}
	if b.Learn != nil {
		v.Learn = b.Learn.String()
	}
	return v, nil
}

// moneyStrings is ms as decimal strings (nil for none).
func moneyStrings(ms []events.Money) []string {
	if len(ms) == 0 {
		return nil
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.String()
	}
	return out
}

// report answers a spend report from the replica's aggregate, after it
// has folded the stream up to its end as of the request; on a tenant's
// subject, of that tenant's reservations only. Errors, in
// precedence order: CodeInvalidRequest (body, or by), CodeInvalidTime,
// CodeReportUnavailable (no aggregate on this replica, or a metadata key
// it does not track), CodeLedgerUnavailable (its fold stopped or did not
// catch up in time).
func (s *Service) report(ctx context.Context, data []byte) (any, error) {
	var req events.ReportRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	by, from, to, err := report.ParseReportRequest(req)
	if err != nil {
		return nil, err
	}
	if s.reports == nil {
		return nil, events.Errorf(events.CodeReportUnavailable, "this replica keeps no spend report (serve --reports=false); spendgate report --replay reads the book instead")
	}
	// A tenant's request (its subject names the tenant) sees only its
	// own reservations, and its scopes as it names them.
	tenant := events.TenantFromContext(ctx)
	if s.denialRec != nil {
		// The denials this replica answered before the report are in it:
		// wait (briefly) for their records to reach the stream.
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = s.denialRec.Flush(fctx)
		cancel()
	}
	rep, err := s.reports.Report(ctx, by, report.Filter{From: from, To: to, OneTenant: tenant != "", Tenant: tenant})
	switch {
	case errors.Is(err, report.ErrRolledUp):
		return nil, events.Errorf(events.CodeReportUnavailable, "the report keeps hours for the last %d days and whole UTC days before %s: give from and to at 00:00Z there; spendgate report --replay takes any hour",
			report.HourDays, s.reports.RolledUpBefore().Format(time.RFC3339))
	case errors.Is(err, report.ErrKeyNotTracked):
		return nil, events.Errorf(events.CodeReportUnavailable, "metadata key %q is not tracked: the report keeps the first %d keys it met; spendgate report --replay reads the book instead", req.By, report.MaxReportKeys)
	case err != nil:
		return nil, &events.Error{Code: events.CodeLedgerUnavailable, Message: "the spend report could not catch up with the ledger", Err: err}
	}
	out := s.fitReport(req, rep)
	if tenant != "" && by == report.ByScope {
		for i := range out.Groups {
			out.Groups[i].Value = string(events.Scope(out.Groups[i].Value).Local())
		}
		for i := range out.Shadow {
			out.Shadow[i].Value = string(events.Scope(out.Shadow[i].Value).Local())
		}
	}
	return out, nil
}

// fitReport is rep on the wire in at most the reply's bytes
// (Config.ReportReplyMax): a report of many groups (scopes of many kinds,
// tenants, metadata values) could otherwise exceed the connection's max
// payload, and a reply that cannot be sent leaves its caller waiting out
// its timeout. The fewest groups with the least spend that make it fit
// are summed into the Other group of their unit (ReportReply.Folded says
// how many): the totals still add up, and report --replay lists every
// group.
func (s *Service) fitReport(req events.ReportRequest, rep *report.AggregateReport) events.ReportReply {
	limit := s.reportReplyMax
	if limit <= 0 {
		limit = int(s.nc.MaxPayload()) - replyHeadroom
	}
	out := ReportReply(req, rep)
	if reportFits(out, limit) {
		return out
	}
	// The least n that fits: n = every group always does, bar the
	// shadow groups (the serve fallback then answers reply_too_large).
	// The least n spend groups folded that fits, and if folding them all
	// does not, the least m shadow groups besides (the CLI asks for them).
	folded := func(n, m int) events.ReportReply {
		c := *rep
		c.Groups, c.Other, c.Shadow = slices.Clone(rep.Groups), slices.Clone(rep.Other), slices.Clone(rep.Shadow)
		n = c.FoldSmallest(n)
		m = c.FoldSmallestShadow(m)
		o := ReportReply(req, &c)
		o.Folded = n + m
		return o
	}
	least := func(max int, fit func(int) bool) int {
		lo, hi := 0, max
		for lo < hi {
			mid := lo + (hi-lo)/2
			if fit(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo
	}
	all := len(rep.Groups)
	if reportFits(folded(all, 0), limit) {
		return folded(least(all, func(n int) bool { return reportFits(folded(n, 0), limit) }), 0)
	}
	// Past this, the serve fallback answers reply_too_large.
	return folded(all, least(len(rep.Shadow), func(m int) bool { return reportFits(folded(all, m), limit) }))
}

// reportFits reports whether r encodes in at most limit bytes.
func reportFits(r events.ReportReply, limit int) bool {
	b, err := json.Marshal(r)
	return err == nil && len(b) <= limit
}

// ReportReply is rep on the wire.
func ReportReply(req events.ReportRequest, rep *report.AggregateReport) events.ReportReply {
	out := events.ReportReply{By: req.By, From: req.From, To: req.To, Position: rep.Position, Groups: make([]events.ReportGroup, 0, len(rep.Groups))}
	for i, g := range rep.Groups {
		out.Groups = append(out.Groups, events.ReportGroup{Value: g.Value, Other: rep.IsOther(i), Unit: g.Unit,
			Reservations: g.Reservations, Open: g.Open, Settled: g.Settled, Released: g.Released, Expired: g.Expired, Late: g.Late,
			Spend: g.Spend.String(), Overrun: g.Overrun.String(), Reserved: g.Reserved.String(), Denials: g.Denials})
	}
	if req.Shadow {
		out.Shadow = ShadowGroups(rep.Shadow)
	}
	return out
}

// ShadowGroups are a report's shadow groups on the wire (nil for none).
func ShadowGroups(gs []report.ShadowGroup) []events.ShadowGroup {
	var out []events.ShadowGroup
	for _, g := range gs {
		out = append(out, g.Wire())
	}
	return out
}
