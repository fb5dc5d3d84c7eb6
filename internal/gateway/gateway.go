package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/logbound"
)

// Gateway is the proxy. Make one with New, register its routes on a mux
// (Register), and call Wait before the process exits.
type Gateway struct {
	cfg     Config
	bodies  *bodyBudget
	ups     []*upstream
	clients *ClientSet
	keys    *Keys
	hc      *http.Client
	m       *Metrics
	log     *slog.Logger
	now     func() time.Time

	// inflight holds the request ids derived from an Idempotency-Key
	// while their call runs here: a second call with the same key and
	// header meanwhile is refused (409), never given the first one's
	// reservation.
	inflight sync.Map
	// bg counts settles that outlive their call (the caller left).
	bg sync.WaitGroup

	// retry bounds the background retries of failed closes (retry.go).
	retry retrier
	// writeGrace is writeGrace (a test's shorter one: SetWriteGrace).
	writeGrace time.Duration
	// quit is closed by Wait: every pending close makes its last attempt.
	quit     chan struct{}
	quitOnce sync.Once
	// retries counts the goroutines of pending closes; mu guards pending
	// (their number) and quitting (Wait began: no new ones).
	retries  sync.WaitGroup
	mu       sync.Mutex
	pending  int
	quitting bool

	// jr is the journal of the calls in flight (nil: none; WithJournal).
	jr *journal

	// refusals bounds the log lines of calls refused for their key (no
	// key, an unknown or disabled one, too many unknown ones): a caller
	// spraying made-up keys wrote a line per request (57,000 in 20 s).
	// The metrics count each.
	refusals logbound.Bound

	// dr counts the calls in flight, for Drain.
	dr drainState

	// callerLeft, when set (a test's: SetCallerLeft), is called when a
	// call's caller is found gone (abandon.left).
	callerLeft func()
}

// New returns a gateway that admits through clients and resolves keys
// with keys. It returns an error if cfg or an option is invalid.
func New(clients *ClientSet, keys *Keys, cfg Config, opts ...Option) (*Gateway, error) {
	if clients == nil || keys == nil {
		return nil, errors.New("gateway: clients and keys are required")
	}
	ups, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	o := options{log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.metrics == nil {
		o.metrics = NewMetrics(nil)
	}
	keys.hits = o.metrics.KeyLookups.WithLabelValues("hit").Inc
	keys.misses = o.metrics.KeyLookups.WithLabelValues("miss").Inc
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	g := &Gateway{cfg: cfg, bodies: &bodyBudget{size: cfg.MaxBodiesInFlight}, ups: ups, clients: clients, keys: keys, hc: &http.Client{Transport: tr},
		m: o.metrics, log: o.log, now: o.now,
		retry: retrier{first: settleRetryFirst, max: settleRetryMax, limit: maxPendingCloses}, writeGrace: writeGrace, quit: make(chan struct{})}
	if keys.failures == nil {
		// The limit the HTTP API on the same Keys shares (LimitUnknown).
		keys.LimitUnknown(cfg.AuthFailures, o.now)
	}
	if o.journal != "" {
		if g.jr, err = openJournal(o.journal); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Register adds the proxied endpoints to mux: POST /v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/responses and /v1/messages, and
// the model list (GET ModelsPath). Any other method on those paths is
// answered 405 in the API's error shape, with Allow.
func (g *Gateway) Register(mux interface{ Handle(string, http.Handler) }) {
	for _, a := range apis {
		mux.Handle("POST "+a.path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(a, w, r) }))
		mux.Handle(a.path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			methodNotAllowed(w, r, a.kind, http.MethodPost)
		}))
	}
	g.registerModels(mux)
	g.registerKey(mux)
	mux.Handle("/v1/", http.HandlerFunc(unknownEndpoint))
}

// proxiedEndpoints names what the gateway answers under /v1/, for the 404
// of any other path.
const proxiedEndpoints = "it proxies POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses and /v1/messages, " +
	"and answers GET /v1/models and /v1/key"

// unknownEndpoint answers a path under /v1/ the gateway does not proxy
// (audio, images, files, /v1/messages/count_tokens, ...): 404
// CodeUnknownEndpoint in the provider's error shape, Anthropic's for
// /v1/messages/... and for a request that carries anthropic-version,
// OpenAI's otherwise, so the SDK raises its usual not-found error.
func unknownEndpoint(w http.ResponseWriter, r *http.Request) {
	kind := KindOpenAI
	if strings.HasPrefix(r.URL.Path, "/v1/messages/") || r.Header.Get("Anthropic-Version") != "" {
		kind = KindAnthropic
	}
	(&callError{status: http.StatusNotFound, typ: "invalid_request_error", code: CodeUnknownEndpoint,
		msg: "spendgate: the gateway does not proxy " + r.Method + " " + r.URL.Path + "; " + proxiedEndpoints, noRetry: true}).write(w, kind)
}

// Wait ends the gateway's background work, once its listener has stopped
// taking calls: every close waiting for a retry makes its last attempt at
// once (one that fails is given up and logged with its amount), and Wait
// waits for those and for the settles of calls whose callers left, at
// most 30 s (shutdownSettle) in all.
func (g *Gateway) Wait() {
	g.quitOnce.Do(func() {
		g.mu.Lock()
		g.quitting = true
		g.mu.Unlock()
		close(g.quit)
	})
	done := make(chan struct{})
	go func() { g.bg.Wait(); g.retries.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownSettle):
		g.mu.Lock()
		n := g.pending
		g.mu.Unlock()
		msg := "gateway: settles still running at shutdown; their reservations expire after their TTL"
		if g.jr != nil {
			msg = "gateway: settles still running at shutdown; the journal keeps them for the next start"
		}
		g.log.Error(msg, "retrying", n)
	}
}

// Close closes the journal (after Wait: what is still open in it is
// closed at the next start). Without a journal it does nothing.
func (g *Gateway) Close() error {
	if g.jr == nil {
		return nil
	}
	if err := g.jr.Err(); err != nil {
		g.log.Error("gateway: the journal stopped on a write error; calls after it were not journaled", "err", err)
	}
	return g.jr.close()
}

