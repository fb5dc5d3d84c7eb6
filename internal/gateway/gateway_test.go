package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/fakellm"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// upstreamKey is the fake provider's credential: the gateway's, never a
// caller's.
const upstreamKey = "sk-upstream-secret-4242"

// Prices per million tokens of the test models.
var (
	priceIn, priceOut, priceCached = "2.5", "10", "1.25"
)

// env is a real JetStream with a spendgate replica, the fake provider and
// a gateway in front of it, each on 127.0.0.1.
type env struct {
	t       *testing.T
	te      *testenv.Env
	replica *replica.Replica
	admin   *client.Client
	fake    *fakellm.Server
	gw      *gateway.Gateway
	url     string
	http    *http.Client
	// dead is the base URL of the models "dead-*": nothing listens there.
	dead string
	// logs is what the gateway logged.
	logs *testenv.LogBuffer
	// stop stops the replica; start starts another in its place.
	stop, start func()
	// metrics are the gateway's.
	metrics *gateway.Metrics
	// another starts another gateway on the same ledger and provider,
	// and returns its URL.
	another func() string
}

type envOpts struct {
	keyCache time.Duration
	// upstream, when set, wraps the fake provider's handler (to hold a
	// call at the upstream, say).
	upstream func(next http.Handler) http.Handler
	// journal, when set, is the gateway's journal file.
	journal string
	// maxBody and maxBodies, when set, are the gateway's Config.MaxBody
	// and MaxBodiesInFlight.
	maxBody, maxBodies int64
	// upstreamTimeout and maxStream, when set, are the gateway's
	// Config.UpstreamTimeout and MaxStream.
	upstreamTimeout, maxStream time.Duration
	// drainAbandoned, when set, is the gateway's Config.DrainAbandoned
	// (negative: cut at once).
	drainAbandoned time.Duration
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	te := testenv.New(t)
	nc := te.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: te.Layout, SweepInterval: -1})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, r.Stop())
		}
		// The invariant checker: replay == live, reserved == sum of open
		// reservations, spent + reserved <= limit at every admission.
		rep, err := projector.Check(context.Background(), te.JS, te.Layout)
		require.NoError(t, err)
		require.True(t, rep.OK(), "invariant check: %s", rep)
	})
	admin, err := client.New(te.Connect(t))
	require.NoError(t, err)
	fake := fakellm.New(upstreamKey)
	var fh http.Handler = fake
	if o.upstream != nil {
		fh = o.upstream(fake)
	}
	up := httptest.NewServer(fh)
	t.Cleanup(up.Close)

	// dead is an address nothing listens on: the upstream of the models
	// "dead-*", for the calls that never get an answer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())

	logs := &testenv.LogBuffer{}
	// mk makes a gateway on the ledger and the fake provider, with a
	// connection and metrics of its own, and serves it.
	mk := func(m *gateway.Metrics, journal string) (*gateway.Gateway, *httptest.Server) {
		gnc := te.Connect(t)
		cs, err := gateway.NewClientSet(gnc, streams.DefaultPrefix, client.WithTimeout(time.Second), client.WithRetries(2))
		require.NoError(t, err)
		root, err := cs.For("")
		require.NoError(t, err)
		gopts := []gateway.Option{gateway.WithLogger(slog.New(slog.NewTextHandler(logs, nil))), gateway.WithMetrics(m)}
		if journal != "" {
			gopts = append(gopts, gateway.WithJournal(journal))
		}
		g, err := gateway.New(cs, gateway.NewKeys(root, o.keyCache), gateway.Config{
			Upstreams: []gateway.Upstream{
				{Kind: gateway.KindOpenAI, BaseURL: up.URL + "/v1", Key: upstreamKey},
				{Kind: gateway.KindAnthropic, BaseURL: up.URL, Key: upstreamKey},
				{Kind: gateway.KindOpenAI, BaseURL: dead + "/v1", Key: upstreamKey, Models: []string{"dead-"}},
				// The fake provider's root, without /v1: the models "nov1-*".
				{Kind: gateway.KindOpenAI, BaseURL: up.URL, Key: upstreamKey, Models: []string{"nov1-"}},
			},
			MaxOutputTokens:   map[string]int64{"claude-*": 4096},
			KeyCache:          o.keyCache,
			MaxBody:           o.maxBody,
			MaxBodiesInFlight: o.maxBodies,
			UpstreamTimeout:   o.upstreamTimeout,
			MaxStream:         o.maxStream,
			DrainAbandoned:    o.drainAbandoned,
		}, gopts...)
		require.NoError(t, err)
		mux := http.NewServeMux()
		g.Register(mux)
		gs := httptest.NewServer(mux)
		t.Cleanup(gs.Close)
		return g, gs
	}
	m := gateway.NewMetrics(nil)
	g, gs := mk(m, o.journal)
	e := &env{t: t, te: te, replica: r, admin: admin, fake: fake, gw: g, url: gs.URL, http: gs.Client(), dead: dead, logs: logs, metrics: m}
	e.another = func() string {
		_, gs := mk(gateway.NewMetrics(nil), "")
		return gs.URL
	}
	e.stop = func() { stopped = true; require.NoError(t, r.Stop()) }
	e.start = func() {
		require.True(t, stopped, "one replica at a time")
		r, err = replica.Start(ctxT(t), nc, js, replica.Config{Layout: te.Layout, SweepInterval: -1})
		require.NoError(t, err)
		e.replica, stopped = r, false
	}
	for _, m := range []string{"gpt-x", "claude-x", "embed-x", "dead-x", "nov1-x"} {
		_, err := admin.PutPrice(ctxT(t), events.PricingPutRequest{Model: m, Input: priceIn, Output: priceOut, CachedInput: priceCached})
		require.NoError(t, err)
	}
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// key makes a key whose calls are admitted against scopes, each given a
// monthly budget of limit USD; it returns the secret.
func (e *env) key(limit string, scopes ...string) string {
	e.t.Helper()
	for _, s := range scopes {
		_, err := e.admin.PutBudget(ctxT(e.t), events.BudgetPutRequest{Scope: s, Period: "month", Limit: limit, Unit: "USD"})
		require.NoError(e.t, err)
	}
	id, secret, err := events.NewAPIKey()
	require.NoError(e.t, err)
	var reply events.APIKeyPutReply
	e.request(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(secret), Scopes: scopes}, &reply)
	require.True(e.t, reply.Created)
	return secret
}

// request sends an admin request on the plain subject.
func (e *env) request(endpoint string, req, out any) {
	e.t.Helper()
	data, err := json.Marshal(req)
	require.NoError(e.t, err)
	msg, err := e.te.Connect(e.t).Request(e.te.Layout.Endpoint(endpoint), data, 10*time.Second)
	require.NoError(e.t, err)
	require.NotContains(e.t, string(msg.Data), `"error"`, string(msg.Data))
	if out != nil {
		require.NoError(e.t, json.Unmarshal(msg.Data, out))
	}
}

