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
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// DefaultBuffer is how many alerts a Publisher holds before it drops new
// ones.
const DefaultBuffer = 1024

const (
	// publishTimeout bounds one publish of an alert.
	publishTimeout = 5 * time.Second
	// publishAttempts bounds the publishes of one alert in a round that
	// fail for a transient cause (backoff 100 ms doubling to 5 s: about
	// half a minute); then the next alert goes, and this one waits to be
	// published again (retryFirst, doubling to retryMax).
	publishAttempts = 10
	// retryFirst and retryMax space the rounds of an alert whose publish
	// failed: a stream without a leader for minutes, or a login racing
	// junk onto its subject, delays an alert but does not lose it.
	retryFirst = 30 * time.Second
	retryMax   = 5 * time.Minute
	// maxRetrying bounds the alerts waiting for another round; past it the
	// one whose round fails is given up (Failed).
	maxRetrying = DefaultBuffer
	// maxSeen bounds the blocking alerts a Publisher remembers having
	// queued (the stream refuses duplicates anyway: this only spares a
	// publish per denial of a blocked budget).
	maxSeen = 4096
)

// Publisher appends alerts to the alert stream, off the fold and the
// request path: Fold and Blocked only queue (counting a drop when the
// buffer is full); Run publishes. Every replica runs one over the same
// stream: each alert is published on a subject of its own, expecting that
// subject to be empty, so it is stored once however many replicas (or
// restarts) publish it (see the alert stream in package streams).
//
// The replica login, which must publish alerts, may publish anything on
// those subjects, and a subject's next alert is predictable. So each alert
// is signed (WithSigner) and its Nats-Msg-Id carries the start of its
// signature, which nobody can compute beforehand; and when the subject is
// not empty, the publisher reads what is there: this alert signed by a
// trusted key (WithTrust) is stored already, anything else (Forged) is
// appended after, so a message published first cannot keep the alert
// out. Safe for concurrent use.
type Publisher struct {
	js     jetstream.JetStream
	layout streams.Layout
	log    *slog.Logger
	now    func() time.Time
	ch     chan events.Alert
	// signer signs each alert (nil, or returning nil: unsigned); keys
	// are the keys whose alerts count as stored (nil, or returning nil:
	// any message that reads as the alert).
	signer func() *signing.Signer
	keys   func() *signing.KeySet

	published, duplicates, dropped, failed, forged atomic.Uint64
	// retry holds the alerts whose round failed, for another (Run's own:
	// no lock); retrying is its length, for the gauge.
	retry    []retrying
	retrying atomic.Int64
	// attempts, retryFirst, retryMax and maxRetrying are publishAttempts
	// and the constants of the same names (tests shorten them).
	attempts             int
	retryFirst, retryMax time.Duration
	maxRetrying          int
	// unread: a check of an alert's subject could not read it (logged
	// once); unreadUntil: until when (Unix nanoseconds) the publisher
	// reads no subject (a login that may not read the stream waits for
	// the read's timeout every time).
	unread      atomic.Bool
	unreadUntil atomic.Int64

	mu   sync.Mutex
	seen map[string]struct{}
}

// Option configures a Publisher.
type Option func(*Publisher)

// WithLogger logs the publishes that fail.
func WithLogger(log *slog.Logger) Option { return func(p *Publisher) { p.log = log } }

// WithClock sets the clock that dates a folded alert too old to publish.
func WithClock(now func() time.Time) Option { return func(p *Publisher) { p.now = now } }

// WithSigner signs each alert with the key s returns as it is published
// (the replica's signing key; nil: unsigned).
func WithSigner(s func() *signing.Signer) Option { return func(p *Publisher) { p.signer = s } }

// WithTrust sets the keys whose alerts count as stored when an alert's
// subject is found taken (the replica's trusted keys; nil: any message
// that reads as the alert counts).
func WithTrust(keys func() *signing.KeySet) Option { return func(p *Publisher) { p.keys = keys } }

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
		ch: make(chan events.Alert, DefaultBuffer), seen: map[string]struct{}{},
		attempts: publishAttempts, retryFirst: retryFirst, retryMax: retryMax, maxRetrying: maxRetrying}
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
		p.forget(a.ID) // dropped: a later denial may queue it again
	}
}