// callLog is what the one log line of a call says.
type callLog struct {
	api, key, model, tenant, outcome string
	stream                           bool
	status                           int
	requestID, reservation, reserved string
	settled, actual                  string
	usage                            *usage
	// served is the model the answer named when otherModel.
	served string
	// drained: the caller left, and the gateway read the answer this
	// long after (abandon.go).
	drained  time.Duration
	denial   string
	err      error
	start    time.Time
	upstream time.Duration
	// async: the call is closed and logged after its reply
	// (Config.SettleAfterReply), by a copy of this line.
	async bool
}

func (g *Gateway) logCall(l *callLog) {
	g.m.Calls.WithLabelValues(l.api, l.outcome).Inc()
	if l.outcome == OutcomeUnauthorized {
		// Anyone may send these, as fast as they like: bounded.
		log, held := g.refusals.Note(time.Now())
		if held > 0 {
			g.log.Info("gateway: more calls refused for their key; not logged one by one (past the first few a minute, summed up once a minute)",
				"refused", held)
		}
		if !log {
			return
		}
	}
	attrs := []any{"api", l.api, "outcome", l.outcome, "status", l.status, "key", l.key, "model", l.model, "stream", l.stream,
		"ms", time.Since(l.start).Milliseconds()}
	if l.tenant != "" {
		attrs = append(attrs, "tenant", l.tenant)
	}
	if l.reservation != "" {
		attrs = append(attrs, "request_id", l.requestID, "reservation", l.reservation, "reserved", l.reserved, "closed", l.settled)
	}
	if l.actual != "" {
		attrs = append(attrs, "actual", l.actual)
	}
	if l.usage != nil {
		attrs = append(attrs, "input_tokens", l.usage.input, "output_tokens", l.usage.output, "cached_input_tokens", l.usage.cached)
	}
	if l.served != "" {
		attrs = append(attrs, "served_model", l.served)
	}
	if l.upstream > 0 {
		attrs = append(attrs, "upstream_ms", l.upstream.Milliseconds())
	}
	if l.outcome == OutcomeCallerGone && l.reservation != "" {
		attrs = append(attrs, "drained_ms", l.drained.Milliseconds())
	}
	if l.denial != "" {
		attrs = append(attrs, "denial", l.denial)
	}
	if l.err != nil {
		attrs = append(attrs, "err", l.err.Error())
	}
	g.log.Info("gateway call", attrs...)
}

// fail answers e and logs the call with outcome.
func (g *Gateway) fail(w http.ResponseWriter, a *api, l *callLog, outcome string, e *callError) {
	e.write(w, a.kind)
	l.outcome, l.status = outcome, e.status
	if l.err == nil {
		l.err = e
	}
}

func (g *Gateway) serve(a *api, w http.ResponseWriter, r *http.Request) {
	g.m.Inflight.Inc()
	defer g.m.Inflight.Dec()
	l := &callLog{api: a.name, start: time.Now()}
	defer func() {
		if l.outcome != "" && !l.async {
			g.logCall(l)
		}
	}()
	ctx := r.Context()
	if !g.dr.enter() {
		g.fail(w, a, l, OutcomeDraining, errDraining)
		return
	}
	defer g.dr.leave()

	key, outcome, cerr := g.authorize(ctx, r)
	if cerr != nil {
		l.key, l.tenant = key.ID, key.Tenant
		g.fail(w, a, l, outcome, cerr)
		return
	}
	l.key, l.tenant = key.ID, key.Tenant
	// Taken before the body is read, for what it says it is (the largest
	// a body may be when it does not say): given back when the call ends.
	need := r.ContentLength
	if need < 0 || need > g.cfg.MaxBody {
		need = g.cfg.MaxBody
	}
	if !g.bodies.take(need) {
		g.fail(w, a, l, OutcomeBusy, &callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "gateway_busy",
			msg: "spendgate: the gateway holds as many request bodies as it may; retry", retryAfter: 1})
		return
	}
	defer g.bodies.give(need)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			g.fail(w, a, l, OutcomeBadRequest, &callError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
				code: "request_too_large", msg: fmt.Sprintf("the request body is larger than %d bytes", g.cfg.MaxBody), noRetry: true})
			return
		}
		l.outcome, l.err = OutcomeCallerGone, err
		return
	}
	c, err := a.parse(body, &g.cfg)
	if err != nil {
		g.fail(w, a, l, OutcomeBadRequest, err.(*callError))
		return
	}
	l.model, l.stream = c.model, c.stream
	if cerr := checkBetas(r.Header.Values("Anthropic-Beta")); cerr != nil {
		g.fail(w, a, l, OutcomeBadRequest, cerr)
		return
	}
	if cerr := c.resolveEndUser(key, r.Header.Get(HeaderEndUser)); cerr != nil {
		g.fail(w, a, l, OutcomeBadRequest, cerr)
		return
	}
	if cerr := c.resolveRun(key, r.Header.Get(HeaderRun)); cerr != nil {
		g.fail(w, a, l, OutcomeBadRequest, cerr)
		return
	}
	up := route(g.ups, a.kind, c.model)
	if up == nil {
		g.fail(w, a, l, OutcomeBadRequest, &callError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found",
			msg: "spendgate: no upstream of this gateway serves model " + c.model, noRetry: true})
		return
	}
	cl, cerr := g.clientFor(key)
	if cerr != nil {
		g.fail(w, a, l, OutcomeUnauthorized, cerr)
		return
	}

	base := requestBase(key.ID, r.Header.Get("Idempotency-Key"))
	if base != "" {
		if _, busy := g.inflight.LoadOrStore(base, struct{}{}); busy {
			g.fail(w, a, l, OutcomeBadRequest, errIdempotencyKeyInUse)
			return
		}
		defer g.inflight.Delete(base)
	}
	hcl, cerr := g.heldFor(key)
	if cerr != nil {
		g.fail(w, a, l, OutcomeUnauthorized, cerr)
		return
	}
	res, err := g.admit(ctx, hcl, key, c, base)
	g.m.AdmitSeconds.WithLabelValues(a.name).Observe(time.Since(l.start).Seconds())
	if err != nil {
		g.admitFailed(ctx, w, a, l, cl, err)
		return
	}
	rep := res.Reply()
	l.requestID, l.reservation, l.reserved = rep.RequestID, rep.ReservationID, rep.Amount+" "+rep.Unit
	// Every answer of an admitted call carries them, whatever becomes of
	// it upstream: the provider's answer, its refusal, a 502.
	h := w.Header()
	h.Set("X-Spendgate-Request-Id", rep.RequestID)
	h.Set("X-Spendgate-Reservation-Id", rep.ReservationID)
	h.Set("X-Spendgate-Reserved", rep.Amount+" "+rep.Unit)
	if g.jr != nil {
		g.jr.opened(key.Tenant, res)
	}
	g.forward(w, r, a, c, up, res, l)
}

