package feed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/signing"
	"github.com/spendgate/spendgate/streams"
)

// DefaultRetry is how long a relay waits before it starts again after an
// error other than losing a race to another relay.
const DefaultRetry = time.Second

// Relay copies every event of the ledger stream into the feed stream, one
// message per event, in commit order (see the package doc). Any number of
// relays may run at once against one ledger: each event is appended once.
type Relay struct {
	js      jetstream.JetStream
	l       streams.Layout
	log     *slog.Logger
	retry   time.Duration
	relayed atomic.Uint64
	lost    atomic.Uint64
	ensure  []streams.FeedOption
	// trust returns the keys a revision must be signed by (nil: none
	// checked); see WithTrust.
	trust func() *signing.KeySet
	// chain is which revisions the replicas fold, decided up to
	// chain.at; nil until the first fold (see chain). Only Run's
	// goroutine uses it.
	chain *chain
	// skipped counts the revisions this relay decided not to relay.
	skipped atomic.Uint64
	// decided counts the revisions this relay's chain decided.
	decided atomic.Uint64
	// ckEvery is WithCheckpointEvery (0: no checkpoints); ckAt the
	// sequence of the newest checkpoint this relay loaded, wrote or
	// found, ckStore the bucket once opened (only Run's goroutine uses
	// them); ckLoaded, ckSkipped and ckWritten are CheckpointStats.
	ckEvery uint64
	ckAt    uint64
	// ckDistrust: the stream contradicted a loaded checkpoint (see
	// chain.checkHead); load none again.
	ckDistrust bool
	ckStore    jetstream.ObjectStore
	ckLoaded   atomic.Uint64
	ckSkipped  atomic.Int64
	ckWritten  atomic.Uint64
}

// Option configures a Relay.
type Option func(*Relay) error

// WithLogger logs the relay's restarts.
func WithLogger(log *slog.Logger) Option {
	return func(r *Relay) error {
		if log == nil {
			return errors.New("feed: nil logger")
		}
		r.log = log
		return nil
	}
}

// WithTrust makes the relay skip every ledger revision whose signature
// the key set trust returns does not accept (signing.KeySet.Verify), as
// replicas skip it: a forged or garbage revision written past the
// permissions never reaches the feed. trust is called per revision, so a
// replica's reloaded keys apply at once. With or without WithTrust, the
// relay also skips, as replicas do, every revision that does not follow
// the last valid revision of its key (a replay of an old signed revision,
// a gap, a fork; see events.Chain): the chain is checked over the
// revisions the keys accept, so a signature the keys refuse leaves the
// key's chain where it was. A skipped revision is logged and counted
// (Skipped).
func WithTrust(trust func() *signing.KeySet) Option {
	return func(r *Relay) error {
		if trust == nil {
			return errors.New("feed: nil trust")
		}
		r.trust = trust
		return nil
	}
}

// WithRetry sets the wait before starting again after an error (default
// DefaultRetry).
func WithRetry(d time.Duration) Option {
	return func(r *Relay) error {
		if d <= 0 {
			return fmt.Errorf("feed: retry must be positive, got %s", d)
		}
		r.retry = d
		return nil
	}
}

// WithMaxAge makes the relay keep each feed message for d (0: every
// message; default streams.DefaultFeedMaxAge). Give every relay of a
// ledger the same value: each sets it on the stream when it starts.
func WithMaxAge(d time.Duration) Option {
	return func(r *Relay) error {
		if err := streams.WithFeedMaxAge(d)(&jetstream.StreamConfig{}); err != nil {
			return err
		}
		r.ensure = append(r.ensure, streams.WithFeedMaxAge(d))
		return nil
	}
}

