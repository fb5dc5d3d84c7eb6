package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/internal/httpapi"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

type env struct {
	t    *testing.T
	te   *testenv.Env
	nc   *nats.Conn
	url  string
	stop func()
	// keys is the API's key cache (gateway.Keys).
	keys *gateway.Keys
}

func newEnv(t *testing.T) *env {
	t.Helper()
	te := testenv.New(t)
	nc := te.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	r, err := replica.Start(ctx, nc, js, replica.Config{Layout: te.Layout, SweepInterval: -1})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, r.Stop())
		}
		rep, err := projector.Check(context.Background(), te.JS, te.Layout)
		require.NoError(t, err)
		require.True(t, rep.OK(), "invariant check: %s", rep)
	})
	cnc := te.Connect(t)
	cl, err := client.New(cnc)
	require.NoError(t, err)
	keys := gateway.NewKeys(cl, 0)
	api, err := httpapi.New(cnc, streams.DefaultPrefix, keys, httpapi.WithMetrics(metrics.NewRegistry()))
	require.NoError(t, err)
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, te: te, nc: te.Connect(t), url: srv.URL, keys: keys, stop: func() { stopped = true; require.NoError(t, r.Stop()) }}
}

// nats sends body to endpoint's subject (subject when set) and returns the
// reply body and its micro status ("" for none).
func (e *env) nats(subject, body string) (string, string) {
	e.t.Helper()
	msg, err := e.nc.Request(subject, []byte(body), 10*time.Second)
	require.NoError(e.t, err)
	return string(msg.Data), msg.Header.Get("Nats-Service-Error-Code")
}

// key makes a key with access (and tenant) and returns its secret.
func (e *env) key(access, tenant string) string {
	e.t.Helper()
	id, secret, err := events.NewAPIKey()
	require.NoError(e.t, err)
	req, _ := json.Marshal(events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(secret), Access: access, Tenant: tenant})
	body, status := e.nats(e.te.Layout.Endpoint(streams.EndpointAPIKeyCreate), string(req))
	require.Empty(e.t, status, body)
	return secret
}

func (e *env) post(secret, endpoint, body string) (int, string) {
	e.t.Helper()
	status, _, b := e.send(http.MethodPost, secret, endpoint, body)
	return status, b
}

// send calls endpoint with method; every answer is JSON.
func (e *env) send(method, secret, endpoint, body string) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+"/spendgate/"+endpoint, strings.NewReader(body))
	require.NoError(e.t, err)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	require.Equal(e.t, "application/json", resp.Header.Get("Content-Type"))
	return resp.StatusCode, resp.Header, string(b)
}

func code(t *testing.T, body string) events.Code {
	t.Helper()
	var er events.ErrorReply
	require.NoError(t, json.Unmarshal([]byte(body), &er), body)
	require.NotNil(t, er.Error, body)
	return er.Error.Code
}

