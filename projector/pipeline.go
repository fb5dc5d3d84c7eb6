package projector

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// parseAhead is how many messages readVerified inspects ahead of the fold.
const parseAhead = 256

// verifier is what every fold of the projector reads through: the gate a
// replica uses (package gate), with the heads of the fold it feeds. No fold
// here interprets a message the gate has not passed.
type verifier struct {
	g *gate.Gate
	h *gate.Heads
	// rejected, if set, is told of every message the gate refuses, in
	// stream order.
	rejected func(*gate.Rejection)
	// refused, if set, is told of every revision folded that the
	// reader's own keys refuse (gate.Revision.Refused), in stream order.
	refused func(*gate.Revision)
}

// newGate returns a gate as the projector's options say: checking
// signatures against the ledger's trust, anchored in the keys Verifying
// named (none: the ledger's first trust revision is trusted on first
// use), or none with Unverified.
func (p *Projector) newGate() *gate.Gate {
	if p.unverified {
		return gate.NewUnverified(p.layout)
	}
	return gate.NewAuditor(p.layout, p.trust)
}

// verifierFrom returns a verifier for a fold that starts at seq from,
// knowing no head before it (see gate.NewHeadsAfter).
func (p *Projector) verifierFrom(from uint64) *verifier {
	h := gate.NewHeads()
	if from > 1 {
		h = gate.NewHeadsAfter(from - 1)
	}
	return &verifier{g: p.newGate(), h: h}
}

// inspected is a message with the gate's verdict on what needs no heads,
// taken ahead of the fold.
type inspected struct {
	m    message
	rev  *gate.Revision
	rej  *gate.Rejection
	done chan struct{}
}

// readVerified hands fn, in stream order on one goroutine, every revision
// of the stream from seq from to until (0: follow until ctx ends) that
// passes v's gate, decoded (message.rev). Lane revisions are inspected
// ahead of the fold by one worker per CPU: the signature and the decode
// are most of a replay's work and need no heads; the chain is checked in
// order. A message under any other key is inspected in order, after
// everything before it is folded, so that a trust revision's verdict
// applies to what follows it. A read that follows the stream (until 0)
// inspects every message in order.
func (p *Projector) readVerified(ctx context.Context, s jetstream.Stream, from, until uint64, v *verifier, fn func(message) error) error {
	work := make(chan *inspected, parseAhead)
	var wg sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				j.rev, j.rej = v.g.Inspect(j.m.gateMsg())
				close(j.done)
			}
		}()
	}
	defer func() { close(work); wg.Wait() }()
	var queue []*inspected // in stream order
	stopped := false
	fold := func(j *inspected) error {
		ok, rej := false, j.rej
		if rej == nil {
			ok, rej = v.g.Admit(v.h, j.rev)
		}
		if rej != nil {
			if v.g.Skip(v.h, rej) && v.rejected != nil {
				v.rejected(rej)
			}
			return nil
		}
		if !ok {
			return nil
		}
		if j.rev.Refused != "" && v.refused != nil {
			v.refused(j.rev)
		}
		m := j.m
		m.rev = j.rev
		err := fn(m)
		if errors.Is(err, errStop) {
			stopped = true
		}
		return err
	}
	next := func() error {
		j := queue[0]
		queue[0] = nil
		queue = queue[1:]
		<-j.done
		return fold(j)
	}
	err := p.read(ctx, s, from, until, func(m message) error {
		if stopped {
			return errStop
		}
		if !streams.IsLaneKey(m.key) || until == 0 {
			// Flush what is queued first: order matters. A read that
			// follows the stream (until 0) inspects in order: a message
			// queued ahead would wait for the next one to be folded.
			for len(queue) > 0 {
				if err := next(); err != nil {
					return err
				}
			}
			j := &inspected{m: m}
			j.rev, j.rej = v.g.Inspect(m.gateMsg())
			return fold(j)
		}
		j := &inspected{m: m, done: make(chan struct{})}
		work <- j
		queue = append(queue, j)
		if len(queue) >= parseAhead {
			return next()
		}
		return nil
	})
	for err == nil && !stopped && len(queue) > 0 {
		err = next()
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	if err != nil || stopped {
		// Let the workers finish what was handed to them.
		for _, j := range queue {
			<-j.done
		}
	}
	return err
}

// gateMsg is m as the gate takes it.
func (m message) gateMsg() *gate.Message {
	return &gate.Message{Seq: m.seq, Subject: m.subject, Header: m.header, Data: m.data, At: m.at}
}

// Message is one revision of the ledger stream that passed the gate, as
// Read hands it over: its stream sequence, key, payload and stream
// timestamp, and the revision the gate decoded and verified.
type Message struct {
	Seq  uint64
	Key  string
	Data []byte
	At   time.Time
	Rev  *gate.Revision
}

// Read hands fn, in stream order, every revision from the stream's first
// message up to until (0: its last message as of the call) that passes the
// projector's gate (verified against the ledger's trust unless the
// projector is Unverified), the archive's first if it reads one. It is the
// one read that reports and exports build on: they never open a consumer
// of their own. It returns the position it read up to; ErrTrimmed for a
// trimmed stream without its archive; ErrPastEnd for an until past the
// stream's last message; the stream lookup or consumer error, ctx's
// error, or fn's.
func (p *Projector) Read(ctx context.Context, until uint64, fn func(Message) error) (uint64, error) {
	s, last, err := p.stream(ctx)
	if err != nil {
		return 0, err
	}
	if until == 0 {
		until = last
	}
	if until > last {
		return 0, fmt.Errorf("%w: position %d, the last is %d", ErrPastEnd, until, last)
	}
	if err := p.whole(s, last); err != nil {
		return 0, err
	}
	if until == 0 {
		return 0, nil
	}
	v := p.verifierFrom(1)
	err = p.readVerified(ctx, s, 1, until, v, func(m message) error {
		return fn(Message{Seq: m.seq, Key: m.key, Data: m.data, At: m.at, Rev: m.rev})
	})
	if err == nil {
		p.readKeys.Store(v.g.Keys())
	}
	return until, err
}

// DecodeStrict decodes one revision's JSON payload into v as the fold
// does: no unknown field, nothing after the value, and an empty payload
// (a KV delete or purge) is malformed. Its errors wrap ErrMalformed.
func DecodeStrict(data []byte, v any) error { return decodeStrict(data, v) }

// EventType names e's type for an error message ("null" for nil).
func EventType(e events.Event) events.Type { return eventType(e) }

// Errorf returns an error wrapping category (ErrMalformed, ErrChain,
// ErrTransition, ...) with the message format formats.
func Errorf(category error, format string, args ...any) error {
	return errorf(category, format, args...)
}
