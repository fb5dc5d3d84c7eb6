package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/streams"
)

// Client sends spendgate requests over a NATS connection. It is safe for
// concurrent use; it does not own the connection.
type Client struct {
	nc       *nats.Conn
	layout   streams.Layout
	timeout  time.Duration
	attempts int
	log      *slog.Logger
	logSet   bool
	failOpen *slog.Logger
	// linger and maxItems bound the coalescing of concurrent calls;
	// coalesce gathers the calls of coalescedEndpoints, nil when off.
	linger   time.Duration
	maxItems int
	coalesce *coalescer
	mux      *replyMux
	brief    bool
	// voiding maps the request id of an admit being voided in the
	// background (its caller gave up mid-request) to a channel closed when
	// the void is done: an admit of that id waits for it (see Admit).
	voiding sync.Map
	// bg tracks the work the client runs in the background (see Drain).
	bg background
}

// background tracks the client's background work: each piece's channel,
// closed when it is done, under its own number.
type background struct {
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan struct{}
}

// goBackground runs f in a goroutine of its own, tracked for Drain from
// before goBackground returns.
func (c *Client) goBackground(f func()) {
	done := make(chan struct{})
	b := &c.bg
	b.mu.Lock()
	if b.pending == nil {
		b.pending = map[uint64]chan struct{}{}
	}
	b.next++
	id := b.next
	b.pending[id] = done
	b.mu.Unlock()
	go func() {
		defer func() {
			b.mu.Lock()
			delete(b.pending, id)
			b.mu.Unlock()
			close(done)
		}()
		f()
	}()
}

// Drain waits until the work the client started in the background before
// Drain was called has finished: the voids of admits whose callers gave
// up mid-request (see Admit) and the releases of admits answered after
// their callers had gone (see WithBatching). Each is bounded by the
// client's timeout × attempts. Call it before closing the connection, at
// shutdown: closed under them, they fail (logged), and what they would
// have given back stays reserved until its reservation's TTL.
//
// It returns nil once they are done, or ctx's error if ctx ends first
// (they go on). Work started while Drain waits is not waited for; the
// client stays usable.
func (c *Client) Drain(ctx context.Context) error {
	b := &c.bg
	b.mu.Lock()
	waits := make([]chan struct{}, 0, len(b.pending))
	for _, done := range b.pending {
		waits = append(waits, done)
	}
	b.mu.Unlock()
	for _, done := range waits {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// New returns a client that sends requests on nc under the service prefix
// (streams.DefaultPrefix unless WithPrefix). It returns an error if nc is
// nil or an option is invalid.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: nil NATS connection")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	layout, err := streams.New(streams.Config{Prefix: o.prefix})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{nc: nc, layout: layout, timeout: o.timeout, attempts: o.attempts, log: o.log, logSet: o.logSet, failOpen: o.failOpen,
		linger: o.linger, maxItems: o.maxItems, brief: o.brief}
	if o.maxItems > 1 {
		c.mux = &replyMux{nc: nc}
		c.coalesce = newCoalescer(c)
		c.coalesce.onAbandoned = c.releaseAbandoned
	}
	return c, nil
}

// releaseAbandoned releases what an admit reserved after its caller gave
// up on it (ctx ended, or every attempt timed out): the caller was told it
// was not admitted, so nothing may stay reserved for it.
func (c *Client) releaseAbandoned(answer *nats.Msg) {
	var reply events.AdmitReply
	if e, _ := replyError(answer); e != nil || json.Unmarshal(answer.Data, &reply) != nil {
		return
	}
	if !reply.Admitted || reply.ReservationID == "" || reply.Mode != "" || reply.Status != events.StatusOpen {
		return
	}
	c.goBackground(func() {
		if _, err := c.Release(context.Background(), events.ReleaseRequest{ReservationID: reply.ReservationID}); err != nil {
			c.errorLog().Error("spendgate: release of an admit whose caller gave up failed; the reservation stays open until it expires",
				"reservation_id", reply.ReservationID, "request_id", reply.RequestID, "err", err)
		}
	})
}