// NewRelay returns a relay from l's ledger stream to l's feed stream.
func NewRelay(js jetstream.JetStream, l streams.Layout, opts ...Option) (*Relay, error) {
	if js == nil {
		return nil, errors.New("feed: nil JetStream")
	}
	r := &Relay{js: js, l: l, log: slog.New(slog.DiscardHandler), retry: DefaultRetry, ckEvery: DefaultCheckpointEvery}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Relayed is how many events this relay appended to the feed.
func (r *Relay) Relayed() uint64 { return r.relayed.Load() }

// Skipped is how many ledger revisions this relay decided not to relay
// (a signature its keys refuse, a replay, off its key's chain, a payload
// that does not decode), each logged once.
func (r *Relay) Skipped() uint64 { return r.skipped.Load() }

// Decided is how many ledger revisions this relay decided (checked against
// its keys and its keys' chains, then relayed, folded or skipped), each
// once: all of the ledger when it starts without a checkpoint, only what
// follows the checkpoint otherwise (CheckpointStats), and what it decided
// before finding a checkpoint wrong as well as the whole ledger after.
func (r *Relay) Decided() uint64 { return r.decided.Load() }

// Lost is how many appends this relay lost to another relay (it then
// skipped what the other had appended).
func (r *Relay) Lost() uint64 { return r.lost.Load() }

// Run ensures the feed stream and relays until ctx is done; it returns
// ctx's error. Errors on the way (a connection lost, a stream leader
// moving) are logged and retried after the retry interval.
func (r *Relay) Run(ctx context.Context) error {
	for {
		if _, err := streams.EnsureFeed(ctx, r.js, r.l, r.ensure...); err != nil {
			r.log.Warn("feed relay: ensure the feed stream", "err", err)
		} else {
			err = r.runOnce(ctx)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, errFeedMoved) || errors.Is(err, errCheckpointWrong) {
				// Another relay moved the feed, or the checkpoint this
				// relay started from was wrong: start again from the
				// feed's end at once.
				r.log.Debug("feed relay: restarting from the feed's end", "err", err)
				continue
			}
			r.log.Warn("feed relay: restarting", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.retry):
		}
	}
}

// tail is the feed's end: the feed sequence of its last message and that
// event's position (zero when the feed is empty).
type tail struct {
	feedSeq uint64
	last    Position
}

// readTail reads the feed's last message.
func (r *Relay) readTail(ctx context.Context) (tail, error) {
	s, err := r.js.Stream(ctx, r.l.FeedStreamName())
	if err != nil {
		return tail{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return tail{}, err
	}
	if info.State.LastSeq == 0 {
		return tail{}, nil
	}
	if info.State.Msgs == 0 {
		// Every message aged out: the feed was quiet for longer than its
		// max age. Its last sequence still counts the events it was
		// given (the message at feed sequence n is always the ledger's
		// n-th event, see MaxInFlight), so the tail is that event.
		last, err := r.nthEvent(ctx, info.State.LastSeq)
		if err != nil {
			return tail{}, err
		}
		r.log.Info("feed relay: every feed message aged out; found the tail by counting the ledger's events", "feed_seq", info.State.LastSeq, "event", last.ID())
		return tail{feedSeq: info.State.LastSeq, last: last}, nil
	}
	m, err := s.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		return tail{}, fmt.Errorf("feed: read the feed's last message %d: %w", info.State.LastSeq, err)
	}
	seq, err1 := strconv.ParseUint(m.Header.Get(streams.HeaderFeedSourceSeq), 10, 64)
	idx, err2 := strconv.Atoi(m.Header.Get(streams.HeaderFeedIndex))
	if err1 != nil || err2 != nil || seq == 0 || idx < 0 {
		return tail{}, fmt.Errorf("feed: message %d of %s has no valid %s/%s headers", m.Sequence, r.l.FeedStreamName(), streams.HeaderFeedSourceSeq, streams.HeaderFeedIndex)
	}
	return tail{feedSeq: m.Sequence, last: Position{Seq: seq, Index: idx}}, nil
}

// nthEvent returns the position of the ledger's n-th event (n >= 1), in
// feed order, counting only the revisions the relay relays (its keys
// accept them and they follow their key's chain; see chain). It reads the
// ledger from its first revision: it runs only when the feed was quiet for
// longer than its max age. If the trusted keys changed which old revisions
// they accept since those were relayed (or a relay that did not check the
// chain relayed a replay), the count is off by their events; the relay
// then finds an event the feed already holds or skips some, which the
// expected sequence cannot tell (see the README's known limitations).
func (r *Relay) nthEvent(ctx context.Context, n uint64) (Position, error) {
	c := newChain(r.readFunc(ctx))
	cons, err := r.js.OrderedConsumer(ctx, r.l.StreamName(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.l.BudgetKeysFilter(), r.l.LaneKeysFilter()},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return Position{}, err
	}
	it, err := cons.Messages()
	if err != nil {
		return Position{}, err
	}
	defer it.Stop()
	var count uint64
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return Position{}, err
		}
		md, err := msg.Metadata()
		if err != nil {
			return Position{}, err
		}
		key, _ := r.l.KeyOf(msg.Subject())
		var out []Message
		reason, _, err := c.check(r.trustSet(), key, md.Sequence.Stream, msg.Headers(), msg.Data())
		if err != nil {
			return Position{}, err
		}
		if reason == "" {
			// Count what the relay appends: a revision it skips has no
			// event in the feed.
			if out, err = Split(md.Sequence.Stream, key, md.Timestamp, msg.Data()); err != nil {
				return Position{}, fmt.Errorf("feed: revision %d of %s: %w", md.Sequence.Stream, key, err)
			}
			c.fold(key, md.Sequence.Stream, msg.Data())
		} else {
			c.skip(md.Sequence.Stream)
		}
		if count+uint64(len(out)) >= n {
			return out[n-count-1].Position(), nil
		}
		count += uint64(len(out))
		if md.NumPending == 0 {
			return Position{}, fmt.Errorf("feed: the feed counts %d events but the ledger holds %d", n, count)
		}
	}
}

