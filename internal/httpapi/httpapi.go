// Package httpapi is spendgate's wire API over HTTP, for any language
// with an HTTP client and no NATS library: POST /spendgate/<endpoint>
// sends the request body, unchanged, to the NATS endpoint
// "<prefix><endpoint>" (admit, settle, release, void, admit.batch,
// settle.batch, release.batch, batch, budget.put, budget.get, budget.list,
// pricing.put, pricing.get, pricing.list, report) and answers its reply
// body, unchanged: the same request and reply bodies and the same error
// codes, with the HTTP status the service's micro error header gives
// (400, 404, 409, 413, 500, 503; 200 for a reply that is not an error,
// a denial included: {"admitted": false, ...}).
//
// A caller authenticates with "Authorization: Bearer <key>", a key of the
// ledger's key table (spendgate keys create --access service|admin): the
// key's access decides the endpoints it may call (AccessService: all but
// budget.put, pricing.put and budget.retire; AccessAdmin: all), and a key of a tenant
// calls the tenant's subjects ("<prefix>t.<tenant>.<endpoint>"), where the
// replica takes the tenant from the subject exactly as it does for a
// tenant's NATS account. budget.put, pricing.put and budget.retire go
// instead to the keyed subjects (streams.KeyedEndpoints)
// with the key itself (events.KeyedRequest): the replica checks the key's
// access and takes its tenant, so the gateway's login alone cannot put. Errors of the HTTP layer itself have the wire's
// shape too ({"error":{"code","message"}}): unauthorized (401, no key or
// an unknown one), key_disabled (401), forbidden (403, an endpoint the
// key's access does not reach), not_found (404, no such endpoint),
// method_not_allowed (405, a method other than POST; the answer says
// Allow: POST), ledger_unavailable (503 with Retry-After: 1, no replica
// answered in time; retry with the same request id, an admit with
// "retry":true).
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/streams"
)

// Codes of the HTTP layer's own errors (the endpoints' are the wire's).
const (
	CodeUnauthorized events.Code = "unauthorized"
	CodeForbidden    events.Code = "forbidden"
	CodeNotFound     events.Code = "not_found"
	CodeMethod       events.Code = "method_not_allowed"
)

// Named bounds and defaults.
const (
	// DefaultTimeout bounds the wait for a replica's reply.
	DefaultTimeout = 10 * time.Second
	// MaxBody bounds a request body: NATS's default max payload.
	MaxBody = 1 << 20
	// PathPrefix starts every endpoint's path.
	PathPrefix = "/spendgate/"
)

// Authenticator resolves a secret presented with request r to its key;
// gateway.Keys is one (under its limit of unknown keys per client address,
// shared with the proxy on the same listener: a *gateway.TooManyUnknownKeys
// is answered 429).
type Authenticator interface {
	AuthenticateFrom(ctx context.Context, r *http.Request, secret string) (events.APIKeyResolveReply, error)
}

// keyedEndpoints maps the endpoints only a key with admin access may call
// to their keyed subjects (events.KeyedRequest).
var keyedEndpoints = map[string]string{
	streams.EndpointBudgetPut:    streams.EndpointKeyedBudgetPut,
	streams.EndpointPricingPut:   streams.EndpointKeyedPricingPut,
	streams.EndpointBudgetRetire: streams.EndpointKeyedBudgetRetire,
}

// endpoints maps each endpoint to the access that may call it.
var endpoints = map[string]string{
	streams.EndpointAdmit: events.AccessService, streams.EndpointSettle: events.AccessService,
	streams.EndpointRelease: events.AccessService, streams.EndpointVoid: events.AccessService,
	streams.EndpointAdmitBatch: events.AccessService, streams.EndpointSettleBatch: events.AccessService,
	streams.EndpointReleaseBatch: events.AccessService, streams.EndpointBatch: events.AccessService,
	streams.EndpointBudgetGet:  events.AccessService,
	streams.EndpointBudgetList: events.AccessService, streams.EndpointPricingGet: events.AccessService,
	streams.EndpointPricingList: events.AccessService, streams.EndpointReport: events.AccessService,
	streams.EndpointBudgetPut: events.AccessAdmin, streams.EndpointPricingPut: events.AccessAdmin,
	streams.EndpointBudgetRetire: events.AccessAdmin,
}

