// Package fakellm is a fake LLM provider for tests and benchmarks: it
// answers the OpenAI API (chat completions, completions, embeddings,
// responses) and the Anthropic Messages API, plain and streaming, with
// deterministic usage, the way the providers shape their bodies and events.
//
// A request steers it with directives anywhere in its body (the prompt is
// the natural place, so an unmodified SDK can send them):
//
//	fake:status=500    answer with that error status (429 adds retry-after)
//	fake:nousage       report no usage (no usage object, no usage chunk)
//	fake:cut           cut the connection mid-answer (after two chunks)
//	fake:out=N         answer N output tokens (default DefaultOutputTokens)
//	fake:cached=N      report N of the input tokens as cached
//	fake:slow=DUR      wait DUR (a Go duration) before each streamed chunk
//	                   (a stream's headers are sent at once)
//	fake:serve=MODEL   name MODEL in the answer, as a provider (or a router
//	                   falling back) that served another model would
//
// Input tokens are InputTokens(body): a deterministic count below the
// body's length in bytes. Every answer's usage, and every call, is kept for
// Calls; GET /fake/calls serves them as JSON and POST /fake/reset forgets
// them.
package fakellm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultOutputTokens is the output of a call without fake:out.
const DefaultOutputTokens = 7

// maxBody bounds a request body.
const maxBody = 32 << 20

// Call is one request the fake answered.
type Call struct {
	Path   string `json:"path"`
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	Status int    `json:"status"`
	// Cut is set when the fake cut the connection mid-answer.
	Cut bool `json:"cut,omitempty"`
	// Usage is what the answer reported (nil when it reported none).
	Usage *Usage `json:"usage,omitempty"`
	// Billed is what the call would cost at the provider: its usage
	// whether reported or not; nil for an error status.
	Billed *Usage `json:"billed,omitempty"`
	// IncludeUsage is whether a streaming request asked for the usage
	// chunk (stream_options.include_usage).
	IncludeUsage bool `json:"include_usage,omitempty"`
	// Authorization is the credential the request carried.
	Authorization string `json:"authorization"`
}

// Usage is a call's tokens.
type Usage struct {
	Input  int64 `json:"input_tokens"`
	Output int64 `json:"output_tokens"`
	Cached int64 `json:"cached_input_tokens"`
}

// Server is the fake provider. Its zero value is not usable: call New.
type Server struct {
	key string
	mu  sync.Mutex
	// calls in arrival order.
	calls []Call
}

// New returns a fake that accepts key: as "Authorization: Bearer <key>"
// on the OpenAI paths, as "x-api-key: <key>" on /v1/messages.
func New(key string) *Server { return &Server{key: key} }

// Calls returns every call answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call{}, s.calls...)
}