// post sends a call through the gateway.
func (e *env) post(path, secret, body string, hdr ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctxT(e.t), http.MethodPost, e.url+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	if strings.HasPrefix(path, "/v1/messages") {
		req.Header.Set("X-Api-Key", secret)
	} else if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Do(req)
	require.NoError(e.t, err)
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func (e *env) budget(scope string) events.BudgetView {
	e.t.Helper()
	v, err := e.admin.GetBudget(ctxT(e.t), events.BudgetGetRequest{Scope: scope, Period: "month"})
	require.NoError(e.t, err)
	return v
}

// cost is what usage costs at the test models' prices: the oracle the
// budgets must end at.
func cost(u fakellm.Usage) events.Money {
	c := events.MustMoney(priceCached)
	q := events.PriceQuote{Input: events.MustMoney(priceIn), Output: events.MustMoney(priceOut), CachedInput: &c}
	return q.Cost(events.Usage{InputTokens: u.Input, OutputTokens: u.Output, CachedInputTokens: u.Cached})
}

func requireMoney(t *testing.T, want events.Money, got string, msgAndArgs ...any) {
	t.Helper()
	g, err := events.ParseMoney(got)
	require.NoError(t, err)
	require.Zero(t, want.Cmp(g), "want %s, got %s %v", want, got, msgAndArgs)
}

// reserved is the amount of a response's X-Spendgate-Reserved.
func reserved(t *testing.T, resp *http.Response) events.Money {
	t.Helper()
	v := resp.Header.Get("X-Spendgate-Reserved")
	amt, unit, ok := strings.Cut(v, " ")
	require.True(t, ok, "X-Spendgate-Reserved %q", v)
	require.Equal(t, "USD", unit)
	return events.MustMoney(amt)
}

// requireSpendgateHeaders checks that an admitted call's answer names its
// request, its reservation and what it reserved.
func requireSpendgateHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	require.NotEmpty(t, resp.Header.Get("X-Spendgate-Reservation-Id"))
	require.NotEmpty(t, resp.Header.Get("X-Spendgate-Request-Id"))
	require.NotZero(t, reserved(t, resp).Sign())
}

// sseData returns the data of every event of an SSE body.
func sseData(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// TestGateway_EveryAPISettlesTheReportedUsage: every proxied API, plain
// and streaming, passes the upstream's answer through and settles its
// reported usage, so the budget ends exactly at the fake's usage priced
// with the table, nothing reserved. The upstream sees the gateway's key,
// never the caller's, and the caller never sees the upstream's.
func TestGateway_EveryAPISettlesTheReportedUsage(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:search", "user:u-17")
	calls := []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hello fake:cached=3"}],"max_tokens":50}`, `"chat.completion"`},
		{"/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hello"}],"max_completion_tokens":50}`, `chat.completion.chunk`},
		{"/v1/completions", `{"model":"gpt-x","prompt":"say fake:out=3","max_tokens":20}`, `"text_completion"`},
		{"/v1/completions", `{"model":"gpt-x","prompt":"say","stream":true,"max_tokens":20,"n":2}`, `"text_completion"`},
		{"/v1/embeddings", `{"model":"embed-x","input":["a","b"]}`, `"embedding"`},
		{"/v1/responses", `{"model":"gpt-x","input":"hi","max_output_tokens":64}`, `"response"`},
		{"/v1/responses", `{"model":"gpt-x","input":"hi","stream":true}`, `response.completed`},
		{"/v1/messages", `{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"hi fake:cached=2"}]}`, `"message"`},
		{"/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`, `message_stop`},
	}
	for _, c := range calls {
		resp := e.post(c.path, secret, c.body)
		body := readAll(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c.path, body)
		require.Contains(t, body, c.want, c.path)
		require.NotContains(t, body, upstreamKey)
		require.NotEmpty(t, resp.Header.Get("X-Spendgate-Reservation-Id"))
	}
	got := e.fake.Calls()
	require.Len(t, got, len(calls))
	want := events.MustMoney("0")
	for i, c := range got {
		require.Equal(t, upstreamKey, c.Authorization, "the upstream gets the gateway's key")
		require.NotNil(t, c.Usage, "call %d reported usage", i)
		want = want.Add(cost(*c.Usage))
	}
	for _, s := range []string{"team:search", "user:u-17"} {
		b := e.budget(s)
		requireMoney(t, want, b.Spent, s)
		require.Equal(t, "0", b.Reserved, s)
		require.Zero(t, b.Open)
	}
}

// TestGateway_StreamUsageChunk: a streaming chat call that did not ask for
// the usage chunk gets none (the gateway asked upstream for it and took it
// out), and the other chunks pass unchanged; one that asked gets it.
func TestGateway_StreamUsageChunk(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:a")
	for _, asked := range []bool{false, true} {
		body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":9}`
		if asked {
			body = `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"max_tokens":9}`
		}
		resp := e.post("/v1/chat/completions", secret, body)
		require.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
		data := sseData(readAll(t, resp))
		require.Equal(t, "[DONE]", data[len(data)-1])
		usageChunks, words := 0, 0
		for _, d := range data[:len(data)-1] {
			var c struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
				Usage *json.RawMessage `json:"usage"`
			}
			require.NoError(t, json.Unmarshal([]byte(d), &c), d)
			if c.Usage != nil && string(*c.Usage) != "null" {
				usageChunks++
				require.Empty(t, c.Choices)
			}
			for _, ch := range c.Choices {
				if strings.HasPrefix(strings.TrimSpace(ch.Delta.Content), "tok") {
					words++
				}
			}
		}
		require.Equal(t, fakellm.DefaultOutputTokens, words, "every content chunk passed")
		if asked {
			require.Equal(t, 1, usageChunks)
		} else {
			require.Zero(t, usageChunks, "the usage chunk the gateway asked for is not shown")
		}
	}
	for _, c := range e.fake.Calls() {
		require.True(t, c.IncludeUsage, "the gateway always asks upstream for the usage chunk")
	}
	b := e.budget("team:a")
	want := cost(*e.fake.Calls()[0].Usage).Add(cost(*e.fake.Calls()[1].Usage))
	requireMoney(t, want, b.Spent)
	require.Equal(t, "0", b.Reserved)
}