// TestAPI_MirrorsTheWire: each endpoint answers over HTTP the bodies NATS
// answers, byte for byte, with the micro error header's status: a budget,
// an admit and its replay, a denial (200, admitted false), a settle, the
// refusals (400 invalid_amount, 404 unknown_reservation, 409
// already_settled), a batch, and a read.
func TestAPI_MirrorsTheWire(t *testing.T) {
	e := newEnv(t)
	admin, svc := e.key(events.AccessAdmin, ""), e.key(events.AccessService, "")

	status, body := e.post(admin, "budget.put", `{"scope":"org:acme","period":"month","limit":"1.00","unit":"USD"}`)
	require.Equal(t, http.StatusOK, status, body)
	status, body = e.post(svc, "admit", `{"request_id":"h-1","scopes":["org:acme"],"amount":"0.60"}`)
	require.Equal(t, http.StatusOK, status, body)
	var a events.AdmitReply
	require.NoError(t, json.Unmarshal([]byte(body), &a))
	require.True(t, a.Admitted)

	for _, c := range []struct {
		endpoint, body string
		status         int
		code           events.Code
	}{
		{"admit", `{"request_id":"h-1","scopes":["org:acme"],"amount":"0.60"}`, 200, ""}, // a replay
		{"admit", `{"request_id":"h-2","scopes":["org:acme"],"amount":"0.60"}`, 200, ""}, // denied
		{"admit", `{"request_id":"h-3","scopes":["org:acme"],"amount":"-1"}`, 400, events.CodeInvalidAmount},
		{"settle", `{"reservation_id":"rsv_00000000-0000-0000-0000-000000000000","actual":"0.1"}`, 404, events.CodeUnknownReservation},
		{"budget.get", `{"scope":"org:acme","period":"month"}`, 200, ""},
		{"budget.list", ``, 200, ""},
		{"pricing.list", `{}`, 200, ""},
		{"settle.batch", `{"items":[{"reservation_id":"rsv_00000000-0000-0000-0000-000000000000","actual":"0.1"}]}`, 200, ""},
		{"admit", `{"request_id":"h-4","scopes":["org:acme"],"amount":"0.1","extra":1}`, 400, events.CodeInvalidRequest},
	} {
		status, body := e.post(svc, c.endpoint, c.body)
		want, _ := e.nats(e.te.Layout.Endpoint(c.endpoint), c.body)
		require.Equal(t, c.status, status, "%s %s: %s", c.endpoint, c.body, body)
		require.Equal(t, want, body, "%s %s: HTTP answers what NATS answers", c.endpoint, c.body)
		if c.code != "" {
			require.Equal(t, c.code, code(t, body))
		}
	}
	status, body = e.post(svc, "admit", `{"request_id":"h-2","scopes":["org:acme"],"amount":"0.60"}`)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"admitted":false`)
	require.Contains(t, body, `"limit_reached"`)

	status, body = e.post(svc, "settle", `{"reservation_id":"`+a.ReservationID+`","actual":"0.5"}`)
	require.Equal(t, http.StatusOK, status, body)
	status, body = e.post(svc, "settle", `{"reservation_id":"`+a.ReservationID+`","actual":"0.4"}`)
	require.Equal(t, http.StatusConflict, status, body)
	require.Equal(t, events.CodeAlreadySettled, code(t, body))
}

// TestAPI_Access: no key and an unknown key are 401; a key without HTTP
// access, or a service key on budget.put, is 403; an unknown endpoint is
// 404; a method other than POST is 405; none of them reaches the ledger. With no replica answering: 503.
func TestAPI_Access(t *testing.T) {
	e := newEnv(t)
	svc, none := e.key(events.AccessService, ""), ""
	id, proxyOnly, err := events.NewAPIKey()
	require.NoError(t, err)
	req, _ := json.Marshal(events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(proxyOnly), Scopes: []string{"team:a"}})
	_, st := e.nats(e.te.Layout.Endpoint(streams.EndpointAPIKeyCreate), string(req))
	require.Empty(t, st)

	put := `{"scope":"org:acme","period":"month","limit":"1.00","unit":"USD"}`
	for _, c := range []struct {
		secret, endpoint string
		status           int
		code             events.Code
	}{
		{none, "budget.get", 401, httpapi.CodeUnauthorized},
		{"sgk_abc_def", "budget.get", 401, httpapi.CodeUnauthorized},
		{proxyOnly, "budget.get", 403, httpapi.CodeForbidden},
		{svc, "budget.put", 403, httpapi.CodeForbidden},
		{svc, "pricing.put", 403, httpapi.CodeForbidden},
		{svc, "apikey.list", 404, httpapi.CodeNotFound},
		{svc, "apikey.create", 404, httpapi.CodeNotFound},
	} {
		status, body := e.post(c.secret, c.endpoint, put)
		require.Equal(t, c.status, status, "%s: %s", c.endpoint, body)
		require.Equal(t, c.code, code(t, body))
		if c.secret == none {
			require.Contains(t, body, "send Authorization: Bearer <key>", "as written, not \\u003ckey\\u003e")
		}
		if c.status == http.StatusNotFound {
			// It lists every endpoint there is (budget.retire was left out).
			for _, ep := range []string{"admit", "budget.retire", "pricing.list", "report"} {
				require.Contains(t, body, ep)
			}
		}
		if c.status == http.StatusForbidden {
			// The refusal says how the access is given.
			want := "--access admin"
			if c.secret == proxyOnly {
				want = "--access service"
			}
			require.Regexp(t, `spendgate keys update --id [0-9a-f]+ `+want+`\)`, body)
		}
	}
	// Another method than POST: 405 in the wire's shape, Allow: POST.
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		status, h, body := e.send(method, svc, "budget.put", put)
		require.Equal(t, http.StatusMethodNotAllowed, status, method)
		require.Equal(t, http.MethodPost, h.Get("Allow"), method)
		require.Equal(t, httpapi.CodeMethod, code(t, body), method)
	}
	_, st = e.nats(e.te.Layout.Endpoint(streams.EndpointBudgetGet), `{"scope":"org:acme","period":"month"}`)
	require.Equal(t, "404", st, "no budget was put")

	status, _ := e.post(svc, "budget.list", ``) // caches the key
	require.Equal(t, http.StatusOK, status)
	e.stop()
	status, h, body := e.send(http.MethodPost, svc, "budget.list", ``)
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Equal(t, events.CodeLedgerUnavailable, code(t, body))
	require.Equal(t, "1", h.Get("Retry-After"), "a client retries a second later")

	// A replica that answers it cannot decide now (ledger_busy, or
	// ledger_unavailable during an election): its answer passes through
	// with Retry-After too. A responder of our own stands in for it, since
	// a real one answers so only under contention or a lost leader.
	sub, err := e.nc.Subscribe(e.te.Layout.Endpoint(">"), func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(micro.ErrorHeader, string(events.CodeLedgerBusy))
		r.Header.Set(micro.ErrorCodeHeader, "503")
		r.Data = []byte(`{"error":{"code":"ledger_busy","message":"busy"}}`)
		_ = m.RespondMsg(r)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, e.nc.Flush())
	status, h, body = e.send(http.MethodPost, svc, "budget.list", ``)
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Equal(t, events.CodeLedgerBusy, code(t, body))
	require.Equal(t, "1", h.Get("Retry-After"))
}

// TestAPI_UnknownKeysLimitedPerAddress: the HTTP API shares the gateway's
// limit of unknown keys per client address (Keys.LimitUnknown): past the
// burst, a made-up key is refused 429 too_many_unknown_keys with
// Retry-After and never looked up, while a valid key from the same
// address still works. Without it every made-up secret cost the replicas
// an apikey.resolve: the 5th below was a 401 after one.
func TestAPI_UnknownKeysLimitedPerAddress(t *testing.T) {
	e := newEnv(t)
	frozen := time.Now()
	e.keys.LimitUnknown(2, func() time.Time { return frozen }) // a burst of 4; no token comes back
	svc := e.key(events.AccessService, "")
	var resolves atomic.Int64
	sub, err := e.nc.Subscribe(e.te.Layout.Endpoint(streams.EndpointAPIKeyResolve), func(*nats.Msg) { resolves.Add(1) })
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, e.nc.Flush())
	// The valid key is in use (cached) before the flood: a key this
	// gateway never saw, from an address out of tokens, waits for one.
	status, body := e.post(svc, "budget.list", "")
	require.Equal(t, http.StatusOK, status, body)
	for i := range 6 {
		_, bogus, err := events.NewAPIKey()
		require.NoError(t, err)
		status, h, body := e.send(http.MethodPost, bogus, "budget.list", "")
		if i < 4 {
			require.Equal(t, http.StatusUnauthorized, status, "%d: %s", i, body)
			continue
		}
		require.Equal(t, http.StatusTooManyRequests, status, "%d: %s", i, body)
		require.Equal(t, events.Code(gateway.CodeTooManyUnknownKeys), code(t, body))
		require.Equal(t, "1", h.Get("Retry-After"))
	}
	status, body = e.post(svc, "budget.list", "")
	require.Equal(t, http.StatusOK, status, "a valid key from the same address: %s", body)
	require.NoError(t, e.nc.Flush())
	testenv.WaitFor(t, 10*time.Second, "the resolves seen", func() bool { return resolves.Load() >= 5 })
	require.Equal(t, int64(5), resolves.Load(), "the valid key once and four made-up keys; the refused two never asked")
}

// TestAPI_TenantKey: a tenant's key calls the tenant's subjects: its
// budget is the tenant's, invisible to the deployment and to another
// tenant.
func TestAPI_TenantKey(t *testing.T) {
	e := newEnv(t)
	acme, globex := e.key(events.AccessAdmin, "acme"), e.key(events.AccessAdmin, "globex")
	status, body := e.post(acme, "budget.put", `{"scope":"team:search","period":"month","limit":"5","unit":"USD"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"scope":"team:search"`, "the tenant sees its own names")
	status, body = e.post(globex, "budget.get", `{"scope":"team:search","period":"month"}`)
	require.Equal(t, http.StatusNotFound, status, body)
	_, st := e.nats(e.te.Layout.Endpoint(streams.EndpointBudgetGet), `{"scope":"team:search","period":"month"}`)
	require.Equal(t, "404", st)
	body, st = e.nats(e.te.Layout.TenantEndpoint("acme", streams.EndpointBudgetGet), `{"scope":"team:search","period":"month"}`)
	require.Empty(t, st, body)
	status, body = e.post(acme, "pricing.put", `{"model":"m","input":"1","output":"1"}`)
	require.Equal(t, http.StatusBadRequest, status, "the replica refuses a tenant's pricing.put: %s", body)
}

// TestAPI_Retire: budget.retire over HTTP is an admin key's, as a put is:
// a service key gets 403 and the budget stays; a tenant's admin key
// retires its own tenant's budget (another tenant's same name is
// untouched), and an admit naming it is then denied budget_retired; a
// put of it is 409 budget_retired.
func TestAPI_Retire(t *testing.T) {
	e := newEnv(t)
	acme, globex := e.key(events.AccessAdmin, "acme"), e.key(events.AccessAdmin, "globex")
	acmeSvc := e.key(events.AccessService, "acme")
	for _, k := range []string{acme, globex} {
		status, body := e.post(k, "budget.put", `{"scope":"run:r-1","period":"lifetime","limit":"1","unit":"USD"}`)
		require.Equal(t, http.StatusOK, status, body)
	}
	status, body := e.post(acmeSvc, "budget.retire", `{"scope":"run:r-1","period":"lifetime"}`)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Equal(t, httpapi.CodeForbidden, code(t, body))

	status, body = e.post(acme, "budget.retire", `{"scope":"run:r-1","period":"lifetime","reason":"run finished"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"retired":true`)
	status, body = e.post(acmeSvc, "admit", `{"request_id":"after","scopes":["run:r-1"],"amount":"0.1"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"reason":"budget_retired"`)
	status, body = e.post(acme, "budget.put", `{"scope":"run:r-1","period":"lifetime","limit":"5"}`)
	require.Equal(t, http.StatusConflict, status, body)
	require.Equal(t, events.CodeBudgetRetired, code(t, body))

	status, body = e.post(globex, "budget.get", `{"scope":"run:r-1","period":"lifetime"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, `"retired"`, "another tenant's budget of the same name stays")
}

// TestAPI_BearerSchemeAnyCase: the auth scheme is case-insensitive (RFC
// 7235), so "bearer <key>", as hand-written clients send it, authenticates
// as "Bearer <key>" does; another scheme is still 401.
func TestAPI_BearerSchemeAnyCase(t *testing.T) {
	e := newEnv(t)
	svc := e.key(events.AccessService, "")
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"Bearer " + svc, http.StatusOK},
		{"bearer " + svc, http.StatusOK},
		{"BEARER  " + svc + " ", http.StatusOK},
		{"Basic " + svc, http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
	} {
		req, err := http.NewRequest(http.MethodPost, e.url+"/spendgate/budget.list", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", c.auth)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, c.status, resp.StatusCode, "%q: %s", strings.Replace(c.auth, svc, "<key>", 1), b)
	}
}