// authorize looks up the caller's key: a key that may call the proxy (and
// the model list) has scopes. On failure it returns the call's outcome
// label and the answer.
func (g *Gateway) authorize(ctx context.Context, r *http.Request) (events.APIKeyResolveReply, string, *callError) {
	key, err := g.authenticate(ctx, r)
	if err != nil {
		return key, outcomeOfKeyError(err), keyError(err)
	}
	if len(key.Scopes) == 0 {
		return key, OutcomeUnauthorized, &callError{status: http.StatusForbidden, typ: "invalid_request_error", code: "no_scopes",
			msg: "spendgate: key " + key.ID + " has no scopes: it may call the HTTP API only", noRetry: true}
	}
	return key, "", nil
}

// authenticate looks up r's key under the limit of unknown keys of r's
// client address (Keys.AuthenticateFrom), counting the calls it refuses.
func (g *Gateway) authenticate(ctx context.Context, r *http.Request) (events.APIKeyResolveReply, error) {
	key, err := g.keys.AuthenticateFrom(ctx, r, secretOf(r))
	if errors.Is(err, errTooManyFailures) {
		g.m.AuthLimited.Inc()
	}
	return key, err
}

// clientFor returns the client of key's tenant.
func (g *Gateway) clientFor(key events.APIKeyResolveReply) (*client.Client, *callError) {
	return tenantClient(g.clients.For, key)
}

// heldFor returns the client of key's tenant on the held subjects
// (ClientSet.Held), which a call's admit and close go through.
func (g *Gateway) heldFor(key events.APIKeyResolveReply) (*client.Client, *callError) {
	return tenantClient(g.clients.Held, key)
}

func tenantClient(get func(string) (*client.Client, error), key events.APIKeyResolveReply) (*client.Client, *callError) {
	cl, err := get(key.Tenant)
	if err != nil {
		return nil, &callError{status: http.StatusForbidden, typ: "invalid_request_error", code: "invalid_tenant",
			msg: "spendgate: key " + key.ID + " names a tenant this gateway cannot serve", noRetry: true}
	}
	return cl, nil
}

// errIdempotencyKeyInUse answers a call whose Idempotency-Key's earlier
// call still holds its reservation.
var errIdempotencyKeyInUse = &callError{status: http.StatusConflict, typ: "invalid_request_error", code: "idempotency_key_in_use",
	msg: "spendgate: a call with this Idempotency-Key is running; retry when it ends", retryAfter: 1}

// requestBase is the request id of a call whose caller sent an
// Idempotency-Key: events.HeldRequestPrefix ("gw-") and 32 hex digits of the SHA-256 of the key's id
// and the header, so the same header from two keys never meets. "" without
// the header (the client makes a UUID).
func requestBase(keyID, idem string) string {
	if idem == "" {
		return ""
	}
	h := sha256.Sum256([]byte(keyID + "\x00" + idem))
	return events.HeldRequestPrefix + hex.EncodeToString(h[:16])
}

// admit reserves the call's maximum cost in every scope of the key, its
// end user's and its run's (metadata end_user and run name them). With
// an Idempotency-Key, the request id of the first attempt is base, and one
// whose earlier call is closed or voided takes the next id of its line
// (base-2, base-3, ...), so that every call that reaches the upstream has
// a reservation of its own.
//
// Each call's admit carries an id of its own (metadata call_id), so the
// ledger answers another call's admit of the same request id
// idempotency_mismatch, never a replay: a call whose earlier one still
// holds its reservation (running on this gateway or another, or left by a
// gateway that died mid-call until its journal or the reservation's TTL
// closes it) is refused idempotency_key_in_use. Taking an open
// reservation over let two gateways given the same header at once call
// the provider twice on one reservation and record one cost. The
// client's own retries of one admit send the same body, and get its
// replay.
func (g *Gateway) admit(ctx context.Context, cl *client.Client, key events.APIKeyResolveReply, c *call, base string) (*client.Reservation, error) {
	req := events.AdmitRequest{Scopes: key.Scopes, Model: c.model, InputTokens: c.input, MaxOutputTokens: c.maxOutput,
		TTL:      (g.callBound(c) + ttlMargin).String(),
		Metadata: map[string]string{"key_id": key.ID, "model": c.model, "endpoint": c.api.name, "call_id": uuid.NewString()}}
	if c.endUserScope != "" {
		req.Scopes = append(slices.Clip(req.Scopes), c.endUserScope)
		req.Metadata["end_user"] = c.endUser
	}
	if c.runScope != "" {
		req.Scopes = append(slices.Clip(req.Scopes), c.runScope)
		req.Metadata["run"] = c.run
	}
	if base == "" {
		// Every call's reservation is held (events.HeldRequestPrefix):
		// only this gateway, through the held subjects, closes it.
		req.RequestID = events.HeldRequestPrefix + uuid.NewString()
	}
	for gen := 1; ; gen++ {
		if base != "" {
			req.RequestID = base
			if gen > 1 {
				req.RequestID = base + "-" + strconv.Itoa(gen)
			}
		}
		res, err := cl.Admit(ctx, req)
		var ee *events.Error
		switch {
		case err == nil && (!res.Reply().Replayed || res.Reply().Status == events.StatusOpen):
			return res, nil
		case errors.As(err, &ee) && ee.Code == events.CodeIdempotencyMismatch && base != "" && ee.Status == events.StatusOpen:
			return nil, errIdempotencyKeyInUse
		case err == nil, errors.As(err, &ee) && (ee.Code == events.CodeRequestVoided || ee.Code == events.CodeIdempotencyMismatch && base != "" ||
			// A replay of this id's reservation, closed already (the
			// client's own retry met it settled or released): the id
			// is spent, as a voided one is.
			ee.Code == events.CodeAlreadySettled || ee.Code == events.CodeAlreadyReleased):
			if base == "" || gen >= maxGenerations {
				return nil, &callError{status: http.StatusConflict, typ: "invalid_request_error", code: "idempotency_key_used",
					msg: fmt.Sprintf("spendgate: this Idempotency-Key has been used by %d calls; send a new one", gen), noRetry: true}
			}
		default:
			return nil, err
		}
	}
}