// errorLog is where failures that no return value can carry are logged:
// the WithLogger logger, or slog.Default().
func (c *Client) errorLog() *slog.Logger {
	if c.logSet {
		return c.log
	}
	return slog.Default()
}

// Admit reserves req.Amount in every budget of req.Scopes, in all of them
// or in none. If req.RequestID is empty, Admit sets a new UUID before the
// first attempt; every retry sends the same id, so the service reserves
// once however many attempts reach it. It retries timeouts, no responders,
// ledger_busy and ledger_unavailable within the attempt budget, marking
// every attempt after the first as a retry (events.AdmitRequest.Retry: the
// service never denies a retry, whose first attempt may still commit, but
// answers ledger_unavailable). Its bound, sooner if ctx ends: timeout ×
// attempts for the admit's own attempts, plus, when it fails closed on an
// outcome it cannot know, up to another timeout × attempts for the void
// that comes first (below): 2 × timeout × attempts in all, 12 s with the
// defaults. An admit that no attempt delivered (no responders on every
// attempt: no replica serves the subject) needs no void, and fails closed
// after timeout × attempts.
//
// A nil error means admitted: the *Reservation holds an open reservation
// (Reply().Status "open", also for a replayed request id whose reservation
// is still open), to be settled or released. Every non-nil error means
// not admitted, nothing held for this call. In precedence order:
//
//   - the service's refusal of the request, an *events.Error (errors.As)
//     matching ErrInvalid (invalid_amount, invalid_identifier, ...: the
//     caller's bug), ErrConflict (idempotency_mismatch: the request id
//     was used with another body) or ErrLimited (tenant_limit: the
//     tenant is at one of its limits; nothing was reserved).
//   - an *events.Error already_settled or already_released matching
//     ErrConflict: the request id was admitted before (the same body, a
//     replay) and its reservation is closed, settled or released or
//     expired (the error's ReservationID and Status name it). The call it
//     paid for already ran, or was given up on; nothing is reserved now,
//     so do not make the call again under it (a new call takes a new
//     request id). Call's Outcome.Admit keeps the replayed reply.
//   - *DeniedError (matches ErrDenied): a budget denied the request
//     (Denial.Reason limit_reached, unknown_budget, unit_mismatch).
//   - *DeniedError with Denial.Reason ledger_unavailable, matching both
//     ErrDenied and ErrUnavailable, whose Err is the *UnavailableError:
//     the ledger did not answer; the client fails closed. It is not an
//     *events.Error. With WithFailOpen, Admit instead returns a
//     Reservation whose FailedOpen is true, and logs it at WARN.
//   - ctx's error, wrapped, if ctx ended before an answer; never fails open.
//
// When the admit's outcome is unknown (an attempt timed out or was
// answered ledger_busy, ledger_unavailable or internal, or ctx ended
// mid-request), the service may have reserved without the client knowing.
// Admit then voids the request id (before it returns the fail-closed
// denial; in the background once ctx has ended, so that a cancelled caller
// returns at once) (Void, with the
// admit's scopes, under context.WithoutCancel and its own timeout ×
// attempts): a reservation that landed is released at once, and an admit
// still in flight reserves nothing when it lands. When every attempt was
// answered no responders (the server delivered none), or none was sent,
// nothing can have landed and Admit sends no void. An Admit of the same
// request id on this client while such a background void is under way
// waits for it, and is then refused request_voided (ErrConflict): retry
// with a new request id. Drain waits for such background voids (call it
// before closing the connection). The DeniedError's Void
// holds the void's reply; it is nil when no void was needed (no attempt
// delivered), or when the void failed too (the ledger is down): then the
// failure is logged at WARN, and a reservation that landed expires after
// its TTL.
func (c *Client) Admit(ctx context.Context, req events.AdmitRequest) (*Reservation, error) {
	res, err := c.admit(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := closedReplay(res.reply); err != nil {
		return nil, err
	}
	return res, nil
}

// admit is Admit, but returns the reservation of a replay of a closed
// reservation as admitted (Call tells it apart, keeping its reply).
func (c *Client) admit(ctx context.Context, req events.AdmitRequest) (*Reservation, error) {
	if req.RequestID == "" {
		req.RequestID = uuid.NewString()
	}
	if c.brief {
		req.Brief = true
	}
	if done, ok := c.voiding.Load(req.RequestID); ok {
		// A retry of an admit whose caller gave up, while its void is
		// under way: sent now, it could be answered with the reservation
		// (a replay) that the void then releases under the caller, whose
		// call would run unreserved and whose settle would be refused.
		// After the void, it is answered request_voided.
		select {
		case <-done.(chan struct{}):
		case <-ctx.Done():
			return nil, fmt.Errorf("spendgate: %s: %w", c.layout.Endpoint(streams.EndpointAdmit), ctx.Err())
		}
	}
	var reply events.AdmitReply
	reached, err := c.send(ctx, streams.EndpointAdmit, req, &reply)
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			if ctx.Err() != nil && !isRefusal(err) && reached {
				// The caller gave up mid-request: the admit may have
				// landed. Void it so that it holds nothing, without
				// holding the caller (it returns ctx's error at once).
				done := make(chan struct{})
				c.voiding.Store(req.RequestID, done)
				c.goBackground(func() {
					defer close(done)
					defer c.voiding.CompareAndDelete(req.RequestID, done)
					c.voidUnknown(ctx, req, err)
				})
			}
			return nil, err
		}
		var void *events.VoidReply
		if reached {
			// The admit may have landed: void it before answering, so
			// that it holds nothing. One that reached no replica (no
			// responders on every attempt) reserved nothing: waiting
			// another timeout × attempts for a void would only double
			// the caller's wait.
			void = c.voidUnknown(ctx, req, err)
		}
		if c.failOpen != nil {
			return c.admitFailedOpen(req, err), nil
		}
		return nil, &DeniedError{
			RequestID: req.RequestID,
			Denial: events.Denial{
				Reason:    events.ReasonLedgerUnavailable,
				Message:   "the ledger could not answer; denied (fail closed): " + err.Error(),
				Unit:      req.Unit,
				Requested: req.Amount,
			},
			Err:  err,
			Void: void,
		}
	}
	if reply.RequestID == "" {
		reply.RequestID = req.RequestID
	}
	if !reply.Admitted {
		d := events.Denial{Reason: events.CodeInternal, Message: "the service denied without a reason"}
		if reply.Denial != nil {
			d = *reply.Denial
		}
		return nil, &DeniedError{RequestID: reply.RequestID, Denial: d}
	}
	return &Reservation{c: c, reply: reply}, nil
}

