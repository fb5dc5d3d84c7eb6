package report

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// ErrAggregatorStopped: the Aggregator is not fed by a running fold (its
// replica has not started, or has stopped) and it answers no report.
var ErrAggregatorStopped = errors.New("report: the report aggregator is not running")

// Aggregator keeps an Aggregate up to date as the replica's one fold hands
// it the revisions the gate passed (a ledger.Reader: Fold), and travels in
// the replica's ledger snapshots as their "report" section (a
// ledger.Section: a restart costs the revisions after the snapshot, as for
// the book). It opens no consumer on the ledger stream: nothing a replica
// skipped reaches it. It also follows the denial stream (Run), which the
// report counts. Safe for concurrent use.
type Aggregator struct {
	log *slog.Logger
	// sync waits until the replica's fold has folded everything the
	// ledger stream held when it was called (see WithSync).
	sync func(context.Context) error

	// den counts the denial records (see aggregate_denials.go).
	den *denialTracker

	mu  sync.Mutex
	agg *Aggregate
	// loaded is the position of the section the Aggregator started from.
	loaded uint64
	// failed counts revisions the Aggregate could not fold (see Fold).
	failed atomic.Uint64
	// denialKeys are the keys denial records must be signed by (nil:
	// none checked; WithDenialTrust).
	denialKeys func() *signing.KeySet
}

// AggregatorOption configures an Aggregator.
type AggregatorOption func(*Aggregator) error

// WithAggregatorLogger logs what the Aggregator could not fold.
func WithAggregatorLogger(log *slog.Logger) AggregatorOption {
	return func(g *Aggregator) error {
		if log == nil {
			return errors.New("report: nil logger")
		}
		g.log = log
		return nil
	}
}

// WithSync has Report call sync first, so that a report includes every
// write acknowledged before it: sync returns once the fold that feeds the
// Aggregator has folded what the ledger stream held when it was called
// (ledger.Ledger.Sync). Without it Report answers from what was folded.
func WithSync(sync func(context.Context) error) AggregatorOption {
	return func(g *Aggregator) error {
		if sync == nil {
			return errors.New("report: nil sync")
		}
		g.sync = sync
		return nil
	}
}

// NewAggregator returns an Aggregator of the ledger of layout; js reads its
// denial stream. It does no I/O until Run.
func NewAggregator(js jetstream.JetStream, layout streams.Layout, opts ...AggregatorOption) (*Aggregator, error) {
	g := &Aggregator{log: slog.New(slog.DiscardHandler), agg: NewAggregate(), den: newDenialTracker(js, layout)}
	for _, o := range opts {
		if err := o(g); err != nil {
			return nil, err
		}
	}
	g.den.check = newDenialCheck(g.denialKeys, g.log)
	return g, nil
}

// WithDenialTrust has the report count only the denial records a key of
// the set keys returns signed (the replica's ledger.Ledger.Trust: the
// ledger's trusted keys; nil: every record), as the ledger folds only
// revisions they signed. See package doc (denials).
func WithDenialTrust(keys func() *signing.KeySet) AggregatorOption {
	return func(g *Aggregator) error {
		if keys == nil {
			return errors.New("report: nil denial trust")
		}
		g.denialKeys = keys
		return nil
	}
}

// RecentDenials returns the newest denial records on the denial stream
// (each tenant's newest, see DenialRing; newest first by the order they
// were stored),
// every replica's, those the report counts: a record no trusted key
// signed is not among them. The stream's records have no ResetsAt.
func (g *Aggregator) RecentDenials() []events.AdmitDenied {
	g.den.mu.Lock()
	agg := g.den.agg
	g.den.mu.Unlock()
	return agg.recent.Newest()
}

// DenialsSkipped returns how many denial records the report left out, by
// reason (see WithDenialTrust).
func (g *Aggregator) DenialsSkipped() map[signing.Reason]uint64 { return g.den.check.Skipped() }

