package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/ledger"
	"github.com/spendgate/spendgate/metrics"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/streams"
)

// Version is the service version reported to micro discovery.
const Version = "0.1.0"

// QueueGroup is the queue group of every endpoint, so replicas share load.
const QueueGroup = "spendgate"

// MaxInFlight is the default bound on the requests one replica handles at
// once (Config.MaxInFlight). micro calls a handler from one goroutine per
// endpoint; spendgate hands each request to its own goroutine so concurrent
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
	nc       *nats.Conn
	m        *metrics.Set
	// lastDispatch is when micro last handed a request to the service
	// (unix nanoseconds).
	lastDispatch atomic.Int64
	// stats counts every answer per endpoint, for micro's STATS data.
	stats endpointStats

	// denials keeps this replica's recent denials (RecentDenials).
	denials denialRing

	// tenants bounds each tenant's share of the in-flight limit.
	tenants tenantShare

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
	// MaxInFlight bounds the requests handled at once; beyond it a request
	// is answered ledger_busy (counted in spendgate_ledger_busy_total with
	// cause inflight_limit). 0 means MaxInFlight; negative is an error.
	MaxInFlight int
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
	s := &Service{l: cfg.Ledger, a: cfg.Admitter, s: cfg.Settler, now: cfg.Now, log: cfg.Log,
		ctx: context.Background(), inflight: make(chan struct{}, limit), nc: nc, tenants: newTenantShare(limit)}
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
	add := func(name, desc string, h func(context.Context, []byte) (any, error), tenants bool) error {
		endpoint, subject := strings.ReplaceAll(name, ".", "_"), layout.Endpoint(name)
		if tenants {
			endpoint, subject = "tenant_"+endpoint, layout.TenantEndpoints(name)
			desc += " (for the tenant named by the subject)"
		}
		return svc.AddEndpoint(endpoint, micro.HandlerFunc(func(r micro.Request) {
			// micro's Request is not safe to use after the handler returns
			// (its stats read it), so the goroutine gets copies and replies
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
			if !s.tenants.enter(tenant) {
				s.refuseBusy(r, name)
				return
			}
			select {
			case s.inflight <- struct{}{}:
			default:
				s.tenants.leave(tenant)
				s.refuseBusy(r, name)
				return
			}
			s.mu.Lock()
			s.running++
			s.mu.Unlock()
			go func() {
				defer func() {
					s.tenants.leave(tenant)
					<-s.inflight
					s.mu.Lock()
					if s.running--; s.running == 0 {
						s.idle.Broadcast()
					}
					s.mu.Unlock()
				}()
				s.serve(nc, name, subject, reply, data, h, arrived)
			}()
		}),
			micro.WithEndpointSubject(subject),
			micro.WithEndpointMetadata(map[string]string{"description": desc}))
	}
	for _, e := range []struct {
		name, desc string
		h          func(context.Context, []byte) (any, error)
	}{
		{streams.EndpointAdmit, "reserve an amount in every budget of the named scopes, or in none", s.admit},
		{streams.EndpointSettle, "close a reservation with its actual cost", s.settle},
		{streams.EndpointRelease, "give a whole reservation back", s.release},
		{streams.EndpointBudgetPut, "define or change a budget", s.budgetPut},
		{streams.EndpointBudgetGet, "read a budget and its current balance, or every budget of a scope", s.budgetGet},
		{streams.EndpointBudgetList, "list budgets", s.budgetList},
	} {
		// Each endpoint twice: for the untenanted deployment on its plain
		// subject, and for every tenant on "<prefix>t.*.<name>" (see
		// serve, which takes the tenant from the subject).
		for _, tenants := range []bool{false, true} {
			if err := add(e.name, e.desc, e.h, tenants); err != nil {
				_ = svc.Stop()
				return nil, err
			}
		}
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
	return err
}

// Info returns the micro service info.
func (s *Service) Info() micro.Info { return s.svc.Info() }

