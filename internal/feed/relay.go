package feed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// DefaultRetry is how long a relay waits before it starts again after an
// error other than losing a race to another relay.
const DefaultRetry = time.Second

// DefaultQueue bounds the events a relay holds that its replica's fold
// handed it and the feed has not taken yet. A full queue holds the fold
// back (the replica's lag shows it), at most DefaultQueueWait for each
// revision.
const DefaultQueue = 1 << 16

// DefaultQueueWait is how long a full queue may hold the fold back for one
// revision (WithQueueWait): a relay that appends keeps freeing room well
// within it (a back-fill is paced by the feed this way), one that appends
// nothing (the feed unreachable, stalled) would otherwise hold the whole
// ledger back. Past it the relay drops that revision's events and every
// later one (Dropped), so the ledger keeps serving; the feed stops before
// the first dropped event. Once the feed takes appends again, the relay
// gets the dropped events back from its replica's fold (WithRefold:
// ledger.Ledger.RefoldPassed reads the revisions it dropped, whose
// sequences it keeps, from the ledger stream again), a few hundred
// revisions at a time, and queues them; after the last one it queues
// what the fold hands it again. It resumes sooner if the feed holds the
// last one dropped (another replica's relay appended them). A relay
// without a refold, or that dropped more than maxGapRuns revisions each
// apart from the previous one by something the fold refused, resumes
// when its replica starts again (its fold then starts at or before the
// feed's end, and the relay back-fills). No event is lost from the feed
// for good.
const DefaultQueueWait = 5 * time.Second

// DefaultAppendWait bounds how long a relay waits for the feed to
// acknowledge an append (WithAppendWait). An append that is never
// answered (the feed stream without a leader, or stopped on its nodes)
// would otherwise hold the relay for good, past the stream's recovery;
// past it the relay starts again from the feed's end, as after any error.
const DefaultAppendWait = 10 * time.Second

// MaxInFlight bounds the feed appends a relay has in flight at once.
// Pipelining is safe: each append expects the feed's sequence just before
// it, and every relay hands the same verified events in the same order,
// so the message at a feed sequence is always the same event, whoever
// appended it.
const MaxInFlight = 256

// expectsMsgID reports whether the relay's pipelined appends to feed
// stream s also expect the previous append's Nats-Msg-Id: only on a
// stream of one replica. A clustered nats-server checks that header only
// when each node applies the entry, where a mismatch is a critical write
// error that stops the stream on every node for good (it stays in the raft
// log): another relay appending k events after the tail this one read,
// with this one's window holding more than k, caused one (the window's
// first k appends failed on the expected sequence, the next passed it at
// the leader and failed on the id when applied), and so would a single
// forged message. On a clustered stream the expected sequence alone keeps
// the appends exactly once and in order among relays, and flush finds a
// message no trusted key signed that took an event's place (checkBefore).
func expectsMsgID(s jetstream.Stream) bool {
	return s.CachedInfo().Config.Replicas <= 1
}

// maxWalkBack is how many messages back from the feed's end a relay
// looks for the last message a trusted key signed before it looks for the
// newest one it knows of (its last append, its checkpoint).
const maxWalkBack = 1024

// DefaultMaxTailScan bounds how many messages a relay reads back from the
// feed's end to find the last one a trusted key signed (WithMaxTailScan):
// about 6 s of reads. More messages than that no trusted key signed after
// the last it knows of stall the relay, loudly (Stalled), rather than let
// it guess where the feed stands.
const DefaultMaxTailScan = 1 << 16

// Relay appends to the feed stream every event of every revision its
// replica's fold passes (a ledger.Reader: Fold), one message per event, in
// commit order. It opens no consumer on the ledger: what the replica
// skipped never reaches the feed, and every kind of event the ledger
// records (reservations, budgets, prices, defaults, thresholds, voids) does.
// Any number of relays may run at once against one ledger: each event is
// appended once.
//
// A relay signs each message it appends (with its replica's key) and
// believes only what trusted keys signed: where the feed stands is the
// last message a trusted key signed, never a header anyone with the
// feed's write permission can set; a forged message is skipped and
// counted (Forged), and the relay appends after it.
type Relay struct {
	js jetstream.JetStream
	// pub is js with an acknowledgement timeout of appendWait, for the
	// appends.
	pub        jetstream.JetStream
	appendWait time.Duration
	l          streams.Layout
	log        *slog.Logger
	retry      time.Duration
	ensure     []streams.FeedOption
	maxAge     time.Duration
	// signer signs what this relay appends (nil: unsigned); keys are the
	// keys whose messages it believes (nil: any).
	signer  func() *signing.Signer
	keys    func() *signing.KeySet
	ckEvery uint64

	mu     sync.Mutex
	more   *sync.Cond // signalled on push, pop and close
	q      []Message
	max    int
	closed bool
	// gap is the events dropped since the queue overflowed (nil: none);
	// wait how long a full queue holds the fold back.
	gap  *gap
	wait time.Duration

	relayed, lost, forged, drift atomic.Uint64
	// known is the newest feed message this relay knows a trusted key
	// signed (its own last append, or one readTail found): where
	// readTail stops looking back.
	known atomic.Pointer[mark]
	// maxScan bounds how many messages readTail reads (WithMaxTailScan).
	maxScan uint64
	// stalled: the relay cannot tell where the feed stands, and appends
	// nothing (Stalled).
	stalled atomic.Bool
	// dropping mirrors gap != nil for Stalled; dropped counts the events
	// dropped (Dropped).
	dropping atomic.Bool
	dropped  atomic.Uint64
	// refold reads again what the replica's fold handed out (WithRefold),
	// for the events this relay dropped; refolded counts the events it
	// got back that way (Refolded), refoldGone that the fold no longer
	// remembers enough to (logged once).
	refold     Refolder
	refolded   atomic.Uint64
	refoldGone bool
	// appendFault, set only by tests, fails appends while it returns an
	// error.
	appendFault func() error
	// forgedTo is the feed sequence up to which the forged messages the
	// relay met are counted (countForged): each is counted once, however
	// often the relay reads past it.
	forgedTo            atomic.Uint64
	ckWritten, ckLoaded atomic.Uint64
	// tailSeen is the last position the feed was known to hold (see
	// Ceiling); tailReady reports it was read.
	tailSeen atomic.Pointer[Position]
}

