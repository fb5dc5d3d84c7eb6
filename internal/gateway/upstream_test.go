package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// badKey makes the fake provider see a wrong key on the calls whose body
// asks for it ("fake:badkey"): the provider refuses the gateway's own
// credentials, as it does when the gateway is given a revoked key.
func badKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := readBody(r)
		if strings.Contains(body, "fake:badkey") {
			r.Header.Set("Authorization", "Bearer sk-revoked")
			r.Header.Set("X-Api-Key", "sk-revoked")
		}
		r.Body = readCloser(body)
		next.ServeHTTP(w, r)
	})
}

// TestGateway_UpstreamAuthNotRetried: the provider refusing the gateway's
// own key is a 502 upstream_auth in both shapes, with x-should-retry:
// false, so that an SDK raises it at once instead of retrying a
// misconfiguration (and the provider's body, which may name the key, is
// not passed on). Without noRetry the header is missing and the SDKs
// retry it twice.
func TestGateway_UpstreamAuthNotRetried(t *testing.T) {
	e := newEnv(t, envOpts{upstream: badKey})
	secret := e.key("10", "team:auth")
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fake:badkey"}],"max_tokens":5}`},
		{"/v1/messages", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"fake:badkey"}]}`},
	} {
		resp := e.post(c.path, secret, c.body)
		body := readAll(t, resp)
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
		require.Equal(t, "upstream_auth", resp.Header.Get("X-Spendgate-Error-Code"), body)
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "%s: a retry cannot mend the gateway's key", c.path)
		require.NotContains(t, body, "sk-revoked")
	}
	b := e.budget("team:auth")
	require.Equal(t, "0", b.Spent, "a refused call is released")
	require.Zero(t, b.Open)
}

// readBody reads a request's body whole.
func readBody(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func readCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

// TestGateway_IntermediaryTimeoutCharged: a 504 or 524 comes from a proxy
// or CDN in front of the provider that gave up waiting while the provider
// may have run and billed the call: it is a call sent with no answer,
// charged its reservation with the note reservation_unreachable and
// answered 502 upstream_unreachable, x-should-retry: false. Every other
// error status (400, 429, 500, 502, 503, 529) is the provider's refusal:
// passed on and released. Without sentNoAnswer the 504 and 524 were
// released, spending nothing, and passed on for the SDK to retry.
func TestGateway_IntermediaryTimeoutCharged(t *testing.T) {
	e := newEnv(t, envOpts{})
	charged := map[string]bool{}
	for _, c := range []struct {
		path   string
		status int
		charge bool
	}{
		{"/v1/chat/completions", 504, true},
		{"/v1/chat/completions", 524, true},
		{"/v1/messages", 504, true},
		{"/v1/chat/completions", 400, false},
		{"/v1/chat/completions", 429, false},
		{"/v1/chat/completions", 500, false},
		{"/v1/chat/completions", 502, false},
		{"/v1/chat/completions", 503, false},
		{"/v1/messages", 529, false},
	} {
		scope := fmt.Sprintf("team:s%d-%s", c.status, strings.Trim(strings.ReplaceAll(c.path, "/", "-"), "-"))
		secret := e.key("10", scope)
		body := fmt.Sprintf(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"fake:status=%d"}],"max_tokens":5}`, c.status)
		if c.path == "/v1/messages" {
			body = fmt.Sprintf(`{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"fake:status=%d"}]}`, c.status)
		}
		resp := e.post(c.path, secret, body)
		got := readAll(t, resp)
		requireSpendgateHeaders(t, resp)
		b := e.budget(scope)
		require.Zero(t, b.Open, "%d: closed", c.status)
		if !c.charge {
			require.Equal(t, c.status, resp.StatusCode, "%d passed on: %s", c.status, got)
			require.Empty(t, resp.Header.Get("X-Should-Retry"), c.status)
			require.Equal(t, "0", b.Spent, "%d: a refusal is released", c.status)
			continue
		}
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, got)
		require.Equal(t, "upstream_unreachable", resp.Header.Get("X-Spendgate-Error-Code"), got)
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "%d: charged, so not retried", c.status)
		require.Contains(t, got, fmt.Sprintf("timed out: %d", c.status))
		require.Contains(t, got, "charged again")
		requireMoney(t, reserved(t, resp), b.Spent, c.status)
		charged[resp.Header.Get("X-Spendgate-Reservation-Id")] = true
	}
	notes := e.notes()
	require.Len(t, charged, 3)
	for id := range charged {
		require.Equal(t, "reservation_unreachable", notes[id], "the note of a call sent with no answer")
	}
}

// TestGateway_ProviderRateLimitHeadersPassed: the provider's rate-limit
// headers (x-ratelimit-*, anthropic-ratelimit-*) and its x-should-retry
// reach the caller, on an answer and on a refusal passed on, while the
// headers the gateway does not pass (a cookie, the provider's
// organization) stay there. Before, only a fixed list came back, so a
// router could not pace itself by the provider's limits.
func TestGateway_ProviderRateLimitHeadersPassed(t *testing.T) {
	limits := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("x-ratelimit-remaining-tokens", "149984")
			h.Set("x-ratelimit-reset-requests", "6m0s")
			h.Set("anthropic-ratelimit-requests-remaining", "49")
			h.Set("x-should-retry", "true")
			h.Set("openai-organization", "org-of-the-gateway")
			h.Set("set-cookie", "__cf_bm=provider")
			next.ServeHTTP(w, r)
		})
	}
	e := newEnv(t, envOpts{upstream: limits})
	secret := e.key("10", "team:limits")
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, 200},
		{"/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, 200},
		{"/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fake:status=429"}],"max_tokens":5}`, 429},
		{"/v1/messages", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 200},
	} {
		resp := e.post(c.path, secret, c.body)
		body := readAll(t, resp)
		require.Equal(t, c.status, resp.StatusCode, body)
		h := resp.Header
		require.Equal(t, "149984", h.Get("X-Ratelimit-Remaining-Tokens"), c.body)
		require.Equal(t, "6m0s", h.Get("X-Ratelimit-Reset-Requests"))
		require.Equal(t, "49", h.Get("Anthropic-Ratelimit-Requests-Remaining"))
		require.Equal(t, "true", h.Get("X-Should-Retry"))
		require.Empty(t, h.Get("Openai-Organization"), "the gateway's account is its own business")
		require.Empty(t, h.Get("Set-Cookie"))
	}
}