// trustSet is the key set revisions are checked against now (nil: none).
func (r *Relay) trustSet() *signing.KeySet {
	if r.trust == nil {
		return nil
	}
	return r.trust()
}

// readFunc returns chain.read for the ledger stream: the key and payload
// hash of its message at seq, or found false if it no longer holds it (a
// trim dropped it).
func (r *Relay) readFunc(ctx context.Context) func(seq uint64) (key, hash string, found bool, err error) {
	return func(seq uint64) (string, string, bool, error) {
		s, err := r.js.Stream(ctx, r.l.StreamName())
		if err != nil {
			return "", "", false, err
		}
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return "", "", false, nil
		}
		if err != nil {
			return "", "", false, err
		}
		key, _ := r.l.KeyOf(m.Subject)
		return key, events.HashPayload(m.Data), true, nil
	}
}

// runOnce relays from the feed's tail until an error.
//
// It reads the ledger from the revision of the feed's last event (the
// events after it in that revision may not be relayed yet), or from
// earlier: from the first revision the relay's chain has not decided yet
// (all of the ledger the first time). The revisions before the tail's are
// only folded into the chain (their events are in the feed); a revision
// decided before this call (the relay starts again behind its own fold,
// after losing a race or its consumer) is relayed again only if the chain
// kept it, never decided twice.
func (r *Relay) runOnce(ctx context.Context) error {
	t, err := r.readTail(ctx)
	if err != nil {
		return err
	}
	if r.chain == nil {
		if r.chain = r.loadCheckpoint(ctx, t); r.chain == nil {
			r.chain = newChain(nil)
		}
	}
	c := r.chain
	c.read = r.readFunc(ctx)
	c.prune(t.last.Seq)
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.l.BudgetKeysFilter(), r.l.LaneKeysFilter()},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if from := min(t.last.Seq, c.at+1); from > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	cons, err := r.js.OrderedConsumer(ctx, r.l.StreamName(), cfg)
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			it.Stop()
		case <-done:
			it.Stop()
		}
	}()
	// next is the position of the last event published (acknowledged or
	// in flight in win).
	next := t.last
	var win []inflight
	for {
		if r.checkpointDue(c) {
			r.writeCheckpoint(ctx, c)
		}
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return err
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		key, _ := r.l.KeyOf(msg.Subject())
		seq := md.Sequence.Stream
		decided := seq <= c.at
		if decided {
			if seq < t.last.Seq || !c.isKept(seq) {
				continue
			}
		} else {
			reason, why, err := c.check(r.trustSet(), key, seq, msg.Headers(), msg.Data())
			if errors.Is(err, errCheckpointWrong) {
				// No revision was refused on the checkpoint's word yet
				// (each refusal checks it first): start again from the
				// feed's tail, folding the whole ledger, and load no
				// checkpoint again.
				r.log.Error("feed relay: checkpoint skipped; folding the whole ledger", "checkpoint", streams.FeedChainName(c.from), "err", err)
				r.chain, r.ckAt, r.ckDistrust = nil, 0, true
				r.ckLoaded.Store(0)
				r.ckSkipped.Add(1)
				return err
			}
			if err != nil {
				return err
			}
			if reason == signing.ReasonMalformed && seq >= t.last.Seq {
				// A revision the relay cannot read is never skipped
				// once its events are due: the feed would lose them for
				// good. Stop and retry (a newer binary may read it).
				return fmt.Errorf("feed: revision %d of %s: %w", seq, key, why)
			}
			if reason != "" {
				c.skip(seq)
				r.decided.Add(1)
				r.skipped.Add(1)
				r.log.Error("feed: revision skipped; not relayed", "seq", seq, "key", key, "reason", string(reason), "err", why)
				continue
			}
			if seq < t.last.Seq {
				c.fold(key, seq, msg.Data())
				r.decided.Add(1)
				continue
			}
		}
		out, err := Split(seq, key, md.Timestamp, msg.Data())
		if err != nil {
			// As above: stop and retry, undecided.
			return fmt.Errorf("feed: revision %d of %s: %w", seq, key, err)
		}
		if !decided {
			c.fold(key, seq, msg.Data())
			r.decided.Add(1)
			if len(out) > 0 {
				c.keep(seq)
			}
		}
		for _, m := range out {
			if !next.Before(m.Position()) {
				continue // already in the feed (or in the window)
			}
			msg, err := r.feedMsg(m)
			if err != nil {
				return err
			}
			f, err := r.js.PublishMsgAsync(msg, jetstream.WithMsgID(m.ID), jetstream.WithExpectLastSequence(t.feedSeq+uint64(len(win))))
			if err != nil {
				return err
			}
			win = append(win, inflight{m: m, f: f})
			next = m.Position()
			if len(win) >= MaxInFlight {
				if t, err = r.flush(ctx, t, win); err != nil {
					return err
				}
				win = win[:0]
				next = later(next, t.last)
				c.prune(t.last.Seq)
			}
		}
		if md.NumPending == 0 && len(win) > 0 {
			// Caught up with the ledger: append what is in flight now,
			// so a live event is not held back for the window to fill.
			if t, err = r.flush(ctx, t, win); err != nil {
				return err
			}
			win = win[:0]
			next = later(next, t.last)
			c.prune(t.last.Seq)
		}
	}
}

