package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/spendgate/spendgate/events"
)

// api is one proxied endpoint: where it is, which provider serves it, and
// how its request names the output it may produce.
type api struct {
	// name labels metrics and log lines and is the reservation's
	// "endpoint" metadata.
	name string
	path string
	kind string
	// maxOut are the body fields naming the most output tokens, in
	// precedence order; none for embeddings (noOutput).
	maxOut   []string
	noOutput bool
	// mult are the body fields that multiply the output (n, best_of).
	mult []string
	// usageChunk: a streaming answer reports its usage in a last chunk
	// that only stream_options.include_usage asks for.
	usageChunk bool
}

// The proxied endpoints.
var apis = []*api{
	{name: "chat.completions", path: "/v1/chat/completions", kind: KindOpenAI, maxOut: []string{"max_completion_tokens", "max_tokens"}, mult: []string{"n"}, usageChunk: true},
	{name: "completions", path: "/v1/completions", kind: KindOpenAI, maxOut: []string{"max_tokens"}, mult: []string{"n", "best_of"}, usageChunk: true},
	{name: "embeddings", path: "/v1/embeddings", kind: KindOpenAI, noOutput: true},
	{name: "responses", path: "/v1/responses", kind: KindOpenAI, maxOut: []string{"max_output_tokens"}},
	{name: "messages", path: "/v1/messages", kind: KindAnthropic, maxOut: []string{"max_tokens"}},
}

// call is a parsed request.
type call struct {
	api    *api
	model  string
	stream bool
	// input is the estimated input (estimateInput); maxOutput the most
	// output the call may produce.
	input, maxOutput int64
	// body is what goes upstream: the caller's, or with
	// stream_options.include_usage added (stripUsage).
	body       []byte
	stripUsage bool
	// endUser is who the caller says the call is for: OpenAI's "user",
	// Anthropic's metadata.user_id ("" when the body names none), or the
	// X-Spendgate-End-User header; endUserScope is its scope under a key
	// with an end-user kind (resolveEndUser).
	endUser, endUserScope string
	// run is the run the X-Spendgate-Run header names, and runScope its
	// scope under a key with a run kind (resolveRun).
	run, runScope string
}

// HeaderEndUser names the end user of a call, for a key with an end-user
// scope kind; it takes precedence over the body's "user" (OpenAI) or
// metadata.user_id (Anthropic).
const HeaderEndUser = "X-Spendgate-End-User"

// resolveEndUser sets the call's end-user scope under key: "<kind>:<end
// user>" for a key with an end-user kind, from header (when set) or the
// body. A key without one ignores both. Errors: 400 end_user_required (a
// key with a kind, a call naming no end user), 400 invalid_end_user.
func (c *call) resolveEndUser(key events.APIKeyResolveReply, header string) *callError {
	if key.EndUser == "" {
		return nil
	}
	if header != "" {
		c.endUser = header
	}
	if c.endUser == "" {
		return &callError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "end_user_required", noRetry: true,
			msg: "spendgate: key " + key.ID + " admits every call against its end user's budget (" + key.EndUser + ":<end user>): name the end user in " + c.endUserField() + " or the " + HeaderEndUser + " header"}
	}
	scope, cerr := endUserScope(key, c.endUser)
	if cerr != nil {
		return cerr
	}
	c.endUserScope = scope
	return nil
}

// endUserScope is the scope of endUser under key's end-user kind. Errors:
// 400 invalid_end_user.
func endUserScope(key events.APIKeyResolveReply, endUser string) (string, *callError) {
	return callScope(key.EndUser, endUser, "end user", "invalid_end_user")
}

// callScope is the scope "<kind>:<name>" of a call's end user or run
// (what). Errors: 400 code, when no scope can hold name.
func callScope(kind, name, what, code string) (string, *callError) {
	scope := kind + ":" + name
	if _, err := events.ParseScope(scope); err != nil {
		return "", &callError{status: http.StatusBadRequest, typ: "invalid_request_error", code: code, noRetry: true,
			msg: fmt.Sprintf("spendgate: %s %q cannot name a scope: %s", what, name, err.(*events.Error).Message)}
	}
	return scope, nil
}

// HeaderRun names the run (an agent run, a job) of a call, for a key with
// a run scope kind. A request body has no field for it.
const HeaderRun = "X-Spendgate-Run"