func (s *Service) serve(nc *nats.Conn, endpoint, subject, reply string, data []byte, h func(context.Context, []byte) (any, error), arrived time.Time) {
	start := time.Now()
	s.m.Inflight.Inc()
	code := metrics.CodeOK
	var errCode, errMsg string
	defer func() {
		s.m.Inflight.Dec()
		s.m.ObserveRequest(endpoint, code, time.Since(start))
		s.stats.observe(endpoint, errCode, errMsg, time.Since(arrived))
	}()
	ctx, cancel := context.WithTimeout(s.ctx, RequestTimeout)
	defer cancel()
	var out any
	var err error
	// The one place the tenant is decided: from the subject the request
	// arrived on, never from its body. A tenant account reaches only
	// "<prefix>t.<its tenant>.<endpoint>" (its service import fixes the
	// subject), so a caller cannot choose another tenant. Every handler
	// and the engine read it with events.TenantFromContext.
	if tenant, ok := s.l.Layout().TenantOf(subject); ok {
		if err = events.ValidateTenant(tenant); err == nil {
			out, err = h(events.ContextWithTenant(ctx, tenant), data)
		}
	} else {
		out, err = h(ctx, data)
	}
	msg := &nats.Msg{Subject: reply}
	if err == nil {
		msg.Data, err = json.Marshal(out)
	}
	if err != nil {
		var e *events.Error
		if !errors.As(err, &e) {
			s.log.Error("request failed", "subject", subject, "err", err)
			e = &events.Error{Code: events.CodeInternal, Message: "internal error"}
		} else if e.Code == events.CodeInternal || e.Code == events.CodeLedgerUnavailable {
			s.log.Error("request failed", "subject", subject, "err", err)
		}
		code = string(e.Code)
		errCode, errMsg = code, e.Message
		if e.Code == events.CodeLedgerBusy {
			s.m.LedgerBusy.With(metrics.BusyConflicts).Inc()
		}
		msg.Data, _ = json.Marshal(events.ErrorReply{Error: &events.Error{
			Code: e.Code, Message: e.Message, ReservationID: e.ReservationID, Status: e.Status,
		}})
		msg.Header = nats.Header{
			micro.ErrorHeader:     []string{string(e.Code)},
			micro.ErrorCodeHeader: []string{statusOf(e.Code)},
		}
	}
	if reply == "" {
		return
	}
	if err := nc.PublishMsg(msg); err != nil {
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
// stream in the replicas' account (a tenant's feed consumer, imported into
// its own account) could otherwise deliver that stream into an endpoint,
// as requests it cannot make itself, again at every ack wait.
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
	s.m.LedgerBusy.With(metrics.BusyInflight).Inc()
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
	case events.CodeUnknownBudget, events.CodeUnknownReservation:
		return "404"
	case events.CodeIdempotencyMismatch, events.CodeAlreadySettled, events.CodeAlreadyReleased:
		return "409"
	case events.CodePayloadTooLarge:
		return "413"
	}
	return "400"
}

func (s *Service) admit(ctx context.Context, data []byte) (any, error) {
	var req events.AdmitRequest
	if err := events.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	reply, err := s.a.Admit(ctx, req)
	if err == nil && reply.Mode != "" {
		// Check and shadow answers are counted apart from real admits.
		if reply.Admitted {
			s.m.AdmitChecks.With(reply.Mode, metrics.ResultAdmitted, "").Inc()
		} else if reply.Denial != nil {
			s.m.AdmitChecks.With(reply.Mode, metrics.ResultDenied, string(reply.Denial.Reason)).Inc()
		}
		return reply, nil
	}
	if err == nil {
		if reply.Admitted {
			s.m.Admits.With(metrics.ResultAdmitted, "").Inc()
		} else if reply.Denial != nil {
			s.m.Admits.With(metrics.ResultDenied, string(reply.Denial.Reason)).Inc()
			s.denials.add(DeniedAdmit{At: s.now().UTC(), Tenant: events.TenantFromContext(ctx), RequestID: req.RequestID, Scopes: req.Scopes, Amount: req.Amount,
				Unit: req.Unit, Metadata: req.Metadata, Denial: *reply.Denial})
		}
	}
	return reply, err
}

func (s *Service) settle(ctx context.Context, data []byte) (any, error) {
	var req events.SettleRequest
	if err := events.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	return s.s.Settle(ctx, req)
}

func (s *Service) release(ctx context.Context, data []byte) (any, error) {
	var req events.ReleaseRequest
	if err := events.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	return s.s.Release(ctx, req)
}

func (s *Service) budgetPut(ctx context.Context, data []byte) (any, error) {
	var req events.BudgetPutRequest
	if err := events.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	def, err := parseBudgetPut(req)
	if err != nil {
		return nil, err
	}
	def.Ref.Scope = events.TenantScope(events.TenantFromContext(ctx), def.Ref.Scope)
	// A unit change is refused on a budget with spend or reservations: fold
	// every lane written so far, from any replica, before looking.
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	ch, err := s.l.DefineBudget(ctx, def, s.now())
	if err != nil {
		return nil, err
	}
	v, err := s.view(def.Ref)
	if err != nil {
		return nil, err
	}
	out := events.BudgetPutReply{BudgetView: v, Created: !ch.Existed, Changed: ch.Changed}
	if ch.Existed && len(ch.Changed) > 0 {
		out.Previous = &events.BudgetDefinition{Limit: ch.Prev.Limit.String(), Unit: ch.Prev.Unit, TZ: ch.Prev.TZ, Disabled: ch.Prev.Disabled}
		if ch.Prev.FixedSlot != nil {
			out.Previous.FixedSlot = ch.Prev.FixedSlot.String()
		}
	}
	return out, nil
}

