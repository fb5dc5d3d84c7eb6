package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// streamReader reads a server-sent event stream one event at a time, with
// no bound on a line's length but the events' own.
type streamReader struct {
	br  *bufio.Reader
	buf []byte
}

func newStreamReader(r io.Reader) *streamReader {
	return &streamReader{br: bufio.NewReaderSize(r, 32<<10)}
}

// eventWaiting reports whether a whole event has already arrived after
// the one last read.
func (s *streamReader) eventWaiting() bool {
	b, _ := s.br.Peek(s.br.Buffered())
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\r\n\r\n"))
}

// next returns the raw bytes of the next event, its blank line included,
// valid until the next call. At the stream's end it returns what is left
// (an event the stream broke off in, or nothing) with the reader's error
// (io.EOF for a stream that ended cleanly).
func (s *streamReader) next() ([]byte, error) {
	s.buf = s.buf[:0]
	midLine := false
	for {
		line, err := s.br.ReadSlice('\n')
		s.buf = append(s.buf, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			midLine = true
			continue
		}
		if err != nil {
			return s.buf, err
		}
		blank := !midLine && (len(line) == 1 || len(line) == 2 && line[0] == '\r')
		midLine = false
		if blank {
			return s.buf, nil
		}
	}
}

// eventFields returns an event's name and its data (its data lines joined
// by newlines).
func eventFields(ev []byte) (name, data []byte) {
	for len(ev) > 0 {
		var line []byte
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			line, ev = ev, nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if data != nil {
				data = append(append(data, '\n'), v...)
			} else {
				data = v
			}
		case bytes.HasPrefix(line, []byte("event:")):
			name = bytes.TrimSpace(line[6:])
		}
	}
	return name, data
}

// streamState is what a streamed answer has reported so far.
type streamState struct {
	a     *api
	strip bool
	u     usage
	// input: Anthropic's message_start gave the input; final: the usage
	// is the answer's last word on it; done: the stream's terminal event
	// came; failed: an error event came.
	input, final, done, failed bool
	// anth is Anthropic's input in its three counts, each as its latest
	// event gave it: u.input is their sum, u.cached the cache read.
	anth anthropicInput
	// served is the model the answer named (in its usage chunk, its
	// terminal response event, or message_start).
	served string
}

// anthropicInput is an Anthropic stream's input as its events give it.
type anthropicInput struct {
	// The pointers are the fields an event may leave out (or null), which
	// keep the count an earlier event gave.
	InputTokens   *int64 `json:"input_tokens"`
	CacheCreation *int64 `json:"cache_creation_input_tokens"`
	CacheRead     *int64 `json:"cache_read_input_tokens"`
}

// merge takes the counts o names over a's.
func (a *anthropicInput) merge(o anthropicInput) {
	for _, f := range []struct{ dst, src **int64 }{{&a.InputTokens, &o.InputTokens}, {&a.CacheCreation, &o.CacheCreation}, {&a.CacheRead, &o.CacheRead}} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
}

// sum is the whole input and the cache read.
func (a anthropicInput) sum() (input, cached int64) {
	for _, p := range []*int64{a.InputTokens, a.CacheCreation, a.CacheRead} {
		if p != nil {
			input += *p
		}
	}
	if a.CacheRead != nil {
		cached = *a.CacheRead
	}
	return input, cached
}

var (
	usageKey   = []byte(`"usage"`)
	usageNull  = []byte(`"usage":null`)
	doneData   = []byte("[DONE]")
	typeFields = [][]byte{[]byte(`"response.completed"`), []byte(`"response.incomplete"`), []byte(`"response.failed"`)}
)

