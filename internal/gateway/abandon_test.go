package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/fakellm"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/testenv"
)

// abandonCase is a streamed call of one API whose caller leaves.
type abandonCase struct{ api, path, body string }

// abandonCases are streamed calls of each streaming API, each prompt
// taking "%s" for the fake's directives.
var abandonCases = []abandonCase{
	{"chat.completions", "/v1/chat/completions", `{"model":"gpt-x","stream":true,"max_tokens":400,"messages":[{"role":"user","content":"hi %s"}]}`},
	{"messages", "/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":400,"messages":[{"role":"user","content":"hi %s"}]}`},
	{"responses", "/v1/responses", `{"model":"gpt-x","stream":true,"max_output_tokens":400,"input":"hi %s"}`},
}

// leaveMidStream sends a streamed call, reads its first n events, then
// leaves: it cancels the request and closes its body, which closes the
// connection. It returns the response (its headers name the reservation).
func (e *env) leaveMidStream(c abandonCase, secret, directives string, n int) *http.Response {
	e.t.Helper()
	ctx, cancel := context.WithCancel(ctxT(e.t))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+c.path, strings.NewReader(strings.Replace(c.body, "%s", directives, 1)))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	if c.path == "/v1/messages" {
		req.Header.Set("X-Api-Key", secret)
	} else {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := e.http.Do(req)
	require.NoError(e.t, err)
	require.Equal(e.t, http.StatusOK, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	for seen := 0; seen < n; {
		line, err := br.ReadString('\n')
		require.NoError(e.t, err, "the stream ended before %d events", n)
		if strings.HasPrefix(line, "data:") {
			seen++
		}
	}
	cancel()
	resp.Body.Close()
	return resp
}

// callLine is the gateway's log line of the call of reservation id.
func (e *env) callLine(id string) string {
	e.t.Helper()
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "gateway call") && strings.Contains(line, "reservation="+id) {
			return line
		}
	}
	e.t.Fatalf("no log line of the call of reservation %s:\n%s", id, e.logs.String())
	return ""
}

// TestGateway_AbandonedStreamSettledFromUsage: a caller that reads a few
// events of a stream and closes its connection does not cut the call
// upstream: the gateway reads the rest of the stream (the fake's 40
// tokens, 20 ms apart, outlast the caller by most of a second), passing
// nothing on, and settles the usage the provider reported at its end
// (OpenAI's usage chunk, Anthropic's message_delta, Responses'
// response.completed): the budget is charged exactly that usage priced,
// not the reservation of 400 output tokens, and the settle's note, which
// the export carries, says the caller left (caller_gone). The call's
// outcome is caller_gone, its log line says closed=usage with drained_ms,
// and spendgate_gateway_abandoned_drained_total counts it by API.
//
// How it can fail: on the old code (and with DrainAbandoned forced to
// none) the caller's leaving cancels the upstream request, no usage
// arrives, and the budget is charged the whole reservation with note
// reservation_caller_gone; the amounts differ by the 360 tokens not
// generated, so requireMoney fails first.
func TestGateway_AbandonedStreamSettledFromUsage(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:gone")
	spent := events.MustMoney("0")
	for _, c := range abandonCases {
		e.fake.Reset()
		resp := e.leaveMidStream(c, secret, "fake:slow=20ms fake:out=40", 3)
		id := resp.Header.Get("X-Spendgate-Reservation-Id")
		testenv.WaitFor(t, 20*time.Second, c.api+": the call is settled", func() bool { return e.budget("team:gone").Open == 0 })
		calls := e.fake.Calls()
		require.Len(t, calls, 1, c.api)
		require.NotNil(t, calls[0].Usage, c.api)
		require.Equal(t, fakellm.Usage{Input: calls[0].Usage.Input, Output: 40, Cached: 0}, *calls[0].Usage, c.api)
		want := cost(*calls[0].Usage)
		require.Positive(t, reserved(t, resp).Cmp(want), "%s: the reservation is more than the usage: the test tells them apart", c.api)
		spent = spent.Add(want)
		b := e.budget("team:gone")
		require.Equal(t, "0", b.Reserved, c.api)
		requireMoney(t, spent, b.Spent, c.api)
		require.Equal(t, gateway.NoteCallerGone, e.notes()[id], c.api)
		line := e.callLine(id)
		require.Contains(t, line, "outcome=caller_gone", c.api)
		require.Contains(t, line, "closed=usage", c.api)
		require.Contains(t, line, "drained_ms=", c.api)
		require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.AbandonedDrained.WithLabelValues(c.api)), c.api)
		require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.Calls.WithLabelValues(c.api, gateway.OutcomeCallerGone)), c.api)
	}
}

// TestGateway_AbandonedStreamCutAtTheBound: a caller leaves a stream that
// would run for another 30 s (300 tokens, 100 ms apart). With
// DrainAbandoned none (the flag's --drain-abandoned 0) the call is cut at
// once, and with a bound of 300 ms it is cut then: either way it is
// charged its whole reservation, note reservation_caller_gone, outcome
// caller_gone, closed=reservation, and not counted as drained. OpenAI chat
// and Anthropic messages.
//
// How it can fail: a drain the bound did not end (the bound ignored, or
// the upstream request cut by nothing once its caller's context no longer
// cancels it) runs the stream to its end, 30 s on, past the 10 s wait,
// and then settles the usage, not the reservation.
func TestGateway_AbandonedStreamCutAtTheBound(t *testing.T) {
	for _, bound := range []time.Duration{-1, 300 * time.Millisecond} {
		t.Run(bound.String(), func(t *testing.T) {
			e := newEnv(t, envOpts{drainAbandoned: bound})
			secret := e.key("10", "team:cut")
			spent := events.MustMoney("0")
			for _, c := range abandonCases[:2] {
				resp := e.leaveMidStream(c, secret, "fake:slow=100ms fake:out=300", 2)
				id := resp.Header.Get("X-Spendgate-Reservation-Id")
				testenv.WaitFor(t, 10*time.Second, c.api+": the call is settled", func() bool { return e.budget("team:cut").Open == 0 })
				spent = spent.Add(reserved(t, resp))
				requireMoney(t, spent, e.budget("team:cut").Spent, c.api)
				require.Equal(t, "reservation_caller_gone", e.notes()[id], c.api)
				line := e.callLine(id)
				require.Contains(t, line, "outcome=caller_gone", c.api)
				require.Contains(t, line, "closed=reservation", c.api)
				require.Zero(t, testutil.ToFloat64(e.metrics.AbandonedDrained.WithLabelValues(c.api)), c.api)
			}
		})
	}
}

// TestGateway_AbandonedBeforeTheAnswer: a plain (not streamed) call whose
// caller leaves while the provider is still working on it (a client
// timeout before the first byte) is still read to its end: the fake holds
// the call until the gateway has seen the caller go, then answers, and the
// call is settled from that answer's usage, note caller_gone. The fake's
// handler also checks that its request was not cancelled meanwhile.
//
// How it can fail: on the old code the upstream request is cancelled
// with its caller's, the fake's request context ends (cancelled is set),
// and the call is charged its whole reservation, note
// reservation_caller_gone.
func TestGateway_AbandonedBeforeTheAnswer(t *testing.T) {
	arrived, proceed := make(chan struct{}, 1), make(chan struct{})
	cancelled := make(chan bool, 1)
	e := newEnv(t, envOpts{upstream: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-proceed
			cancelled <- r.Context().Err() != nil
			next.ServeHTTP(w, r)
		})
	}})
	left := make(chan struct{}, 1)
	gateway.SetCallerLeft(e.gw, func() { left <- struct{}{} })
	secret := e.key("10", "team:plain-gone")
	ctx, cancel := context.WithCancel(ctxT(t))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"hi fake:out=30"}],"max_tokens":400}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	errc := make(chan error, 1)
	go func() {
		resp, err := e.http.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitChan(t, arrived, "the call reached the upstream")
	cancel()
	require.Error(t, <-errc, "the caller left without an answer")
	waitChan(t, left, "the gateway saw the caller go")
	close(proceed)
	require.False(t, <-cancelled, "the upstream request outlived its caller")
	testenv.WaitFor(t, 10*time.Second, "the call is settled", func() bool { return e.budget("team:plain-gone").Open == 0 })
	calls := e.fake.Calls()
	require.Len(t, calls, 1)
	require.NotNil(t, calls[0].Usage)
	requireMoney(t, cost(*calls[0].Usage), e.budget("team:plain-gone").Spent)
	notes := e.notes()
	require.Len(t, notes, 1)
	for id, note := range notes {
		require.Equal(t, gateway.NoteCallerGone, note)
		require.Contains(t, e.callLine(id), "outcome=caller_gone")
	}
	require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.AbandonedDrained.WithLabelValues("chat.completions")))
}

// TestGateway_ShutdownBoundsTheDrain: a stream whose caller left is being
// drained (the default bound, 2 minutes) when the gateway shuts down; at
// Drain's timeout it is cut as every call still running is, and charged
// its whole reservation, note reservation_caller_gone (its caller was
// gone, the shutdown did not take its answer from it); Drain returns.
//
// How it can fail: a drain Drain's cut does not reach (the upstream
// request no longer tracked, or run on a context the cut does not end)
// keeps Drain waiting for the stream's 50 s, past the 10 s below.
func TestGateway_ShutdownBoundsTheDrain(t *testing.T) {
	e := newEnv(t, envOpts{})
	left := make(chan struct{}, 1)
	gateway.SetCallerLeft(e.gw, func() { left <- struct{}{} })
	secret := e.key("10", "team:gone-at-shutdown")
	resp := e.leaveMidStream(abandonCases[0], secret, "fake:slow=100ms fake:out=500", 2)
	waitChan(t, left, "the gateway saw the caller go")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	drained := make(chan struct{})
	go func() { e.gw.Drain(ctx); close(drained) }()
	waitChan(t, drained, "Drain returned")
	b := e.budget("team:gone-at-shutdown")
	require.Zero(t, b.Open)
	requireMoney(t, reserved(t, resp), b.Spent)
	require.Equal(t, "reservation_caller_gone", e.notes()[resp.Header.Get("X-Spendgate-Reservation-Id")])
}

// waitChan waits for c, at most 10 s.
func waitChan[T any](t *testing.T, c <-chan T, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting: " + what)
	}
}

// TestGateway_AbandonedLargePlainAnswer: a plain answer larger than what
// the gateway keeps whole (8 MiB) is passed on as it comes; its caller
// reads a little of it and leaves. The upstream (a handler of the test's:
// 9 MiB of content, then, once the gateway has seen the caller go, the
// rest with the usage) is read to its end all the same, and the call is
// settled from that usage, note caller_gone.
//
// How it can fail: on the old code the caller's leaving cancelled the
// upstream read (and a failed write to the caller stopped the copy
// anyway), so the call was charged its whole reservation, noted
// reservation_cut as if the upstream had broken off.
func TestGateway_AbandonedLargePlainAnswer(t *testing.T) {
	left := make(chan struct{}, 1)
	const usage = `"usage":{"prompt_tokens":12,"completion_tokens":3000,"total_tokens":3012}`
	e := newEnv(t, envOpts{upstream: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"chatcmpl-big","object":"chat.completion","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"`)
			_, _ = io.WriteString(w, strings.Repeat("a", 9<<20))
			w.(http.Flusher).Flush()
			select {
			case <-left:
			case <-time.After(10 * time.Second):
			}
			_, _ = io.WriteString(w, `"},"finish_reason":"stop"}],`+usage+`}`)
		})
	}})
	gateway.SetCallerLeft(e.gw, func() {
		select {
		case left <- struct{}{}:
		default:
		}
	})
	secret := e.key("10", "team:big")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":4000}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = io.ReadFull(resp.Body, make([]byte, 1024))
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	testenv.WaitFor(t, 20*time.Second, "the call is settled", func() bool { return e.budget("team:big").Open == 0 })
	want := cost(fakellm.Usage{Input: 12, Output: 3000})
	require.Positive(t, reserved(t, resp).Cmp(want))
	requireMoney(t, want, e.budget("team:big").Spent)
	id := resp.Header.Get("X-Spendgate-Reservation-Id")
	require.Equal(t, gateway.NoteCallerGone, e.notes()[id])
	require.Contains(t, e.callLine(id), "outcome=caller_gone")
}