// TestGateway_FailuresLeaveNothingReserved: an upstream 500 or 429 is
// passed to the caller and released (nothing spent); an answer without
// usage, plain or streamed, and an answer cut mid-way are settled at
// their reservation (they may have been billed in full). Nothing stays
// reserved after any of them.
func TestGateway_FailuresLeaveNothingReserved(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i, c := range []struct {
		name, path, body string
		status           int
		spent            string // "0", or "reservation"
	}{
		{"500", "/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fake:status=500"}],"max_tokens":5}`, 500, "0"},
		{"429", "/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fake:status=429"}],"max_tokens":5}`, 429, "0"},
		{"anthropic 500", "/v1/messages", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"fake:status=500"}]}`, 500, "0"},
		{"no usage", "/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fake:nousage"}],"max_tokens":5}`, 200, "reservation"},
		{"no usage streamed", "/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:nousage"}],"max_tokens":5}`, 200, "reservation"},
		{"anthropic no usage streamed", "/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"fake:nousage"}]}`, 200, "reservation"},
		{"responses no usage", "/v1/responses", `{"model":"gpt-x","input":"fake:nousage","max_output_tokens":5}`, 200, "reservation"},
		{"cut stream", "/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:cut"}],"max_tokens":5}`, 200, "reservation"},
		{"anthropic cut stream", "/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"fake:cut"}]}`, 200, "reservation"},
		{"cut plain", "/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fake:cut"}],"max_tokens":5}`, 502, "reservation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			scope := fmt.Sprintf("team:f%d", i)
			secret := e.key("10", scope)
			resp := e.post(c.path, secret, c.body)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			if strings.Contains(c.name, "cut stream") {
				// A stream the upstream broke off ends in the provider's
				// error event, so the SDK raises instead of taking half an
				// answer for a whole one.
				require.Contains(t, string(body), "upstream_cut", string(body))
			}
			require.Equal(t, c.status, resp.StatusCode, string(body))
			require.NotContains(t, string(body), upstreamKey)
			requireSpendgateHeaders(t, resp)
			if c.status == http.StatusBadGateway {
				// Charged its reservation: an SDK's own retry would be
				// charged again.
				require.Equal(t, "false", resp.Header.Get("X-Should-Retry"), string(body))
				require.Contains(t, string(body), "charged again")
			}
			b := e.budget(scope)
			require.Equal(t, "0", b.Reserved, "nothing stays reserved")
			require.Zero(t, b.Open)
			if c.spent == "0" {
				require.Equal(t, "0", b.Spent, "a refused call is released")
				return
			}
			requireMoney(t, reserved(t, resp), b.Spent)
			require.NotEqual(t, "0", b.Spent, "a call that may have been billed is settled at its reservation")
		})
	}
}

// TestGateway_UnreachableUpstream: a call whose upstream refuses the
// connection is answered 502 upstream_unreachable with the cause's class,
// never the upstream's address (a host inside the operator's network), and
// its reservation is released: the upstream never got the call.
func TestGateway_UnreachableUpstream(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:u")
	resp := e.post("/v1/chat/completions", secret, `{"model":"dead-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`)
	body := readAll(t, resp)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	var shape struct {
		Error struct{ Type, Code, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &shape), body)
	require.Equal(t, "upstream_unreachable", shape.Error.Code)
	requireSpendgateHeaders(t, resp)
	require.Equal(t, "spendgate: the openai upstream did not answer (connection refused)", shape.Error.Message)
	require.Empty(t, resp.Header.Get("X-Should-Retry"), "released: a retry is free")
	host := strings.TrimPrefix(e.dead, "http://")
	require.NotContains(t, body, host, "the upstream's address stays in the gateway's log")
	require.NotContains(t, body, "127.0.0.1")
	b := e.budget("team:u")
	require.Equal(t, "0", b.Spent, "the upstream never got the call: released")
	require.Equal(t, "0", b.Reserved)
	require.Zero(t, b.Open)
}

// TestGateway_UpstreamTimeoutChargedNotRetried: an upstream that takes
// the call and does not answer within the upstream timeout is answered 502
// upstream_unreachable, the call charged its reservation (the provider may
// have run it), and x-should-retry: false, so that an SDK does not retry
// on its own and pay a second reservation. How it can fail: before, the
// 502 invited the SDK's retries, each charged in full.
func TestGateway_UpstreamTimeoutChargedNotRetried(t *testing.T) {
	e := newEnv(t, envOpts{upstreamTimeout: time.Second, upstream: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done() // holds the call until the gateway gives up
		})
	}})
	secret := e.key("10", "team:hang")
	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`)
	body := readAll(t, resp)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	require.Contains(t, body, "upstream_unreachable")
	require.Contains(t, body, "charged again")
	require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	b := e.budget("team:hang")
	requireMoney(t, reserved(t, resp), b.Spent)
	require.Zero(t, b.Open)
}

// TestGateway_StalledReaderSettledInTime: a caller that reads the
// response's headers of a long stream and then stops reading (a small
// receive buffer, never drained) does not hold the call open: its writes
// end at the upstream timeout plus the write grace, and the call is
// settled then, while the caller still holds its connection, before the
// reservation's expiry. How it can fail: without the write deadline the
// handler blocks in its write until the caller closes, the reservation
// stays open (and, past its TTL, the sweeper frees its room while the call
// was billed); the wait below then times out with open 1.
func TestGateway_StalledReaderSettledInTime(t *testing.T) {
	e := newEnv(t, envOpts{upstreamTimeout: time.Second})
	gateway.SetWriteGrace(e.gw, time.Second)
	secret := e.key("10", "team:stall")
	body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi fake:out=60000"}],"max_tokens":100000}`
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
		return errors.Join(err, serr)
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", secret, len(body), body)
	require.NoError(t, err)
	head := make([]byte, 64)
	_, err = io.ReadFull(conn, head)
	require.NoError(t, err)
	require.Contains(t, string(head), "200 OK")
	testenv.WaitFor(t, 30*time.Second, "the stalled call settled", func() bool {
		b := e.budget("team:stall")
		return b.Open == 0 && b.Spent != "0"
	})
	b := e.budget("team:stall")
	require.Equal(t, "0", b.Reserved)
}