// observe reads one event and reports whether the caller must not see it
// (the usage chunk the gateway asked for). It decodes only the events that
// can carry usage or end the stream.
func (s *streamState) observe(ev []byte) (drop bool) {
	name, data := eventFields(ev)
	if data == nil {
		return false
	}
	switch {
	case s.a.kind == KindAnthropic:
		s.observeAnthropic(name, data)
	case s.a.usageChunk:
		if bytes.Equal(bytes.TrimSpace(data), doneData) {
			s.done = true
			return false
		}
		// Every chunk of a stream that asked for usage carries
		// "usage":null but the last: only that one is decoded.
		if !bytes.Contains(data, usageKey) || bytes.Contains(data, usageNull) {
			return false
		}
		var c struct {
			Usage   json.RawMessage   `json:"usage"`
			Choices []json.RawMessage `json:"choices"`
			Model   string            `json:"model"`
		}
		if json.Unmarshal(data, &c) != nil {
			return false
		}
		if u, ok := s.a.usageOf(c.Usage); ok {
			s.u, s.final, s.served = u, true, c.Model
			return s.strip && len(c.Choices) == 0
		}
	default: // responses
		terminal := false
		for _, t := range typeFields {
			terminal = terminal || bytes.Contains(data, t)
		}
		if bytes.Contains(data, []byte(`"error"`)) && bytes.Contains(data, []byte(`"type":"error"`)) {
			s.failed = true
		}
		if !terminal {
			return false
		}
		var e struct {
			Type     string `json:"type"`
			Response struct {
				Usage json.RawMessage `json:"usage"`
				Model string          `json:"model"`
			} `json:"response"`
		}
		if json.Unmarshal(data, &e) != nil {
			return false
		}
		switch e.Type {
		case "response.completed", "response.incomplete", "response.failed":
			s.done = true
			s.served = e.Response.Model
			if u, ok := s.a.usageOf(e.Response.Usage); ok {
				s.u, s.final = u, true
			}
		}
	}
	return false
}