// admitFailed answers an admit that did not admit: a budget's denial
// (429, or 400 for an unpriced model), the ledger unavailable (503), a
// request the ledger refused (400, 409).
func (g *Gateway) admitFailed(ctx context.Context, w http.ResponseWriter, a *api, l *callLog, cl *client.Client, err error) {
	var ce *callError
	var de *client.DeniedError
	var ee *events.Error
	switch {
	case errors.As(err, &ce):
		g.fail(w, a, l, OutcomeBadRequest, ce)
	case errors.Is(err, client.ErrUnavailable):
		g.fail(w, a, l, OutcomeUnavailable, &callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "ledger_unavailable",
			msg: "spendgate: the ledger did not answer; the call was not made (fail closed)"})
	case errors.As(err, &de):
		d := de.Denial
		g.m.Denials.WithLabelValues(string(d.Reason)).Inc()
		l.denial = string(d.Reason)
		g.fail(w, a, l, OutcomeDenied, g.denial(ctx, cl, d))
	case errors.As(err, &ee):
		status := http.StatusBadRequest
		if ee.Code == events.CodeIdempotencyMismatch {
			status = http.StatusConflict
		}
		g.fail(w, a, l, OutcomeBadRequest, &callError{status: status, typ: "invalid_request_error", code: string(ee.Code),
			msg: "spendgate: " + ee.Message, noRetry: true})
	default: // ctx ended: the caller left
		l.outcome, l.err = OutcomeCallerGone, err
	}
}

// denial shapes a budget's denial. A call whose maximum cost is more than
// the budget's whole limit never fits: 400 CodeExceedsBudgetLimit, no
// Retry-After. A limit that the budget's spend alone already blocks frees
// up at its period's reset: Retry-After says when, and the SDKs are told
// not to retry (x-should-retry: false) unless that is within a minute. One
// that open reservations block may free up any moment: Retry-After 1.
// Other reasons never free up by waiting.
func (g *Gateway) denial(ctx context.Context, cl *client.Client, d events.Denial) *callError {
	e := &callError{status: http.StatusTooManyRequests, typ: "budget_exceeded", code: string(d.Reason), denial: &d, noRetry: true}
	switch d.Reason {
	case events.ReasonLimitReached:
		e.msg = fmt.Sprintf("spendgate: budget %s per %s (%s) is spent: limit %s %s, spent %s, reserved %s, this call needs up to %s",
			d.Scope, d.Period, d.Instance, d.Limit, d.Unit, d.Spent, d.Reserved, d.Requested)
		limit, err1 := events.ParseMoney(d.Limit)
		spent, err2 := events.ParseMoney(d.Spent)
		need, err3 := events.ParseMoney(d.Requested)
		if err1 != nil || err2 != nil || err3 != nil {
			break
		}
		if need.Cmp(limit) > 0 {
			// Not even an empty period holds it: waiting never helps, only
			// a smaller call or a larger limit does.
			e.status, e.typ, e.code = http.StatusBadRequest, "invalid_request_error", CodeExceedsBudgetLimit
			e.msg = fmt.Sprintf("spendgate: this call's maximum cost, up to %s %s, is more than the whole limit of budget %s per %s (%s %s): "+
				"it can never be admitted; lower its max_tokens (or its input), or raise the budget's limit",
				d.Requested, d.Unit, d.Scope, d.Period, d.Limit, d.Unit)
			break
		}
		if spent.Add(need).Cmp(limit) <= 0 {
			// Open reservations block it: they close soon. Saying the
			// budget "is spent" would send the caller looking for spend.
			e.retryAfter, e.noRetry = 1, false
			e.msg = fmt.Sprintf("spendgate: budget %s per %s (%s) is held by open reservations: limit %s %s, spent %s, reserved %s, this call needs up to %s; they close as their calls end, retry in a moment",
				d.Scope, d.Period, d.Instance, d.Limit, d.Unit, d.Spent, d.Reserved, d.Requested)
			break
		}
		end, ok := time.Time{}, d.ResetsAt != nil
		if ok {
			end = *d.ResetsAt
		} else {
			end, ok = g.resetOf(ctx, cl, d) // a replica before resets_at
		}
		if ok {
			secs := int64(end.Sub(g.now()).Seconds()) + 1
			e.retryAfter = max(secs, 1)
			e.noRetry = secs > 60
			e.msg += "; it resets at " + end.UTC().Format(time.RFC3339)
		}
	case events.ReasonUnpricedModel:
		e.status, e.typ = http.StatusBadRequest, "invalid_request_error"
		e.msg = "spendgate: model " + d.Model + " has no price in the pricing table; the call is denied, never costed at zero"
	default:
		e.msg = "spendgate: denied by budget " + string(d.Scope) + ": " + string(d.Reason) + ": " + d.Message
	}
	return e
}