// endpointList names every endpoint, sorted, for the answer to an unknown
// one (from endpoints: a list written apart left budget.retire out).
var endpointList = strings.Join(slices.Sorted(maps.Keys(endpoints)), ", ")

// API serves the HTTP API. Make one with New and Register it on a mux.
type API struct {
	nc      *nats.Conn
	layout  streams.Layout
	auth    Authenticator
	timeout time.Duration
	log     *slog.Logger
	// requests counts answers: With(endpoint, code), code "ok" or the
	// error code.
	requests *prometheus.CounterVec
}

// Option configures New.
type Option func(*API) error

// WithTimeout bounds the wait for a replica's reply (DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(a *API) error {
		if d <= 0 {
			return errors.New("httpapi: timeout must be positive")
		}
		a.timeout = d
		return nil
	}
}

// WithLogger logs failures to log.
func WithLogger(log *slog.Logger) Option {
	return func(a *API) error {
		if log == nil {
			return errors.New("httpapi: nil logger")
		}
		a.log = log
		return nil
	}
}

// WithMetrics registers the API's request counter
// (spendgate_httpapi_requests_total{endpoint, code}) in r.
func WithMetrics(r *prometheus.Registry) Option {
	return func(a *API) error {
		return r.Register(a.requests)
	}
}