// Option configures a Relay.
type Option func(*Relay) error

// WithLogger logs the relay's restarts and what it skips.
func WithLogger(log *slog.Logger) Option {
	return func(r *Relay) error {
		if log == nil {
			return errors.New("feed: nil logger")
		}
		r.log = log
		return nil
	}
}

// WithSigner has the relay sign every message it appends with the key s
// returns (the replica's signing key: a reader of the feed verifies it
// with the replicas' public keys).
func WithSigner(s func() *signing.Signer) Option {
	return func(r *Relay) error {
		if s == nil {
			return errors.New("feed: nil signer")
		}
		r.signer = s
		return nil
	}
}

// WithTrust makes the relay believe only feed messages and checkpoints
// signed by a key that keys returns trusts (the ledger's trusted keys):
// anything else in the feed is forged, skipped and counted. keys is called
// when needed, so the ledger's current keys apply.
func WithTrust(keys func() *signing.KeySet) Option {
	return func(r *Relay) error {
		if keys == nil {
			return errors.New("feed: nil trust")
		}
		r.keys = keys
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
// ledger the same value: each sets it on the stream when it starts, and
// reports a feed whose limits were changed under it (Drift).
func WithMaxAge(d time.Duration) Option {
	return func(r *Relay) error {
		if err := streams.WithFeedMaxAge(d)(&jetstream.StreamConfig{}); err != nil {
			return err
		}
		r.ensure = append(r.ensure, streams.WithFeedMaxAge(d))
		r.maxAge = d
		return nil
	}
}

// WithQueue bounds the events the relay holds (default DefaultQueue).
func WithQueue(n int) Option {
	return func(r *Relay) error {
		if n < 1 {
			return fmt.Errorf("feed: queue must hold at least one event, got %d", n)
		}
		r.max = n
		return nil
	}
}

// WithAppendWait sets how long the relay waits for the feed to
// acknowledge an append before it starts again (default
// DefaultAppendWait).
func WithAppendWait(d time.Duration) Option {
	return func(r *Relay) error {
		if d <= 0 {
			return fmt.Errorf("feed: append wait must be positive, got %s", d)
		}
		r.appendWait = d
		return nil
	}
}

// WithMaxTailScan bounds how many messages the relay reads back from the
// feed's end to find where it stands (default DefaultMaxTailScan).
func WithMaxTailScan(n int) Option {
	return func(r *Relay) error {
		if n < maxWalkBack {
			return fmt.Errorf("feed: the tail scan must read at least %d messages, got %d", maxWalkBack, n)
		}
		r.maxScan = uint64(n)
		return nil
	}
}

// WithQueueWait sets how long a full queue holds the fold back for one
// revision before the relay drops events (default DefaultQueueWait).
func WithQueueWait(d time.Duration) Option {
	return func(r *Relay) error {
		if d <= 0 {
			return fmt.Errorf("feed: queue wait must be positive, got %s", d)
		}
		r.wait = d
		return nil
	}
}

// Refolder reads again the revisions the replica's fold passed, at stream
// sequences from to to, at most max messages read
// (ledger.Ledger.RefoldPassed): the revisions in stream order and the
// sequence after the last one read. The relay asks only for runs of
// sequences whose every revision the fold handed it (and it dropped), so
// a Refolder need not remember what the fold refused in between.
type Refolder func(ctx context.Context, from, to uint64, max int) ([]*gate.Revision, uint64, error)

// WithRefold has the relay get the events it dropped (a full queue, see
// DefaultQueueWait) back from its replica's fold once the feed takes
// appends again, rather than wait for another relay or a restart.
func WithRefold(f Refolder) Option {
	return func(r *Relay) error {
		if f == nil {
			return errors.New("feed: nil refold")
		}
		r.refold = f
		return nil
	}
}

// UnsafeAppendFaultForTesting fails every append while f returns an
// error, as a feed that takes nothing would. Tests only.
func UnsafeAppendFaultForTesting(f func() error) Option {
	return func(r *Relay) error {
		r.appendFault = f
		return nil
	}
}

// NewRelay returns a relay for the ledger of l. It does no I/O until
// Ceiling or Run. Hand it to the replica's fold (ledger.AddReader) before
// the fold starts.
func NewRelay(js jetstream.JetStream, l streams.Layout, opts ...Option) (*Relay, error) {
	r := &Relay{js: js, l: l, log: slog.New(slog.DiscardHandler), retry: DefaultRetry, max: DefaultQueue,
		maxAge: streams.DefaultFeedMaxAge, ckEvery: DefaultCheckpointEvery, maxScan: DefaultMaxTailScan, wait: DefaultQueueWait,
		appendWait: DefaultAppendWait,
		signer:     func() *signing.Signer { return nil }, keys: func() *signing.KeySet { return nil }}
	r.more = sync.NewCond(&r.mu)
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	pub, err := withAckTimeout(js, r.appendWait)
	if err != nil {
		return nil, err
	}
	r.pub = pub
	return r, nil
}

// withAckTimeout returns a JetStream context on js's connection, API
// prefix or domain whose asynchronous publishes fail with
// jetstream.ErrAsyncPublishTimeout when unanswered for d (js's own may
// have no such timeout: nats.go's default waits for ever).
func withAckTimeout(js jetstream.JetStream, d time.Duration) (jetstream.JetStream, error) {
	o := js.Options()
	opts := []jetstream.JetStreamOpt{jetstream.WithPublishAsyncTimeout(d)}
	if o.DefaultTimeout > 0 {
		opts = append(opts, jetstream.WithDefaultTimeout(o.DefaultTimeout))
	}
	switch {
	case o.Domain != "":
		return jetstream.NewWithDomain(js.Conn(), o.Domain, opts...)
	case o.APIPrefix != "":
		return jetstream.NewWithAPIPrefix(js.Conn(), o.APIPrefix, opts...)
	default:
		return jetstream.New(js.Conn(), opts...)
	}
}

// Relayed is how many events this relay appended.
func (r *Relay) Relayed() uint64 { return r.relayed.Load() }

// Lost is how many appends this relay lost to another relay (it then
// skipped what the other had appended).
func (r *Relay) Lost() uint64 { return r.lost.Load() }

// Forged counts the feed messages this relay found that no trusted key
// signed, and skipped.
func (r *Relay) Forged() uint64 { return r.forged.Load() }

// Drift counts the times this relay found the feed stream's limits
// changed under it (and set them back).
func (r *Relay) Drift() uint64 { return r.drift.Load() }

// Stalled reports that the relay cannot tell where the feed stands (more
// messages no trusted key signed after the last it knows of than it
// reads, or none and no checkpoint) and appends nothing until it can: the
// feed falls behind the ledger, but loses no event. It is logged once per
// incident, and the relay tries again every retry interval.
//
// It also reports a relay that dropped events because its queue
// overflowed (Dropped) and has not resumed yet.
func (r *Relay) Stalled() bool { return r.stalled.Load() || r.dropping.Load() }

// Refolded is how many of the events the relay dropped it got back from
// its replica's fold (WithRefold) and queued again.
func (r *Relay) Refolded() uint64 { return r.refolded.Load() }

// Dropped is how many events the relay dropped because its queue was
// full for longer than the queue wait (DefaultQueueWait). The feed stops
// before the first of them until the relay resumes; none is lost for good.
func (r *Relay) Dropped() uint64 { return r.dropped.Load() }

// gap is the events a relay dropped: the first and the last, and the
// sequences of the revisions they came in, as runs of consecutive
// sequences (what it reads back: the fold passed each). Only revisions
// the fold passed grow runs, so junk written to the ledger in between
// costs nothing here; past maxGapRuns runs (that many genuine revisions,
// each apart from the last by something the fold refused) the relay
// stops recording (overflow) and waits for another relay or a restart.
type gap struct {
	from, to Position
	runs     []seqRun
	overflow bool
}

// seqRun is the stream sequences lo to hi.
type seqRun struct{ lo, hi uint64 }

// maxGapRuns bounds the runs a gap records.
const maxGapRuns = 1 << 16

// record adds seq, the sequence of a revision dropped, to g's runs.
func (g *gap) record(seq uint64) {
	if n := len(g.runs); n > 0 && seq <= g.runs[n-1].hi+1 && seq >= g.runs[n-1].lo {
		g.runs[n-1].hi = max(g.runs[n-1].hi, seq)
		return
	}
	if len(g.runs) >= maxGapRuns {
		g.overflow = true
		return
	}
	g.runs = append(g.runs, seqRun{seq, seq})
}

// Queued is how many events wait to be appended.
func (r *Relay) Queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q)
}

