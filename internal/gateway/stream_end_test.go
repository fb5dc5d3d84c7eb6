package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sseEvents splits an SSE body into its events' (name, data).
func sseEvents(body string) (names, data []string) {
	for _, ev := range strings.Split(strings.TrimSpace(body), "\n\n") {
		name, d := "", ""
		for _, line := range strings.Split(ev, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				d = v
			}
		}
		names, data = append(names, name), append(data, d)
	}
	return names, data
}

// requireStreamError checks that a stream's last event is the provider's
// error event with code (OpenAI: a data line {"error":{...}}; Anthropic:
// event error, {"type":"error","error":{...}}), its message saying the
// call was charged.
func requireStreamError(t *testing.T, path, body, code string) {
	t.Helper()
	names, data := sseEvents(body)
	last := data[len(data)-1]
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type, Message, Code string
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(last), &e), body)
	require.Equal(t, code, e.Error.Code, body)
	require.Contains(t, e.Error.Message, "charged its reservation")
	if strings.HasPrefix(path, "/v1/messages") {
		require.Equal(t, "error", names[len(names)-1], "Anthropic's error event")
		require.Equal(t, "error", e.Type)
		require.NotEmpty(t, e.Error.Type)
		return
	}
	require.Empty(t, names[len(names)-1], "OpenAI's error is a data line")
	require.Equal(t, "server_error", e.Error.Type)
}

// TestGateway_CutStreamEndsInAnErrorEvent: a stream the upstream breaks
// off ends, for the caller, in the provider's own error event naming
// upstream_cut (the SDKs raise it as their API error with the code),
// after the chunks that came; the call is charged its reservation.
// Without it the caller saw a bare connection drop (openai-node:
// "TypeError: terminated").
func TestGateway_CutStreamEndsInAnErrorEvent(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:cut")
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:cut"}],"max_tokens":5}`},
		{"/v1/responses", `{"model":"gpt-x","stream":true,"input":"fake:cut","max_output_tokens":5}`},
		{"/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"fake:cut"}]}`},
	} {
		resp := e.post(c.path, secret, c.body)
		body := readAll(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_, data := sseEvents(body)
		require.Len(t, data, 3, "the two chunks that came, then the error: %s", body)
		requireStreamError(t, c.path, body, "upstream_cut")
	}
	b := e.budget("team:cut")
	require.Zero(t, b.Open)
	require.NotEqual(t, "0", b.Spent, "charged")
}

// TestGateway_UpstreamTimeoutIsIdleForStreams: for a stream the upstream
// timeout bounds each wait for the next bytes, not the stream: a stream
// that sends a chunk every quarter of the timeout runs past the timeout
// to its end and is settled from its usage; one that goes silent longer
// than the timeout is ended with the error event upstream_timeout and
// charged its reservation. A plain answer keeps the whole-call bound,
// however it trickles. Before, the timeout cut the first stream at 1 s,
// charging it in full.
func TestGateway_UpstreamTimeoutIsIdleForStreams(t *testing.T) {
	trickle := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := readBody(r)
			if !strings.Contains(body, "trickle") {
				r.Body = readCloser(body)
				next.ServeHTTP(w, r)
				return
			}
			// A plain answer that trickles a byte every 100 ms for 3 s.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			for range 30 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				_, _ = w.Write([]byte(" "))
				w.(http.Flusher).Flush()
			}
			_, _ = w.Write([]byte(`{}`))
		})
	}
	e := newEnv(t, envOpts{upstreamTimeout: time.Second, upstream: trickle})

	secret := e.key("10", "team:long")
	start := time.Now()
	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:slow=250ms fake:out=8"}],"max_tokens":20}`)
	body := readAll(t, resp)
	require.Greater(t, time.Since(start), time.Second, "the stream ran past the upstream timeout")
	_, data := sseEvents(body)
	require.Equal(t, "[DONE]", data[len(data)-1], body)
	calls := e.fake.Calls()
	require.Len(t, calls, 1)
	require.NotNil(t, calls[0].Usage)
	requireMoney(t, cost(*calls[0].Usage), e.budget("team:long").Spent, "settled from its usage")

	for _, c := range []struct{ test, path string }{{"silent", "/v1/chat/completions"}, {"silent-anthropic", "/v1/messages"}} {
		scope := "team:" + c.test
		secret := e.key("10", scope)
		call := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:slow=5s"}],"max_tokens":20}`
		if c.path == "/v1/messages" {
			call = `{"model":"claude-x","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"fake:slow=5s"}]}`
		}
		resp := e.post(c.path, secret, call)
		body := readAll(t, resp)
		requireStreamError(t, c.path, body, "upstream_timeout")
		b := e.budget(scope)
		require.Zero(t, b.Open)
		requireMoney(t, reserved(t, resp), b.Spent, "a silent stream is charged its reservation")
	}

	secret = e.key("10", "team:trickle")
	resp = e.post("/v1/chat/completions", secret, `{"model":"gpt-x","messages":[{"role":"user","content":"trickle"}],"max_tokens":20}`)
	body = readAll(t, resp)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	require.Equal(t, "upstream_timeout", resp.Header.Get("X-Spendgate-Error-Code"), body)
	require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	requireMoney(t, reserved(t, resp), e.budget("team:trickle").Spent)
}

// TestGateway_MaxStreamBoundsAStream: a stream that keeps sending is cut at
// MaxStream (its error event upstream_timeout, charged its reservation),
// and its reservation's TTL is MaxStream plus the margin, a plain call's
// the upstream timeout plus it: the sweeper never frees the room of a
// stream still running. Without MaxStream, a stream sending every 250 ms
// ran to its end, 5 s, past its reservation's expiry (upstream timeout +
// margin), and this fails on the cut.
func TestGateway_MaxStreamBoundsAStream(t *testing.T) {
	e := newEnv(t, envOpts{upstreamTimeout: time.Second, maxStream: 2 * time.Second})
	secret := e.key("10", "team:endless")
	start := time.Now()
	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:slow=250ms fake:out=20"}],"max_tokens":20}`)
	body := readAll(t, resp)
	took := time.Since(start)
	requireStreamError(t, "/v1/chat/completions", body, "upstream_timeout")
	require.Contains(t, body, "--max-stream", "the event says which bound cut it")
	require.Less(t, took, 4500*time.Millisecond, "cut at the 2 s bound, not run to its 5 s end")
	b := e.budget("team:endless")
	require.Zero(t, b.Open)
	requireMoney(t, reserved(t, resp), b.Spent, "a cut stream is charged its reservation")
	r, ok := e.replica.Ledger.Reservation(resp.Header.Get("X-Spendgate-Reservation-Id"))
	require.True(t, ok)
	require.Equal(t, 2*time.Second+time.Minute, r.ExpiresAt.Sub(r.OpenedAt), "a stream's TTL")

	resp = e.post("/v1/chat/completions", secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":20}`)
	readAll(t, resp)
	r, ok = e.replica.Ledger.Reservation(resp.Header.Get("X-Spendgate-Reservation-Id"))
	require.True(t, ok)
	require.Equal(t, time.Second+time.Minute, r.ExpiresAt.Sub(r.OpenedAt), "a plain call's TTL")
}