// resolveRun sets the call's run scope under key: "<kind>:<run>" for a
// key with a run kind, from header. A key without one ignores it. Errors:
// 400 run_required (a key with a kind, a call naming no run), 400
// invalid_run.
func (c *call) resolveRun(key events.APIKeyResolveReply, header string) *callError {
	if key.Run == "" {
		return nil
	}
	if header == "" {
		return &callError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "run_required", noRetry: true,
			msg: "spendgate: key " + key.ID + " admits every call against its run's budget (" + key.Run + ":<run>): name the run in the " + HeaderRun + " header"}
	}
	scope, cerr := runScope(key, header)
	if cerr != nil {
		return cerr
	}
	c.run, c.runScope = header, scope
	return nil
}

// runScope is the scope of run under key's run kind. Errors: 400
// invalid_run.
func runScope(key events.APIKeyResolveReply, run string) (string, *callError) {
	return callScope(key.Run, run, "run", "invalid_run")
}

// endUserField is where the call's body names its end user.
func (c *call) endUserField() string {
	if c.api.kind == KindAnthropic {
		return "metadata.user_id"
	}
	return `"user"`
}

// parse reads a request body. Errors: a *callError (400).
func (a *api) parse(body []byte, cfg *Config) (*call, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, badRequest("the request body is not a JSON object")
	}
	if err := readOnce(body, "", a.reads()); err != nil {
		return nil, err
	}
	if err := a.checkBilling(fields); err != nil {
		return nil, err
	}
	c := &call{api: a, body: body}
	if err := json.Unmarshal(fields["model"], &c.model); err != nil || c.model == "" {
		return nil, badRequest("model is required: a model name string")
	}
	if err := events.ValidateModel(c.model); err != nil {
		return nil, badRequest(fmt.Sprintf("model %q cannot be priced: %s", c.model, err.(*events.Error).Message))
	}
	if raw, ok := fields["stream"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.stream); err != nil {
			return nil, badRequest("stream must be true or false")
		}
	}
	mult := int64(1)
	for _, f := range a.mult {
		n, ok, err := intField(fields, f)
		if err != nil || ok && n < 1 {
			return nil, badRequest(f + " must be a whole number of at least 1")
		}
		if ok && n > mult {
			mult = n
		}
	}
	if !a.noOutput {
		c.maxOutput = -1
		for _, f := range a.maxOut {
			n, ok, err := intField(fields, f)
			if err != nil || ok && n < 1 {
				// 0 too: servers that read "max_completion_tokens or
				// max_tokens" take 0 for no limit at all, where the
				// gateway would reserve no output.
				return nil, badRequest(f + " must be a whole number of tokens, at least 1")
			}
			if ok && n > c.maxOutput {
				// Both named (max_completion_tokens and the older
				// max_tokens): the larger, since a provider or router
				// may honour either, and the reservation must hold what
				// it may produce.
				c.maxOutput = n
			}
		}
		if c.maxOutput < 0 {
			c.maxOutput = cfg.maxOutput(c.model)
		}
		if c.maxOutput > events.MaxTokens/mult {
			return nil, badRequest(fmt.Sprintf("the call may produce more than %d output tokens", events.MaxTokens))
		}
		c.maxOutput *= mult
	}
	if err := c.readEndUser(fields); err != nil {
		return nil, err
	}
	c.input = estimateInput(body, cfg.ImageTokens)
	if a.usageChunk && c.stream {
		opts := map[string]json.RawMessage{}
		if raw, ok := fields["stream_options"]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &opts); err != nil {
				return nil, badRequest("stream_options must be an object")
			}
			if err := readOnce(raw, "stream_options.", []string{"include_usage"}); err != nil {
				return nil, err
			}
		}
		var include bool
		if raw, ok := opts["include_usage"]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &include); err != nil {
				return nil, badRequest("stream_options.include_usage must be true or false")
			}
		}
		if !include {
			// The usage chunk is asked for here and taken out of what
			// the caller sees (see observe).
			opts["include_usage"] = json.RawMessage("true")
			fields["stream_options"], _ = json.Marshal(opts)
			b, err := json.Marshal(fields)
			if err != nil {
				return nil, badRequest("the request body cannot be re-encoded")
			}
			c.body, c.stripUsage = b, true
		}
	}
	return c, nil
}

// readEndUser reads the end user a body names: "user" (OpenAI), or
// metadata.user_id (Anthropic).
func (c *call) readEndUser(fields map[string]json.RawMessage) error {
	raw, field := fields["user"], "user"
	if c.api.kind == KindAnthropic {
		raw, field = nil, "metadata.user_id"
		var md map[string]json.RawMessage
		if m, ok := fields["metadata"]; ok && !isNull(m) {
			if err := json.Unmarshal(m, &md); err != nil {
				return badRequest("metadata must be an object")
			}
			if err := readOnce(m, "metadata.", []string{"user_id"}); err != nil {
				return err
			}
			raw = md["user_id"]
		}
	}
	if raw == nil || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, &c.endUser); err != nil {
		return badRequest(field + " must be a string")
	}
	return nil
}