// Fold folds one revision the replica's fold passed (ledger.Reader). The
// Aggregate folds it as Rows does; a revision it cannot fold (a
// transition its rules refuse, which the gate cannot see) is logged,
// counted (Failed) and left out, and the report goes on.
func (g *Aggregator) Fold(rev *gate.Revision, _ bool) {
	if rev.Kind != gate.KindLane {
		g.mu.Lock()
		g.agg.pos = max(g.agg.pos, rev.Seq)
		g.mu.Unlock()
		return
	}
	g.mu.Lock()
	err := g.agg.apply(message{seq: rev.Seq, key: rev.Key, data: rev.Data, at: rev.At, rev: rev})
	if err != nil {
		g.agg.pos = max(g.agg.pos, rev.Seq)
	}
	g.mu.Unlock()
	if err != nil {
		g.failed.Add(1)
		g.log.Error("report: a revision the spend report cannot fold; left out of it", "seq", rev.Seq, "key", rev.Key, "err", err)
	}
}

// SectionName is projector.ReportSection (ledger.Section).
func (g *Aggregator) SectionName() string { return projector.ReportSection }

// MarshalSection returns the Aggregate as a snapshot section.
func (g *Aggregator) MarshalSection() ([]byte, error) {
	return g.CopySection()()
}

// CopySection copies the Aggregate and returns the function that encodes
// the copy as MarshalSection does (ledger.SectionCopier): a replica copies
// while it holds its book's lock and encodes after it. Every open or
// expired reservation the report tracks is in the section (hundreds of
// thousands when callers let reservations expire), and encoding them
// under the lock held every admit for seconds.
func (g *Aggregator) CopySection() func() ([]byte, error) {
	g.mu.Lock()
	s := g.agg.snapshotCopy()
	g.mu.Unlock()
	return s.encode
}

// LoadSection replaces the Aggregate by a snapshot's section at seq.
func (g *Aggregator) LoadSection(seq uint64, data []byte) error {
	a, err := UnmarshalAggregate(data)
	if err != nil {
		return err
	}
	if a.Position() > seq {
		return fmt.Errorf("the report is at %d, past the snapshot's %d", a.Position(), seq)
	}
	a.pos = seq
	g.mu.Lock()
	g.agg, g.loaded = a, seq
	g.mu.Unlock()
	return nil
}

// ResetSection empties the Aggregate: the fold starts from the stream's
// first revision.
func (g *Aggregator) ResetSection() {
	g.mu.Lock()
	g.agg, g.loaded = NewAggregate(), 0
	g.mu.Unlock()
}

// Loaded is the position of the snapshot section the Aggregator started
// from (0: it folded the stream from its first revision).
func (g *Aggregator) Loaded() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loaded
}

// Position is the stream sequence folded so far.
func (g *Aggregator) Position() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.agg.Position()
}

// RolledUpBefore is the Aggregate's RolledUpBefore: before it, a
// report's bounds must be whole UTC days.
func (g *Aggregator) RolledUpBefore() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.agg.RolledUpBefore()
}

// Failed counts the revisions the Aggregate could not fold.
func (g *Aggregator) Failed() uint64 { return g.failed.Load() }

// Size returns the Aggregate's cells and the reservations it follows.
func (g *Aggregator) Size() (cells, tracked int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.agg.Cells(), g.agg.Tracked()
}

// Run follows the denial stream (which the report counts) until ctx
// ends; it returns nil then. The ledger is folded by the replica, not
// here.
func (g *Aggregator) Run(ctx context.Context) error {
	g.den.run(ctx)
	return nil
}

// Sync waits until the fold feeding the Aggregator has folded the ledger
// stream up to its last message as of the call (WithSync); without
// WithSync it returns at once.
func (g *Aggregator) Sync(ctx context.Context) error {
	if g.sync == nil {
		return nil
	}
	return g.sync(ctx)
}

// Report syncs (see Sync) and returns the Aggregate's report by, over the
// reservations f selects (see Aggregate.Report), with the denials recorded
// on the denial stream up to the call counted in (see
// streams.DenialStreamName). It returns Sync's errors, ErrScopesFilter and
// ErrKeyNotTracked.
func (g *Aggregator) Report(ctx context.Context, by GroupBy, f Filter) (*AggregateReport, error) {
	if len(f.Scopes) > 0 {
		return nil, ErrScopesFilter
	}
	if err := g.Sync(ctx); err != nil {
		return nil, err
	}
	g.mu.Lock()
	rep, err := g.agg.Report(by, f)
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// The denials recorded up to the call (see aggregate_denials.go).
	counts, shadow, err := g.den.counts(ctx, by, f)
	if err != nil {
		return nil, err
	}
	addDenials(rep, counts)
	rep.Shadow = foldShadow(shadow, rep.fold)
	return rep, nil
}