// forget lets Blocked queue alert id again.
func (p *Publisher) forget(id string) {
	p.mu.Lock()
	delete(p.seen, id)
	p.mu.Unlock()
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

// retrying is an alert whose publish failed, due for another round.
type retrying struct {
	a     events.Alert
	due   time.Time
	delay time.Duration
}

// Run publishes queued alerts until ctx ends, then what is queued still
// within a short drain. An alert whose publish fails is published again
// later (retryFirst, doubling to retryMax), for as long as the replica
// runs, unless maxRetrying others wait already.
func (p *Publisher) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if next, ok := p.nextDue(); ok {
			timer.Reset(max(0, time.Until(next)))
			due = timer.C
		}
		select {
		case a := <-p.ch:
			if !p.publish(ctx, a) {
				p.later(a, p.retryFirst)
			}
		case <-due:
			p.retryDue(ctx)
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
			defer cancel()
			for {
				select {
				case a := <-p.ch:
					if !p.publish(drain, a) {
						p.failed.Add(1)
					}
				default:
					if n := len(p.retry); n > 0 {
						p.failed.Add(uint64(n))
						p.log.Warn("alert: stopping with alerts not published (a threshold alert is published again when a replica folds its revision again)", "alerts", n)
						p.retry = nil
						p.retrying.Store(0)
					}
					return ctx.Err()
				}
			}
		}
	}
}

// nextDue is when the first alert waiting for another round is due.
func (p *Publisher) nextDue() (time.Time, bool) {
	if len(p.retry) == 0 {
		return time.Time{}, false
	}
	next := p.retry[0].due
	for _, r := range p.retry[1:] {
		if r.due.Before(next) {
			next = r.due
		}
	}
	return next, true
}

// later keeps a, whose round failed, for another in delay, or gives it up
// when maxRetrying alerts wait already.
func (p *Publisher) later(a events.Alert, delay time.Duration) {
	if len(p.retry) >= p.maxRetrying {
		p.failed.Add(1)
		p.forget(a.ID) // a later denial may queue a blocking alert again
		p.log.Error("alert: given up, its publish failed and too many alerts wait to be published again", "id", a.ID, "waiting", len(p.retry))
		return
	}
	p.retry = append(p.retry, retrying{a: a, due: time.Now().Add(delay), delay: delay})
	p.retrying.Store(int64(len(p.retry)))
	p.log.Warn("alert: publish failed; trying again later", "id", a.ID, "in", delay)
}

// retryDue publishes again the alerts whose time has come.
func (p *Publisher) retryDue(ctx context.Context) {
	now := time.Now()
	var due []retrying
	kept := p.retry[:0]
	for _, r := range p.retry {
		if r.due.After(now) {
			kept = append(kept, r)
		} else {
			due = append(due, r)
		}
	}
	p.retry = kept
	p.retrying.Store(int64(len(p.retry)))
	for _, r := range due {
		if ctx.Err() != nil {
			p.retry = append(p.retry, r)
			continue
		}
		if !p.publish(ctx, r.a) {
			p.later(r.a, min(2*r.delay, p.retryMax))
		}
	}
	p.retrying.Store(int64(len(p.retry)))
}

// msgIDSigChars is how much of an alert's signature its Nats-Msg-Id
// carries (as the feed's, internal/feed).
const msgIDSigChars = 22