// closedReplay returns the error of an admit answered as a replay of a
// reservation that is no longer open (settled, released or expired), nil
// otherwise: such an answer holds nothing, and a caller told "admitted"
// would make the paid call again with nothing reserved for it. The error
// matches ErrConflict and is an *events.Error already_settled (settled) or
// already_released (released or expired), with the reservation's id and
// status.
func closedReplay(reply events.AdmitReply) error {
	st := reply.Status
	if !reply.Replayed || st == "" || st == events.StatusOpen || reply.Mode != "" {
		return nil
	}
	code := events.CodeAlreadyReleased
	if st == events.StatusSettled {
		code = events.CodeAlreadySettled
	}
	return &refusal{class: ErrConflict, err: events.ReservationErrorf(code, reply.ReservationID, st,
		"request_id %s was already admitted and its reservation %s is %s: nothing is reserved for this admit; a new call needs a new request id",
		reply.RequestID, reply.ReservationID, st)}
}

// voidUnknown voids the request id of an admit whose outcome is unknown
// (cause), and returns the void's reply, or nil if it failed (logged).
func (c *Client) voidUnknown(ctx context.Context, req events.AdmitRequest, cause error) *events.VoidReply {
	v, err := c.Void(ctx, events.VoidRequest{RequestID: req.RequestID, Scopes: req.Scopes})
	if err != nil {
		c.errorLog().Warn("spendgate: the admit's outcome is unknown and voiding its request id failed; a reservation it made expires after its TTL",
			"request_id", req.RequestID, "scopes", req.Scopes, "admit_err", cause, "err", err)
		return nil
	}
	return &v
}