// Fold queues the events of one revision the replica's fold passed
// (ledger.Reader). While the queue is full it waits, at most the queue
// wait: what another login writes to the feed must not hold the ledger
// back. Then, and until the relay resumes, it drops the events instead
// (see DefaultQueueWait). Once Run has ended nothing is queued.
func (r *Relay) Fold(rev *gate.Revision, _ bool) {
	ms := SplitRevision(rev)
	if len(ms) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gap == nil && len(r.q) >= r.max && !r.closed {
		expired := false
		tm := time.AfterFunc(r.wait, func() {
			r.mu.Lock()
			expired = true
			r.more.Broadcast()
			r.mu.Unlock()
		})
		for len(r.q) >= r.max && !r.closed && !expired {
			r.more.Wait()
		}
		tm.Stop()
		if len(r.q) >= r.max && !r.closed {
			r.gap = &gap{from: ms[0].Position()}
			r.refoldGone = false
			r.dropping.Store(true)
			r.log.Error("feed relay: the queue is full and the feed took nothing for the queue wait; dropping events so the ledger keeps serving (the feed stops before them; once it takes appends again, the relay reads them back from the ledger)",
				"first_dropped", ms[0].ID, "queued", len(r.q), "wait", r.wait)
		}
	}
	if r.closed {
		return
	}
	if r.gap != nil {
		r.gap.to = ms[len(ms)-1].Position()
		r.gap.record(rev.Seq)
		r.dropped.Add(uint64(len(ms)))
		return
	}
	r.q = append(r.q, ms...)
	r.more.Broadcast()
}

// waitingOnGap reports whether the queue is empty with events dropped after
// it (the relay has nothing to append until the feed holds them).
func (r *Relay) waitingOnGap() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q) == 0 && r.gap != nil
}

// refoldBatch is how many ledger messages one refold step reads.
const refoldBatch = 256

