// Package alerting turns what the ledger decides into alerts people receive:
// a Publisher appends threshold alerts, derived from the ledger's one fold
// (a ledger.Reader), and blocking alerts, handed over by the admitter, to
// the alert stream (streams.AlertStreamName), once each whichever replicas
// publish them; a Sink delivers that stream to a webhook
// (Slack-compatible JSON) through a durable consumer, with retries.
package alerting

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// DefaultBuffer is how many alerts a Publisher holds before it drops new
// ones.
const DefaultBuffer = 1024

const (
	// publishTimeout bounds one publish of an alert.
	publishTimeout = 5 * time.Second
	// publishAttempts bounds the publishes of one alert that fail for a
	// transient cause (backoff 100 ms doubling to 5 s: about half a
	// minute); then the alert is counted failed and the next one goes.
	publishAttempts = 10
	// maxSeen bounds the blocking alerts a Publisher remembers having
	// queued (the stream refuses duplicates anyway: this only spares a
	// publish per denial of a blocked budget).
	maxSeen = 4096
)

// Publisher appends alerts to the alert stream, off the fold and the
// request path: Fold and Blocked only queue (counting a drop when the
// buffer is full); Run publishes. Every replica runs one over the same
// stream: each alert is published with its id as Nats-Msg-Id on a
// subject of its own, expecting that subject to be empty, so it is stored
// once however many replicas (or restarts) publish it (see the alert
// stream in package streams). Safe for concurrent use.
type Publisher struct {
	js     jetstream.JetStream
	layout streams.Layout
	log    *slog.Logger
	now    func() time.Time
	ch     chan events.Alert

	published, duplicates, dropped, failed atomic.Uint64

	mu   sync.Mutex
	seen map[string]struct{}
}

// Option configures a Publisher.
type Option func(*Publisher)

// WithLogger logs the publishes that fail.
func WithLogger(log *slog.Logger) Option { return func(p *Publisher) { p.log = log } }

// WithClock sets the clock that dates a folded alert too old to publish.
func WithClock(now func() time.Time) Option { return func(p *Publisher) { p.now = now } }

// WithBuffer sets how many alerts wait for Run (default DefaultBuffer).
func WithBuffer(n int) Option {
	return func(p *Publisher) {
		if n > 0 {
			p.ch = make(chan events.Alert, n)
		}
	}
}

// New returns a Publisher on js. It does no I/O until Run; the alert
// stream must exist (streams.EnsureAlerts).
func New(js jetstream.JetStream, layout streams.Layout, opts ...Option) *Publisher {
	p := &Publisher{js: js, layout: layout, log: slog.New(slog.DiscardHandler), now: time.Now,
		ch: make(chan events.Alert, DefaultBuffer), seen: map[string]struct{}{}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Fold queues the threshold alerts of rev (a ledger.Reader): every
// ThresholdCrossed of a lane revision, whichever replica wrote it. A
// crossing older than the stream keeps alerts (folded again from a long
// history) is left out: the stream could no longer tell it was sent.
func (p *Publisher) Fold(rev *gate.Revision, _ bool) {
	if rev.Kind != gate.KindLane {
		return
	}
	oldest := p.now().Add(-streams.AlertMaxAge + 24*time.Hour)
	for _, b := range rev.Lane.Balances {
		for _, e := range b.Events {
			if tc, ok := e.(events.ThresholdCrossed); ok && tc.At.After(oldest) {
				p.queue(events.ThresholdAlert(tc))
			}
		}
	}
}

// Blocked queues a blocking alert (admit.WithBlocking), unless this
// Publisher queued that alert (its id) already.
func (p *Publisher) Blocked(a events.Alert) {
	p.mu.Lock()
	if _, ok := p.seen[a.ID]; ok {
		p.mu.Unlock()
		return
	}
	if len(p.seen) >= maxSeen {
		clear(p.seen)
	}
	p.seen[a.ID] = struct{}{}
	p.mu.Unlock()
	if !p.queue(a) {
		// Dropped: a later denial may queue it again.
		p.mu.Lock()
		delete(p.seen, a.ID)
		p.mu.Unlock()
	}
}

func (p *Publisher) queue(a events.Alert) bool {
	select {
	case p.ch <- a:
		return true
	default:
		// Logged at the first drop and every 1000th: a replica folding a
		// long history at start may drop many (old ones, which the stream
		// holds already).
		if n := p.dropped.Add(1); n%1000 == 1 {
			p.log.Warn("alert: buffer full, alert dropped", "id", a.ID, "dropped", n)
		}
		return false
	}
}

// Run publishes queued alerts until ctx ends, then what is queued still
// within a short drain.
func (p *Publisher) Run(ctx context.Context) error {
	for {
		select {
		case a := <-p.ch:
			p.publish(ctx, a)
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
			defer cancel()
			for {
				select {
				case a := <-p.ch:
					p.publish(drain, a)
				default:
					return ctx.Err()
				}
			}
		}
	}
}

// publish appends a, retrying a transient failure with backoff.
func (p *Publisher) publish(ctx context.Context, a events.Alert) {
	data, err := events.EncodeAlert(a)
	if err != nil {
		p.failed.Add(1)
		p.log.Error("alert: encode", "id", a.ID, "err", err)
		return
	}
	msg := nats.NewMsg(p.layout.AlertMsgSubject(a))
	msg.Data = data
	msg.Header.Set(streams.HeaderAlertID, a.ID)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		ack, err := p.js.PublishMsg(pctx, msg, jetstream.WithMsgID(a.ID), jetstream.WithExpectLastSequencePerSubject(0))
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil && ack.Duplicate:
			p.duplicates.Add(1)
			return
		case err == nil:
			p.published.Add(1)
			return
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
			// Stored before, past the dedupe window.
			p.duplicates.Add(1)
			return
		case apiErr != nil || attempt >= publishAttempts || ctx.Err() != nil:
			p.failed.Add(1)
			p.log.Warn("alert: publish failed", "id", a.ID, "subject", msg.Subject, "attempts", attempt, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Published counts the alerts this Publisher stored; Duplicates those the
// stream held already (another replica's, or its own earlier publish);
// Dropped those not queued (buffer full); Failed those whose publish
// failed for good.
func (p *Publisher) Published() uint64  { return p.published.Load() }
func (p *Publisher) Duplicates() uint64 { return p.duplicates.Load() }
func (p *Publisher) Dropped() uint64    { return p.dropped.Load() }
func (p *Publisher) Failed() uint64     { return p.failed.Load() }
