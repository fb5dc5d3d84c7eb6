package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
)

// refusedCase is a call the gateway must refuse before its admit: its
// code, what its message says, and (OpenAI's shape) its param.
type refusedCase struct {
	path, body string
	hdr        []string
	code, says string
	param      string
}

// requireRefused sends each call and checks it is refused 400 with its
// code in the API's shape, x-should-retry false, and that none of them
// reached the upstream or reserved or spent anything in scope.
func (e *env) requireRefused(secret, scope string, cases []refusedCase) {
	t := e.t
	t.Helper()
	before := len(e.fake.Calls())
	for _, c := range cases {
		resp := e.post(c.path, secret, c.body, c.hdr...)
		got := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %v: %s", c.body, c.hdr, got)
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"), got)
		require.Equal(t, c.code, resp.Header.Get(gateway.HeaderErrorCode), got)
		require.Empty(t, resp.Header.Get("X-Spendgate-Reservation-Id"), "refused before its admit: %s", got)
		var shape struct {
			Type  string
			Error struct {
				Type, Code, Message string
				Param               *string
			}
		}
		require.NoError(t, json.Unmarshal([]byte(got), &shape), got)
		require.Equal(t, "invalid_request_error", shape.Error.Type, got)
		require.Equal(t, c.code, shape.Error.Code, got)
		require.Contains(t, shape.Error.Message, c.says, got)
		if c.path == "/v1/messages" {
			require.Equal(t, "error", shape.Type, "Anthropic's shape: %s", got)
		} else if c.param != "" {
			require.NotNil(t, shape.Error.Param, got)
			require.Equal(t, c.param, *shape.Error.Param, got)
		}
	}
	require.Len(t, e.fake.Calls(), before, "a refused call never reaches the upstream")
	b := e.budget(scope)
	require.Equal(t, "0", b.Spent, scope)
	require.Equal(t, "0", b.Reserved, scope)
	require.Zero(t, b.Open, scope)
}

// requireCharged sends each call and checks it goes through: 200, the
// upstream got it, and scope's budget ends at the usage the fake reported,
// priced at the table's standard prices, nothing left reserved.
func (e *env) requireCharged(secret, scope string, calls [][2]string, hdr ...string) {
	t := e.t
	t.Helper()
	before := e.budget(scope)
	spent := events.MustMoney(before.Spent)
	n := len(e.fake.Calls())
	for _, c := range calls {
		resp := e.post(c[0], secret, c[1], hdr...)
		got := readAll(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c[1], got)
		requireSpendgateHeaders(t, resp)
	}
	got := e.fake.Calls()
	require.Len(t, got, n+len(calls))
	for _, c := range got[n:] {
		require.NotNil(t, c.Usage)
		spent = spent.Add(cost(*c.Usage))
	}
	b := e.budget(scope)
	requireMoney(t, spent, b.Spent, scope)
	require.Equal(t, "0", b.Reserved, scope)
	require.Zero(t, b.Open, scope)
}

// TestGateway_ServiceTierNotPricedIsRefused: a call asking for a service
// tier billed above the standard rate (OpenAI's "priority", about 2x, and
// "scale"), or any tier the gateway does not know, is refused 400
// unpriced_option before its admit, in the API's shape, naming the field
// and value; a tier in another letter case or given twice is refused as
// the priced fields are. The tiers billed at standard or less ("auto",
// "default", "flex"; Anthropic's "auto", "standard_only") go through,
// charged as before. How it can fail: without the check, "priority" is
// forwarded, the provider bills it at priority rates, and the gateway
// settles it at the standard price (the security review's repro: closed
// from usage at 0.0125 for a priority call), so the fake records the
// call and the budget is charged.
func TestGateway_ServiceTierNotPricedIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:tier")
	const chat, msgs = "/v1/chat/completions", `"messages":[{"role":"user","content":"hi"}]`
	withTier := func(model, tier string) string {
		return `{"model":"` + model + `","max_tokens":1000,` + msgs + `,"service_tier":` + tier + `}`
	}
	e.requireRefused(secret, "team:tier", []refusedCase{
		{path: chat, body: withTier("gpt-x", `"priority"`), code: gateway.CodeUnpricedOption, says: `"service_tier":"priority"`, param: "service_tier"},
		{path: chat, body: withTier("gpt-x", `"scale"`), code: gateway.CodeUnpricedOption, says: `"service_tier":"scale"`, param: "service_tier"},
		{path: chat, body: withTier("gpt-x", `"Priority"`), code: gateway.CodeUnpricedOption, says: `"service_tier":"Priority"`, param: "service_tier"},
		{path: chat, body: withTier("gpt-x", `"turbo-2027"`), code: gateway.CodeUnpricedOption, says: `drop service_tier, or use one the gateway prices ("auto", "default", "flex")`},
		{path: chat, body: withTier("gpt-x", `1`), code: gateway.CodeUnpricedOption, says: `"service_tier":1`},
		{path: "/v1/responses", body: `{"model":"gpt-x","input":"hi","service_tier":"priority"}`, code: gateway.CodeUnpricedOption, says: `"service_tier":"priority"`},
		{path: "/v1/completions", body: `{"model":"gpt-x","prompt":"hi","service_tier":"priority"}`, code: gateway.CodeUnpricedOption, says: `"service_tier":"priority"`},
		{path: "/v1/messages", body: withTier("claude-x", `"priority"`), code: gateway.CodeUnpricedOption, says: `use one the gateway prices ("auto", "standard_only")`},
		// Read as the priced fields are: no case variant, no second one.
		{path: chat, body: `{"model":"gpt-x","max_tokens":1000,` + msgs + `,"Service_Tier":"priority"}`, code: "invalid_request", says: `write it "service_tier"`},
		{path: chat, body: `{"model":"gpt-x","max_tokens":1000,` + msgs + `,"service_tier":"default","service_tier":"priority"}`, code: "invalid_request", says: `"service_tier" twice`},
		{path: "/v1/messages", body: `{"model":"claude-x","max_tokens":10,` + msgs + `,"service_tier":"auto","SERVICE_TIER":"priority"}`, code: "invalid_request", says: `both "service_tier" and "SERVICE_TIER"`},
	})
	var ok [][2]string
	for _, tier := range []string{`"auto"`, `"default"`, `"flex"`, `null`} {
		ok = append(ok, [2]string{chat, withTier("gpt-x", tier)})
	}
	ok = append(ok, [2]string{"/v1/responses", `{"model":"gpt-x","input":"hi","service_tier":"flex"}`})
	for _, tier := range []string{`"auto"`, `"standard_only"`} {
		ok = append(ok, [2]string{"/v1/messages", withTier("claude-x", tier)})
	}
	e.requireCharged(secret, "team:tier", ok)
}