// TestGateway_UpstreamWithoutV1Hinted: an openai upstream given without
// its /v1 answers 404 to every call; the 404 reaches the caller as the
// provider wrote it, the reservation is released, and the gateway logs
// once (not per call) that an OpenAI base URL usually ends in /v1.
func TestGateway_UpstreamWithoutV1Hinted(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:nov1")
	for range 3 {
		resp := e.post("/v1/chat/completions", secret, `{"model":"nov1-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`)
		body := readAll(t, resp)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	}
	b := e.budget("team:nov1")
	require.Equal(t, "0", b.Spent, "a 404 is not billed: released")
	require.Equal(t, "0", b.Reserved)
	logs := e.logs.String()
	require.Equal(t, 1, strings.Count(logs, "an OpenAI base URL usually ends in /v1"), logs)
	require.Contains(t, logs, "path=/chat/completions")
	// An upstream with its /v1 that answers 404 (an unknown route of the
	// provider's) gets no such hint.
	resp := e.post("/v1/chat/completions", e.key("10", "team:v1"), `{"model":"gpt-x","messages":[{"role":"user","content":"fake:status=404"}],"max_tokens":5}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, readAll(t, resp))
	require.Equal(t, 1, strings.Count(e.logs.String(), "usually ends in /v1"))
}

// TestGateway_DenialNeverReachesUpstream: a call its budget cannot hold is
// answered 429 with the provider's error shape naming the budget and the
// reason, Retry-After at the period's reset and x-should-retry false; the
// upstream never sees it.
func TestGateway_DenialNeverReachesUpstream(t *testing.T) {
	e := newEnv(t, envOpts{})
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`
	// The limit is one call's reservation: the first fits, and once it is
	// settled its spend leaves less than a second needs.
	probe := e.post("/v1/chat/completions", e.key("10", "team:probe"), body)
	one := reserved(t, probe)
	readAll(t, probe)
	secret := e.key(one.String(), "team:small")
	e.fake.Reset()
	resp := e.post("/v1/chat/completions", secret, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, readAll(t, resp))
	resp.Body.Close()
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		b := body
		if path == "/v1/messages" {
			// At most the limit (its body is longer: a shorter max_tokens),
			// more than what the first call's spend left.
			b = `{"model":"claude-x","max_tokens":99,"messages":[{"role":"user","content":"hi"}]}`
		}
		resp = e.post(path, secret, b)
		got := readAll(t, resp)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, got)
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
		ra, err := time.ParseDuration(resp.Header.Get("Retry-After") + "s")
		require.NoError(t, err)
		now := time.Now().UTC()
		reset := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		require.InDelta(t, time.Until(reset).Seconds(), ra.Seconds(), 5, "Retry-After is the month's reset")
		var shape map[string]any
		require.NoError(t, json.Unmarshal([]byte(got), &shape))
		require.Equal(t, "limit_reached", resp.Header.Get(gateway.HeaderErrorCode), "the code in either shape")
		if path == "/v1/messages" {
			require.Equal(t, "error", shape["type"])
			require.Equal(t, "rate_limit_error", shape["error"].(map[string]any)["type"])
			require.Equal(t, "limit_reached", shape["error"].(map[string]any)["code"], "Anthropic's shape carries the code too")
			require.Contains(t, shape["error"].(map[string]any)["message"], "team:small")
		} else {
			er := shape["error"].(map[string]any)
			require.Equal(t, "limit_reached", er["code"])
			require.Equal(t, "budget_exceeded", er["type"])
			require.Contains(t, er["message"], "budget team:small per month")
			require.Equal(t, "team:small", er["spendgate"].(map[string]any)["scope"])
		}
	}
	require.Len(t, e.fake.Calls(), 1, "denied calls never reach the upstream")
	require.Equal(t, "0", e.budget("team:small").Reserved)
}

// TestGateway_ConcurrentCallsAdmittedAtomically: 20 slow calls at once on
// a budget that holds exactly 5 of their reservations: 5 reach the
// upstream, 15 are denied, and the budget never holds more than its
// limit. How it can fail: a gateway that forwarded before the admit
// answered, or checked the budget without reserving, would let more
// through.
func TestGateway_ConcurrentCallsAdmittedAtomically(t *testing.T) {
	e := newEnv(t, envOpts{})
	body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:slow=50ms"}],"max_tokens":1000}`
	// Each reserves (len(body with include_usage) + 1000 x 4) ... at the
	// prices: find it with one check admit, then give the budget 5 x it.
	secret := e.key("1000", "team:probe")
	resp := e.post("/v1/chat/completions", secret, body)
	one := reserved(t, resp)
	readAll(t, resp)
	limit := one.Mul(events.MoneyFromInt(5))
	secret = e.key(limit.String(), "team:five")
	e.fake.Reset()
	type result struct {
		status int
		err    error
	}
	results := make(chan result, 20)
	for range 20 {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := e.http.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{status: resp.StatusCode, err: err}
		}()
	}
	ok, denied := 0, 0
	for range 20 {
		r := <-results
		require.NoError(t, r.err)
		switch r.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			denied++
		default:
			t.Fatalf("status %d", r.status)
		}
	}
	// A settled call frees its unused reservation: a late call may fit in
	// what the early ones gave back, so at least 5 pass, and every one
	// that passed reached the upstream once.
	require.GreaterOrEqual(t, ok, 5)
	require.Equal(t, ok, len(e.fake.Calls()), "exactly the admitted calls reached the upstream")
	require.Equal(t, 20, ok+denied)
	b := e.budget("team:five")
	require.Equal(t, "0", b.Reserved)
	spent := events.MustMoney(b.Spent)
	require.LessOrEqual(t, spent.Cmp(limit), 0)
}

// TestGateway_Keys: no key, a key not of spendgate's format and an unknown
// one are 401; a disabled key is refused within the cache bound; an
// unpriced model is denied (400) and reaches nothing.
func TestGateway_Keys(t *testing.T) {
	e := newEnv(t, envOpts{keyCache: 200 * time.Millisecond})
	secret := e.key("10", "team:k")
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
	for _, s := range []string{"", "sk-not-ours", secret + "0", upstreamKey} {
		resp := e.post("/v1/chat/completions", s, body)
		got := readAll(t, resp)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, got)
	}
	resp := e.post("/v1/chat/completions", secret, body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	readAll(t, resp)

	id, _ := events.ParseAPIKey(secret)
	e.request(streams.EndpointAPIKeyDisable, events.APIKeyIDRequest{ID: id}, nil)
	testenv.WaitFor(t, 5*time.Second, "the disabled key is refused", func() bool {
		resp := e.post("/v1/chat/completions", secret, body)
		got := readAll(t, resp)
		return resp.StatusCode == http.StatusUnauthorized && strings.Contains(got, "key_disabled")
	})

	n := len(e.fake.Calls())
	resp = e.post("/v1/chat/completions", secret, body)
	readAll(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	other := e.key("10", "team:k2")
	resp = e.post("/v1/chat/completions", other, `{"model":"gpt-unpriced","messages":[],"max_tokens":5}`)
	got := readAll(t, resp)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, got)
	require.Contains(t, got, "unpriced_model")
	require.Len(t, e.fake.Calls(), n, "refused calls reach nothing")
}