// refoldGap gets the next dropped events back from the replica's fold
// (WithRefold) and queues them; once it has queued the last one dropped,
// the relay queues what its replica's fold hands it again. The queue is
// empty when it is called (waitingOnGap), and it adds one step's events
// at most, beyond the queue's bound if a revision holds more. It reports
// whether it moved (false: no refold, or the fold cannot tell any more).
func (r *Relay) refoldGap(ctx context.Context) (bool, error) {
	r.mu.Lock()
	g := r.gap
	gone := r.refoldGone
	var run seqRun
	var from, to Position
	if g != nil {
		for len(g.runs) > 0 && g.runs[0].hi < g.from.Seq {
			g.runs = g.runs[1:]
		}
		if len(g.runs) > 0 {
			run = g.runs[0]
		}
		from, to = g.from, g.to
		if g.overflow && !gone {
			gone, r.refoldGone = true, true
			r.log.Error("feed relay: too many revisions dropped apart from one another to read them back; the events dropped stay out of the feed until another relay appends them or this replica starts again",
				"from", g.from.ID(), "to", g.to.ID(), "runs", len(g.runs))
		}
	}
	r.mu.Unlock()
	if r.refold == nil || g == nil || gone || run.hi == 0 {
		return false, nil
	}
	revs, next, err := r.refold(ctx, max(run.lo, from.Seq), run.hi, refoldBatch)
	if errors.Is(err, ledger.ErrRefoldForgotten) {
		r.mu.Lock()
		r.refoldGone = true
		r.mu.Unlock()
		r.log.Error("feed relay: the replica no longer remembers which revisions its fold refused that far back; the events dropped stay out of the feed until another relay appends them or this replica starts again",
			"from", g.from.ID(), "to", g.to.ID())
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("feed: reading the dropped events again: %w", err)
	}
	var ms []Message
	for _, rev := range revs {
		for _, m := range SplitRevision(rev) {
			if p := m.Position(); !p.Before(from) && !to.Before(p) {
				ms = append(ms, m)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gap != g || r.gap.from != from {
		return true, nil // closed meanwhile (another relay appended them)
	}
	r.q = append(r.q, ms...)
	r.refolded.Add(uint64(len(ms)))
	r.gap.from = Position{Seq: next}
	// What lies between this run and the next, the fold did not pass.
	for len(g.runs) > 0 && g.runs[0].hi < next {
		g.runs = g.runs[1:]
	}
	if len(g.runs) > 0 {
		r.gap.from = Position{Seq: max(next, g.runs[0].lo)}
	}
	if r.gap.to.Before(r.gap.from) {
		r.log.Info("feed relay: got the events it dropped back from the replica's fold; relaying again", "events", r.refolded.Load())
		r.gap = nil
		r.dropping.Store(false)
	}
	r.more.Broadcast()
	return next > from.Seq, nil
}

// closeGap resumes queueing if the feed holds the last event dropped (at
// p or before it): another relay appended them.
func (r *Relay) closeGap(p Position) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gap == nil || p.Before(r.gap.to) {
		return
	}
	r.log.Info("feed relay: the feed holds the events this relay dropped (another relay appended them); relaying again", "from", r.gap.from.ID(), "to", r.gap.to.ID())
	r.gap = nil
	r.dropping.Store(false)
}

// Ceiling returns the position up to which the feed holds the ledger's
// events, as the last message a trusted key signed says (or this relay's
// checkpoint, when every message aged out): the newest ledger snapshot a
// relaying replica may start its fold from (ledger.WithSnapshotCeiling),
// so that no event between the feed's end and the snapshot is missed. 0:
// the feed holds nothing, or does not exist (the fold starts from the
// ledger's first revision and the feed back-fills).
func (r *Relay) Ceiling(ctx context.Context) (uint64, error) {
	s, err := r.js.Stream(ctx, r.l.FeedStreamName())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	t, err := r.readTail(ctx, s)
	if err != nil {
		return 0, err
	}
	return t.last.Seq, nil
}

// Run appends the queued events to the feed until ctx ends; it returns
// ctx's error. It ensures the feed stream (reporting and setting back
// limits changed under it), finds where the feed stands, drops the queued
// events the feed holds already and appends the others. Errors on the way
// (a connection lost, a stream leader moving, another relay appending
// first) are logged and retried.
func (r *Relay) Run(ctx context.Context) error {
	defer func() {
		r.mu.Lock()
		r.closed = true
		r.more.Broadcast()
		r.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.more.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	var last tail
	quick := false // the last restart was immediate
	logged := ""   // the error last logged
	for {
		s, err := r.ensureFeed(ctx)
		progress := r.relayed.Load()
		if err == nil {
			last, err = r.runOnce(ctx, s)
		}
		if ctx.Err() != nil {
			if last.lastSeq > 0 {
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				r.writeCheckpoint(wctx, last)
				cancel()
			}
			return ctx.Err()
		}
		if errors.Is(err, errFeedMoved) && (!quick || r.relayed.Load() != progress) {
			// Another relay appended first: start again at once, but
			// not twice in a row without appending anything, so that
			// nothing at the feed's end can make the relay spin.
			r.log.Debug("feed relay: another relay moved the feed; starting again from its end", "err", err)
			quick = true
			continue
		}
		quick = false
		if err.Error() != logged || r.relayed.Load() != progress {
			// Once per incident: the same error again without an
			// append in between is the same incident.
			logged = err.Error()
			lvl := slog.LevelWarn
			if errors.Is(err, errBuried) || errors.Is(err, errSquatted) {
				lvl = slog.LevelError
			}
			r.log.Log(ctx, lvl, "feed relay: restarting", "err", err)
		} else {
			r.log.Debug("feed relay: restarting", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(r.retry):
		}
	}
}

// ensureFeed creates the feed stream or checks and sets back its limits.
func (r *Relay) ensureFeed(ctx context.Context) (jetstream.Stream, error) {
	s, err := r.js.Stream(ctx, r.l.FeedStreamName())
	if err != nil {
		return streams.EnsureFeed(ctx, r.js, r.l, r.ensure...)
	}
	have := s.CachedInfo().Config
	if have.MaxAge == r.maxAge && have.DenyDelete && have.DenyPurge && have.Discard == jetstream.DiscardNew && have.MaxMsgs == -1 && have.MaxBytes == -1 {
		return s, nil
	}
	r.drift.Add(1)
	r.log.Error("feed: the feed stream's limits were changed under the relay (or differ from its --feed-max-age); setting them back",
		"stream", r.l.FeedStreamName(), "max_age", have.MaxAge, "want_max_age", r.maxAge, "deny_delete", have.DenyDelete, "deny_purge", have.DenyPurge, "max_msgs", have.MaxMsgs, "max_bytes", have.MaxBytes)
	uctx, cancel := context.WithTimeout(ctx, feedUpdateWait)
	defer cancel()
	fixed, err := streams.EnsureFeed(uctx, r.js, r.l, r.ensure...)
	if err != nil {
		// Under spendgate roles a replica may not update the feed
		// stream (an update could drop what it holds): the relay appends
		// on to the stream as it is, and the operator sets it back.
		r.log.Error("feed: could not set the feed stream's limits back; appending to it as it is (only the operator's identity may update it: nats stream edit)",
			"stream", r.l.FeedStreamName(), "err", err)
		return s, nil
	}
	return fixed, nil
}

// feedUpdateWait bounds the relay's attempt to set the feed stream's
// limits back.
const feedUpdateWait = 5 * time.Second

// tail is where the feed stands: the feed sequence of its last message
// (what the next append expects, whoever wrote that message) and the
// position of the last event a trusted key signed at or before it, with
// that message's feed sequence (lastSeq; 0 when it aged out and a
// checkpoint says where the feed stood).
type tail struct {
	feedSeq uint64
	last    Position
	lastSeq uint64
}

// mark is a message of the feed a trusted key signed: its event's
// position and its feed sequence.
type mark struct {
	pos Position
	seq uint64
}

// runOnce appends queued events after the feed's tail until an error.
func (r *Relay) runOnce(ctx context.Context, s jetstream.Stream) (tail, error) {
	t, err := r.readTail(ctx, s)
	r.stalled.Store(errors.Is(err, errBuried))
	if err != nil {
		return t, err
	}
	next := t.last
	byID := expectsMsgID(s)
	var win []inflight
	sinceCk := uint64(0)
	for {
		if len(win) == 0 && r.waitingOnGap() {
			// Everything before the dropped events is appended: get
			// them back from the replica's fold; if it cannot, look
			// every retry interval whether another relay appended them.
			if more, err := r.refoldGap(ctx); err != nil {
				return t, err
			} else if more {
				continue
			}
			select {
			case <-ctx.Done():
				return t, ctx.Err()
			case <-time.After(r.retry):
			}
			nt, err := r.readTail(ctx, s)
			if err != nil {
				return t, err
			}
			t, next = nt, later(next, nt.last)
			r.closeGap(nt.last)
			continue
		}
		m, ok := r.next(ctx, len(win) > 0)
		if !ok {
			if ctx.Err() != nil {
				return t, ctx.Err()
			}
			// Nothing queued: append what is in flight now, so a live
			// event is not held back for the window to fill.
			if len(win) > 0 {
				if t, err = r.flush(ctx, s, t, win); err != nil {
					// The events of win are not lost: they come again
					// from the queue's front after the relay starts
					// again, and those the feed holds are dropped then.
					r.requeue(win)
					return t, err
				}
				sinceCk += uint64(len(win))
				win = win[:0]
				next = later(next, t.last)
				if r.ckEvery > 0 && sinceCk >= r.ckEvery {
					r.writeCheckpoint(ctx, t)
					sinceCk = 0
				}
			}
			continue
		}
		if !next.Before(m.Position()) {
			r.pop()
			continue // in the feed already
		}
		msg, err := r.feedMsg(m)
		if err != nil {
			return t, err
		}
		id := msgID(m, msg.Header)
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(id), jetstream.WithExpectLastSequence(t.feedSeq + uint64(len(win)))}
		if len(win) > 0 && byID {
			// Pipelined: this append must follow the window's previous
			// event, not merely the sequence it was expected to take. A
			// message no relay wrote (a forged one) that took that
			// sequence would make the previous append fail and this one
			// land after the forgery, the previous event missing from
			// the feed for good; expecting the previous append's
			// Nats-Msg-Id makes this one fail too, and the relay starts
			// again from the feed's tail. That id carries this relay's
			// signature (msgID), so no message it did not sign can
			// satisfy the expectation.
			opts = append(opts, jetstream.WithExpectLastMsgID(win[len(win)-1].id))
		}
		if r.appendFault != nil {
			if err := r.appendFault(); err != nil {
				r.requeue(win)
				return t, err
			}
		}
		f, err := r.pub.PublishMsgAsync(msg, opts...)
		if err != nil {
			// The window's events are not lost: they come again from
			// the queue's front after the relay starts again, and those
			// the feed holds are dropped then.
			r.requeue(win)
			return t, err
		}
		r.pop()
		win = append(win, inflight{m: m, id: id, f: f})
		next = m.Position()
		if len(win) >= MaxInFlight {
			if t, err = r.flush(ctx, s, t, win); err != nil {
				r.requeue(win) // as above
				return t, err
			}
			sinceCk += uint64(len(win))
			win = win[:0]
			next = later(next, t.last)
		}
	}
}

// next returns the queue's first event without taking it (pop takes it),
// waiting for one unless nowait; false when there is none (nowait) or ctx
// ended.
func (r *Relay) next(ctx context.Context, nowait bool) (Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.q) == 0 {
		if nowait || ctx.Err() != nil {
			return Message{}, false
		}
		r.more.Wait()
	}
	return r.q[0], true
}

// pop drops the queue's first event.
func (r *Relay) pop() {
	r.mu.Lock()
	r.q[0] = Message{}
	r.q = r.q[1:]
	if len(r.q) == 0 {
		r.q = nil // let the array go
	}
	r.more.Broadcast()
	r.mu.Unlock()
}

// requeue puts back at the queue's front the events of an unflushed
// window.
func (r *Relay) requeue(win []inflight) {
	back := make([]Message, 0, len(win))
	for _, w := range win {
		back = append(back, w.m)
	}
	r.mu.Lock()
	r.q = append(back, r.q...)
	r.mu.Unlock()
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

// inflight is an append waiting for its acknowledgement, with the
// Nats-Msg-Id it was published with.
type inflight struct {
	m  Message
	id string
	f  jetstream.PubAckFuture
}

// msgIDSigChars is how many characters of an append's signature its
// Nats-Msg-Id carries: 132 bits, which nobody without the signing key can
// guess.
const msgIDSigChars = 22

// msgID is the Nats-Msg-Id of the append of m, whose headers h this relay
// signed: the event's id, then "." and the start of the signature
// ("42-0.Xq3...").
//
// The id must not be one another login can take first. JetStream checks a
// message's Nats-Msg-Id before anything else: an append whose id a message
// already in the duplicate window carries is answered "duplicate" and not
// stored. With the bare event id ("42-0"), anyone who may publish to the
// feed could publish a message under the ids of the events to come and
// have every relay's append of them dropped for the whole window. A
// signature is deterministic (Ed25519) and nobody can compute it without
// the key, so only the relay can publish under this id before it does,
// and a retry of the same append carries the same id. Relays of other
// replicas sign with other keys and so use other ids for the same event:
// exactly once does not rest on the id but on the compare-and-set of
// Nats-Expected-Last-Sequence (and an append retried after its first try
// landed fails it too). An unsigned relay (no key: nothing is verified)
// uses the bare event id.
func msgID(m Message, h nats.Header) string {
	sig := h.Get(streams.HeaderSig)
	if len(sig) < msgIDSigChars {
		return m.ID
	}
	return m.ID + "." + sig[:msgIDSigChars]
}

// flush waits for the appends in win, in order, and returns the feed's new
// tail. If another relay appended some of them first (a duplicate id or a
// wrong last sequence), it re-reads the tail, which must then be at or past
// the window's last event (errFeedMoved otherwise: the caller starts again
// from the tail).
func (r *Relay) flush(ctx context.Context, s jetstream.Stream, t tail, win []inflight) (tail, error) {
	lost := false
	refused := false // an append of win failed on its expected sequence
	for i, p := range win {
		select {
		case ack := <-p.f.Ok():
			if ack.Duplicate {
				// Only this append itself (a retry) or a relay with the
				// same key can hold its id (msgID); anything else is a
				// message that took it: say so rather than believe it.
				if err := r.checkDuplicate(ctx, s, p, ack.Sequence); err != nil {
					return t, err
				}
				lost = true
				continue
			}
			if refused && i > 0 {
				// Landed behind an append that lost: the message before it
				// must be that append's event, another relay's.
				r.checkBefore(ctx, s, win[i-1], ack.Sequence-1)
			}
			r.relayed.Add(1)
			t = tail{feedSeq: ack.Sequence, last: p.m.Position(), lastSeq: ack.Sequence}
			r.known.Store(&mark{pos: t.last, seq: ack.Sequence})
		case err := <-p.f.Err():
			if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
				return t, fmt.Errorf("feed: the feed stream %s did not acknowledge the append of event %s within %s (has it a leader? nats stream info %s): %w",
					r.l.FeedStreamName(), p.m.ID, r.appendWait, r.l.FeedStreamName(), err)
			}
			if !streams.IsConflict(err) {
				return t, err
			}
			lost, refused = true, true
		case <-ctx.Done():
			return t, ctx.Err()
		}
	}
	if !lost {
		return t, nil
	}
	r.lost.Add(1)
	nt, err := r.readTail(ctx, s)
	if err != nil {
		return t, err
	}
	if nt.last.Before(win[len(win)-1].m.Position()) {
		return t, errFeedMoved
	}
	return nt, nil
}

// getMsg reads the feed's message at seq through the feed stream's leader
// (jetstream.ErrMsgNotFound when there is none). Not a direct get: any
// replica of a clustered feed stream may answer one from a copy that
// lags, and a relay that read the feed's last message as missing took an
// older event for the feed's end and appended the next one again (live,
// on an R3 feed with two relays: an event twice in a row, the one after
// it missing).
func (r *Relay) getMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, getMsgWait)
		defer cancel()
	}
	reply, err := r.js.Conn().RequestWithContext(ctx, r.l.FeedMsgGetSubject(r.js), body)
	if err != nil {
		return nil, err
	}
	m, found, err := streams.DecodeMsgGetReply(reply.Data)
	if err == nil && !found {
		err = jetstream.ErrMsgNotFound
	}
	return m, err
}