// later returns the later of two positions. After a flush that found the
// feed moved past this relay's window (another relay appended ahead), the
// relay must skip to the feed's tail: publishing the events between its
// window and that tail would append them a second time, since each would
// expect the new tail's sequence and pass.
func later(a, b Position) Position {
	if a.Before(b) {
		return b
	}
	return a
}

// MaxInFlight bounds the feed appends a relay has in flight at once.
// Pipelining is safe: each append expects the feed's sequence just before
// it, and every relay splits the same ledger into the same events in the
// same order, so the message at a feed sequence is always the same event,
// whoever appended it.
const MaxInFlight = 256

// inflight is an append waiting for its acknowledgement.
type inflight struct {
	m Message
	f jetstream.PubAckFuture
}

// flush waits for the appends in win, in order, and returns the feed's new
// tail. If another relay appended some of them first (a duplicate id or a
// wrong last sequence), it re-reads the tail, which must then be at or past
// the window's last event (errFeedMoved otherwise: the caller starts again
// from the tail).
func (r *Relay) flush(ctx context.Context, t tail, win []inflight) (tail, error) {
	lost := false
	for _, p := range win {
		select {
		case ack := <-p.f.Ok():
			if ack.Duplicate {
				lost = true
				continue
			}
			r.relayed.Add(1)
			t = tail{feedSeq: ack.Sequence, last: p.m.Position()}
		case err := <-p.f.Err():
			if !streams.IsConflict(err) {
				return t, err
			}
			lost = true
		case <-ctx.Done():
			return t, ctx.Err()
		}
	}
	if !lost {
		return t, nil
	}
	r.lost.Add(1)
	nt, err := r.readTail(ctx)
	if err != nil {
		return t, err
	}
	if nt.last.Before(win[len(win)-1].m.Position()) {
		return t, errFeedMoved
	}
	return nt, nil
}

// errFeedMoved: the feed's tail is not where this relay's chain expects it
// and not past the event either.
var errFeedMoved = errors.New("feed: the feed stream's last event is not the one this relay relayed")

// append publishes m after t and returns the new tail. If another relay
// appended first, it re-reads the tail and, when the tail is at or past m,
// returns it (m is in the feed already).
func (r *Relay) append(ctx context.Context, t tail, m Message) (tail, error) {
	msg, err := r.feedMsg(m)
	if err != nil {
		return t, err
	}
	ack, err := r.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID), jetstream.WithExpectLastSequence(t.feedSeq))
	if err == nil && !ack.Duplicate {
		r.relayed.Add(1)
		return tail{feedSeq: ack.Sequence, last: m.Position()}, nil
	}
	if err != nil && !streams.IsConflict(err) {
		return t, err
	}
	// Lost: another relay appended this event (a duplicate id) or moved
	// the feed past t (a wrong last sequence).
	r.lost.Add(1)
	nt, err := r.readTail(ctx)
	if err != nil {
		return t, err
	}
	if nt.last.Before(m.Position()) {
		return t, errFeedMoved
	}
	return nt, nil
}

