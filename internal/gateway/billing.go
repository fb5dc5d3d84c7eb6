package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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
	return nil
}

// billingReads are the body's fields checkBilling reads, for readOnce.
func (a *api) billingReads() []string {
	return []string{"service_tier"}
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