// resetOf is when a denying budget's period ends, in the budget's time
// zone (read from the ledger; UTC if it cannot be).
func (g *Gateway) resetOf(ctx context.Context, cl *client.Client, d events.Denial) (time.Time, bool) {
	loc := time.UTC
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if b, err := cl.GetBudget(rctx, events.BudgetGetRequest{Scope: string(d.Scope), Period: string(d.Period), Unit: d.Unit}); err == nil && b.TZ != "" {
		if z, err := events.LoadZone(b.TZ); err == nil {
			loc = z
		}
	}
	_, end, ok := events.CalendarOf(d.Period, loc).InstanceBounds(d.Instance)
	return end, ok
}

func outcomeOfKeyError(err error) string {
	if errors.Is(err, client.ErrUnavailable) {
		return OutcomeUnavailable
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return OutcomeCallerGone
	}
	return OutcomeUnauthorized
}

// keyError shapes a key lookup's failure: 401 for no key or an unknown
// one, 401 key_disabled, 503 when the ledger did not answer.
func keyError(err error) *callError {
	var ee *events.Error
	var tf *TooManyUnknownKeys
	switch {
	case errors.As(err, &tf):
		return &callError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: CodeTooManyUnknownKeys,
			msg:        "spendgate: too many unknown API keys from this address; the key was not checked: retry after Retry-After seconds with a valid key",
			retryAfter: tf.RetryAfter()}
	case errors.Is(err, ErrNoKey):
		return &callError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "missing_api_key",
			msg: "spendgate: no API key: send Authorization: Bearer <key> (or x-api-key)", noRetry: true}
	case errors.Is(err, client.ErrUnavailable):
		return &callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "ledger_unavailable",
			msg: "spendgate: the ledger did not answer the key lookup; the call was not made (fail closed)"}
	case errors.As(err, &ee) && ee.Code == events.CodeKeyDisabled:
		return &callError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "key_disabled",
			msg: "spendgate: this API key is disabled", noRetry: true}
	case errors.As(err, &ee):
		return &callError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
			msg: "spendgate: incorrect API key", noRetry: true}
	}
	return &callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "ledger_unavailable",
		msg: "spendgate: the key lookup did not finish", noRetry: false}
}

// Headers passed from the caller to the upstream, and back. Any other
// request header stays here: the gateway's own key decides the provider's
// account, so OpenAI-Organization and OpenAI-Project are not forwarded.
// A call whose Anthropic-Beta names a beta with pricing the gateway does
// not have is refused before its admit (checkBetas).
var (
	forwardRequestHeaders  = []string{"Accept", "OpenAI-Beta", "Anthropic-Version", "Anthropic-Beta", "User-Agent"}
	forwardResponseHeaders = []string{"Content-Type", "Cache-Control", "X-Request-Id", "Request-Id", "Openai-Processing-Ms",
		"Openai-Version", "Retry-After", "Retry-After-Ms", "X-Should-Retry"}
	// forwardResponsePrefixes pass back the providers' rate-limit
	// headers (x-ratelimit-remaining-tokens,
	// anthropic-ratelimit-requests-reset, ...), which routers and the
	// SDKs' callers pace themselves by.
	forwardResponsePrefixes = []string{"X-Ratelimit-", "Anthropic-Ratelimit-"}
)

