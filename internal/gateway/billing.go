package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// CodeUnpricedOption is the error code (400) of a call that asks the
// provider for a billing option the gateway does not price: a service
// tier billed above the standard rate (OpenAI's "priority", "scale"), a
// hosted tool billed per call (web search, code execution, ...), a beta
// with premium pricing (Anthropic's context-1m). The gateway prices every
// call at the pricing table's standard rates, so such a call could cost
// more than it reserves and settles: unpriced is denied, never sent.
const CodeUnpricedOption = "unpriced_option"

// serviceTiers are the service_tier values the gateway forwards, by
// provider: those billed at the standard rate or less. Any other value,
// a future tier included, is refused (fail closed).
//
// OpenAI: "auto" (the project's setting, as when the field is absent),
// "default" (standard), "flex" (cheaper than standard: reserving and
// settling it at standard over-charges, the safe side). Refused:
// "priority" (about 1.75-2x standard), "scale" (Scale Tier units).
// Anthropic: "auto" (the default) and "standard_only".
var serviceTiers = map[string][]string{
	KindOpenAI:    {"auto", "default", "flex"},
	KindAnthropic: {"auto", "standard_only"},
}

// unpricedOption answers a call that asks for a billing option the
// gateway does not price: 400 CodeUnpricedOption naming the field (param,
// in OpenAI's shape) and saying what to do.
func unpricedOption(param, msg string) *callError {
	return &callError{status: http.StatusBadRequest, typ: "invalid_request_error", code: CodeUnpricedOption, param: param,
		msg: "spendgate: " + msg + "; the gateway prices calls at the standard rate only, and a call it cannot price is not sent", noRetry: true}
}

// checkBilling refuses a body that asks for a billing option the gateway
// does not price (CodeUnpricedOption). fields is the body, decoded, whose
// keys readOnce has checked (no duplicate, no case variant of the fields
// read here).
func (a *api) checkBilling(fields map[string]json.RawMessage) error {
	if raw, ok := fields["service_tier"]; ok && !isNull(raw) {
		allowed := serviceTiers[a.kind]
		var tier string
		if json.Unmarshal(raw, &tier) != nil || !slices.Contains(allowed, tier) {
			return unpricedOption("service_tier", fmt.Sprintf("the gateway does not price \"service_tier\":%s, which the provider may bill above the standard rate: "+
				"drop service_tier, or use one the gateway prices (%s)", clip(raw), quoteAll(allowed)))
		}
	}
	if a.kind == KindOpenAI {
		if raw, ok := fields["web_search_options"]; ok && !isNull(raw) {
			return unpricedOption("web_search_options", "the gateway does not price web_search_options: the provider bills web search per call, "+
				"beyond the call's tokens: drop web_search_options")
		}
	}
	raw, ok := fields["tools"]
	if !ok || isNull(raw) {
		return nil
	}
	var tools []json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return badRequest("tools must be an array")
	}
	for i, t := range tools {
		var tool map[string]json.RawMessage
		if json.Unmarshal(t, &tool) != nil || tool == nil {
			return badRequest(fmt.Sprintf("tools[%d] must be an object", i))
		}
		path := fmt.Sprintf("tools[%d].", i)
		if err := readOnce(t, path, []string{"type"}); err != nil {
			return err
		}
		if a.pricedTool(tool["type"]) {
			continue
		}
		what, use := `of type `+clip(tool["type"]), `a function tool ("type":"function")`
		if tool["type"] == nil {
			what = "with no type"
		}
		if a.kind == KindAnthropic {
			use = `a client tool (no type, or "type":"custom")`
		}
		return unpricedOption("tools", fmt.Sprintf("the gateway does not price tools[%d] %s: the provider may bill a hosted or server tool per call, beyond the call's tokens: "+
			"drop it, or use %s", i, what, use))
	}
	return nil
}

// anthropicClientTools are the type prefixes of the tools Anthropic
// defines that the caller's code runs, each followed by its version's
// date (bash_20250124, text_editor_20250728, computer_20250124,
// memory_20250818): billed as tokens only, like a custom tool.
var anthropicClientTools = []string{"bash_", "text_editor_", "computer_", "memory_"}

// pricedTool reports whether a tool of type typ (raw JSON; nil when the
// tool names none) is billed as tokens alone, which the gateway prices:
// OpenAI's "function" and "custom" tools, which the caller's code runs;
// Anthropic's tools without a type or "custom", and the client tools it
// defines (anthropicClientTools). A hosted tool (OpenAI's web_search,
// file_search, code_interpreter, image_generation, computer_use_preview,
// mcp, ...) or a server tool (Anthropic's web_search_20250305,
// web_fetch_..., code_execution_...), billed per call or per use, is not;
// nor is any type the gateway does not know (fail closed).
func (a *api) pricedTool(typ json.RawMessage) bool {
	if typ == nil || isNull(typ) {
		return a.kind == KindAnthropic
	}
	var t string
	if json.Unmarshal(typ, &t) != nil {
		return false
	}
	if a.kind == KindOpenAI {
		return t == "function" || t == "custom"
	}
	if t == "custom" {
		return true
	}
	for _, p := range anthropicClientTools {
		if date, ok := strings.CutPrefix(t, p); ok && date != "" && strings.Trim(date, "0123456789") == "" {
			return true
		}
	}
	return false
}

// billingReads are the body's fields checkBilling reads, for readOnce.
func (a *api) billingReads() []string {
	if a.kind == KindOpenAI {
		return []string{"service_tier", "tools", "web_search_options"}
	}
	return []string{"service_tier", "tools"}
}

// clip is raw JSON for a message: at most 64 bytes of it.
func clip(raw json.RawMessage) string {
	const most = 64
	if len(raw) > most {
		return string(raw[:most]) + "..."
	}
	return string(raw)
}

// quoteAll is vs quoted and joined by ", ".
func quoteAll(vs []string) string {
	s := ""
	for i, v := range vs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", v)
	}
	return s
}

// unpricedBetas are the prefixes of the Anthropic betas that turn on
// pricing the gateway does not have: context-1m-2025-08-07 bills the input
// of a call past 200K tokens at about twice the standard rate (and its
// output at 1.5x). Other betas are forwarded: they change what a call may
// do, not the rate of its tokens, and a server tool one of them enables is
// refused by its entry in tools (checkBilling).
var unpricedBetas = []string{"context-1m"}

// checkBetas refuses a call whose anthropic-beta header (values, each a
// comma-separated list) names a beta of unpricedBetas, matched in any
// letter case: 400 CodeUnpricedOption. Any endpoint: an OpenAI-shaped
// upstream may be a router to Anthropic that passes the header on.
func checkBetas(values []string) *callError {
	for _, v := range values {
		for beta := range strings.SplitSeq(v, ",") {
			beta = strings.TrimSpace(beta)
			for _, p := range unpricedBetas {
				if len(beta) >= len(p) && strings.EqualFold(beta[:len(p)], p) {
					return unpricedOption("anthropic-beta", fmt.Sprintf("the gateway does not price the anthropic-beta %q: it bills a long context's input above the standard rate: "+
						"drop it from the anthropic-beta header (other betas are forwarded)", beta))
				}
			}
		}
	}
	return nil
}