// reads are the body's fields the gateway reads to price and attribute a
// call, or to refuse an option it does not price (billingReads).
func (a *api) reads() []string {
	r := append([]string{"model", "stream", "stream_options", "user", "metadata"}, a.mult...)
	r = append(r, a.billingReads()...)
	return append(r, a.maxOut...)
}

// readOnce refuses an object (the body, or the object at path in it) that
// an upstream could read differently from the gateway, priced one way and
// served another: a key given twice (parsers keep the first or the last),
// two keys that differ only in letter case, or a key that is one of reads
// but for its case. Go's encoding/json, and the OpenAI-compatible servers
// built on it, match a key to a field regardless of case, so an upstream
// could serve "Model" where the gateway priced "model". raw has been
// decoded as an object already.
func readOnce(raw []byte, path string, reads []string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return badRequest("the request body is not a JSON object")
	}
	read := make(map[string]string, len(reads))
	for _, f := range reads {
		read[foldKey(f)] = f
	}
	seen := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return badRequest("the request body is not a JSON object")
		}
		key, _ := t.(string)
		folded := foldKey(key)
		if prev, ok := seen[folded]; ok {
			if prev == key {
				return badRequest(fmt.Sprintf("the request body names %q twice", path+key))
			}
			return badRequest(fmt.Sprintf("the request body names both %q and %q: an upstream may read either", path+prev, path+key))
		}
		seen[folded] = key
		if f, ok := read[folded]; ok && f != key {
			return badRequest(fmt.Sprintf("the request body names %q: write it %q, as the gateway prices the call by it", path+key, path+f))
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return badRequest("the request body is not a JSON object")
		}
	}
	return nil
}

// foldKey is key with each letter replaced by the least of its case
// folding (unicode.SimpleFold): keys equal under case folding, as Go's
// encoding/json matches them (the Kelvin sign with k, long s with s), have
// the same foldKey.
func foldKey(key string) string {
	var b strings.Builder
	for _, r := range key {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// intField reads an integer field: ok false when absent or null.
func intField(fields map[string]json.RawMessage, name string) (n int64, ok bool, err error) {
	raw, present := fields[name]
	if !present || isNull(raw) {
		return 0, false, nil
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false, err
	}
	return n, true, nil
}

// estimateInput bounds a request's input tokens without a tokenizer: one
// token per byte of the body (a byte-level tokenizer makes at most one
// token per UTF-8 byte, and the JSON around the text is more bytes than
// the chat template's tokens), but image tokens for each image or file the
// body names as the value of an image field ("url", "image_url": OpenAI's
// image parts, Anthropic's URL sources) or a "file_id": an inline image
// (inlineImage) instead of its base64 bytes, an http(s) URL or a file id
// instead of the reference's bytes when they are fewer. At least 1, at
// most events.MaxTokens. Text is bounded; an image or file by reference is
// not (its size is unknown here): image is what one counts.
//
// Text that merely starts "data:image/" is text, and is tokenized as text:
// discounting it let one caller reserve 3,000 tokens for a 300 KB prompt
// (37,000 tokens) however many calls ran.
func estimateInput(body []byte, image int64) int64 {
	n := int64(len(body))
	var key []byte // the last string, while a colon may make it a key
	colon := false
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			end := closingQuote(body[i+1:])
			if end < 0 {
				return max(1, min(n, events.MaxTokens))
			}
			s := body[i+1 : i+1+end]
			if colon {
				switch imageRef(key, s) {
				case refInline:
					n += image - int64(end+2)
				case refOther:
					n += max(0, image-int64(end+2))
				}
				key, colon = nil, false
			} else {
				key = s
			}
			i += end + 1
		case ':':
			colon = key != nil
		case ' ', '\t', '\r', '\n':
		default:
			key, colon = nil, false
		}
	}
	return max(1, min(n, events.MaxTokens))
}

// Kinds of image or file reference (imageRef).
const (
	refNone = iota
	refInline
	refOther
)

// imageRef tells what the string s, the value of key, names: an inline
// image, an image or file by reference, or neither.
func imageRef(key, s []byte) int {
	switch string(key) {
	case "url", "image_url":
		switch {
		case inlineImage(s):
			return refInline
		case bytes.HasPrefix(s, []byte("https:")) || bytes.HasPrefix(s, []byte("http:")):
			return refOther
		}
	case "file_id":
		return refOther
	}
	return refNone
}