// publish appends a, retrying a transient failure with backoff; false if
// it did not (the caller keeps a for another round).
func (p *Publisher) publish(ctx context.Context, a events.Alert) bool {
	data, err := events.EncodeAlert(a)
	if err != nil {
		p.failed.Add(1)
		p.log.Error("alert: encode", "id", a.ID, "err", err)
		return true // never publishable: not kept
	}
	msg := nats.NewMsg(p.layout.AlertMsgSubject(a))
	msg.Data = data
	msg.Header.Set(streams.HeaderAlertID, a.ID)
	// The id must not be one another login can take first: JetStream
	// answers "duplicate", and stores nothing, for an id in its window.
	// The alert's own id is predictable; its signature is not.
	id := a.ID
	if p.signer != nil {
		if s := p.signer(); s != nil {
			s.SignMsg(msg.Header, signing.DomainAlert, msg.Subject, data)
			if sig := msg.Header.Get(streams.HeaderSig); len(sig) >= msgIDSigChars {
				id += "." + sig[:msgIDSigChars]
			}
		}
	}
	expect := uint64(0) // the subject's last sequence the append expects
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		ack, err := p.js.PublishMsg(pctx, msg, jetstream.WithMsgID(id), jetstream.WithExpectLastSequencePerSubject(expect))
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil && ack.Duplicate:
			p.duplicates.Add(1)
			return true
		case err == nil:
			p.published.Add(1)
			return true
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence && attempt < p.attempts:
			// The subject holds a message: this alert, stored before
			// (another replica's, or this one's before a restart), or
			// something a login that may publish alerts put there.
			last, stored, rerr := p.stored(ctx, msg.Subject, a.ID)
			if rerr != nil {
				// Taken as stored, as before the check: a login whose
				// roles were rendered by an earlier version may not read
				// the alert stream.
				if !p.unread.Swap(true) {
					p.log.Warn("alert: cannot read an alert's subject to check what holds it; taking it as stored (render spendgate roles again: the replica role reads the alert stream)",
						"id", a.ID, "subject", msg.Subject, "err", rerr)
				}
				p.duplicates.Add(1)
				return true
			}
			if stored {
				p.duplicates.Add(1)
				return true
			}
			if p.forged.Add(1); expect == 0 {
				p.log.Error("alert: its subject holds a message that is not this alert signed by a trusted key (written by a login that may publish alerts); publishing after it",
					"id", a.ID, "subject", msg.Subject, "seq", last)
			}
			expect = last
			continue
		case apiErr != nil || attempt >= p.attempts || ctx.Err() != nil:
			p.log.Warn("alert: publish failed", "id", a.ID, "subject", msg.Subject, "attempts", attempt, "err", err)
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// unreadPause is how long a publisher whose read of an alert's subject
// failed reads none before it tries again.
const unreadPause = 5 * time.Minute

// stored reads the last message on subject: its sequence, and whether it
// is the alert id signed by a key the publisher trusts (Verify).
func (p *Publisher) stored(ctx context.Context, subject, id string) (last uint64, ok bool, err error) {
	if time.Now().UnixNano() < p.unreadUntil.Load() {
		return 0, false, errors.New("a read of an alert's subject failed a moment ago")
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	s, err := p.js.Stream(ctx, p.layout.AlertStreamName())
	if err == nil {
		var m *jetstream.RawStreamMsg
		if m, err = s.GetLastMsgForSubject(ctx, subject); err == nil {
			return p.check(m, id)
		}
	}
	p.unreadUntil.Store(time.Now().Add(unreadPause).UnixNano())
	return 0, false, err
}

// check reports m's sequence and whether it is the alert id signed by a
// key the publisher trusts.
func (p *Publisher) check(m *jetstream.RawStreamMsg, id string) (uint64, bool, error) {
	var ks *signing.KeySet
	if p.keys != nil {
		ks = p.keys()
	}
	if Verify(ks, m.Subject, m.Header, m.Data) != "" {
		return m.Sequence, false, nil
	}
	a, err := events.DecodeAlert(m.Data)
	return m.Sequence, err == nil && a.ID == id, nil
}

// Verify reports why the keys ks refuse the alert message of subject with
// headers h and body data ("" if they do not): a message counts only if a
// key of ks that is not distrusted signed it (a retired key's still
// count). With ks nil nothing is verified.
func Verify(ks *signing.KeySet, subject string, h nats.Header, data []byte) signing.Reason {
	if ks == nil {
		return ""
	}
	signer, valid := signing.VerifyMsg(h, signing.DomainAlert, subject, data)
	switch _, known := ks.Lookup(signer); {
	case signer == "":
		return signing.ReasonUnsigned
	case !valid:
		return signing.ReasonBadSignature
	case ks.IsDistrusted(signer):
		return signing.ReasonDistrustedKey
	case !known:
		return signing.ReasonUntrustedKey
	}
	return ""
}

// Published counts the alerts this Publisher stored; Duplicates those the
// stream held already (another replica's, or its own earlier publish);
// Dropped those not queued (buffer full); Failed those given up (their
// publish failed while maxRetrying others waited for another round, or
// the replica stopped); Forged the times an alert's subject held something
// else than the alert signed by a trusted key (the alert was published
// after it). Retrying is how many alerts wait for another round now.
func (p *Publisher) Published() uint64  { return p.published.Load() }
func (p *Publisher) Duplicates() uint64 { return p.duplicates.Load() }
func (p *Publisher) Dropped() uint64    { return p.dropped.Load() }
func (p *Publisher) Failed() uint64     { return p.failed.Load() }
func (p *Publisher) Forged() uint64     { return p.forged.Load() }
func (p *Publisher) Retrying() uint64   { return uint64(max(0, p.retrying.Load())) }