// TestGateway_LedgerDownFailsClosed: with no replica answering, a call is
// refused 503 and never reaches the upstream.
func TestGateway_LedgerDownFailsClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:d")
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
	resp := e.post("/v1/chat/completions", secret, body) // the key is now cached
	readAll(t, resp)
	e.stop()
	resp = e.post("/v1/chat/completions", secret, body)
	got := readAll(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, got)
	require.Contains(t, got, "ledger_unavailable")
	require.Equal(t, "1", resp.Header.Get("Retry-After"), "the SDKs retry a second later, not after their own backoff")
	// A key the gateway has not cached cannot be checked either.
	_, unknown, err := events.NewAPIKey()
	require.NoError(t, err)
	resp = e.post("/v1/chat/completions", unknown, body)
	readAll(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Len(t, e.fake.Calls(), 1)
}

// TestGateway_IdempotencyKey: the request id derives from the caller's
// Idempotency-Key: a retry after the first call ended takes the next id of
// the line and its own reservation (both are settled); another key's
// calls with the same header never meet them.
func TestGateway_IdempotencyKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := e.key("10", "team:i"), e.key("10", "team:j")
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
	var ids []string
	for _, s := range []string{a, a, b} {
		resp := e.post("/v1/chat/completions", s, body, "Idempotency-Key", "retry-me")
		readAll(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		ids = append(ids, resp.Header.Get("X-Spendgate-Request-Id"))
	}
	require.True(t, strings.HasPrefix(ids[0], "gw-"), ids[0])
	require.Equal(t, ids[0]+"-2", ids[1])
	require.NotEqual(t, ids[0], ids[2])
	require.NotEqual(t, "0", e.budget("team:i").Spent)
	require.Equal(t, int64(0), e.budget("team:i").Open)
}

// TestGateway_IdempotencyKeyOnTwoGateways: the same call with the same
// Idempotency-Key sent to two gateways of one ledger while the first is
// at the provider: the second is refused 409 idempotency_key_in_use and
// never reaches the provider; once the first has ended, the header takes
// the next id of its line. It fails when a call takes over an open
// reservation of its request id (the earlier design): the second gateway,
// whose per-process lock cannot see the first's call, got the ledger's
// replay, called the provider too, and one of the two costs was lost.
func TestGateway_IdempotencyKeyOnTwoGateways(t *testing.T) {
	entered, release := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	// A failing test still lets held calls go before the servers close
	// (deferred calls run before t.Cleanup's).
	defer open()
	e := newEnv(t, envOpts{upstream: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
			next.ServeHTTP(w, r)
		})
	}})
	secret := e.key("10", "team:twice")
	second := e.another()
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`

	first := make(chan *http.Response, 1)
	go func() { first <- e.post("/v1/chat/completions", secret, body, "Idempotency-Key", "once") }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first call never reached the provider")
	}
	// Bounded: a second call that reached the provider would wait there
	// for the first's release.
	ctx, cancel := context.WithTimeout(ctxT(t), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, second+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Idempotency-Key", "once")
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	got := readAll(t, resp)
	require.Equal(t, http.StatusConflict, resp.StatusCode, got)
	require.Contains(t, got, "idempotency_key_in_use")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	open()
	resp = <-first
	readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, e.fake.Calls(), 1, "the second call never reached the provider")
	require.Len(t, entered, 0)

	resp = e.post("/v1/chat/completions", secret, body, "Idempotency-Key", "once")
	readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasSuffix(resp.Header.Get("X-Spendgate-Request-Id"), "-2"), resp.Header.Get("X-Spendgate-Request-Id"))
	require.Equal(t, int64(0), e.budget("team:twice").Open)
}

// TestGateway_BodiesInFlightBounded: with room for 64 KiB of bodies, a
// call holding a 40 KiB body at the provider leaves no room for another
// of 40 KiB, which is refused 503 gateway_busy (Retry-After 1) before its
// body is read and reaches nobody; a small call still fits, and once the
// first has ended the large one is served. It fails without the bound:
// the second call is served (the gateway held every body at once, 2.1 GB
// for twenty 32 MiB ones).
func TestGateway_BodiesInFlightBounded(t *testing.T) {
	entered, release := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	first := true
	var mu sync.Mutex
	e := newEnv(t, envOpts{maxBody: 48 << 10, maxBodies: 64 << 10, upstream: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hold := first
			first = false
			mu.Unlock()
			if hold {
				entered <- struct{}{}
				<-release
			}
			next.ServeHTTP(w, r)
		})
	}})
	secret := e.key("10", "team:big")
	big := `{"model":"gpt-x","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("a", 40<<10) + `"}]}`
	small := `{"model":"gpt-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`

	done := make(chan *http.Response, 1)
	go func() { done <- e.post("/v1/chat/completions", secret, big) }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first call never reached the provider")
	}
	resp := e.post("/v1/chat/completions", secret, big)
	got := readAll(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, got)
	require.Contains(t, got, "gateway_busy")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	resp = e.post("/v1/chat/completions", secret, small)
	readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "a small body still fits")

	open()
	resp = <-done
	readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp = e.post("/v1/chat/completions", secret, big)
	readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "room again")
	require.Len(t, e.fake.Calls(), 3)
}

// TestGateway_HeldReservation: a holder of the key closing the call's
// reservation while the provider call runs, by its reservation id
// (release, settle at almost nothing) or by its request id (void), through
// the plain endpoints any service login or the HTTP API reaches: each is
// refused reservation_held, and the call settles its real usage. An admit
// with a request id of the gateway's kind through a plain endpoint is
// refused too. It fails without held reservations: the release succeeded,
// the gateway's settle found the reservation released and recorded
// nothing, and the budget's cap held none of the calls that followed.
func TestGateway_HeldReservation(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:held")
	ctx := ctxT(t)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:slow=20ms fake:out=40"}],"max_tokens":100}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rid, reqID := resp.Header.Get("X-Spendgate-Reservation-Id"), resp.Header.Get("X-Spendgate-Request-Id")
	require.True(t, strings.HasPrefix(reqID, events.HeldRequestPrefix), reqID)

	requireHeld := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, client.ErrConflict)
		require.Equal(t, events.CodeReservationHeld, events.CodeOf(err), "%v", err)
	}
	_, err = e.admin.Release(ctx, events.ReleaseRequest{ReservationID: rid})
	requireHeld(err)
	_, err = e.admin.Settle(ctx, events.SettleRequest{ReservationID: rid, Actual: "0.000000000001"})
	requireHeld(err)
	_, err = e.admin.Void(ctx, events.VoidRequest{RequestID: reqID, Scopes: []string{"team:held"}})
	requireHeld(err)
	_, err = e.admin.Admit(ctx, events.AdmitRequest{RequestID: events.HeldRequestPrefix + "mine", Scopes: []string{"team:held"}, Amount: "0.01"})
	requireHeld(err)
	require.Equal(t, int64(1), e.budget("team:held").Open, "still the call's")

	readAll(t, resp)
	testenv.WaitFor(t, 10*time.Second, "the call is settled", func() bool { return e.budget("team:held").Open == 0 })
	calls := e.fake.Calls()
	require.Len(t, calls, 1)
	require.NotNil(t, calls[0].Usage)
	requireMoney(t, cost(*calls[0].Usage), e.budget("team:held").Spent)
}