// getMsgWait bounds a message get that has no deadline of its own.
const getMsgWait = 5 * time.Second

// checkBefore checks that the feed's message at seq, just before an append
// that landed behind one that lost its compare-and-set (prev), is prev's
// event signed by a trusted key: another relay appended it. On a clustered
// feed stream, whose appends expect no previous Nats-Msg-Id
// (expectsMsgID), a message no trusted key signed can take that place, and
// prev's event is then missing from the feed: it is counted as forged and
// logged at error level. A read that fails is logged, not returned: the
// appends have landed either way.
func (r *Relay) checkBefore(ctx context.Context, s jetstream.Stream, prev inflight, seq uint64) {
	sm, err := r.getMsg(ctx, seq)
	if err != nil {
		r.log.Warn("feed: cannot read the message before an append that landed behind one that lost", "feed_seq", seq, "event", prev.m.ID, "err", err)
		return
	}
	if m, ok, _ := r.trusted(sm.Subject, sm.Header, sm.Data); ok && m.Position() == prev.m.Position() {
		return
	}
	r.countForged(seq, seq)
	r.log.Error("feed: a message no trusted key signed took the place of an event in the feed; the event is missing from it (who may publish to the feed?)",
		"event", prev.m.ID, "feed_seq", seq)
}

// checkDuplicate checks that the message an append was deduplicated
// against, at feed sequence seq, is that append's event signed by a
// trusted key. Otherwise it counts it as forged and returns errSquatted.
func (r *Relay) checkDuplicate(ctx context.Context, s jetstream.Stream, p inflight, seq uint64) error {
	sm, err := r.getMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("feed: read the message append %s was deduplicated against (%d): %w", p.id, seq, err)
	}
	m, ok, _ := r.trusted(sm.Subject, sm.Header, sm.Data)
	if ok && m.Position() == p.m.Position() {
		return nil
	}
	r.countForged(seq, seq)
	r.log.Error("feed: an append was deduplicated against a message no trusted key signed: its Nats-Msg-Id was taken (is a signing key known to others?)",
		"event", p.m.ID, "msg_id", p.id, "feed_seq", seq)
	return errSquatted
}