// Void voids an admit by its request id, whether or not the admit has
// landed: its reservation, if open, is released (reason voided), and an
// admit with that request id that lands later reserves nothing (the
// service answers request_voided, which Admit returns as an error
// matching ErrConflict). req.Scopes must name the admit's scopes. Like
// Release, it runs under context.WithoutCancel(ctx) with the client's own
// timeout × attempts, and retries; voiding again answers Replayed. Admit
// calls it itself when an admit's outcome is unknown.
//
// Errors, in precedence order: the service's refusal, an *events.Error
// matching ErrInvalid (invalid_identifier, invalid_request) or ErrConflict
// (already_settled: the admit landed and was settled); then an
// *UnavailableError matching ErrUnavailable.
func (c *Client) Void(ctx context.Context, req events.VoidRequest) (events.VoidReply, error) {
	var reply events.VoidReply
	if err := c.request(context.WithoutCancel(ctx), streams.EndpointVoid, req, &reply); err != nil {
		return events.VoidReply{}, err
	}
	return reply, nil
}

// admitFailedOpen builds and logs a fail-open admission.
func (c *Client) admitFailedOpen(req events.AdmitRequest, cause error) *Reservation {
	c.failOpen.Warn("spendgate: ledger unavailable; admitting without a reservation (fail-open)",
		"request_id", req.RequestID, "scopes", req.Scopes, "amount", req.Amount, "unit", req.Unit, "err", cause)
	return &Reservation{
		c: c,
		reply: events.AdmitReply{
			Admitted:  true,
			RequestID: req.RequestID,
			Amount:    req.Amount,
			Unit:      req.Unit,
		},
		failedOpen: true,
	}
}

// Settle closes a reservation with its actual cost. It runs under
// context.WithoutCancel(ctx), bounded by the client's own timeout ×
// attempts: a cancelled caller still settles. It retries timeouts, no
// responders, ledger_busy and ledger_unavailable; the service answers a
// repeated settle with the recorded outcome and Replayed set.
//
// Errors, in precedence order: the service's refusal, an *events.Error
// matching ErrInvalid (invalid_amount, invalid_identifier, ...),
// ErrNotFound (unknown_reservation) or ErrConflict (already_released,
// already_settled with another actual; its ReservationID and Status name
// the reservation's state); then an *UnavailableError matching
// ErrUnavailable (no answer after every attempt, ledger_busy, internal).
func (c *Client) Settle(ctx context.Context, req events.SettleRequest) (events.CloseReply, error) {
	var reply events.CloseReply
	if err := c.request(context.WithoutCancel(ctx), streams.EndpointSettle, req, &reply); err != nil {
		return events.CloseReply{}, err
	}
	return reply, nil
}

// Release gives a whole reservation back. Like Settle, it runs under
// context.WithoutCancel(ctx) with the client's own timeout × attempts, and
// it retries; a repeated release (or one of an expired reservation) is
// answered with Replayed set.
//
// Errors, in precedence order: the service's refusal, an *events.Error
// matching ErrInvalid (invalid_identifier, ...), ErrNotFound
// (unknown_reservation) or ErrConflict (already_settled, with the
// reservation's Status); then an *UnavailableError matching
// ErrUnavailable.
func (c *Client) Release(ctx context.Context, req events.ReleaseRequest) (events.CloseReply, error) {
	var reply events.CloseReply
	if err := c.request(context.WithoutCancel(ctx), streams.EndpointRelease, req, &reply); err != nil {
		return events.CloseReply{}, err
	}
	return reply, nil
}

