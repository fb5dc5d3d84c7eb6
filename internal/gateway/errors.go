package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/spendgate/spendgate/events"
)

// CodeExceedsBudgetLimit is the error code (400) of a call whose maximum
// cost is more than a budget's whole limit: a limit_reached denial that no
// wait can lift, unlike a 429. Its body still carries the ledger's denial.
const CodeExceedsBudgetLimit = "exceeds_budget_limit"

// CodeTooManyUnknownKeys is the error code (429, with Retry-After) of a
// request whose client address presented more unknown keys than
// Config.AuthFailures lets it: its key was not looked up.
const CodeTooManyUnknownKeys = "too_many_unknown_keys"

// CodeUnknownEndpoint is the error code (404) of a path under /v1/ that
// the gateway does not proxy.
const CodeUnknownEndpoint = "unknown_endpoint"

// callError is a call the gateway answers itself, shaped as the caller's
// provider shapes its errors so that its SDK raises its usual exception.
type callError struct {
	status int
	// typ is the OpenAI error type; code the OpenAI error code (and the
	// outcome label of the call's metrics).
	typ, code string
	msg       string
	// param, when set, is the request field the error is about: OpenAI's
	// "param" (null otherwise).
	param string
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int64
	// noRetry sends "x-should-retry: false": the OpenAI and Anthropic
	// SDKs then do not retry (a budget that frees up only at its
	// period's reset).
	noRetry bool
	// denial is the ledger's denial, sent as "spendgate" in the body.
	denial *events.Denial
}

// denialBody is the ledger's denial as an answer's "spendgate" carries
// it: every field of events.Denial, but no "scope" when no budget denied
// the call (unpriced_model: the pricing table did, for every scope), where
// the ledger's reply has "scope":"".
type denialBody struct {
	events.Denial
	// Scope shadows Denial.Scope (encoding/json takes the shallower field).
	Scope events.Scope `json:"scope,omitempty"`
}

// bodyOf is d as an answer carries it; nil for nil.
func bodyOf(d *events.Denial) *denialBody {
	if d == nil {
		return nil
	}
	return &denialBody{Denial: *d, Scope: d.Scope}
}

// paramOf is OpenAI's "param" of an error about field: nil (null) for "".
func paramOf(field string) *string {
	if field == "" {
		return nil
	}
	return &field
}

func (e *callError) Error() string { return e.code + ": " + e.msg }

func badRequest(msg string) *callError {
	return &callError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_request", msg: msg, noRetry: true}
}

// anthropicType is the Anthropic error type of an HTTP status.
func anthropicType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusConflict:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}

// HeaderErrorCode carries the stable code of an answer the gateway made
// (not the provider's): limit_reached, ledger_unavailable, key_disabled, ...
// In both APIs' shapes, so that a caller of the Anthropic API, whose error
// body has no code, can tell them apart.
const HeaderErrorCode = "X-Spendgate-Error-Code"

// write answers e in kind's shape:
//
//	OpenAI:    {"error":{"message","type","param":null,"code","spendgate":{denial}}}
//	Anthropic: {"type":"error","error":{"type","message","code"},"spendgate":{denial}}
//
// and the code in HeaderErrorCode too.
func (e *callError) write(w http.ResponseWriter, kind string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	retryAfter := e.retryAfter
	if retryAfter == 0 && e.code == "ledger_unavailable" {
		// A replica comes back (or another takes over) within seconds:
		// the SDKs honour a Retry-After of at most a minute, so their
		// retry comes a second later instead of after their own backoff.
		retryAfter = 1
	}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	}
	if e.noRetry {
		h.Set("X-Should-Retry", "false")
	}
	if e.code != "" {
		// In either shape: Anthropic's has no code of its own, and a
		// header reaches the caller whatever its SDK makes of the body.
		h.Set(HeaderErrorCode, e.code)
	}
	var body any
	if kind == KindAnthropic {
		body = struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
				Code    string `json:"code,omitempty"`
			} `json:"error"`
			Spendgate *denialBody `json:"spendgate,omitempty"`
		}{Type: "error", Error: struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code,omitempty"`
		}{anthropicType(e.status), e.msg, e.code}, Spendgate: bodyOf(e.denial)}
	} else {
		body = struct {
			Error struct {
				Message   string      `json:"message"`
				Type      string      `json:"type"`
				Param     *string     `json:"param"`
				Code      string      `json:"code"`
				Spendgate *denialBody `json:"spendgate,omitempty"`
			} `json:"error"`
		}{Error: struct {
			Message   string      `json:"message"`
			Type      string      `json:"type"`
			Param     *string     `json:"param"`
			Code      string      `json:"code"`
			Spendgate *denialBody `json:"spendgate,omitempty"`
		}{Message: e.msg, Type: e.typ, Param: paramOf(e.param), Code: e.code, Spendgate: bodyOf(e.denial)}}
	}
	// Not escaped for HTML: a message says "Bearer <key>" as written.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body)
	w.WriteHeader(e.status)
	_, _ = w.Write(b.Bytes())
}
