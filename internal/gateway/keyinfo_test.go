package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
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

// keyInfo sends GET /v1/key with secret and the headers hdr (name, value,
// ...): the answer's status, a 200's KeyInfo, and the body.
func keyInfo(t *testing.T, base, secret string, hdr ...string) (int, gateway.KeyInfo, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, base+gateway.KeyPath, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body := readAll(t, resp)
	var info gateway.KeyInfo
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(body), &info), body)
	}
	return resp.StatusCode, info, body
}

// TestGateway_KeyInfoOfEndUserAndRun: GET /v1/key with X-Spendgate-End-User
// and X-Spendgate-Run answers the budgets of that end user and run too,
// after the key's own, as the ledger holds them; an end user or run with
// no budget yet is named in without_budget and the read creates none (the
// run:* default makes it at the first call's admit); a name no scope can
// hold is the calls' 400; a header of a kind the key does not have is
// ignored, as a call ignores it. How it can fail: without the headers read
// the end user's budget is missing from budgets; a read that went through
// an admit or check would make the unknown run's budget from run:*.
func TestGateway_KeyInfoOfEndUserAndRun(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.putBudgets(e.admin,
		events.BudgetPutRequest{Scope: "team:chat", Period: "month", Limit: "10", Unit: "USD"},
		events.BudgetPutRequest{Scope: "user:alice", Period: "month", Limit: "3", Unit: "USD"},
		events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "2", Unit: "requests"})
	id, secret := e.runKey("", []string{"team:chat"}, "user", "run")
	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":20,"user":"alice"}`,
		gateway.HeaderRun, "r1")
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	testenv.WaitFor(t, 10*time.Second, "the call is settled", func() bool { return e.budget("team:chat").Open == 0 })

	// Without the headers: the key's own scopes, and its kinds.
	status, info, body := keyInfo(t, e.url, secret)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, id, info.ID)
	require.Equal(t, "user", info.EndUser)
	require.Equal(t, "run", info.Run)
	require.Equal(t, []string{"team:chat"}, info.Scopes)
	require.Empty(t, info.EndUserScope)
	require.Empty(t, info.RunScope)
	require.Len(t, info.Budgets, 1)

	// With them: alice's and run r1's budgets too, as the ledger holds them.
	status, info, body = keyInfo(t, e.url, secret, gateway.HeaderEndUser, "alice", gateway.HeaderRun, "r1")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, []string{"team:chat", "user:alice", "run:r1"}, info.Scopes)
	require.Equal(t, "user:alice", info.EndUserScope)
	require.Equal(t, "run:r1", info.RunScope)
	require.Empty(t, info.WithoutBudget)
	r1, err := e.admin.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "run:r1", Period: "lifetime"})
	require.NoError(t, err)
	require.Equal(t, []events.BudgetView{e.budget("team:chat"), e.budget("user:alice"), r1}, info.Budgets)
	require.Equal(t, "1", r1.Spent)
	require.Equal(t, "1", r1.Available, "what the run has left: one more call")
	require.NotEqual(t, "0", info.Budgets[1].Spent, "alice's budget holds her call")

	// An end user and a run the ledger has no budget of: named, not made.
	seq := e.lastSeq()
	status, info, body = keyInfo(t, e.url, secret, gateway.HeaderEndUser, "bob", gateway.HeaderRun, "r-new")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, []string{"user:bob", "run:r-new"}, info.WithoutBudget)
	require.Len(t, info.Budgets, 1)
	// What their first call would be held to: run:* (user has no
	// default, so bob's first call is denied unknown_budget).
	require.Len(t, info.Defaults, 1, "%+v", info.Defaults)
	require.Equal(t, events.Scope("run:*"), info.Defaults[0].Scope)
	require.EqualValues(t, "lifetime", info.Defaults[0].Period)
	require.Equal(t, "2", info.Defaults[0].Limit)
	require.Equal(t, "requests", info.Defaults[0].Unit)
	require.Equal(t, seq, e.lastSeq(), "a read writes nothing")
	_, err = e.admin.GetScopeBudgets(ctxT(t), "run:r-new")
	require.True(t, errors.Is(err, client.ErrNotFound), "the read made no budget from run:*: %v", err)

	// Names no scope can hold: the calls' codes.
	for _, c := range []struct{ hdr, value, code string }{
		{gateway.HeaderEndUser, "a@b.example", "invalid_end_user"},
		{gateway.HeaderRun, "r 1", "invalid_run"},
	} {
		status, _, body := keyInfo(t, e.url, secret, c.hdr, c.value)
		require.Equal(t, http.StatusBadRequest, status, body)
		require.Equal(t, c.code, code(t, body))
	}

	// A key without the kinds ignores the headers, as its calls do.
	_, plain := e.runKey("", []string{"team:chat"}, "", "")
	status, info, body = keyInfo(t, e.url, plain, gateway.HeaderEndUser, "alice", gateway.HeaderRun, "r1")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, []string{"team:chat"}, info.Scopes)
	require.Empty(t, info.EndUser)
	require.Empty(t, info.Run)
	require.Empty(t, info.EndUserScope)
	require.Len(t, info.Budgets, 1)
}