// PutBudget defines a budget, or changes the fields req names (all of
// them with req.Replace; see events.BudgetPutRequest), and returns it with
// its balance in the current period, and what the put did: Created, the
// fields it Changed, and the Previous definition when it changed one.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_identifier, invalid_period, invalid_amount, invalid_unit,
// unit_change_refused, ...); then an *UnavailableError matching
// ErrUnavailable; then ctx's error, wrapped.
func (c *Client) PutBudget(ctx context.Context, req events.BudgetPutRequest) (events.BudgetPutReply, error) {
	var v events.BudgetPutReply
	if err := c.request(ctx, streams.EndpointBudgetPut, req, &v); err != nil {
		return events.BudgetPutReply{}, err
	}
	return v, nil
}

// RetireBudget retires a budget for good (see events.BudgetRetired) and
// returns it as retired; Already is set when it was retired before.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_identifier, invalid_period, invalid_unit, invalid_request) or
// ErrNotFound (unknown_budget); then an *UnavailableError matching ErrUnavailable; then ctx's error,
// wrapped.
func (c *Client) RetireBudget(ctx context.Context, req events.BudgetRetireRequest) (events.BudgetRetireReply, error) {
	var v events.BudgetRetireReply
	if err := c.request(ctx, streams.EndpointBudgetRetire, req, &v); err != nil {
		return events.BudgetRetireReply{}, err
	}
	return v, nil
}

// PutPrice sets a model's prices per million tokens and returns them with
// their new version and what the put changed.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_model, invalid_unit, invalid_amount); then an
// *UnavailableError matching ErrUnavailable; then ctx's error, wrapped.
func (c *Client) PutPrice(ctx context.Context, req events.PricingPutRequest) (events.PricingPutReply, error) {
	var v events.PricingPutReply
	if err := c.request(ctx, streams.EndpointPricingPut, req, &v); err != nil {
		return events.PricingPutReply{}, err
	}
	return v, nil
}

// GetPrice reads a model's current prices and version.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_model) or ErrNotFound (unpriced_model); then an *UnavailableError
// matching ErrUnavailable; then ctx's error, wrapped.
func (c *Client) GetPrice(ctx context.Context, model string) (events.PriceView, error) {
	var v events.PriceView
	if err := c.request(ctx, streams.EndpointPricingGet, events.PricingGetRequest{Model: model}, &v); err != nil {
		return events.PriceView{}, err
	}
	return v, nil
}

// ListPrices lists every priced model, sorted by model: the models an
// admit can be priced from.
//
// Errors, in precedence order: an *UnavailableError matching
// ErrUnavailable; then ctx's error, wrapped.
func (c *Client) ListPrices(ctx context.Context) (events.PricingListReply, error) {
	var v events.PricingListReply
	if err := c.request(ctx, streams.EndpointPricingList, events.PricingListRequest{}, &v); err != nil {
		return events.PricingListReply{}, err
	}
	return v, nil
}

// PutTenantLimits sets a tenant's own limits in the ledger (the whole set:
// a field left nil is the replica's common limit, 0 no limit) and returns
// them with their version and what the put changed. Only the deployment's
// administration may: a client acting for a tenant gets no responder.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_identifier for the tenant, invalid_request for a value); then
// an *UnavailableError matching ErrUnavailable; then ctx's error, wrapped.
func (c *Client) PutTenantLimits(ctx context.Context, req events.TenantLimitsPutRequest) (events.TenantLimitsPutReply, error) {
	var v events.TenantLimitsPutReply
	if err := c.request(ctx, streams.EndpointTenantLimitsPut, req, &v); err != nil {
		return events.TenantLimitsPutReply{}, err
	}
	return v, nil
}

// GetTenantLimits reads a tenant's own limits kept in the ledger (none set
// and version 0 if it has none), with what the replica that answered holds
// the tenant to (HeldTo) and where it stands there (Usage).
//
// Errors, in precedence order: an *events.Error matching ErrInvalid; then
// an *UnavailableError matching ErrUnavailable; then ctx's error, wrapped.
func (c *Client) GetTenantLimits(ctx context.Context, tenant string) (events.TenantLimitsView, error) {
	var v events.TenantLimitsView
	if err := c.request(ctx, streams.EndpointTenantLimitsGet, events.TenantLimitsGetRequest{Tenant: tenant}, &v); err != nil {
		return events.TenantLimitsView{}, err
	}
	return v, nil
}