// Reset forgets the calls.
func (s *Server) Reset() {
	s.mu.Lock()
	s.calls = nil
	s.mu.Unlock()
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

var directive = regexp.MustCompile(`fake:(status|nousage|cut|out|cached|slow|serve)(=([0-9a-zA-Z._/-]+))?`)

// steer is a request's directives.
type steer struct {
	status  int
	noUsage bool
	cut     bool
	out     int64
	cached  int64
	slow    time.Duration
	serve   string
}

func parseSteer(body []byte) steer {
	st := steer{out: DefaultOutputTokens}
	for _, m := range directive.FindAllSubmatch(body, -1) {
		v := string(m[3])
		switch string(m[1]) {
		case "status":
			st.status, _ = strconv.Atoi(v)
		case "nousage":
			st.noUsage = true
		case "cut":
			st.cut = true
		case "out":
			st.out, _ = strconv.ParseInt(v, 10, 64)
		case "cached":
			st.cached, _ = strconv.ParseInt(v, 10, 64)
		case "slow":
			st.slow, _ = time.ParseDuration(v)
		case "serve":
			st.serve = v
		}
	}
	return st
}

// InputTokens is the input a request body is billed: one token per eight
// bytes, at least one.
func InputTokens(body []byte) int64 { return int64(len(body))/8 + 1 }

// request is the part of every API's body the fake reads.
type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	EncodingFormat string          `json:"encoding_format"`
	Input          json.RawMessage `json:"input"`
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/fake/calls":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Calls())
		return
	case r.Method == http.MethodPost && r.URL.Path == "/fake/reset":
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	api := apiOf(r.URL.Path)
	if r.Method != http.MethodPost || api == "" {
		http.Error(w, `{"error":{"message":"no such path","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	auth := r.Header.Get("Authorization")
	if api == apiMessages {
		auth = r.Header.Get("X-Api-Key")
	} else {
		auth = strings.TrimPrefix(auth, "Bearer ")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		s.fail(w, api, http.StatusBadRequest, "body is not JSON")
		return
	}
	call := Call{Path: r.URL.Path, Model: req.Model, Stream: req.Stream, Authorization: auth,
		IncludeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	if auth != s.key {
		call.Status = http.StatusUnauthorized
		s.record(call)
		s.fail(w, api, http.StatusUnauthorized, "Incorrect API key provided: "+mask(auth))
		return
	}
	st := parseSteer(body)
	if st.status >= 400 {
		call.Status = st.status
		s.record(call)
		if st.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		s.fail(w, api, st.status, fmt.Sprintf("fake upstream answers %d", st.status))
		return
	}
	u := Usage{Input: InputTokens(body), Output: st.out, Cached: min(st.cached, InputTokens(body))}
	if api == apiEmbeddings {
		u.Output = 0
	}
	call.Status, call.Billed = http.StatusOK, &u
	if !st.noUsage && !st.cut {
		call.Usage = &u
	}
	call.Cut = st.cut
	s.record(call)
	if st.serve != "" {
		req.Model = st.serve // the answer names the model served
	}
	a := answer{req: req, u: u, st: st, w: w, api: api, gone: r.Context().Done()}
	if req.Stream && api != apiEmbeddings {
		a.stream()
		return
	}
	a.plain()
}

// APIs by path.
const (
	apiChat        = "chat"
	apiCompletions = "completions"
	apiEmbeddings  = "embeddings"
	apiResponses   = "responses"
	apiMessages    = "messages"
)

func apiOf(path string) string {
	switch path {
	case "/v1/chat/completions":
		return apiChat
	case "/v1/completions":
		return apiCompletions
	case "/v1/embeddings":
		return apiEmbeddings
	case "/v1/responses":
		return apiResponses
	case "/v1/messages":
		return apiMessages
	}
	return ""
}

// mask shows the end of a credential, as providers do in their 401s.
func mask(k string) string {
	if len(k) <= 4 {
		return "****"
	}
	return strings.Repeat("*", 8) + k[len(k)-4:]
}

func (s *Server) fail(w http.ResponseWriter, api string, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if api == apiMessages {
		typ := "api_error"
		switch status {
		case http.StatusTooManyRequests:
			typ = "rate_limit_error"
		case http.StatusUnauthorized:
			typ = "authentication_error"
		case http.StatusBadRequest:
			typ = "invalid_request_error"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
		return
	}
	typ := "server_error"
	switch status {
	case http.StatusTooManyRequests:
		typ = "requests"
	case http.StatusUnauthorized, http.StatusBadRequest:
		typ = "invalid_request_error"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

// answer writes one successful answer.
type answer struct {
	// gone closes when the caller left: a stream stops.
	gone <-chan struct{}
	req  request
	u    Usage
	st   steer
	w    http.ResponseWriter
	api  string
}

// text is the answer's content: one word per output token.
func (a answer) words() []string {
	out := make([]string, a.u.Output)
	for i := range out {
		out[i] = "tok" + strconv.Itoa(i)
		if i > 0 {
			out[i] = " " + out[i]
		}
	}
	return out
}

const created = 1767225600 // 2026-01-01T00:00:00Z

func (a answer) openaiUsage() map[string]any {
	return map[string]any{"prompt_tokens": a.u.Input, "completion_tokens": a.u.Output, "total_tokens": a.u.Input + a.u.Output,
		"prompt_tokens_details": map[string]any{"cached_tokens": a.u.Cached}}
}

func (a answer) responsesUsage() map[string]any {
	return map[string]any{"input_tokens": a.u.Input, "output_tokens": a.u.Output, "total_tokens": a.u.Input + a.u.Output,
		"input_tokens_details": map[string]any{"cached_tokens": a.u.Cached}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
}

func (a answer) anthropicUsage(output int64) map[string]any {
	return map[string]any{"input_tokens": a.u.Input - a.u.Cached, "output_tokens": output,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": a.u.Cached}
}

func (a answer) responseObject(status string, text string) map[string]any {
	r := map[string]any{"id": "resp_fake", "object": "response", "created_at": created, "status": status, "model": a.req.Model,
		"output": []any{map[string]any{"id": "msg_fake", "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}},
		"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}, "usage": nil, "error": nil, "incomplete_details": nil}
	if !a.st.noUsage && status == "completed" {
		r["usage"] = a.responsesUsage()
	}
	return r
}

// plain writes a non-streaming answer (cut: half of it, then the
// connection is dropped).
func (a answer) plain() {
	text := strings.Join(a.words(), "")
	var body map[string]any
	switch a.api {
	case apiChat:
		body = map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": created, "model": a.req.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text, "refusal": nil},
				"logprobs": nil, "finish_reason": "stop"}}}
		if !a.st.noUsage {
			body["usage"] = a.openaiUsage()
		}
	case apiCompletions:
		body = map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": created, "model": a.req.Model,
			"choices": []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": "stop"}}}
		if !a.st.noUsage {
			body["usage"] = a.openaiUsage()
		}
	case apiEmbeddings:
		// One vector per input: a string, or an array of strings or of
		// token arrays (an array of numbers is one tokenized input).
		n := 1
		var list []json.RawMessage
		if json.Unmarshal(a.req.Input, &list) == nil && len(list) > 0 {
			if first := bytes.TrimSpace(list[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
				n = len(list)
			}
		}
		data := make([]any, n)
		for i := range data {
			vec := []float32{0.25, -0.5, float32(i)}
			var e any = vec
			if a.req.EncodingFormat == "base64" {
				b := make([]byte, 4*len(vec))
				for j, f := range vec {
					binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
				}
				e = base64.StdEncoding.EncodeToString(b)
			}
			data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
		}
		body = map[string]any{"object": "list", "data": data, "model": a.req.Model}
		if !a.st.noUsage {
			body["usage"] = map[string]any{"prompt_tokens": a.u.Input, "total_tokens": a.u.Input}
		}
	case apiResponses:
		body = a.responseObject("completed", text)
	case apiMessages:
		body = map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": a.req.Model,
			"content": []any{map[string]any{"type": "text", "text": text}}, "stop_reason": "end_turn", "stop_sequence": nil}
		if !a.st.noUsage {
			body["usage"] = a.anthropicUsage(a.u.Output)
		}
	}
	b, _ := json.Marshal(body)
	a.w.Header().Set("Content-Type", "application/json")
	if a.st.cut {
		a.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		a.w.WriteHeader(http.StatusOK)
		_, _ = a.w.Write(b[:len(b)/2])
		flush(a.w)
		panic(http.ErrAbortHandler)
	}
	a.w.WriteHeader(http.StatusOK)
	_, _ = a.w.Write(b)
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// stream writes a streaming answer as server-sent events.
func (a answer) stream() {
	h := a.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	a.w.WriteHeader(http.StatusOK)
	// The headers leave at once, as a provider's do: a stream's first
	// chunk may be long in coming (fake:slow).
	flush(a.w)
	sent := 0
	event := func(name string, v any) {
		if a.st.cut && sent == 2 {
			flush(a.w)
			panic(http.ErrAbortHandler)
		}
		if a.st.slow > 0 {
			select {
			case <-time.After(a.st.slow):
			case <-a.gone:
			}
		}
		select {
		case <-a.gone:
			panic(http.ErrAbortHandler)
		default:
		}
		b, _ := json.Marshal(v)
		if name != "" {
			fmt.Fprintf(a.w, "event: %s\n", name)
		}
		fmt.Fprintf(a.w, "data: %s\n\n", b)
		flush(a.w)
		sent++
	}
	words := a.words()
	switch a.api {
	case apiChat, apiCompletions:
		chunk := func(delta string, finish any) map[string]any {
			if a.api == apiChat {
				d := map[string]any{"content": delta}
				if delta == "" && finish == nil {
					d = map[string]any{"role": "assistant", "content": ""}
				}
				return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": a.req.Model,
					"choices": []any{map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}}}
			}
			return map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": created, "model": a.req.Model,
				"choices": []any{map[string]any{"index": 0, "text": delta, "logprobs": nil, "finish_reason": finish}}}
		}
		include := a.req.StreamOptions != nil && a.req.StreamOptions.IncludeUsage && !a.st.noUsage
		with := func(c map[string]any) map[string]any {
			if include {
				c["usage"] = nil
			}
			return c
		}
		if a.api == apiChat {
			event("", with(chunk("", nil)))
		}
		for _, wd := range words {
			event("", with(chunk(wd, nil)))
		}
		event("", with(chunk("", "stop")))
		if include {
			c := chunk("", nil)
			c["choices"] = []any{}
			c["usage"] = a.openaiUsage()
			event("", c)
		}
		if a.st.cut && sent <= 2 {
			event("", nil) // cuts
		}
		fmt.Fprint(a.w, "data: [DONE]\n\n")
	case apiResponses:
		seq := 0
		ev := func(typ string, v map[string]any) {
			v["type"], v["sequence_number"] = typ, seq
			seq++
			event(typ, v)
		}
		ev("response.created", map[string]any{"response": a.responseObject("in_progress", "")})
		for _, wd := range words {
			ev("response.output_text.delta", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": wd})
		}
		ev("response.completed", map[string]any{"response": a.responseObject("completed", strings.Join(words, ""))})
	case apiMessages:
		start := map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": a.req.Model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": a.anthropicUsage(1)}
		event("message_start", map[string]any{"type": "message_start", "message": start})
		event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, wd := range words {
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": wd}})
		}
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}}
		if !a.st.noUsage {
			delta["usage"] = map[string]any{"output_tokens": a.u.Output}
		}
		event("message_delta", delta)
		event("message_stop", map[string]any{"type": "message_stop"})
	}
	flush(a.w)
}