// TestGateway_CallerLeavesMidStream: with DrainAbandoned none (the
// flag's 0), a caller that leaves mid-stream has its call cut at once and
// settled at the reservation (what was generated is unknown), and nothing
// stays reserved. The drain's own tests are in abandon_test.go.
func TestGateway_CallerLeavesMidStream(t *testing.T) {
	e := newEnv(t, envOpts{drainAbandoned: -1})
	secret := e.key("10", "team:c")
	ctx, cancel := context.WithCancel(ctxT(t))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:slow=100ms fake:out=50"}],"max_tokens":100}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	want := reserved(t, resp)
	br := bufio.NewReader(resp.Body)
	_, err = br.ReadString('\n') // the first event has come
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	testenv.WaitFor(t, 10*time.Second, "the call is settled", func() bool {
		return e.budget("team:c").Open == 0
	})
	b := e.budget("team:c")
	require.Equal(t, "0", b.Reserved)
	requireMoney(t, want, b.Spent)
	// The settle says why it is the whole reservation, and the export
	// carries it.
	var notes []string
	_, err = report.NewReader(e.te.JS, e.te.Layout, projector.New(e.te.JS, e.te.Layout)).Rows(ctxT(t), report.Filter{}, func(r *report.Row) error {
		notes = append(notes, r.Note)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"reservation_caller_gone"}, notes)
}

// TestGateway_ServedOtherModelNoted: an answer naming another model than
// the one priced (a router falling back, an upstream substituting) is
// settled from its usage as before, at the model asked for, and its settle
// carries the note served_other_model, exported with the reservation; the
// call's log line names the served model and the metric counts it by API.
// A dated version of the priced model ("gpt-x-2024-08-06") is the same
// model: no note. Plain and streamed answers of the three APIs that name
// their model. Without the check every note below is empty and the metric
// stays 0.
func TestGateway_ServedOtherModelNoted(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:m")
	calls := []struct{ api, path, body string }{
		{"chat.completions", "/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi fake:serve=big-y"}],"max_tokens":9}`},
		{"chat.completions", "/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi fake:serve=big-y"}],"max_tokens":9}`},
		{"responses", "/v1/responses", `{"model":"gpt-x","input":"hi fake:serve=big-y","max_output_tokens":9}`},
		{"responses", "/v1/responses", `{"model":"gpt-x","input":"hi fake:serve=big-y","stream":true,"max_output_tokens":9}`},
		{"messages", "/v1/messages", `{"model":"claude-x","max_tokens":9,"messages":[{"role":"user","content":"hi fake:serve=claude-x-opus"}]}`},
		{"messages", "/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi fake:serve=claude-x-opus"}]}`},
		// A dated version of the model priced: not another model.
		{"", "/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi fake:serve=gpt-x-2024-08-06"}],"max_tokens":9}`},
		{"", "/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi fake:serve=claude-x-20241022"}]}`},
	}
	ids := map[string]string{} // reservation id -> the api whose note is due ("" none)
	for _, c := range calls {
		resp := e.post(c.path, secret, c.body)
		body := readAll(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c.path, body)
		ids[resp.Header.Get("X-Spendgate-Reservation-Id")] = c.api
	}
	testenv.WaitFor(t, 10*time.Second, "every call is settled", func() bool { return e.budget("team:m").Open == 0 })
	want := events.MustMoney("0")
	for _, c := range e.fake.Calls() {
		require.NotNil(t, c.Usage)
		want = want.Add(cost(*c.Usage))
	}
	requireMoney(t, want, e.budget("team:m").Spent, "settled from the usage, at the model priced")
	notes := map[string]string{}
	_, err := report.NewReader(e.te.JS, e.te.Layout, projector.New(e.te.JS, e.te.Layout)).Rows(ctxT(t), report.Filter{}, func(r *report.Row) error {
		notes[r.ReservationID] = r.Note
		return nil
	})
	require.NoError(t, err)
	require.Len(t, notes, len(ids))
	for id, api := range ids {
		if api == "" {
			require.Empty(t, notes[id], "a dated version is the model priced")
		} else {
			require.Equal(t, gateway.NoteOtherModel, notes[id], api)
		}
	}
	for api, n := range map[string]float64{"chat.completions": 2, "responses": 2, "messages": 2, "embeddings": 0} {
		require.Equal(t, n, testutil.ToFloat64(e.metrics.OtherModel.WithLabelValues(api)), api)
	}
	logs := e.logs.String()
	require.Equal(t, 4, strings.Count(logs, "served_model=big-y"), logs)
	require.Equal(t, 2, strings.Count(logs, "served_model=claude-x-opus"), logs)
}

// TestGateway_BadRequests: what the gateway cannot price is refused 400
// before any admit, in the provider's shape.
func TestGateway_BadRequests(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:b")
	for _, body := range []string{`nope`, `{"messages":[]}`, `{"model":"gpt x"}`, `{"model":"gpt-x","max_tokens":-1}`,
		`{"model":"gpt-x","stream":"yes"}`, `{"model":"gpt-x","n":0}`, `{"model":"gpt-x","max_tokens":20000000}`,
		`{"model":"gpt-x","max_tokens":0}`, `{"model":"gpt-x","max_completion_tokens":0,"max_tokens":1000}`} {
		resp := e.post("/v1/chat/completions", secret, body)
		got := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", body, got)
		var shape struct {
			Error struct{ Type, Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(got), &shape))
		require.Equal(t, "invalid_request_error", shape.Error.Type)
	}
	// Another method than POST: 405 in each API's error shape.
	for path, kind := range map[string]string{"/v1/chat/completions": "openai", "/v1/messages": "anthropic"} {
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, e.url+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := e.http.Do(req)
		require.NoError(t, err)
		got := readAll(t, resp)
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s: %s", path, got)
		require.Equal(t, http.MethodPost, resp.Header.Get("Allow"))
		var shape struct {
			Type  string
			Error struct{ Type, Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(got), &shape), got)
		require.Equal(t, "invalid_request_error", shape.Error.Type, got)
		if kind == "anthropic" {
			require.Equal(t, "error", shape.Type, got)
		} else {
			require.Equal(t, "method_not_allowed", shape.Error.Code, got)
		}
	}
	require.Empty(t, e.fake.Calls())
	b := e.budget("team:b")
	require.Equal(t, "0", b.Spent)
	require.Zero(t, b.Open)
}

// TestGateway_PricedFieldsReadOnce: a body an upstream could read
// differently from the gateway is refused 400 before any admit. The fake
// upstream decodes bodies as Go's encoding/json does, matching keys
// regardless of case, so without the check the first body is priced as
// gpt-x (1 per million output tokens) and served as gpt-y, and the fake
// records a call: that is how each case can fail. A key the gateway does
// not read may be in any case.
func TestGateway_PricedFieldsReadOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:b")
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ path, body, says string }{
		{"/v1/chat/completions", `{"model":"gpt-x","Model":"gpt-y",` + msgs + `}`, `both "model" and "Model"`},
		{"/v1/chat/completions", `{"model":"gpt-x","model":"gpt-y",` + msgs + `}`, `"model" twice`},
		{"/v1/chat/completions", `{"model":"gpt-x","MAX_TOKENS":100000,` + msgs + `}`, `write it "max_tokens"`},
		{"/v1/chat/completions", `{"model":"gpt-x","max_completion_to\u212aens":100000,` + msgs + `}`, `write it "max_completion_tokens"`},
		{"/v1/chat/completions", `{"model":"gpt-x","N":8,` + msgs + `}`, `write it "n"`},
		{"/v1/chat/completions", `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true,"Include_Usage":false},` + msgs + `}`, `"stream_options.include_usage" and "stream_options.Include_Usage"`},
		{"/v1/messages", `{"model":"claude-x","max_tokens":10,"metadata":{"user_id":"a","USER_ID":"b"},` + msgs + `}`, `"metadata.user_id" and "metadata.USER_ID"`},
	} {
		resp := e.post(c.path, secret, c.body)
		got := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", c.body, got)
		var shape struct {
			Error struct{ Type, Code, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(got), &shape), got)
		require.Equal(t, "invalid_request_error", shape.Error.Type, got)
		require.Contains(t, shape.Error.Message, c.says, got)
	}
	require.Empty(t, e.fake.Calls())
	b := e.budget("team:b")
	require.Equal(t, "0", b.Spent)
	require.Zero(t, b.Open)

	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","Temperature":0.5,`+msgs+`}`)
	got := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, got)
	require.Len(t, e.fake.Calls(), 1)
}

