package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestGateway_KeyInfo: GET /v1/key answers a key's holder the budgets its
// calls are admitted against, with their balances after a call, as the
// ledger holds them; the scopes without a budget are named; another key's
// budgets are not in it. No key, a wrong one and a disabled one get the
// call's 401s, and POST the 405 of the API.
func TestGateway_KeyInfo(t *testing.T) {
	e := newEnv(t, envOpts{keyCache: 50 * time.Millisecond})
	secret := e.key("10", "team:k", "user:k")
	e.key("7", "team:other")
	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":9}`)
	call := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, call)

	status, _, body := get(t, e.url, gateway.KeyPath, secret, false)
	require.Equal(t, http.StatusOK, status, body)
	var info gateway.KeyInfo
	require.NoError(t, json.Unmarshal([]byte(body), &info), body)
	require.Equal(t, []string{"team:k", "user:k"}, info.Scopes)
	require.Empty(t, info.WithoutBudget)
	require.Len(t, info.Budgets, 2, body)
	for i, scope := range info.Scopes {
		want := e.budget(scope)
		require.Equal(t, want, info.Budgets[i], "the ledger's view of %s", scope)
		require.NotEqual(t, "0", want.Spent, "the call was settled in %s", scope)
	}

	// A scope with no budget of its own is named, not left out silently.
	id, bare, err := events.NewAPIKey()
	require.NoError(t, err)
	var put events.APIKeyPutReply
	e.request(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(bare), Scopes: []string{"team:k", "user:nobudget"}}, &put)
	status, _, body = get(t, e.url, gateway.KeyPath, bare, true) // Anthropic's SDK sends x-api-key
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &info), body)
	require.Equal(t, []string{"user:nobudget"}, info.WithoutBudget)
	require.Len(t, info.Budgets, 1)
	require.Equal(t, events.Scope("team:k"), info.Budgets[0].Scope)

	status, _, body = get(t, e.url, gateway.KeyPath, "", false)
	require.Equal(t, http.StatusUnauthorized, status, body)
	require.Equal(t, "missing_api_key", code(t, body))
	status, _, body = get(t, e.url, gateway.KeyPath, "sgk_nope_0", false)
	require.Equal(t, http.StatusUnauthorized, status, body)
	e.request(streams.EndpointAPIKeyDisable, events.APIKeyIDRequest{ID: id}, nil)
	testenv.WaitFor(t, 5*time.Second, "the disabled key is refused", func() bool {
		status, _, body = get(t, e.url, gateway.KeyPath, bare, false)
		return status == http.StatusUnauthorized
	})
	require.Equal(t, "key_disabled", code(t, body))

	resp = e.post(gateway.KeyPath, secret, `{}`)
	body = readAll(t, resp)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
	require.Equal(t, http.MethodGet, resp.Header.Get("Allow"))
}

// TestGateway_BearerSchemeAnyCase: the auth scheme is case-insensitive
// (RFC 7235): "bearer <key>" is the key, as "Bearer <key>" is.
func TestGateway_BearerSchemeAnyCase(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:k")
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"Bearer " + secret, http.StatusOK},
		{"bearer " + secret, http.StatusOK},
		{"BEARER  " + secret + " ", http.StatusOK},
		{"Basic " + secret, http.StatusUnauthorized},
	} {
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, e.url+gateway.KeyPath, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", c.auth)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body := readAll(t, resp)
		require.Equal(t, c.status, resp.StatusCode, "%q: %s", strings.Replace(c.auth, secret, "<key>", 1), body)
	}
}