// errSquatted: an append was deduplicated against a message that is not
// its event signed by a trusted key.
var errSquatted = errors.New("feed: an append's Nats-Msg-Id was taken by a message no trusted key signed")

// errFeedMoved: the feed's tail is not where this relay's appends put it
// and not past them either (another relay appended something else).
var errFeedMoved = errors.New("feed: the feed stream's last event is not the one this relay appended")

// readTail finds where the feed stands: its last sequence, and the last
// message a trusted key signed, whose position the feed holds up to. A
// message no trusted key signed is forged: counted and skipped, however
// many follow the last trusted one. It reads back from the feed's end, at
// most maxWalkBack messages, then, if none of those is trusted, down to
// the newest trusted message it knows of (this relay's last append, or
// its checkpoint, which it checks against the feed), at most maxScan
// messages in all: past that it returns errBuried rather than guess. It
// never counts messages as events: when every message after the
// checkpoint aged out, the feed stands at the checkpoint (an event
// appended after it whose message aged out is appended again; a Cursor
// skips it), never past it.
func (r *Relay) readTail(ctx context.Context, s jetstream.Stream) (tail, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return tail{}, err
	}
	st := info.State
	if st.LastSeq == 0 {
		r.seen(Position{})
		return tail{}, nil
	}
	first := max(st.FirstSeq, 1) // the oldest message kept
	if st.Msgs == 0 {
		first = st.LastSeq + 1 // every message aged out
	}
	lo := first // no trusted message below it need be read
	known := r.known.Load()
	if known != nil && known.seq <= st.LastSeq && known.seq >= first {
		lo = known.seq
	}
	found := func(m mark) (tail, error) {
		if m.seq < st.LastSeq && r.countForged(m.seq+1, st.LastSeq) {
			r.log.Error("feed: messages at the feed's end that no trusted key signed; skipped", "from", m.seq+1, "to", st.LastSeq)
		}
		r.known.Store(&m)
		r.seen(m.pos)
		return tail{feedSeq: st.LastSeq, last: m.pos, lastSeq: m.seq}, nil
	}
	var unsigned *Message
	// look reads back from seq down to stop; true: it found a trusted
	// message (at), or the first error.
	look := func(seq, stop uint64) (at mark, ok bool, next uint64, err error) {
		for ; seq >= stop && seq > 0; seq-- {
			sm, err := r.getMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return mark{}, false, seq, fmt.Errorf("feed: read the feed's message %d: %w", seq, err)
			}
			m, ok, isUnsigned := r.trusted(sm.Subject, sm.Header, sm.Data)
			if ok {
				return mark{pos: m.Position(), seq: seq}, true, seq, nil
			}
			if isUnsigned && unsigned == nil {
				unsigned = &m
			}
		}
		return mark{}, false, seq, nil
	}
	// The common case: a trusted message among the last few.
	quick := lo
	if st.LastSeq >= maxWalkBack && st.LastSeq-maxWalkBack+1 > quick {
		quick = st.LastSeq - maxWalkBack + 1
	}
	at, ok, next, err := look(st.LastSeq, quick)
	if err != nil {
		return tail{}, err
	}
	if ok {
		return found(at)
	}
	// Junk at the end: read on, down to the newest trusted message this
	// relay knows, or its checkpoint's.
	floor := known
	if floor == nil || floor.seq < first {
		floor = nil
		if ck, ok := r.checkpointMark(ctx, s, first, st.LastSeq); ok {
			floor = &ck
			if ck.seq >= first {
				lo = max(lo, ck.seq)
			}
		}
	}
	if next >= lo && next > 0 {
		if n := st.LastSeq - lo + 1; n > r.maxScan {
			r.countForged(next+1, st.LastSeq)
			return tail{}, fmt.Errorf("%w: %d messages to read back from feed sequence %d, the relay reads at most %d", errBuried, n, st.LastSeq, r.maxScan)
		}
		if at, ok, _, err = look(next, lo); err != nil {
			return tail{}, err
		}
		if ok {
			return found(at)
		}
	}
	r.countForged(max(lo, first), st.LastSeq)
	switch {
	case floor != nil && floor.seq >= first:
		return found(*floor) // the known message is still the last trusted one
	case floor != nil:
		// Every message since the checkpoint aged out, or none is
		// trusted: the feed holds the events up to it.
		r.log.Info("feed relay: no trusted message in the feed after this relay's checkpoint; starting from it", "checkpoint", floor.pos.ID(), "checkpoint_feed_seq", floor.seq, "feed_seq", st.LastSeq)
		r.seen(floor.pos)
		return tail{feedSeq: st.LastSeq, last: floor.pos}, nil
	case unsigned != nil && r.keys() == nil:
		// A feed written before relays signed, read by a relay that
		// checks no signature: its newest readable message is taken as
		// it is. A relay with trusted keys never takes an unsigned
		// message's word for where the feed stands (anyone who may
		// publish to the feed could write one): it goes by its
		// checkpoint (above), or by the feed's whole history.
		r.log.Warn("feed relay: the feed's messages are not signed (written by an older version); trusting the newest readable one", "event", unsigned.ID)
		r.seen(unsigned.Position())
		return tail{feedSeq: st.LastSeq, last: unsigned.Position()}, nil
	case first == 1:
		// Every message the feed ever held was read: none is an event.
		r.seen(Position{})
		return tail{feedSeq: st.LastSeq}, nil
	}
	return tail{}, fmt.Errorf("%w: no message since feed sequence %d (the oldest kept) is signed by a trusted key, and no checkpoint says where the feed stands", errBuried, first)
}

