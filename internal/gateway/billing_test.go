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

// TestGateway_HostedToolsAreRefused: a call naming a tool the provider
// bills per call or per use beyond its tokens (OpenAI's hosted tools,
// Chat Completions' web_search_options, Anthropic's server tools), or a
// tool type the gateway does not know, is refused 400 unpriced_option
// before its admit, naming the tool; a tool's "type" in another letter
// case or given twice is refused as the priced fields are. Function
// tools (OpenAI's "function" and "custom", Anthropic's untyped, "custom"
// and its client tools such as bash_20250124) are tokens alone and go
// through, charged as before. How it can fail: without the check the
// hosted tools are forwarded, their per-call fees reserved and settled
// by nothing, so the fake records the calls and the budget is charged.
func TestGateway_HostedToolsAreRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:tools")
	const chat, msgs = "/v1/chat/completions", `"messages":[{"role":"user","content":"hi"}]`
	const fn = `{"type":"function","name":"f","parameters":{"type":"object"}}`
	responses := func(tools string) string {
		return `{"model":"gpt-x","input":"hi","max_output_tokens":64,"tools":[` + tools + `]}`
	}
	messages := func(tools string) string {
		return `{"model":"claude-x","max_tokens":64,` + msgs + `,"tools":[` + tools + `]}`
	}
	const code = gateway.CodeUnpricedOption
	var cases []refusedCase
	for _, typ := range []string{"web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation", "computer_use_preview", "mcp", "tool_search_2027"} {
		cases = append(cases, refusedCase{path: "/v1/responses", body: responses(fn + `,{"type":"` + typ + `"}`), code: code,
			says: `tools[1] of type "` + typ + `"`, param: "tools"})
	}
	for _, typ := range []string{"web_search_20250305", "web_fetch_20250910", "code_execution_20250522", "bash_server", "function"} {
		cases = append(cases, refusedCase{path: "/v1/messages", body: messages(`{"name":"f","input_schema":{"type":"object"}},{"type":"` + typ + `","name":"x"}`), code: code,
			says: `tools[1] of type "` + typ + `"`})
	}
	cases = append(cases,
		refusedCase{path: chat, body: `{"model":"gpt-x","max_tokens":64,` + msgs + `,"web_search_options":{}}`, code: code, says: "drop web_search_options", param: "web_search_options"},
		refusedCase{path: chat, body: `{"model":"gpt-x","max_tokens":64,` + msgs + `,"tools":[{"type":"web_search"}]}`, code: code, says: `use a function tool ("type":"function")`},
		refusedCase{path: chat, body: `{"model":"gpt-x","max_tokens":64,` + msgs + `,"tools":[{"function":{"name":"f"}}]}`, code: code, says: `tools[0] with no type`},
		refusedCase{path: "/v1/responses", body: responses(`{"type":7}`), code: code, says: `tools[0] of type 7`},
		// Read as the priced fields are: no case variant, no second one.
		refusedCase{path: "/v1/responses", body: responses(`{"type":"function","Type":"web_search"}`), code: "invalid_request", says: `both "tools[0].type" and "tools[0].Type"`},
		refusedCase{path: "/v1/responses", body: responses(`{"TYPE":"web_search"}`), code: "invalid_request", says: `write it "tools[0].type"`},
		refusedCase{path: "/v1/messages", body: messages(`{"name":"f","type":"custom","type":"web_search_20250305"}`), code: "invalid_request", says: `"tools[0].type" twice`},
		refusedCase{path: "/v1/responses", body: `{"model":"gpt-x","input":"hi","Tools":[{"type":"web_search"}]}`, code: "invalid_request", says: `write it "tools"`},
		refusedCase{path: chat, body: `{"model":"gpt-x",` + msgs + `,"Web_Search_Options":{}}`, code: "invalid_request", says: `write it "web_search_options"`},
		refusedCase{path: "/v1/responses", body: `{"model":"gpt-x","input":"hi","tools":{"type":"web_search"}}`, code: "invalid_request", says: "tools must be an array"},
	)
	e.requireRefused(secret, "team:tools", cases)

	e.requireCharged(secret, "team:tools", [][2]string{
		{chat, `{"model":"gpt-x","max_tokens":64,` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"web_search_options":null}`},
		{"/v1/responses", responses(fn + `,{"type":"custom","name":"g"}`)},
		{"/v1/responses", `{"model":"gpt-x","input":"hi","tools":[]}`},
		{"/v1/messages", messages(`{"name":"f","input_schema":{"type":"object"}},{"type":"custom","name":"g","input_schema":{"type":"object"}},` +
			`{"type":"bash_20250124","name":"bash"},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"}`)},
	})
}

// TestGateway_LongContextBetaIsRefused: a call whose anthropic-beta header
// names context-1m (Anthropic's 1M-token context, its input past 200K
// tokens billed at about 2x), alone, in a list or in another letter case,
// is refused 400 unpriced_option before its admit, on any endpoint, in
// its API's shape; other betas are forwarded and charged as before. How
// it can fail: without the check the header is forwarded (it is one the
// gateway passes) and the fake records the call.
func TestGateway_LongContextBetaIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:beta")
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	const claude = `{"model":"claude-x","max_tokens":64,` + msgs + `}`
	const code = gateway.CodeUnpricedOption
	var cases []refusedCase
	for _, v := range []string{"context-1m-2025-08-07", "interleaved-thinking-2025-05-14, context-1m-2025-08-07", "Context-1M-2026-01-01"} {
		cases = append(cases, refusedCase{path: "/v1/messages", body: claude, hdr: []string{"Anthropic-Beta", v}, code: code,
			says: "drop it from the anthropic-beta header"})
	}
	cases = append(cases, refusedCase{path: "/v1/chat/completions", body: `{"model":"gpt-x","max_tokens":64,` + msgs + `}`,
		hdr: []string{"Anthropic-Beta", "context-1m-2025-08-07"}, code: code, says: `anthropic-beta "context-1m-2025-08-07"`, param: "anthropic-beta"})
	e.requireRefused(secret, "team:beta", cases)

	e.requireCharged(secret, "team:beta", [][2]string{{"/v1/messages", claude}},
		"Anthropic-Beta", "interleaved-thinking-2025-05-14,token-efficient-tools-2025-02-19")
}