// TestGateway_CallLargerThanTheLimit: a call whose maximum cost is more
// than its budget's whole limit (100,000 output tokens at 10 per million
// is 1 USD; the limit is 0.5) can never be admitted, so it is not told to
// wait: 400 exceeds_budget_limit in each provider's shape, saying so and
// what to change, with the ledger's denial, no Retry-After and
// x-should-retry false. How it can fail: the plain limit_reached answer is
// 429 with a Retry-After at the month's reset.
func TestGateway_CallLargerThanTheLimit(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("0.5", "team:tiny")
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":100000}`,
		"/v1/messages":         `{"model":"claude-x","max_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		resp := e.post(path, secret, body)
		got := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", path, got)
		require.Empty(t, resp.Header.Get("Retry-After"), "waiting never helps")
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
		var shape struct {
			Type  string
			Error struct {
				Type, Code, Message string
				Spendgate           *events.Denial
			}
			Spendgate *events.Denial
		}
		require.NoError(t, json.Unmarshal([]byte(got), &shape), got)
		require.Equal(t, "invalid_request_error", shape.Error.Type, got)
		require.Contains(t, shape.Error.Message, "more than the whole limit of budget team:tiny per month (0.5 USD)", got)
		require.Contains(t, shape.Error.Message, "lower its max_tokens", got)
		require.NotContains(t, shape.Error.Message, "resets at", got)
		d := shape.Spendgate
		if path == "/v1/chat/completions" {
			require.Equal(t, gateway.CodeExceedsBudgetLimit, shape.Error.Code, got)
			d = shape.Error.Spendgate
		} else {
			require.Equal(t, "error", shape.Type, got)
		}
		require.NotNil(t, d, got)
		require.Equal(t, events.ReasonLimitReached, d.Reason)
		require.Equal(t, "0.5", d.Limit)
	}
	require.Empty(t, e.fake.Calls(), "denied calls never reach the upstream")
	require.Equal(t, 2.0, testutil.ToFloat64(e.metrics.Denials.WithLabelValues(string(events.ReasonLimitReached))))
}

// TestGateway_UnknownEndpoint: a path under /v1/ the gateway does not
// proxy is 404 unknown_endpoint in the provider's JSON error shape
// (Anthropic's under /v1/messages/ or with anthropic-version), naming
// what the gateway does proxy, and reaches nothing. How it can fail: the
// mux's own 404 is text/plain "404 page not found".
func TestGateway_UnknownEndpoint(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:u")
	for _, c := range []struct {
		method, path, anthropicVersion, kind string
	}{
		{http.MethodPost, "/v1/audio/speech", "", gateway.KindOpenAI},
		{http.MethodGet, "/v1/files", "", gateway.KindOpenAI},
		{http.MethodPost, "/v1/chat/completions/extra", "", gateway.KindOpenAI},
		{http.MethodPost, "/v1/messages/count_tokens", "", gateway.KindAnthropic},
		{http.MethodPost, "/v1/messages/batches", "2023-06-01", gateway.KindAnthropic},
		{http.MethodPost, "/v1/complete", "2023-06-01", gateway.KindAnthropic},
	} {
		req, err := http.NewRequestWithContext(ctxT(t), c.method, e.url+c.path, strings.NewReader(`{"model":"gpt-x"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		if c.anthropicVersion != "" {
			req.Header.Set("Anthropic-Version", c.anthropicVersion)
		}
		resp, err := e.http.Do(req)
		require.NoError(t, err)
		got := readAll(t, resp)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s: %s", c.path, got)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), c.path)
		var shape struct {
			Type  string
			Error struct{ Type, Code, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(got), &shape), "%s: %s", c.path, got)
		require.Contains(t, shape.Error.Message, "does not proxy "+c.method+" "+c.path, got)
		require.Contains(t, shape.Error.Message, "proxies POST /v1/chat/completions", got)
		if c.kind == gateway.KindAnthropic {
			require.Equal(t, "error", shape.Type, got)
			require.Equal(t, "not_found_error", shape.Error.Type, got)
		} else {
			require.Equal(t, gateway.CodeUnknownEndpoint, shape.Error.Code, got)
			require.Equal(t, "invalid_request_error", shape.Error.Type, got)
		}
	}
	require.Empty(t, e.fake.Calls())
}