// errBuried: the relay cannot tell where the feed stands, and appends
// nothing rather than guess (it tries again, and reports it: Stalled).
var errBuried = errors.New("feed: cannot find the last message a trusted key signed; the relay appends nothing (see docs/wire.md, how the relay keeps the feed)")

// checkpointMark is this relay's newest checkpoint, checked against the
// feed: the message at its feed sequence must be its event, signed by a
// trusted key, unless it aged out (before first). A checkpoint the feed
// contradicts is ignored.
func (r *Relay) checkpointMark(ctx context.Context, s jetstream.Stream, first, last uint64) (mark, bool) {
	ck, ok := r.loadCheckpoint(ctx)
	if !ok {
		return mark{}, false
	}
	m := mark{pos: ck.Position(), seq: ck.FeedSeq}
	if ck.FeedSeq > last || ck.FeedSeq == 0 {
		r.log.Error("feed relay: checkpoint skipped: it names a feed sequence past the feed's end", "checkpoint", m.pos.ID(), "checkpoint_feed_seq", ck.FeedSeq, "feed_seq", last)
		return mark{}, false
	}
	if ck.FeedSeq < first {
		return m, true // aged out
	}
	sm, err := r.getMsg(ctx, ck.FeedSeq)
	if err != nil {
		r.log.Warn("feed relay: checkpoint skipped: its message cannot be read", "checkpoint", m.pos.ID(), "checkpoint_feed_seq", ck.FeedSeq, "err", err)
		return mark{}, false
	}
	fm, ok, _ := r.trusted(sm.Subject, sm.Header, sm.Data)
	if !ok || fm.Position() != m.pos {
		r.log.Error("feed relay: checkpoint skipped: the feed's message at its sequence is not its event signed by a trusted key", "checkpoint", m.pos.ID(), "checkpoint_feed_seq", ck.FeedSeq)
		return mark{}, false
	}
	return m, true
}