// ListTenantLimits lists every tenant with limits kept in the ledger,
// sorted by tenant.
//
// Errors, in precedence order: an *UnavailableError matching
// ErrUnavailable; then ctx's error, wrapped.
func (c *Client) ListTenantLimits(ctx context.Context) (events.TenantLimitsListReply, error) {
	var v events.TenantLimitsListReply
	if err := c.request(ctx, streams.EndpointTenantLimitsList, events.TenantLimitsListRequest{}, &v); err != nil {
		return events.TenantLimitsListReply{}, err
	}
	return v, nil
}

// GetBudget reads a budget and its balance in the current period.
// req.Period is required; GetScopeBudgets reads every budget of a scope.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_identifier, invalid_period, also for an empty period) or
// ErrNotFound (unknown_budget); then an *UnavailableError matching
// ErrUnavailable; then ctx's error, wrapped.
func (c *Client) GetBudget(ctx context.Context, req events.BudgetGetRequest) (events.BudgetView, error) {
	if req.Period == "" {
		return events.BudgetView{}, invalid(events.CodeInvalidPeriod, "GetBudget needs a period; GetScopeBudgets reads every budget of a scope")
	}
	var v events.BudgetView
	if err := c.request(ctx, streams.EndpointBudgetGet, req, &v); err != nil {
		return events.BudgetView{}, err
	}
	return v, nil
}

// GetScopeBudgets reads every budget of scope (budget.get without a
// period) with its balance in the current period, in period order.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_identifier) or ErrNotFound (unknown_budget: the scope has no
// budget); then an *UnavailableError matching ErrUnavailable; then ctx's
// error, wrapped.
func (c *Client) GetScopeBudgets(ctx context.Context, scope string) (events.BudgetListReply, error) {
	var v events.BudgetListReply
	if err := c.request(ctx, streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: scope}, &v); err != nil {
		return events.BudgetListReply{}, err
	}
	return v, nil
}

// ListBudgets lists every budget of scopes of kind ("" for all), sorted by
// scope and period, fetching them page by page (budget.list is paged; see
// ListBudgetsPage for one page). The pages are not one snapshot: a budget
// defined while the listing runs may be missing.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_identifier: kind); then an *UnavailableError matching
// ErrUnavailable; then ctx's error, wrapped.
func (c *Client) ListBudgets(ctx context.Context, kind string) (events.BudgetListReply, error) {
	all := events.BudgetListReply{Budgets: []events.BudgetView{}}
	req := events.BudgetListRequest{Kind: kind}
	for {
		page, err := c.ListBudgetsPage(ctx, req)
		if err != nil {
			return events.BudgetListReply{}, err
		}
		all.Budgets = append(all.Budgets, page.Budgets...)
		if page.NextCursor == "" {
			return all, nil
		}
		req.Cursor = page.NextCursor
	}
}

// ListBudgetsPage requests one page of budget.list: req names the kind, the
// sort (events.SortScope or events.SortUtilization), the page size and the
// cursor of the previous page (empty for the first). The reply's NextCursor
// is empty on the last page.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_identifier: kind; invalid_request: sort, limit or cursor); then
// an *UnavailableError matching ErrUnavailable; then ctx's error, wrapped.
func (c *Client) ListBudgetsPage(ctx context.Context, req events.BudgetListRequest) (events.BudgetListReply, error) {
	var v events.BudgetListReply
	if err := c.request(ctx, streams.EndpointBudgetList, req, &v); err != nil {
		return events.BudgetListReply{}, err
	}
	return v, nil
}

// Report requests a spend report: req.By is "scope" or a metadata key,
// req.From and req.To optional RFC 3339 times on whole hours. The reply
// is exact at its Position (the replica folds the ledger up to its end
// first) and equals `spendgate report --replay` over the same bounds.
//
// Errors, in precedence order: an *events.Error matching ErrInvalid
// (invalid_request: by; invalid_time: from or to); an *events.Error
// matching ErrNotFound with code report_unavailable (no aggregate on the
// replica, or a metadata key it does not track; the replay answers it);
// then an *UnavailableError matching ErrUnavailable;
// then ctx's error, wrapped.
func (c *Client) Report(ctx context.Context, req events.ReportRequest) (events.ReportReply, error) {
	var v events.ReportReply
	if err := c.request(ctx, streams.EndpointReport, req, &v); err != nil {
		return events.ReportReply{}, err
	}
	return v, nil
}