// TestGateway_UnpricedModelBodyHasNoScope: the pricing table, not a
// budget, denies an unpriced model, so the denial in the answer names the
// model and no scope, in both shapes, instead of "scope":"". How it can
// fail: the ledger's denial passed as it is has "scope":"".
func TestGateway_UnpricedModelBodyHasNoScope(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:p")
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"model":"gpt-unpriced","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`,
		"/v1/messages":         `{"model":"claude-unpriced","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		resp := e.post(path, secret, body)
		got := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, got)
		var shape struct {
			Error struct {
				Code      string
				Spendgate map[string]any
			}
			Spendgate map[string]any
		}
		require.NoError(t, json.Unmarshal([]byte(got), &shape), got)
		d := shape.Spendgate
		if path == "/v1/chat/completions" {
			require.Equal(t, "unpriced_model", shape.Error.Code, got)
			d = shape.Error.Spendgate
		}
		require.Equal(t, "unpriced_model", d["reason"], got)
		require.NotEmpty(t, d["model"], got)
		require.NotContains(t, d, "scope", got)
	}
	require.Empty(t, e.fake.Calls())
}

// TestGateway_EndUsers: a key with an end-user scope kind admits each call
// against "user:<end user>" as well as its own scopes, the end user named
// by OpenAI's "user", Anthropic's metadata.user_id or the
// X-Spendgate-End-User header (which wins); a call that names none, or a
// name no scope can hold, is refused before anything is reserved or sent
// upstream; an end user whose budget cannot hold the call is refused
// while another is admitted. How it can fail: a gateway that ignores the kind admits bob's
// call (his budget is not in it), and charges no end user's budget at all.
func TestGateway_EndUsers(t *testing.T) {
	e := newEnv(t, envOpts{})
	for scope, limit := range map[string]string{"team:chat": "10", "user:alice": "10", "user:bob": "0.000001"} {
		_, err := e.admin.PutBudget(ctxT(t), events.BudgetPutRequest{Scope: scope, Period: "month", Limit: limit, Unit: "USD"})
		require.NoError(t, err)
	}
	id, secret, err := events.NewAPIKey()
	require.NoError(t, err)
	var created events.APIKeyPutReply
	e.request(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(secret),
		Scopes: []string{"team:chat"}, EndUser: "user"}, &created)
	require.Equal(t, "user", created.EndUser)

	chat := func(user string) string {
		b := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":20`
		if user != "" {
			b += `,"user":"` + user + `"`
		}
		return b + "}"
	}
	for _, c := range []struct {
		path, body string
		hdr        []string
	}{
		{"/v1/chat/completions", chat("alice"), nil},
		{"/v1/messages", `{"model":"claude-x","max_tokens":20,"metadata":{"user_id":"alice"},"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"/v1/chat/completions", chat("bob"), []string{gateway.HeaderEndUser, "alice"}},
	} {
		resp := e.post(c.path, secret, c.body, c.hdr...)
		body := readAll(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c.path, body)
	}
	calls := e.fake.Calls()
	require.Len(t, calls, 3)
	want := events.MustMoney("0")
	for _, c := range calls {
		want = want.Add(cost(*c.Usage))
	}
	requireMoney(t, want, e.budget("user:alice").Spent, "alice's budget holds her three calls")
	requireMoney(t, want, e.budget("team:chat").Spent, "the key's own scope too")
	require.Equal(t, "0", e.budget("user:bob").Spent)

	resp := e.post("/v1/chat/completions", secret, chat("bob"))
	body := readAll(t, resp)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body) // bob's budget is below one call's maximum: it never fits
	require.Contains(t, body, "user:bob")
	for _, c := range []struct{ body, code string }{
		{chat(""), "end_user_required"},
		{chat("not a scope id!"), "invalid_end_user"},
	} {
		resp := e.post("/v1/chat/completions", secret, c.body)
		body := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		require.Contains(t, body, c.code)
	}
	require.Len(t, e.fake.Calls(), 3, "nothing refused reached the upstream")
	for _, s := range []string{"team:chat", "user:alice", "user:bob"} {
		require.Equal(t, "0", e.budget(s).Reserved, "%s: nothing left reserved", s)
	}
}

// TestGateway_DenialByOpenReservationsSaysSo: a call that open
// reservations block (its budget's spend alone would hold it) is a 429 with
// Retry-After 1 that the SDK may retry, and its message says the budget is
// held, not spent: "is spent: ..., spent 0" sent callers looking for spend
// that was not there.
func TestGateway_DenialByOpenReservationsSaysSo(t *testing.T) {
	e := newEnv(t, envOpts{})
	// The first call streams for about 1.4 s (7 chunks, 200 ms apart):
	// the second comes while it holds the whole limit.
	body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:slow=200ms"}],"max_tokens":100}`
	probe := e.post("/v1/chat/completions", e.key("10", "team:probe"), body)
	one := reserved(t, probe)
	readAll(t, probe)
	secret := e.key(one.String(), "team:held")
	first := e.post("/v1/chat/completions", secret, body) // its headers came: admitted, and streaming
	require.Equal(t, http.StatusOK, first.StatusCode)
	resp := e.post("/v1/chat/completions", secret, body)
	got := readAll(t, resp)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, got)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Empty(t, resp.Header.Get("X-Should-Retry"), "the SDK may retry it")
	var shape struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(got), &shape), got)
	require.Equal(t, "limit_reached", shape.Error.Code)
	require.Contains(t, shape.Error.Message, "budget team:held per month")
	require.Contains(t, shape.Error.Message, "is held by open reservations")
	require.NotContains(t, shape.Error.Message, "is spent")
	readAll(t, first)
}

// TestGateway_BothMaxTokensReserveTheLarger: a chat call naming both
// max_completion_tokens and the older max_tokens reserves for the larger,
// since a provider or router may honour either; it reserved for the first
// field found, so {"max_completion_tokens":5,"max_tokens":100000000} was
// admitted for 5 tokens (and passed the 10,000,000-token cap).
func TestGateway_BothMaxTokensReserveTheLarger(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("100", "team:both")
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	post := func(limits string) *http.Response {
		resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x",`+msgs+`,`+limits+`}`)
		readAll(t, resp)
		return resp
	}
	// The same body length both ways (the input is reserved by bytes).
	a := reserved(t, post(`"max_completion_tokens":5,"max_tokens":5000`))
	require.Equal(t, a, reserved(t, post(`"max_completion_tokens":5000,"max_tokens":5`)))
	require.Positive(t, a.Cmp(reserved(t, post(`"max_completion_tokens":5,"max_tokens":9`))), "5000 output tokens reserved, not 5")
	resp := post(`"max_completion_tokens":5,"max_tokens":100000000`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "past the cap on output tokens")
}