// passResponseHeaders copies the upstream's headers the caller is given
// (forwardResponseHeaders, forwardResponsePrefixes) into h.
func passResponseHeaders(h, upstream http.Header) {
	for _, k := range forwardResponseHeaders {
		if v := upstream.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	for k, v := range upstream {
		for _, p := range forwardResponsePrefixes {
			if strings.HasPrefix(k, p) {
				h[k] = v
			}
		}
	}
}

// outcome is how a forwarded call ended.
type outcome struct {
	// u is the reported usage, used when final; otherwise the call is
	// settled at its reservation, or released.
	u        usage
	final    bool
	released bool
	// served is the model the answer named ("" if none).
	served string
	// label is the call's outcome (OutcomeOK, ...); err why it failed.
	label string
	err   error
	// drained is, for a caller gone, how long the gateway read the
	// answer after it left.
	drained time.Duration
}

// callBound is the longest call c may be: MaxStream for a stream, the
// upstream timeout for a plain call. Its reservation's TTL is this plus
// ttlMargin.
func (g *Gateway) callBound(c *call) time.Duration {
	if c.stream {
		return g.cfg.MaxStream
	}
	return g.cfg.UpstreamTimeout
}

// forward sends the call upstream, passes its answer to the caller, and
// closes the reservation: from the reported usage, at the reservation when
// none was reported, released when the upstream refused the call or never
// got it.
//
// The upstream timeout bounds the wait for the response's headers and, for
// a streamed answer, each wait for its next bytes (idle), never a stream
// that keeps sending (MaxStream bounds it as a whole); a plain answer,
// which comes whole at the end, is bounded as a whole call.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, a *api, c *call, up *upstream, res *client.Reservation, l *callLog) {
	// The upstream request outlives a caller that leaves, for at most
	// DrainAbandoned (abandon.go): the answer is read to its end for the
	// usage the provider reports. The other bounds below end it all the
	// same.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	ab := watchCaller(r.Context(), g.cfg.DrainAbandoned, cancel, g.callerLeft)
	defer ab.end()
	defer g.dr.track(cancel)() // Drain's cut
	idle := time.AfterFunc(g.cfg.UpstreamTimeout, func() { cancel(errUpstreamTimeout) })
	defer idle.Stop()
	if c.stream {
		// A stream that keeps sending ends within its reservation's TTL.
		whole := time.AfterFunc(g.cfg.MaxStream, func() { cancel(errStreamTooLong) })
		defer whole.Stop()
	}
	// A caller that stops reading must not hold the call open past its
	// reservation's expiry: the sweeper would release the reservation
	// while the call runs, its budget room free again, and the settle
	// would come late. Writes to the caller end writeGrace after the
	// upstream's bound (time to answer a timed-out call's 502), well
	// inside the TTL's margin; a write that misses it is a caller gone.
	// A stream moves the deadline on as it writes (keepWriting).
	// A ResponseWriter without deadlines (a wrapper) keeps the old way.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.UpstreamTimeout + g.writeGrace))
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}})
	ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, up.url(a), bytes.NewReader(c.body))
	if err != nil {
		g.close(res, outcome{released: true, label: OutcomeUnreachable, err: err}, l)
		(&callError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_error", msg: "spendgate: " + err.Error()}).write(w, a.kind)
		return
	}
	for _, h := range forwardRequestHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			ureq.Header[h] = v
		}
	}
	ureq.Header.Set("Content-Type", "application/json")
	if a.kind == KindAnthropic {
		ureq.Header.Set("X-Api-Key", up.Key)
		if ureq.Header.Get("Anthropic-Version") == "" {
			ureq.Header.Set("Anthropic-Version", "2023-06-01")
		}
	} else {
		ureq.Header.Set("Authorization", "Bearer "+up.Key)
	}
	if ab.gone() {
		// Left before anything was sent: nothing to bill, nothing to wait for.
		g.close(res, outcome{released: true, label: OutcomeCallerGone, err: context.Cause(r.Context())}, l)
		return
	}
	t0 := time.Now()
	resp, err := g.hc.Do(ureq)
	l.upstream = time.Since(t0)
	g.m.UpstreamSeconds.WithLabelValues(a.name).Observe(l.upstream.Seconds())
	if err != nil {
		err = endedBy(ctx, err)
		o := outcome{label: OutcomeUnreachable, err: redact(err, up.Key)}
		if !wrote.Load() {
			o.released = true // the upstream never got the call
		}
		switch {
		case ab.gone():
			o.label, o.drained = OutcomeCallerGone, ab.since()
		case errors.Is(err, errGatewayShutdown):
			o.label = OutcomeShutdown
		}
		g.close(res, o, l)
		e := &callError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_unreachable",
			msg: "spendgate: the " + up.Kind + " upstream did not answer (" + unreachableCause(err) + ")"}
		if o.label == OutcomeShutdown {
			e.status, e.code = http.StatusServiceUnavailable, CodeGatewayShutdown
			e.msg = "spendgate: the gateway shut down before the " + up.Kind + " upstream answered"
		}
		if !o.released {
			// Sent and charged its reservation (the upstream may have
			// run it): an SDK's automatic retry would be charged again.
			e.noRetry = true
			e.msg += "; the call was sent, so it was charged its reservation: a retry is a new call, charged again"
		}
		e.write(w, a.kind)
		l.status = e.status
		return
	}
	defer resp.Body.Close()
	l.status = resp.StatusCode
	if resp.StatusCode/100 != 2 {
		g.refused(w, a, resp, up, res, l)
		return
	}
	h := w.Header()
	passResponseHeaders(h, resp.Header)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		g.plain(w, a, resp, res, l, ab, func(err error) error { return endedBy(ctx, err) })
		return
	}
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	st := &streamState{a: a, strip: c.stripUsage}
	closed := false
	// Each read that brings bytes starts the idle bound again.
	body := &activityReader{r: resp.Body, active: func() { idle.Reset(g.cfg.UpstreamTimeout) }}
	// A write the caller holds up (not reading) stops the upstream's
	// idle bound: the provider is not silent, the gateway is not reading.
	// The write's own deadline (keepWriting) bounds the caller.
	keepW := keepWriting(rc, g.cfg.UpstreamTimeout+g.writeGrace)
	keep := func() { idle.Stop(); keepW() }
	written := func() { idle.Reset(g.cfg.UpstreamTimeout) }
	err = pumpStream(w, body, st, ab, keep, written, func() {
		closed = true
		o := outcome{u: st.u, final: st.final, label: OutcomeOK, served: st.served}
		switch {
		case ab.gone():
			// Left before the answer's end: settled from the usage
			// if the rest of the stream brought it (NoteCallerGone),
			// else at the reservation.
			o.label, o.drained = OutcomeCallerGone, ab.since()
		case !st.done && errors.Is(context.Cause(ctx), errGatewayShutdown):
			o.label = OutcomeShutdown
		case !st.done || st.failed:
			o.label = OutcomeCut
		}
		if g.cfg.SettleAfterReply {
			g.closeAfter(res, o, l)
			return
		}
		g.close(res, o, l)
	})
	if err != nil {
		err = endedBy(ctx, err)
	}
	if !closed {
		g.close(res, outcome{label: OutcomeCut, err: err}, l)
	}
	if err != nil && l.err == nil {
		l.err = redact(err, up.Key)
	}
	if !ab.gone() && !st.done && !st.failed {
		// The stream ends without its terminal event (broken off, or
		// ended cleanly without it): the caller's SDK is told why in the
		// provider's own error event, so it raises its API error with
		// the code instead of a bare connection drop (or, worse, taking
		// half an answer for a whole one).
		e := streamEndError(up.Kind, err)
		writeStreamError(w, a.kind, e)
		if l.err == nil {
			l.err = errors.New("the stream ended without its terminal event")
		}
		l.err = fmt.Errorf("%s: %w", e.code, l.err)
	}
}

// endedBy is err of a call's upstream request or read, wrapped with why
// the gateway ended it (errUpstreamTimeout, errGatewayShutdown,
// errAbandonBound) when it did: the upstream request's context is the
// gateway's own, never cancelled by the caller.
func endedBy(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}

// activityReader calls active after each read that brought bytes.
type activityReader struct {
	r      io.Reader
	active func()
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.active()
	}
	return n, err
}

// keepWriting returns what a stream calls before each write to its
// caller: it moves the write deadline to d from now (at most once a
// second), so a stream that keeps sending is never cut by it, and a
// caller that stops reading is still let go d after its last write.
func keepWriting(rc *http.ResponseController, d time.Duration) func() {
	var last time.Time
	return func() {
		if now := time.Now(); now.Sub(last) >= time.Second {
			last = now
			_ = rc.SetWriteDeadline(now.Add(d))
		}
	}
}