// request sends req to endpoint, retrying within the attempt budget, and
// decodes the reply into out. The whole request is bounded by timeout ×
// attempts. Its errors: a refusal (the service's *events.Error, matching
// ErrInvalid, ErrNotFound, ErrConflict or ErrLimited); an *UnavailableError; ctx's
// error, wrapped, when ctx (the caller's) ended.
func (c *Client) request(ctx context.Context, endpoint string, req, out any) error {
	_, err := c.send(ctx, endpoint, req, out)
	return err
}

// send is request, and also reports, when it fails, whether the request
// may have reached the service (reached): false only when no attempt was
// made or every attempt was answered no responders, which the server
// sends when no subscriber got the message. An admit that reached nothing
// reserved nothing: it needs no void.
func (c *Client) send(ctx context.Context, endpoint string, req, out any) (reached bool, err error) {
	subject := c.layout.Endpoint(endpoint)
	data, err := marshalRequest(req)
	if err != nil {
		return false, invalid(events.CodeInvalidRequest, "encoding request: %v", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("spendgate: %s: %w", subject, err)
	}
	// The first attempt is bounded by its own timeout (c.timeout), within
	// the whole request's: only a retry needs the whole request's bound as
	// a context of its own, made then (not a timer per call).
	start := time.Now()
	all := ctx
	pause := retryPause
	var k *coalescer
	if _, ok := coalescedEndpoints[endpoint]; ok {
		k = c.coalesce
	}
	for attempt := 1; ; attempt++ {
		retry, wait, err := c.attempt(all, k, endpoint, subject, data, out)
		if err == nil {
			return true, nil
		}
		noResponders := errors.Is(err, nats.ErrNoResponders)
		reached = reached || !noResponders
		if ctx.Err() != nil {
			return reached, fmt.Errorf("spendgate: %s: %w", subject, ctx.Err())
		}
		if attempt == 1 && retry && attempt < c.attempts {
			var cancel context.CancelFunc
			all, cancel = context.WithDeadline(ctx, start.Add(c.timeout*time.Duration(c.attempts)))
			defer cancel()
		}
		// No responders is answered at once: no replica serves the
		// subject yet (one restarting, the embedded server back before its
		// service). Counted as attempts, its retries would span only their
		// pauses (60 ms by default), not the request's bound: it is retried,
		// with growing pauses, until that bound has passed.
		if !retry || (attempt >= c.attempts && !(noResponders && c.attempts > 1)) || all.Err() != nil {
			return reached, err
		}
		if r, ok := req.(events.AdmitRequest); ok && !r.Retry {
			// The first attempt may still commit: the service must not
			// deny the retry (events.AdmitRequest.Retry).
			r.Retry = true
			data = codec.AppendAdmitRequest(make([]byte, 0, len(data)+16), &r)
		}
		c.log.Debug("spendgate: retrying", "subject", subject, "attempt", attempt+1, "of", c.attempts, "err", err)
		if wait {
			t := time.NewTimer(min(pause, c.timeout))
			select {
			case <-all.Done():
				t.Stop()
				if ctx.Err() != nil {
					return reached, fmt.Errorf("spendgate: %s: %w", subject, ctx.Err())
				}
				return reached, err
			case <-t.C:
			}
			pause *= 2
		}
	}
}

// attempt sends one request of endpoint, through k when coalescing (nil
// otherwise).
// retry says whether the failure invites a
// retry with the same request, wait whether to pause first (the failure
// was immediate).
func (c *Client) attempt(ctx context.Context, k *coalescer, endpoint, subject string, data []byte, out any) (retry, wait bool, err error) {
	var msg *nats.Msg
	if k != nil {
		msg, err = k.do(ctx, endpoint, data)
	} else {
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		msg, err = c.nc.RequestWithContext(actx, subject, data)
		cancel()
	}
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return true, true, unavailable(subject, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return true, false, unavailable(subject, fmt.Errorf("no reply within %s: %w", c.timeout, err))
	default:
		return false, false, unavailable(subject, err)
	}
	if e, status := replyError(msg); e != nil {
		err := classify(subject, e, status)
		return retryable(err), true, err
	}
	if err := unmarshalReply(msg.Data, out); err != nil {
		return false, false, &UnavailableError{Subject: subject, Code: events.CodeInternal,
			Message: fmt.Sprintf("undecodable reply: %v", err), Err: err}
	}
	if what := notAnAnswer(out); what != "" {
		return false, false, &UnavailableError{Subject: subject, Code: events.CodeInternal,
			Message: fmt.Sprintf("a reply that is not a replica's answer (%s): %.200q", what, msg.Data)}
	}
	return false, false, nil
}

// notAnAnswer says what a decoded admit, settle or release reply lacks
// that every replica's answer has, or "" if nothing: an admit reply
// admits or carries its denial, a settle or release reply names its
// reservation. Anything else on the endpoint's subject answered the
// request: a JetStream stream capturing it answers with its
// acknowledgement ({"stream":...,"seq":...}), which would otherwise read as
// a denial without a reason while the replica may have reserved. Admit
// then voids the request id, as for any unknown outcome.
func notAnAnswer(out any) string {
	switch o := out.(type) {
	case *events.AdmitReply:
		if !o.Admitted && o.Denial == nil {
			return "neither admitted nor denied"
		}
	case *events.CloseReply:
		if o.ReservationID == "" {
			return "no reservation_id"
		}
	}
	return ""
}

// marshalRequest encodes a request: the hot path's without reflection.
func marshalRequest(req any) ([]byte, error) {
	switch r := req.(type) {
	case events.AdmitRequest:
		return codec.AppendAdmitRequest(make([]byte, 0, 256), &r), nil
	case events.SettleRequest:
		return codec.AppendSettleRequest(make([]byte, 0, 96), &r), nil
	case events.ReleaseRequest:
		return codec.AppendReleaseRequest(make([]byte, 0, 64), &r), nil
	}
	return json.Marshal(req)
}

// unmarshalReply decodes a reply: the hot path's without reflection.
func unmarshalReply(data []byte, out any) error {
	switch o := out.(type) {
	case *events.AdmitReply:
		return codec.DecodeAdmitReply(data, o)
	case *events.CloseReply:
		return codec.DecodeCloseReply(data, o)
	}
	return json.Unmarshal(data, out)
}

// isErrorObject reports whether data is a JSON object whose first key is
// "error" (whitespace allowed before and after its brace).
func isErrorObject(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(data[1:], " \t\r\n"), []byte(`"error"`))
}

// replyError returns the error a reply carries and its micro status
// header, or nil: the {"error":{...}} body, or failing that the micro
// service error headers.
func replyError(msg *nats.Msg) (*events.Error, string) {
	var status string
	if msg.Header != nil {
		status = msg.Header.Get(micro.ErrorCodeHeader)
	}
	// An error reply is an object whose one key is "error", as every
	// replica encodes it ({"error":{...}}); other replies are not decoded
	// twice. Looking at the first key, not for "error" anywhere, and
	// declaring er only here: the scan of every reply and er escaping to
	// the heap on each took 1.4% of a hot64 bench run's CPU (profiled).
	if isErrorObject(msg.Data) {
		var er events.ErrorReply
		if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil && er.Error.Code != "" {
			return er.Error, status
		}
	}
	if msg.Header == nil {
		return nil, ""
	}
	code, desc := status, msg.Header.Get(micro.ErrorHeader)
	if code == "" && desc == "" {
		return nil, ""
	}
	// The code header may hold a status number, the description the code.
	if _, err := strconv.Atoi(code); (err == nil || code == "") && desc != "" {
		code = desc
	}
	return &events.Error{Code: events.Code(code), Message: desc}, status
}