// countForged counts the messages at feed sequences from to to, none of
// which a trusted key signed, but those counted before, and reports
// whether any was new (the incident is logged then, once).
func (r *Relay) countForged(from, to uint64) bool {
	for {
		seen := r.forgedTo.Load()
		if to <= seen || from > to {
			return false
		}
		if r.forgedTo.CompareAndSwap(seen, to) {
			r.forged.Add(to - max(from-1, seen))
			return true
		}
	}
}

// seen records where the feed was last seen to stand.
func (r *Relay) seen(p Position) { r.tailSeen.Store(&p) }

// trusted decodes a feed message and reports whether a trusted key signed
// it (isUnsigned: it carries no signature at all).
func (r *Relay) trusted(subject string, h nats.Header, data []byte) (m Message, ok, isUnsigned bool) {
	m, err := Decode(data)
	if err != nil {
		return m, false, false
	}
	signer, valid := signing.VerifyMsg(h, signing.DomainFeed, subject, data)
	if signer == "" {
		// Unsigned: trusted only where signatures are not checked.
		return m, r.keys() == nil, true
	}
	if !valid {
		return m, false, false
	}
	ks := r.keys()
	return m, ks == nil || ks.Trusts(signer, m.SourceSeq), false
}

// feedMsg is the feed message of m: its subject, body, headers and this
// relay's signature.
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
	if s := r.signer(); s != nil {
		s.SignMsg(msg.Header, signing.DomainFeed, msg.Subject, body)
	}
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
	// An event of no scope (pricing.defined.v1, default.defined.v1): a
	// subject that still has the layout's token count.
	return events.Scope(NoScope + ":" + NoScope)
}

// NoScope is the scope kind and id tokens of the subject of an event that
// names no scope.
const NoScope = "_"

// encode writes the body without HTML escaping, so Event keeps the bytes
// the ledger's encoder writes.
func (m Message) encode() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// SplitRevision returns the feed messages of a revision the gate passed,
// in feed order: one per event, each event encoded as the ledger's encoder
// encodes it. A revision of a key with no events the feed carries (trust,
// API keys, tenant limits) has none.
func SplitRevision(rev *gate.Revision) []Message {
	var out []Message
	add := func(e events.Event, bal *Balance) {
		raw, err := codec.AppendEvent(nil, e)
		if err != nil {
			return // every event the gate passed encodes
		}
		i := len(out)
		out = append(out, Message{Schema: streams.FeedSchema, ID: events.EventID(rev.Seq, i), SourceSeq: rev.Seq, Index: i,
			Key: rev.Key, CommittedAt: rev.At.UTC(), Type: e.EventType(), Balance: bal, Event: raw})
	}
	var evs events.Events
	switch rev.Kind {
	case gate.KindLane:
		for _, b := range rev.Lane.Balances {
			bal := &Balance{Ref: b.Balance, Unit: b.Unit, Limit: b.Limit, Spent: b.Spent, Reserved: b.Reserved, Overrun: b.Overrun, Open: b.Open}
			for _, e := range b.Events {
				add(e, bal)
			}
		}
		return out
	case gate.KindBudget:
		evs = rev.Budget.Events
	case gate.KindPricing:
		evs = rev.Pricing.Events
	case gate.KindDefault:
		evs = rev.Default.Events
	}
	for _, e := range evs {
		add(e, nil)
	}
	return out
}

// Split returns the feed messages of the ledger revision data, stored at
// stream sequence seq under key at time at, as a relay appends them. It
// decodes the revision and verifies nothing: a relay splits only what its
// replica's gate passed.
func Split(seq uint64, key string, at time.Time, data []byte) ([]Message, error) {
	rev := &gate.Revision{Seq: seq, Key: key, At: at}
	var err error
	switch {
	case streams.IsLaneKey(key):
		var r events.LaneRevision
		r, err = codec.DecodeLane(data)
		rev.Kind, rev.Lane = gate.KindLane, &r
	case streams.IsBudgetKey(key):
		var r events.BudgetRevision
		r, err = events.DecodeBudgetRevision(data)
		rev.Kind, rev.Budget = gate.KindBudget, &r
	case streams.IsPricingKey(key):
		var r events.PricingRevision
		r, err = events.DecodePricingRevision(data)
		rev.Kind, rev.Pricing = gate.KindPricing, &r
	case streams.IsDefaultKey(key):
		var r events.DefaultRevision
		r, err = events.DecodeDefaultRevision(data)
		rev.Kind, rev.Default = gate.KindDefault, &r
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("feed: revision %d of %s: %w", seq, key, err)
	}
	return SplitRevision(rev), nil
}