// inlineImage reports whether s, a JSON string's raw content, is a base64
// data URL of an image: "data:image/" and a subtype, ";base64,", then
// base64 alone (a "/" may be escaped as "\/").
func inlineImage(s []byte) bool {
	rest, ok := bytes.CutPrefix(s, []byte("data:image/"))
	if !ok {
		return false
	}
	subtype, data, ok := bytes.Cut(rest, []byte(";base64,"))
	if !ok || len(subtype) == 0 || len(subtype) > 64 {
		return false
	}
	for _, c := range subtype {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '+' || c == '-') {
			return false
		}
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/', c == '=':
		case c == '\\' && i+1 < len(data) && data[i+1] == '/':
			i++
		default:
			return false
		}
	}
	return true
}

// closingQuote returns the index of the quote that ends the JSON string
// whose content starts at s[0], or -1.
func closingQuote(s []byte) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// usage is what a provider reported.
type usage struct {
	input, output, cached int64
}

// rawUsage reads every provider's usage object.
type rawUsage struct {
	// OpenAI chat, completions, embeddings.
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	PromptDetails    *struct {
		Cached int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// OpenAI responses, Anthropic messages.
	InputTokens  *int64 `json:"input_tokens"`
	OutputTokens *int64 `json:"output_tokens"`
	InputDetails *struct {
		Cached int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	// Anthropic's cache: written (priced here at the input price; the
	// pricing table has no cache-write price) and read.
	CacheCreation int64 `json:"cache_creation_input_tokens"`
	CacheRead     int64 `json:"cache_read_input_tokens"`
}

// usageOf reads a usage object of a's provider: ok false when raw is
// null, not an object, or names no input.
func (a *api) usageOf(raw json.RawMessage) (usage, bool) {
	if len(raw) == 0 || isNull(raw) {
		return usage{}, false
	}
	var r rawUsage
	if err := json.Unmarshal(raw, &r); err != nil {
		return usage{}, false
	}
	var u usage
	switch {
	case a.kind == KindAnthropic:
		if r.InputTokens == nil {
			return usage{}, false
		}
		u.input = *r.InputTokens + r.CacheCreation + r.CacheRead
		u.cached = r.CacheRead
		if r.OutputTokens != nil {
			u.output = *r.OutputTokens
		}
	case r.PromptTokens != nil:
		u.input, u.output = *r.PromptTokens, r.CompletionTokens
		if r.PromptDetails != nil {
			u.cached = r.PromptDetails.Cached
		}
	case r.InputTokens != nil:
		u.input = *r.InputTokens
		if r.OutputTokens != nil {
			u.output = *r.OutputTokens
		}
		if r.InputDetails != nil {
			u.cached = r.InputDetails.Cached
		}
	default:
		return usage{}, false
	}
	if events.ValidateUsage(events.Usage{InputTokens: u.input, OutputTokens: u.output, CachedInputTokens: u.cached}) != nil {
		return usage{}, false
	}
	return u, true
}

// bodyUsage reads the usage of a plain (not streamed) answer: the top
// level "usage" of the whole body, or, when only its tail was kept
// (complete false), of the last top-level-looking "usage" key in the tail.
// served is the whole body's top-level "model" ("" from a tail).
func (a *api) bodyUsage(body []byte, whole bool) (u usage, served string, ok bool) {
	if whole {
		var top struct {
			Usage json.RawMessage `json:"usage"`
			Model string          `json:"model"`
		}
		if json.Unmarshal(body, &top) != nil {
			return usage{}, "", false
		}
		u, ok = a.usageOf(top.Usage)
		return u, top.Model, ok
	}
	key := []byte(`"usage"`)
	for end := len(body); ; {
		i := bytes.LastIndex(body[:end], key)
		if i < 0 {
			return usage{}, "", false
		}
		end = i
		rest := bytes.TrimLeft(body[i+len(key):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		var raw json.RawMessage
		if json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&raw) != nil {
			continue
		}
		if u, ok := a.usageOf(raw); ok {
			return u, "", true
		}
	}
}

// otherModel reports whether an answer naming served was served by
// another model than the one priced: not when the answer names none, the
// priced one, or a dated version of it (the providers answer "gpt-4o" with
// "gpt-4o-2024-08-06", "claude-3-5-sonnet-latest" with
// "claude-3-5-sonnet-20241022"). A router's fallback, or an upstream
// that substitutes, answers with another name: its tokens were billed at
// that model's prices while the ledger priced them at the one asked for.
func otherModel(priced, served string) bool {
	if served == "" || served == priced {
		return false
	}
	base := strings.TrimSuffix(priced, "-latest")
	date, ok := strings.CutPrefix(served, base+"-")
	if !ok || date == "" {
		return true
	}
	for _, r := range date {
		if (r < '0' || r > '9') && r != '-' {
			return true
		}
	}
	return false
}