// parseBudgetPut validates a budget put. Errors (*events.Error), in
// precedence order: CodeInvalidIdentifier (scope), CodeInvalidPeriod,
// CodeInvalidAmount (limit: its message names "limit"; 0 without
// allow_zero), CodeInvalidUnit, CodeInvalidTZ, CodeInvalidAmount
// (fixed_slot: not a decimal > 0, or on a requests budget).
func parseBudgetPut(req events.BudgetPutRequest) (ledger.Budget, error) {
	scope, err := events.ParseScope(req.Scope)
	if err != nil {
		return ledger.Budget{}, err
	}
	period, err := events.ParsePeriod(req.Period)
	if err != nil {
		return ledger.Budget{}, err
	}
	limit, err := events.ParseMoney(req.Limit)
	if err != nil {
		var e *events.Error
		if errors.As(err, &e) && strings.HasPrefix(e.Message, "amount") {
			return ledger.Budget{}, &events.Error{Code: e.Code, Message: "limit" + strings.TrimPrefix(e.Message, "amount"), Err: err}
		}
		return ledger.Budget{}, err
	}
	if limit.IsZero() && !req.AllowZero {
		return ledger.Budget{}, events.Errorf(events.CodeInvalidAmount,
			"limit 0 denies every admit; to mean that, put \"allow_zero\": true (or \"disabled\": true to switch the budget off)")
	}
	if err := events.ValidateUnit(req.Unit); err != nil {
		return ledger.Budget{}, err
	}
	if _, err := events.LoadZone(req.TZ); err != nil {
		return ledger.Budget{}, err
	}
	def := ledger.Budget{Ref: events.BudgetRef{Scope: scope, Period: period}, Limit: limit, Unit: req.Unit,
		TZ: req.TZ, Disabled: req.Disabled}
	if req.FixedSlot != "" {
		slot, err := events.ParseMoney(req.FixedSlot)
		if err != nil {
			var e *events.Error
			if errors.As(err, &e) && strings.HasPrefix(e.Message, "amount") {
				return ledger.Budget{}, &events.Error{Code: e.Code, Message: "fixed_slot" + strings.TrimPrefix(e.Message, "amount"), Err: err}
			}
			return ledger.Budget{}, err
		}
		if slot.IsZero() {
			return ledger.Budget{}, events.Errorf(events.CodeInvalidAmount, "fixed_slot must be greater than zero (leave it out for none)")
		}
		if events.IsCount(req.Unit) {
			return ledger.Budget{}, events.Errorf(events.CodeInvalidAmount, "fixed_slot applies to money budgets; a %s budget reserves 1 per admit", req.Unit)
		}
		def.FixedSlot = &slot
	}
	return def, nil
}

func (s *Service) budgetGet(ctx context.Context, data []byte) (any, error) {
	var req events.BudgetGetRequest
	if err := events.DecodeRequest(data, &req); err != nil {
		return nil, err
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
		return s.view(events.BudgetRef{Scope: scope, Period: period})
	}
	// Only a scope: every budget of it, in period order.
	bs := s.l.BudgetsOf(scope)
	if len(bs) == 0 {
		return nil, events.Errorf(events.CodeUnknownBudget, "no budget is defined for scope %s", scope.Local())
	}
	out := events.BudgetListReply{Budgets: make([]events.BudgetView, 0, len(bs))}
	for _, b := range bs {
		v, err := s.view(b.Ref)
		if err != nil {
			return nil, err
		}
		out.Budgets = append(out.Budgets, v)
	}
	return out, nil
}

// view reads a budget and its balance in the current period instance, its
// scope as its tenant names it.
func (s *Service) view(ref events.BudgetRef) (events.BudgetView, error) {
	b, ok := s.l.Budget(ref)
	if !ok {
		return events.BudgetView{}, events.Errorf(events.CodeUnknownBudget, "no budget is defined for %s per %s", ref.Scope.Local(), ref.Period)
	}
	bal := s.l.Balance(b.Balance(s.now()))
	v := events.BudgetView{
		Scope: ref.Scope.Local(), Period: ref.Period, Limit: b.Limit.String(), Unit: b.Unit,
		Instance: bal.Ref.Instance, Spent: bal.Spent.String(), Reserved: bal.Reserved.String(),
		Overrun: bal.Overrun.String(), Available: bal.Available().String(), Open: int64(bal.Open),
		TZ: b.TZ, Disabled: b.Disabled,
	}
	if b.FixedSlot != nil {
		n := b.Limit.Slots(*b.FixedSlot)
		v.FixedSlot, v.MaxInFlight = b.FixedSlot.String(), n.String()
		v.OvershootBound = fmt.Sprintf("%s x (cost of one call - %s)", n, b.FixedSlot)
	}
	return v, nil
}
