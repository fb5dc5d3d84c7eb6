package gateway_test

import (
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