// plain passes a whole (not streamed) answer: it reads it (keeping what
// its usage needs), settles, then writes it, so a caller that has the
// answer finds its spend in the ledger. An answer larger than maxUsageScan
// is written as it comes and settled after. A caller that leaves does not
// end the read (abandon.go): the call is settled from the answer's usage
// if it ends within DrainAbandoned, outcome caller_gone either way.
//
// why wraps a read error with the reason the gateway ended the read
// (endedBy).
func (g *Gateway) plain(w http.ResponseWriter, a *api, resp *http.Response, res *client.Reservation, l *callLog, ab *abandon, why func(error) error) {
	buf := bytes.NewBuffer(make([]byte, 0, max(0, min(resp.ContentLength, maxUsageScan))+512))
	n, err := io.Copy(buf, io.LimitReader(resp.Body, maxUsageScan+1))
	if err == nil && n <= maxUsageScan {
		u, served, ok := a.bodyUsage(buf.Bytes(), true)
		o := outcome{u: u, final: ok, label: OutcomeOK, served: served}
		if ab.gone() {
			o.label, o.drained = OutcomeCallerGone, ab.since()
		}
		if !g.cfg.SettleAfterReply {
			g.close(res, o, l)
		}
		if resp.ContentLength >= 0 {
			w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(buf.Bytes())
		if g.cfg.SettleAfterReply {
			g.closeAfter(res, o, l)
		}
		return
	}
	if err != nil {
		// Cut mid-answer: nothing was passed on yet, and half an answer
		// is no answer. The call may have been billed in full.
		err = why(err)
		o := outcome{label: OutcomeCut, err: err}
		e := &callError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_cut", noRetry: true,
			msg: "spendgate: the upstream's answer broke off; the call was charged its reservation: a retry is a new call, charged again"}
		switch {
		case ab.gone():
			o.label, o.drained = OutcomeCallerGone, ab.since()
		case errors.Is(err, errGatewayShutdown):
			o.label = OutcomeShutdown
			e.status, e.code = http.StatusServiceUnavailable, CodeGatewayShutdown
			e.msg = "spendgate: the gateway shut down before the upstream's answer ended; the call was charged its reservation: a retry is a new call, charged again"
		case errors.Is(err, errUpstreamTimeout):
			e.code = "upstream_timeout"
			e.msg = "spendgate: the upstream's answer did not end within the upstream timeout; the call was charged its reservation: a retry is a new call, charged again"
		}
		g.close(res, o, l)
		e.write(w, a.kind)
		l.status = e.status
		return
	}
	// Large: stream the rest through, keeping only its tail for the usage.
	w.WriteHeader(resp.StatusCode)
	tail := &tailBuffer{max: usageTail}
	// A write to the caller that fails stops the writes, not the read.
	dst := io.MultiWriter(tail, &callerWriter{w: w, ab: ab})
	_, _ = dst.Write(buf.Bytes())
	_, err = io.Copy(dst, resp.Body)
	u, _, ok := a.bodyUsage(tail.b, false)
	o := outcome{u: u, final: ok && err == nil, label: OutcomeOK, err: err}
	switch {
	case ab.gone():
		o.label, o.drained = OutcomeCallerGone, ab.since()
		if err != nil {
			o.err = why(err)
		}
	case err != nil:
		o.label, o.err = OutcomeCut, why(err)
		if errors.Is(o.err, errGatewayShutdown) {
			o.label = OutcomeShutdown
		}
	}
	g.close(res, o, l)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// refused passes an upstream's refusal (a status that is not 2xx) and
// releases the reservation: a refused call is not billed. A refusal of the
// gateway's own credentials (401, 403) is not passed on: it is the
// gateway's fault, answered 502, and its body may name the key. 504 and
// 524 are no refusal but an intermediary's timeout (sentNoAnswer): charged.
func (g *Gateway) refused(w http.ResponseWriter, a *api, resp *http.Response, up *upstream, res *client.Reservation, l *callLog) {
	if sentNoAnswer(resp.StatusCode) {
		g.timedOutBetween(w, a, resp, up, res, l)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	g.close(res, outcome{released: true, label: OutcomeUpstreamError,
		err: fmt.Errorf("upstream answered %d", resp.StatusCode)}, l)
	if resp.StatusCode == http.StatusNotFound && up.Kind == KindOpenAI && strings.Trim(up.base.Path, "/") == "" && up.hinted.CompareAndSwap(false, true) {
		// The most common misconfiguration: OpenAI's base URL is
		// https://api.openai.com/v1, and without /v1 every call is a 404.
		g.log.Warn("gateway: an openai upstream whose URL has no path answered 404; an OpenAI base URL usually ends in /v1 (https://api.openai.com/v1): check --upstream",
			"upstream", up.base.Host, "path", resp.Request.URL.Path)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		g.log.Error("gateway: the upstream refused the gateway's credentials", "upstream", up.base.Host, "status", resp.StatusCode)
		// A misconfiguration of the gateway: no retry of the caller's can
		// mend it, so its SDK is told not to try (as for the other
		// refusals that waiting never lifts).
		(&callError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_auth", noRetry: true,
			msg: "spendgate: the upstream refused the gateway's credentials"}).write(w, a.kind)
		l.status = http.StatusBadGateway
		return
	}
	h := w.Header()
	passResponseHeaders(h, resp.Header)
	h.Set("Content-Length", strconv.Itoa(len(redactBytes(body, up.Key))))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(redactBytes(body, up.Key))
}

// sentNoAnswer reports whether an upstream's status says the call went
// through to the provider and its answer was lost on the way back, not
// that the provider refused it: 504 and Cloudflare's 524, which a proxy
// or CDN in front of the provider answers when the origin did not answer
// in its time, while the origin may have run (and billed) the call.
func sentNoAnswer(status int) bool {
	return status == http.StatusGatewayTimeout || status == statusCloudflareTimeout
}

// statusCloudflareTimeout is Cloudflare's "a timeout occurred": the origin
// took the request and did not answer in time.
const statusCloudflareTimeout = 524

// timedOutBetween answers a call whose answer an intermediary gave up on
// (sentNoAnswer) as a call sent with no answer: charged its reservation
// (note reservation_unreachable), answered 502 upstream_unreachable with
// x-should-retry: false, since a retry is a new call, charged again. The
// intermediary's body (often an HTML page) goes to the log, not the caller.
func (g *Gateway) timedOutBetween(w http.ResponseWriter, a *api, resp *http.Response, up *upstream, res *client.Reservation, l *callLog) {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	g.close(res, outcome{label: OutcomeUnreachable,
		err: fmt.Errorf("upstream answered %d (an intermediary timed out; the provider may have run the call): %q", resp.StatusCode, redactBytes(body, up.Key))}, l)
	(&callError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_unreachable", noRetry: true,
		msg: fmt.Sprintf("spendgate: the %s upstream did not answer (an intermediary before it timed out: %d); "+
			"the call was sent, so it was charged its reservation: a retry is a new call, charged again", up.Kind, resp.StatusCode)}).write(w, a.kind)
	l.status = http.StatusBadGateway
}

