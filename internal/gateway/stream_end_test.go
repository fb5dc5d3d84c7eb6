package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/testenv"
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

// brokenStreams is an upstream that answers a chat stream whose body says
// "midevent" with two whole events and then a third cut in the middle of
// its data line (the connection closed with the chunked body unfinished:
// a read error), and one that says "cleanend" with two whole events and a
// clean end, without [DONE] nor a usage.
func brokenStreams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := readBody(r)
		mid, clean := strings.Contains(body, "midevent"), strings.Contains(body, "cleanend")
		if !mid && !clean {
			r.Body = readCloser(body)
			next.ServeHTTP(w, r)
			return
		}
		const ev = `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-x","choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"
		if clean {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(ev + ev))
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, part := range []string{ev, ev, `data: {"id":"c1","choices":[{"delta":{"c`} {
			_, _ = fmt.Fprintf(buf, "%x\r\n%s\r\n", len(part), part)
		}
		_ = buf.Flush()
	})
}

// TestGateway_BrokenStreamEndsInAWholeErrorEvent: a stream broken off in
// the middle of an event ends, for the caller, in the two whole events
// and the error event, every data line whole JSON: the half event is not
// passed on (it was, and the error event joined it into one line of
// broken JSON, which the SDKs fail to parse instead of raising the error's
// code). A stream that ends cleanly without its terminal event gets the
// error event too (it got none: an SDK took half an answer for a whole
// one). Both are charged their reservation.
func TestGateway_BrokenStreamEndsInAWholeErrorEvent(t *testing.T) {
	e := newEnv(t, envOpts{upstream: brokenStreams})
	for _, c := range []string{"midevent", "cleanend"} {
		scope := "team:" + c
		secret := e.key("10", scope)
		resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"`+c+`"}],"max_tokens":5}`)
		body := readAll(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		_, data := sseEvents(body)
		require.Len(t, data, 3, "%s: the two whole events, then the error: %s", c, body)
		for _, d := range data {
			require.True(t, json.Valid([]byte(d)), "%s: every data line is whole JSON: %q", c, d)
		}
		requireStreamError(t, "/v1/chat/completions", body, "upstream_cut")
		b := e.budget(scope)
		require.Zero(t, b.Open)
		requireMoney(t, reserved(t, resp), b.Spent, "charged its reservation")
	}
}

// TestGateway_StalledReaderIsNotAnUpstreamTimeout: a caller that stops
// reading a stream for longer than the upstream timeout (but less than
// the write's grace after it) holds the gateway's writes up, not the
// provider: the stream goes on when it reads again, to its end, settled
// from its usage. Before, the upstream's idle bound ran while the gateway
// was blocked writing, cut the stream as upstream_timeout and charged its
// reservation. The pause is the behaviour under test (a caller that does
// not read for 2.5 s), not a wait for something; the answer is large
// enough (about 30 MB) that the connection's buffers fill.
func TestGateway_StalledReaderIsNotAnUpstreamTimeout(t *testing.T) {
	e := newEnv(t, envOpts{upstreamTimeout: time.Second})
	gateway.SetWriteGrace(e.gw, 10*time.Second)
	secret := e.key("1000", "team:stall")
	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:out=400000"}],"max_tokens":400000}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	first := make([]byte, 1024)
	_, err := io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond) // the caller does not read
	body := string(first) + readAll(t, resp)
	_, data := sseEvents(body)
	require.Equal(t, "[DONE]", data[len(data)-1], "the stream ran to its end")
	calls := e.fake.Calls()
	require.Len(t, calls, 1)
	require.NotNil(t, calls[0].Usage)
	testenv.WaitFor(t, 10*time.Second, "settled", func() bool { return e.budget("team:stall").Open == 0 })
	requireMoney(t, cost(*calls[0].Usage), e.budget("team:stall").Spent, "settled from its usage")
}