// feedMsg is the feed message of m: its subject, body and headers.
func (r *Relay) feedMsg(m Message) (*nats.Msg, error) {
	body, err := m.encode()
	if err != nil {
		return nil, fmt.Errorf("feed: encode event %s: %w", m.ID, err)
	}
	msg := nats.NewMsg(r.l.FeedSubject(m.Type, m.scope()))
	msg.Data = body
	msg.Header.Set(streams.HeaderFeedSchema, streams.FeedSchema)
	msg.Header.Set(streams.HeaderFeedSourceSeq, strconv.FormatUint(m.SourceSeq, 10))
	msg.Header.Set(streams.HeaderFeedIndex, strconv.Itoa(m.Index))
	msg.Header.Set(streams.HeaderFeedType, string(m.Type))
	return msg, nil
}

// scope is the scope of the message's subject: its balance's, or the
// defined budget's.
func (m Message) scope() events.Scope {
	if m.Balance != nil {
		return m.Balance.Ref.Scope
	}
	var e struct {
		Budget  events.BudgetRef  `json:"budget"`
		Balance events.BalanceRef `json:"balance"`
	}
	_ = json.Unmarshal(m.Event, &e)
	switch {
	case e.Budget.Scope != "":
		return e.Budget.Scope
	case e.Balance.Scope != "":
		return e.Balance.Scope
	}
	// An event of no scope (pricing.defined.v1, default.defined.v1): a subject that still
	// has the layout's token count.
	return events.Scope(NoScope + ":" + NoScope)
}

// NoScope is the scope kind and id tokens of the subject of an event that
// names no scope.
const NoScope = "_"

// encode writes the body without HTML escaping, so Event keeps the exact
// bytes of the ledger.
func (m Message) encode() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// rawLane and rawBudget read a revision keeping each event's bytes.
type rawLane struct {
	Schema   string `json:"schema"`
	Balances []struct {
		Balance
		Ref    events.BalanceRef `json:"balance"`
		Events []json.RawMessage `json:"events"`
	} `json:"balances"`
}

type rawBudget struct {
	Schema string            `json:"schema"`
	Events []json.RawMessage `json:"events"`
}

// Split returns the feed messages of the ledger revision data, stored at
// stream sequence seq under key at time at, in feed order. It is what a
// relay publishes; a consumer never needs it.
func Split(seq uint64, key string, at time.Time, data []byte) ([]Message, error) {
	var out []Message
	add := func(raw json.RawMessage, bal *Balance) error {
		var head struct {
			Type events.Type `json:"type"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return err
		}
		if _, err := events.DecodeEvent(raw); err != nil {
			return err
		}
		i := len(out)
		out = append(out, Message{Schema: streams.FeedSchema, ID: events.EventID(seq, i), SourceSeq: seq, Index: i,
			Key: key, CommittedAt: at.UTC(), Type: head.Type, Balance: bal, Event: raw})
		return nil
	}
	switch {
	case streams.IsLaneKey(key):
		var rev rawLane
		if err := json.Unmarshal(data, &rev); err != nil {
			return nil, err
		}
		if rev.Schema != events.SchemaLane && rev.Schema != events.SchemaLaneV1 {
			return nil, fmt.Errorf("schema %q under a lane key", rev.Schema)
		}
		for _, b := range rev.Balances {
			bal := b.Balance
			bal.Ref = b.Ref
			for _, e := range b.Events {
				if err := add(e, &bal); err != nil {
					return nil, err
				}
			}
		}
	case streams.IsBudgetKey(key):
		var rev rawBudget
		if err := json.Unmarshal(data, &rev); err != nil {
			return nil, err
		}
		if rev.Schema != events.SchemaBudget && rev.Schema != events.SchemaBudgetV1 {
			return nil, fmt.Errorf("schema %q under a budget key", rev.Schema)
		}
		for _, e := range rev.Events {
			if err := add(e, nil); err != nil {
				return nil, err
			}
		}
	case streams.IsPricingKey(key), streams.IsDefaultKey(key):
		// A model's price and a kind's default name no scope: their
		// subject's scope tokens are NoScope.
		var rev rawBudget
		if err := json.Unmarshal(data, &rev); err != nil {
			return nil, err
		}
		if rev.Schema != events.SchemaPricing && rev.Schema != events.SchemaDefault {
			return nil, fmt.Errorf("schema %q under a pricing or default key", rev.Schema)
		}
		for _, e := range rev.Events {
			if err := add(e, nil); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("key %q is neither a lane, a budget nor a pricing key", key)
	}
	return out, nil
}