// close settles or releases the call's reservation, under its own
// deadline and whatever became of the caller, and logs the call. A close
// the ledger does not acknowledge is counted by its code; one it did not
// answer (an outage) is retried in the background (retryClose), and one
// it refused is logged: the reservation then expires after its TTL.
func (g *Gateway) close(res *client.Reservation, o outcome, l *callLog) {
	p := &pendingClose{res: res, o: o, attempts: 1, deadline: res.ExpiresAt()}
	switch {
	case o.released:
		p.how = "released"
	case o.final:
		p.how, l.usage = "usage", &o.u
		if o.label == OutcomeCallerGone {
			// Its caller left; the gateway read the answer to its
			// end for this usage (abandon.go): the note says so.
			p.note = NoteCallerGone
			g.m.AbandonedDrained.WithLabelValues(l.api).Inc()
		}
		if otherModel(l.model, o.served) {
			// Priced at the model asked for, served by another: the
			// settle and the log say so, and the metric counts it.
			p.note, l.served = NoteOtherModel, o.served
			if o.label == OutcomeCallerGone {
				p.note = NoteCallerGoneOtherModel
			}
			g.m.OtherModel.WithLabelValues(l.api).Inc()
		}
	default:
		// No usage: the call may have cost up to its reservation.
		p.how, p.note = "reservation", noteOf(o.label)
	}
	if !o.released {
		p.deadline = p.deadline.Add(lateSettleWindow)
	}
	l.settled, l.drained = p.how, o.drained
	start := time.Now()
	reply, err := g.closeOnce(p)
	g.m.SettleLag.Observe(time.Since(start).Seconds())
	l.actual = reply.Actual
	l.outcome = o.label
	if o.err != nil {
		l.err = o.err
	}
	if err == nil {
		g.journalClosed(res)
		return
	}
	g.m.SettleFailures.WithLabelValues(string(closeCode(err))).Inc()
	if errors.Is(err, client.ErrUnavailable) && g.jr != nil {
		// Kept open in the journal with the close it is due: a gateway
		// killed before a retry lands makes it at its next start.
		g.jr.owes(p)
	} else {
		g.journalClosed(res)
	}
	switch {
	case errors.Is(err, client.ErrUnavailable) && g.retryClose(p):
		g.log.Warn("gateway: closing a reservation failed; retrying in the background", "reservation", res.ID(), "closed", p.how,
			"due", due(p), "unit", res.Unit(), "err", err)
		err = fmt.Errorf("retrying in the background: %w", err)
	case errors.Is(err, client.ErrUnavailable):
		g.log.Error("gateway: closing a reservation failed and is not retried; its spend is not recorded and the sweeper releases it at its expiry",
			"reservation", res.ID(), "closed", p.how, "due", due(p), "unit", res.Unit(), "err", err)
	default:
		g.log.Error("gateway: the ledger refused a reservation's close; it expires after its TTL", "reservation", res.ID(), "closed", p.how,
			"due", due(p), "unit", res.Unit(), "err", err)
	}
	if l.err == nil {
		l.err = err
	}
}

// journalClosed records in the journal that res's call needs nothing more.
func (g *Gateway) journalClosed(res *client.Reservation) {
	if g.jr != nil {
		g.jr.closed(res.ID())
	}
}

// closeAfter closes the call's reservation and logs it off the caller's
// path (Config.SettleAfterReply), from a copy of its log line.
func (g *Gateway) closeAfter(res *client.Reservation, o outcome, l *callLog) {
	l.async = true
	lc := *l
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		g.close(res, o, &lc)
		g.logCall(&lc)
	}()
}

// url is where the upstream answers a.
func (u *upstream) url(a *api) string {
	p := a.path
	if u.Kind == KindOpenAI {
		p = p[len("/v1"):]
	}
	return u.base.String() + p
}

// redact removes the upstream's key from an error's text.
// unreachableCause names why a call never got an answer, for the caller:
// a class of failure, never the error's text, which names the upstream's
// address (a host inside the operator's network, say). The gateway's log
// line of the call has the whole error.
func unreachableCause(err error) string {
	var dns *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "the call was cancelled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.As(err, &dns):
		return "its name did not resolve"
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return "could not connect"
	case isTLSError(err):
		return "TLS failed"
	}
	return "the request failed"
}

// isTLSError reports whether err comes from the TLS handshake or the
// upstream's certificate.
func isTLSError(err error) bool {
	var rec tls.RecordHeaderError
	var cert *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	return errors.As(err, &rec) || errors.As(err, &cert) || errors.As(err, &unknown) || errors.As(err, &host)
}

func redact(err error, key string) error {
	if err == nil || key == "" || !bytes.Contains([]byte(err.Error()), []byte(key)) {
		return err
	}
	return errors.New(string(redactBytes([]byte(err.Error()), key)))
}

func redactBytes(b []byte, key string) []byte {
	if key == "" {
		return b
	}
	return bytes.ReplaceAll(b, []byte(key), []byte("[redacted]"))
}

// bodyBudget counts the bytes of the request bodies held at once, up to
// its limit (Config.MaxBodiesInFlight).
type bodyBudget struct {
	mu         sync.Mutex
	used, size int64
}

// take reserves n bytes, or reports false (reserving nothing) if they
// would pass the limit.
func (b *bodyBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.size {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes that take reserved.
func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}