// New returns the API over nc for the service under prefix.
func New(nc *nats.Conn, prefix string, auth Authenticator, opts ...Option) (*API, error) {
	if nc == nil || auth == nil {
		return nil, errors.New("httpapi: a NATS connection and an authenticator are required")
	}
	layout, err := streams.New(streams.Config{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	a := &API{nc: nc, layout: layout, auth: auth, timeout: DefaultTimeout, log: slog.New(slog.DiscardHandler),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_httpapi_requests_total",
			Help: "HTTP API requests, by endpoint and reply code (ok or the error code)."}, []string{"endpoint", "code"})}
	for _, opt := range opts {
		if err := opt(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Register adds POST /spendgate/{endpoint} to mux, and an answer in the
// wire's shape to every other method on those paths (the mux's own 405
// is a line of plain text).
func (a *API) Register(mux interface{ Handle(string, http.Handler) }) {
	mux.Handle("POST "+PathPrefix+"{endpoint}", a)
	mux.Handle(PathPrefix+"{endpoint}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		a.fail(w, "other", http.StatusMethodNotAllowed, CodeMethod, r.Method+" "+r.URL.Path+": every endpoint of the HTTP API takes POST with a JSON body")
	}))
}

// fail answers a wire-shaped error of the HTTP layer.
func (a *API) fail(w http.ResponseWriter, endpoint string, status int, code events.Code, msg string) {
	a.requests.WithLabelValues(endpoint, string(code)).Inc()
	// Not escaped for HTML: a message says "Bearer <key>", and curl shows
	// it as written.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(events.ErrorReply{Error: &events.Error{Code: code, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	if code == events.CodeLedgerUnavailable {
		// A replica comes back (or another takes over) within seconds:
		// a client that honours Retry-After tries again soon, not after
		// its own longer backoff.
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint := r.PathValue("endpoint")
	need, ok := endpoints[endpoint]
	if !ok {
		a.fail(w, "other", http.StatusNotFound, CodeNotFound, "no endpoint "+strconv.Quote(endpoint)+" ("+endpointList+")")
		return
	}
	ctx := r.Context()
	secret := bearer(r)
	if secret == "" {
		a.fail(w, endpoint, http.StatusUnauthorized, CodeUnauthorized, "send Authorization: Bearer <key> (spendgate keys create --access service)")
		return
	}
	key, err := a.auth.AuthenticateFrom(ctx, r, secret)
	var ee *events.Error
	var tm *gateway.TooManyUnknownKeys
	switch {
	case err == nil:
	case errors.As(err, &tm):
		w.Header().Set("Retry-After", strconv.FormatInt(tm.RetryAfter(), 10))
		a.fail(w, endpoint, http.StatusTooManyRequests, gateway.CodeTooManyUnknownKeys,
			"too many unknown keys from this address; the key was not checked: retry after Retry-After seconds with a valid key")
		return
	case errors.Is(err, client.ErrUnavailable):
		a.fail(w, endpoint, http.StatusServiceUnavailable, events.CodeLedgerUnavailable, "the ledger did not answer the key lookup; retry")
		return
	case errors.As(err, &ee) && ee.Code == events.CodeKeyDisabled:
		a.fail(w, endpoint, http.StatusUnauthorized, events.CodeKeyDisabled, "this key is disabled")
		return
	case errors.As(err, &ee):
		a.fail(w, endpoint, http.StatusUnauthorized, CodeUnauthorized, "incorrect key")
		return
	default:
		a.fail(w, endpoint, http.StatusServiceUnavailable, events.CodeLedgerUnavailable, "the key lookup did not finish")
		return
	}
	if key.Access != events.AccessAdmin && (key.Access != events.AccessService || need == events.AccessAdmin) {
		want := "service"
		if need == events.AccessAdmin {
			want = "admin"
		}
		a.fail(w, endpoint, http.StatusForbidden, CodeForbidden, "key "+key.ID+" may not call "+endpoint+" (its access: "+accessName(key.Access)+
			"; the deployment's admin gives it with spendgate keys update --id "+key.ID+" --access "+want+")")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		a.fail(w, endpoint, http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge, "the request body is larger than 1 MiB")
		return
	}
	subject := a.layout.Endpoint(endpoint)
	if key.Tenant != "" {
		subject = a.layout.TenantEndpoint(key.Tenant, endpoint)
	}
	if keyed, ok := keyedEndpoints[endpoint]; ok {
		// The replica checks the key itself and takes its tenant from
		// it: the gateway's login may not publish the plain puts.
		subject = a.layout.Endpoint(keyed)
		if body, err = json.Marshal(events.KeyedRequest{Key: secret, Request: body}); err != nil {
			a.fail(w, endpoint, http.StatusBadRequest, events.CodeInvalidRequest, "request body must be a JSON object")
			return
		}
	}
	rctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	msg, err := a.nc.RequestWithContext(rctx, subject, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		a.fail(w, endpoint, http.StatusServiceUnavailable, events.CodeLedgerUnavailable, "no spendgate replica is answering; retry with the same request id (an admit with \"retry\":true), or void it")
		return
	case err != nil:
		if ctx.Err() != nil {
			return // the caller left
		}
		a.fail(w, endpoint, http.StatusServiceUnavailable, events.CodeLedgerUnavailable, "no reply from the ledger in time; retry with the same request id (an admit with \"retry\":true), or void it")
		return
	}
	status := http.StatusOK
	code := "ok"
	if msg.Header != nil {
		if n, err := strconv.Atoi(msg.Header.Get(micro.ErrorCodeHeader)); err == nil && n >= 400 && n < 600 {
			status = n
		}
		if c := msg.Header.Get(micro.ErrorHeader); c != "" {
			code = c
		}
	}
	a.requests.WithLabelValues(endpoint, code).Inc()
	w.Header().Set("Content-Type", "application/json")
	if code == string(events.CodeLedgerUnavailable) || code == string(events.CodeLedgerBusy) {
		// The replica answered that it cannot decide now (an election, a
		// lane contended past its retries): as the HTTP layer's own 503.
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(msg.Data)))
	w.WriteHeader(status)
	_, _ = w.Write(msg.Data)
}

func accessName(a string) string {
	if a == "" {
		return "none: the gateway's proxy only"
	}
	return a
}

// bearer is the secret of "Authorization: Bearer <secret>", the scheme
// in any case, as the gateway's proxy reads it.
func bearer(r *http.Request) string { return gateway.BearerSecret(r.Header.Get("Authorization")) }
