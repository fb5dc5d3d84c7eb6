package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The ledger publishes with a plain request and reads the JetStream ack
// itself: jetstream.PublishMsg decodes every ack with encoding/json, by
// reflection, once per commit. publishRequest and pubAck keep its
// semantics (the same headers, set by the caller; the same retries when no
// stream answers; the same errors), and hand every reply that is not a
// plain success ack (an error, or anything unexpected) to encoding/json as
// before.

// publishRequest sends m and returns the stream's reply, resending it as
// jetstream.PublishMsg does while no stream answers (twice, 250 ms apart);
// then it fails with jetstream.ErrNoStreamResponse.
func publishRequest(ctx context.Context, nc *nats.Conn, m *nats.Msg) (*nats.Msg, error) {
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, jetstream.ErrNoStreamResponse
	}
	return resp, err
}

// publishAcked publishes m (its headers set) and returns the stream
// sequence it got: jetstream.PublishMsg's work, without reflection.
func (l *Ledger) publishAcked(ctx context.Context, m *nats.Msg) (uint64, error) {
	nc, done := l.writeConn()
	defer done()
	send := func(ctx context.Context, m *nats.Msg) (*nats.Msg, error) { return publishRequest(ctx, nc, m) }
	var resp *nats.Msg
	var err error
	if h := l.opts.publishHook; h != nil {
		resp, err = h(ctx, m, send)
	} else {
		resp, err = send(ctx, m)
	}
	if err != nil {
		return 0, err
	}
	return pubAck(resp.Data)
}

// pubAck reads the ack of a single publish, as jetstream.PublishMsg does:
// an API error comes back wrapped ("nats: %w"), a reply that is not an ack
// is jetstream.ErrInvalidJSAck.
func pubAck(data []byte) (uint64, error) {
	if a, ok := scanAck(data); ok && !a.hasCount {
		return a.seq, nil
	}
	var r struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return 0, fmt.Errorf("nats: %w", r.Error)
	}
	if r.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return r.Seq, nil
}

// batchPubAck reads the ack of an atomic batch's commit: the sequence of
// its last message and the number of messages. An API error comes back
// as it is.
func batchPubAck(data []byte) (seq uint64, count int, err error) {
	if a, ok := scanAck(data); ok && a.hasCount {
		return a.seq, a.count, nil
	}
	var ack batchAck
	if err := json.Unmarshal(data, &ack); err != nil {
		return 0, 0, err
	}
	if ack.Error != nil {
		return 0, 0, ack.Error
	}
	return ack.Seq, ack.Count, nil
}

// scannedAck is what scanAck read.
type scannedAck struct {
	seq      uint64
	count    int
	hasCount bool
}

// scanAck reads a success ack without allocating: one JSON object of the
// fields a JetStream publish ack has ("stream", non-empty; "seq";
// optionally "duplicate", "domain", "val", "batch", "count"), strings
// without escapes. ok is false for anything else (an "error", another
// field, an escape, a malformed reply), which the caller hands to
// encoding/json.
func scanAck(d []byte) (a scannedAck, ok bool) {
	i := 0
	ws := func() {
		for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
			i++
		}
	}
	// str reads a string without escapes and returns its contents.
	str := func() ([]byte, bool) {
		if i >= len(d) || d[i] != '"' {
			return nil, false
		}
		start := i + 1
		for j := start; j < len(d); j++ {
			switch {
			case d[j] == '"':
				i = j + 1
				return d[start:j], true
			case d[j] == '\\' || d[j] < 0x20:
				return nil, false
			}
		}
		return nil, false
	}
	// num reads a non-negative integer.
	num := func() (uint64, bool) {
		start := i
		var n uint64
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			if n > (1<<64-1-9)/10 {
				return 0, false
			}
			n = n*10 + uint64(d[i]-'0')
			i++
		}
		if i == start || (d[start] == '0' && i-start > 1) {
			return 0, false
		}
		return n, true
	}
	ws()
	if i >= len(d) || d[i] != '{' {
		return a, false
	}
	i++
	var stream, seq bool
	for first := true; ; first = false {
		ws()
		if i < len(d) && d[i] == '}' && !first {
			i++
			break
		}
		if !first {
			if i >= len(d) || d[i] != ',' {
				return a, false
			}
			i++
			ws()
		}
		key, okk := str()
		if !okk {
			return a, false
		}
		ws()
		if i >= len(d) || d[i] != ':' {
			return a, false
		}
		i++
		ws()
		switch string(key) {
		case "stream":
			s, oks := str()
			if !oks || len(s) == 0 || stream {
				return a, false
			}
			stream = true
		case "domain", "val", "batch":
			if _, oks := str(); !oks {
				return a, false
			}
		case "seq":
			n, okn := num()
			if !okn || seq {
				return a, false
			}
			a.seq, seq = n, true
		case "count":
			n, okn := num()
			if !okn || a.hasCount || n > 1<<31 {
				return a, false
			}
			a.count, a.hasCount = int(n), true
		case "duplicate":
			switch {
			case len(d)-i >= 4 && string(d[i:i+4]) == "true":
				i += 4
			case len(d)-i >= 5 && string(d[i:i+5]) == "false":
				i += 5
			default:
				return a, false
			}
		default:
			return a, false
		}
	}
	ws()
	if i != len(d) || !stream || !seq {
		return a, false
	}
	return a, true
}