// observeAnthropic follows message_start (the input), message_delta (the
// output so far, final in the last one), message_stop and error.
func (s *streamState) observeAnthropic(name, data []byte) {
	kind := string(name)
	if kind == "" {
		var h struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &h) != nil {
			return
		}
		kind = h.Type
	}
	switch kind {
	case "message_start":
		var e struct {
			Message struct {
				Usage json.RawMessage `json:"usage"`
				Model string          `json:"model"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &e) == nil {
			s.served = e.Message.Model
			if u, ok := s.a.usageOf(e.Message.Usage); ok {
				var in anthropicInput
				_ = json.Unmarshal(e.Message.Usage, &in) // usageOf read it
				s.u, s.input, s.anth = u, true, in
			}
		}
	case "message_delta":
		var e struct {
			Usage *struct {
				anthropicInput
				OutputTokens *int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(data, &e) != nil || e.Usage == nil || e.Usage.OutputTokens == nil {
			return
		}
		if e.Usage.InputTokens != nil {
			// Newer API versions repeat the (cumulative) input here,
			// each count only when they give it: a count left out (or
			// null) keeps message_start's, so a delta naming the input
			// without the cache counts does not drop the cache.
			s.anth.merge(e.Usage.anthropicInput)
			s.u.input, s.u.cached = s.anth.sum()
			s.input = true
		}
		s.u.output = *e.Usage.OutputTokens
		s.final = s.input
	case "message_stop":
		s.done = true
	case "error":
		s.failed = true
	}
}

// pumpStream forwards the upstream's events to the caller as they come,
// each flushed at once; the terminal event is held back until hold
// returns, so that a caller that sees the answer's end sees its spend in
// the ledger. keep is called before each write (keepWriting), wrote after
// it (with flushing: the time a caller that does not read holds the
// write up is not the upstream's silence). A caller
// that leaves (ab: its connection closed, or a write to it failed) is
// written nothing more, and the stream is still read, for its usage, until
// its end or until the upstream request is ended (DrainAbandoned's bound,
// the upstream timeout, the gateway's shutdown: abandon.go). It stops at
// the stream's end or when the upstream fails.
func pumpStream(w http.ResponseWriter, body io.Reader, st *streamState, ab *abandon, keep, wrote, hold func()) error {
	fl, _ := w.(http.Flusher)
	r := newStreamReader(body)
	held := false
	for {
		ev, rerr := r.next()
		if rerr != nil && len(ev) > 0 {
			// What the stream broke off in, or ended on without its
			// blank line: whole lines make an event (ended here), a
			// line cut short is no event, and written on it would join
			// the error event that follows into one line of broken JSON.
			if ev[len(ev)-1] != '\n' {
				ev = nil
			} else {
				ev = append(ev, '\n')
			}
		}
		if len(ev) > 0 {
			drop := st.observe(ev)
			if st.done && !held {
				held = true
				hold()
			}
			if !drop && !ab.gone() {
				keep()
				_, werr := w.Write(ev)
				if werr == nil && fl != nil && (!r.eventWaiting() || st.done) {
					// Flushed unless a whole event is already here: events
					// that came together leave together, none waits.
					fl.Flush()
				}
				wrote()
				if werr != nil {
					ab.left()
				}
			}
		}
		if rerr != nil {
			if !held {
				hold()
			}
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return rerr
		}
	}
}

// Why the gateway ended an upstream call itself (the cause of its
// context's cancellation).
var (
	// errUpstreamTimeout: the upstream timeout passed, waiting for the
	// response's headers, a plain answer's end, or a stream's next bytes.
	errUpstreamTimeout = fmt.Errorf("the upstream timeout passed: %w", context.DeadlineExceeded)
	// errStreamTooLong: the stream ran for the whole MaxStream; it ends as
	// a timed-out one does.
	errStreamTooLong = fmt.Errorf("the stream ran for the gateway's --max-stream: %w", errUpstreamTimeout)
	// errGatewayShutdown: the gateway's shutdown timeout passed with the
	// call still running (Drain).
	errGatewayShutdown = errors.New("the gateway shut down")
)

// CodeGatewayShutdown is the error code of a call the gateway cut at its
// shutdown timeout: in a stream's error event, or a 503.
const CodeGatewayShutdown = "gateway_shutdown"

// streamEndError is why a stream ends without its terminal event, err
// being what ended the upstream's read (endedBy): the gateway's shutdown,
// the upstream's silence past the timeout, or the upstream breaking off.
func streamEndError(kind string, err error) *callError {
	const charged = "; the call was charged its reservation: a retry is a new call, charged again"
	e := &callError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_cut",
		msg: "spendgate: the " + kind + " upstream's stream broke off before its end" + charged}
	switch {
	case errors.Is(err, errGatewayShutdown):
		e.code, e.status = CodeGatewayShutdown, http.StatusServiceUnavailable
		e.msg = "spendgate: the gateway shut down before the stream's end (its --shutdown-timeout passed)" + charged
	case errors.Is(err, errStreamTooLong):
		e.code = "upstream_timeout"
		e.msg = "spendgate: the " + kind + " upstream's stream ran for the gateway's whole --max-stream without ending" + charged
	case errors.Is(err, errUpstreamTimeout):
		e.code = "upstream_timeout"
		e.msg = "spendgate: the " + kind + " upstream sent nothing for the upstream timeout (--upstream-timeout) mid-stream" + charged
	}
	return e
}

// writeStreamError ends a stream with e as the provider's own error event,
// which the SDKs raise as their API error: OpenAI's a data line of
// {"error":{...}} (openai-node throws APIError for a chunk with "error"),
// Anthropic's an "error" event of {"type":"error","error":{...}}. Each
// carries the code beside the message.
func writeStreamError(w http.ResponseWriter, kind string, e *callError) {
	var b []byte
	if kind == KindAnthropic {
		b, _ = json.Marshal(map[string]any{"type": "error",
			"error": map[string]string{"type": anthropicType(e.status), "message": e.msg, "code": e.code}})
		b = append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
	} else {
		b, _ = json.Marshal(map[string]any{"error": map[string]any{"message": e.msg, "type": "server_error", "param": nil, "code": e.code}})
		b = append(append([]byte("data: "), b...), "\n\n"...)
	}
	if _, err := w.Write(b); err == nil {
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}
}
