package projector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// Projector folds the ledger stream into a State with an ordered consumer.
// Its methods are safe for concurrent use; State returns snapshots.
type Projector struct {
	js     jetstream.JetStream
	layout streams.Layout
	// trust: see Verifying; unverified: see Unverified.
	trust      *signing.KeySet
	unverified bool
	// v is the verifier of state's fold: CatchUp starts it, Run goes on
	// with it.
	v *verifier
	// readKeys are the keys the last Read's gate ended with (see Keys).
	readKeys atomic.Pointer[signing.KeySet]

	mu    sync.Mutex
	state *State
	// arch, if set (UseArchive), is read before the stream.
	arch *ArchiveInfo
}

// New returns a Projector over the ledger stream of layout. It does no I/O
// until CatchUp, Run or ReplayUntil.
func New(js jetstream.JetStream, layout streams.Layout, opts ...Option) *Projector {
	p := &Projector{js: js, layout: layout, state: NewState()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Keys returns the keys that sign for the ledger: those the gate of the
// last Read ended with (the ledger's trust revision's, anchored in the
// keys Verifying named), or before any Read the keys Verifying named; nil
// when signatures are not checked (Unverified, or nothing to anchor them).
// What a replica writes beside the ledger (its denial records) is checked
// against them.
func (p *Projector) Keys() *signing.KeySet {
	if p.unverified {
		return nil
	}
	if ks := p.readKeys.Load(); ks != nil {
		return ks
	}
	return p.trust
}

// Option configures a Projector.
type Option func(*Projector)

// Verifying makes ks the anchor of every fold's gate (CatchUp, Run,
// ReplayUntil, Rows, MetadataKeys): the keys that vouch for the ledger's
// first trust revision (see package gate). Every fold reads only what the
// gate passes, as a replica does; Check reports what it skips (see
// WithTrust), these folds do not. Without it (and without Unverified) the
// ledger's first trust revision is trusted on first use.
func Verifying(ks *signing.KeySet) Option {
	return func(p *Projector) { p.trust = ks }
}

// Unverified makes every fold's gate check no signature: what a tool told
// --unverified in so many words reads. Decoding and chains are still
// checked.
func Unverified() Option {
	return func(p *Projector) { p.unverified = true }
}

// applySkipping folds m into st, skipping (as a replica does) a revision
// that does not decode or breaks its key's chain.
func applySkipping(st *State, m message) error {
	err := st.Apply(m.seq, m.key, m.data)
	if _, ok := rejection(m.key, err); ok {
		st.skip(m.seq)
		return nil
	}
	return err
}

// State returns a snapshot (a deep copy) of the projector's current state:
// what CatchUp installed and Run folded since.
func (p *Projector) State() *State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.Clone()
}

// ErrTrimmed marks a replay of a stream trimmed below its first message
// (spendgate audit trim) without the archive of what was trimmed: its
// revisions would chain to messages it no longer holds, and a fold that
// skips them, as replicas skip revisions off their chain, would be wrong,
// not short.
var ErrTrimmed = errors.New("projector: stream trimmed")

// ErrPastEnd: a read asked to end at a position past the stream's last
// message. A position names a revision the book has; one past its end
// would read the book as it stands and be reported as a position that
// never existed, giving other rows each time it runs.
var ErrPastEnd = errors.New("projector: position past the end of the book")

// whole returns ErrTrimmed when the stream s, whose last sequence is last,
// lacks messages (trimmed: it starts after seq 1, or has gaps where a
// trim purged a key's old revisions) and the projector reads no archive.
// With an archive it relies on the archive (a trim requires one that
// covers what it drops; a fold checks the chains across the two).
func (p *Projector) whole(s jetstream.Stream, last uint64) error {
	st := s.CachedInfo().State
	if last == 0 || (st.FirstSeq <= 1 && st.NumDeleted == 0) || p.arch != nil {
		return nil
	}
	return fmt.Errorf("%w: %s starts at seq %d with %d messages deleted; read its archive first (--archive DIR; in Go, WithArchive or UseArchive)",
		ErrTrimmed, p.layout.StreamName(), st.FirstSeq, st.NumDeleted)
}

// errStop ends a read early without an error.
var errStop = errors.New("projector: stop")

// message is what a read hands to its fold.
type message struct {
	seq     uint64
	subject string
	key     string
	header  nats.Header
	data    []byte
	at      time.Time
	// rev is the revision as the gate passed it (readVerified), or nil
	// for a raw read.
	rev *gate.Revision
}

// stream returns the ledger stream handle and its last sequence as of now.
func (p *Projector) stream(ctx context.Context) (jetstream.Stream, uint64, error) {
	s, err := p.js.Stream(ctx, p.layout.StreamName())
	if err != nil {
		return nil, 0, fmt.Errorf("projector: stream %s: %w", p.layout.StreamName(), err)
	}
	return s, s.CachedInfo().State.LastSeq, nil
}

// read hands every message of the stream with sequence from..until to fn
// (those the archive holds, if there is one, from the archive), raw, in
// stream order, through an ordered consumer: a fold reads through
// readVerified, which passes each through the gate first. until == 0 means follow the
// stream until ctx ends (then read returns nil). A finite read also ends
// when the consumer reports nothing pending (a trailing gap). fn returning
// errStop ends the read with nil; any other error ends it with that error.
func (p *Projector) read(ctx context.Context, s jetstream.Stream, from, until uint64, fn func(message) error) error {
	if a := p.arch; a != nil && from <= a.Last {
		end := a.Last
		if until != 0 {
			end = min(end, until)
		}
		if err := a.eachArchived(p.layout.StreamName(), p.layout, from, end, fn); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
		from = a.Last + 1
		if until != 0 && from > until {
			return nil
		}
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 1 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from}
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("projector: ordered consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("projector: ordered consumer: %w", err)
	}
	defer it.Stop()
	rctx, w := ctx, (*stallWatch)(nil)
	if until != 0 {
		rctx, w = watchStall(ctx, readStall)
		defer w.stop()
	}
	last := from - 1
	for {
		msg, err := it.Next(jetstream.NextContext(rctx))
		if err != nil {
			if until == 0 && ctx.Err() != nil {
				return nil
			}
			return readError(p.layout.StreamName(), cons, w, last, until, err)
		}
		w.progress()
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("projector: message metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		last = seq
		if until != 0 && seq > until {
			return nil
		}
		key, _ := p.layout.KeyOf(msg.Subject())
		if err := fn(message{seq: seq, subject: msg.Subject(), key: key, header: msg.Headers(), data: msg.Data(), at: meta.Timestamp}); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
		if until != 0 && (seq >= until || meta.NumPending == 0) {
			return nil
		}
	}
}

// CatchUp folds the whole stream, from its first message to its last as of
// the call, into a fresh State and returns it. The result also becomes the
// projector's state (unless Run has already folded further), so that Run
// continues from it.
//
// It returns the stream lookup or consumer error, ctx's error, ErrTrimmed,
// or the first *ApplyError (the stream contradicts itself; nothing after
// it is folded).
//
// Options: WithWindow (forget closed reservations, so that memory follows
// what is open) and WithProgress; others are ignored.
func (p *Projector) CatchUp(ctx context.Context, opts ...CheckOption) (*State, error) {
	o := newCheckOptions(opts, false)
	s, last, err := p.stream(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.withArchive(o); err != nil {
		return nil, err
	}
	if err := p.whole(s, last); err != nil {
		return nil, err
	}
	st := o.newState()
	v := p.verifierFrom(1)
	if last > 0 {
		if err := p.readVerified(ctx, s, 1, last, v, func(m message) error {
			if o.progress != nil {
				o.progress(m.seq, last)
			}
			st.advance(m.at)
			return applySkipping(st, m)
		}); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	if st.Position() >= p.state.Position() {
		p.state = st.Clone()
		p.v = v
	}
	p.mu.Unlock()
	return st, nil
}

// Run keeps folding new messages into the projector's state, from just
// after its position, until ctx ends; then it returns nil. Call CatchUp
// first to start from a full replay; otherwise Run starts at the first
// message. Run starts no goroutine that outlives it.
//
// It returns the stream lookup or consumer error, or the first *ApplyError;
// the state then stays at the last message that applied.
func (p *Projector) Run(ctx context.Context) error {
	s, _, err := p.stream(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	p.mu.Lock()
	from := p.state.Position() + 1
	v := p.v
	p.mu.Unlock()
	if v == nil {
		v = p.verifierFrom(from)
	}
	return p.readVerified(ctx, s, from, 0, v, func(m message) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		return applySkipping(p.state, m)
	})
}

// ReplayUntil folds, into a fresh State, the messages stored at or before
// t: the balances as they stood at time t. It reads in stream order up to
// the last message as of the call and stops at the first message stored
// after t. It does not change the projector's state.
//
// It takes CatchUp's options and returns the same errors as CatchUp.
func (p *Projector) ReplayUntil(ctx context.Context, t time.Time, opts ...CheckOption) (*State, error) {
	o := newCheckOptions(opts, false)
	s, last, err := p.stream(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.withArchive(o); err != nil {
		return nil, err
	}
	if err := p.whole(s, last); err != nil {
		return nil, err
	}
	st := o.newState()
	if last == 0 {
		return st, nil
	}
	if err := p.readVerified(ctx, s, 1, last, p.verifierFrom(1), func(m message) error {
		if m.at.After(t) {
			return errStop
		}
		if o.progress != nil {
			o.progress(m.seq, last)
		}
		st.advance(m.at)
		return applySkipping(st, m)
	}); err != nil {
		return nil, err
	}
	return st, nil
}

// withArchive attaches the archive an option names, if any.
func (p *Projector) withArchive(o checkOptions) error {
	if o.archive == "" || p.arch != nil {
		return nil
	}
	_, err := p.UseArchive(o.archive)
	return err
}
