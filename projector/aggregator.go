package projector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/streams"
)

// Defaults of an Aggregator's own snapshots.
const (
	// DefaultReportSnapshotRevisions: a report snapshot is written after
	// this many messages folded since the last one...
	DefaultReportSnapshotRevisions = 10000
	// DefaultReportSnapshotInterval: ...or this long after it, if any
	// message was folded.
	DefaultReportSnapshotInterval = 5 * time.Minute
	// ReportSnapshotsKept is how many report snapshots the writer keeps.
	ReportSnapshotsKept = 2
)

// ErrAggregatorStopped: the Aggregator's fold stopped (its Run returned,
// or it met a message it cannot fold) and it answers no more reports.
var ErrAggregatorStopped = errors.New("projector: the report aggregator is not running")

// Aggregator keeps an Aggregate up to date from the ledger stream with its
// own ordered consumer, and persists it on its own: a snapshot of the
// Aggregate (streams.ReportSnapshotName, in the ledger's snapshot bucket,
// which the ledger's own snapshots ignore) every
// DefaultReportSnapshotRevisions messages or DefaultReportSnapshotInterval,
// and when Run ends. Run loads the newest one it can read and folds the
// stream from just after it, so a restart costs the messages since the
// snapshot, not the history. Safe for concurrent use.
type Aggregator struct {
	js       jetstream.JetStream
	layout   streams.Layout
	p        *Projector
	log      *slog.Logger
	every    uint64
	interval time.Duration

	// den counts the denial records (see aggregate_denials.go).
	den *denialTracker

	mu     sync.Mutex
	agg    *Aggregate
	moved  chan struct{} // closed and replaced whenever the position moves
	err    error         // why the fold stopped; nil while it runs
	loaded uint64
}

// AggregatorOption configures an Aggregator.
type AggregatorOption func(*Aggregator) error

// WithAggregatorLogger logs snapshot writes and fold failures to log.
func WithAggregatorLogger(log *slog.Logger) AggregatorOption {
	return func(g *Aggregator) error {
		if log == nil {
			return errors.New("projector: nil logger")
		}
		g.log = log
		return nil
	}
}

// WithReportSnapshots sets when a report snapshot is written: after every
// messages folded, or interval after the last if any was. every 0 writes
// none (Run still loads one).
func WithReportSnapshots(every uint64, interval time.Duration) AggregatorOption {
	return func(g *Aggregator) error {
		if interval <= 0 {
			return errors.New("projector: report snapshot interval must be positive")
		}
		g.every, g.interval = every, interval
		return nil
	}
}

// NewAggregator returns an Aggregator over the ledger stream of layout. It
// does no I/O until Run.
func NewAggregator(js jetstream.JetStream, layout streams.Layout, opts ...AggregatorOption) (*Aggregator, error) {
	g := &Aggregator{js: js, layout: layout, p: New(js, layout), log: slog.New(slog.DiscardHandler),
		every: DefaultReportSnapshotRevisions, interval: DefaultReportSnapshotInterval,
		agg: NewAggregate(), moved: make(chan struct{}), err: nil, den: newDenialTracker(js, layout)}
	for _, o := range opts {
		if err := o(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Loaded is the position of the report snapshot Run started from (0: it
// folded the stream from its first message).
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

// Size returns the Aggregate's cells and the reservations it follows.
func (g *Aggregator) Size() (cells, tracked int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.agg.Cells(), g.agg.Tracked()
}

// Run loads the newest readable report snapshot, then folds the ledger
// stream from just after it until ctx ends, writing snapshots as
// configured and one last when ctx ends. A snapshot the stream does not
// continue (a chain error on the first messages after it) is dropped for
// a fold from the first message. It returns nil when ctx ends, or the
// error that stopped the fold (an *ApplyError, the stream lookup's).
func (g *Aggregator) Run(ctx context.Context) error {
	dctx, dstop := context.WithCancel(ctx)
	dended := make(chan struct{})
	go func() { defer close(dended); g.den.run(dctx) }()
	err := g.run(ctx)
	dstop()
	<-dended
	g.mu.Lock()
	if err == nil {
		g.err = ErrAggregatorStopped
	} else {
		g.err = fmt.Errorf("%w: %w", ErrAggregatorStopped, err)
	}
	g.notify()
	g.mu.Unlock()
	return err
}

// notify wakes every Sync waiting for the position to move; g.mu is held.
func (g *Aggregator) notify() {
	close(g.moved)
	g.moved = make(chan struct{})
}

func (g *Aggregator) run(ctx context.Context) error {
	s, last, err := g.p.stream(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if a := g.loadSnapshot(ctx, last); a != nil {
		g.mu.Lock()
		g.agg, g.loaded = a, a.Position()
		g.notify()
		g.mu.Unlock()
		g.log.Info("report: loaded snapshot", "seq", a.Position())
	}
	var sinceSnap uint64
	lastSnap := time.Now()
	written := g.Position()
	snap := func(ctx context.Context) {
		g.mu.Lock()
		pos := g.agg.Position()
		if pos == written {
			g.mu.Unlock()
			return
		}
		data, err := g.agg.MarshalJSON()
		g.mu.Unlock()
		sinceSnap, lastSnap = 0, time.Now()
		if err == nil {
			err = g.writeSnapshot(ctx, pos, data)
		}
		if err != nil {
			g.log.Warn("report: snapshot failed", "seq", pos, "err", err)
			return
		}
		written = pos
	}
	for {
		g.mu.Lock()
		from := g.agg.Position() + 1
		g.mu.Unlock()
		err := g.p.readVerified(ctx, s, from, 0, g.p.verifierFrom(from), func(m message) error {
			g.mu.Lock()
			err := g.agg.apply(m)
			g.notify()
			g.mu.Unlock()
			if err != nil {
				return err
			}
			sinceSnap++
			if g.every > 0 && (sinceSnap >= g.every || time.Since(lastSnap) >= g.interval) {
				snap(ctx)
			}
			return nil
		})
		if ctx.Err() != nil {
			if g.every > 0 {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				snap(sctx)
				cancel()
			}
			return nil
		}
		var ae *ApplyError
		if errors.As(err, &ae) && g.Loaded() != 0 {
			g.log.Error("report: the stream does not continue the loaded snapshot; folding from the first message", "snapshot", g.Loaded(), "err", err)
			g.mu.Lock()
			g.agg, g.loaded = NewAggregate(), 0
			g.mu.Unlock()
			written = 0
			continue
		}
		if err == nil {
			continue // the consumer ended without ctx: read on
		}
		return err
	}
}

// Sync waits until the Aggregate has folded the ledger stream up to its
// last message as of the call, so that a report includes every write
// acknowledged before it. It returns ctx's error, ErrAggregatorStopped,
// or the stream lookup's error.
func (g *Aggregator) Sync(ctx context.Context) error {
	_, last, err := g.p.stream(ctx)
	if err != nil {
		return err
	}
	for {
		g.mu.Lock()
		pos, moved, ferr := g.agg.Position(), g.moved, g.err
		g.mu.Unlock()
		if ferr != nil {
			return ferr
		}
		if pos >= last {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Report syncs (see Sync) and returns the Aggregate's report by, over the
// reservations f selects (see Aggregate.Report), with the denials recorded
// on the denial stream up to the call counted in (see
// streams.DenialStreamName; the denial stream is folded from its start
// when Run starts, not kept in the report snapshots). It returns Sync's errors,
// ErrScopesFilter and ErrKeyNotTracked.
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
	counts, err := g.den.counts(ctx, by, f)
	if err != nil {
		return nil, err
	}
	addDenials(rep, counts)
	return rep, nil
}

// loadSnapshot returns the newest report snapshot at or below last that
// reads, or nil.
func (g *Aggregator) loadSnapshot(ctx context.Context, last uint64) *Aggregate {
	lctx, cancel := context.WithTimeout(ctx, snapshotLookup)
	defer cancel()
	store, err := g.js.ObjectStore(lctx, g.layout.SnapshotBucket())
	if err != nil {
		return nil
	}
	for _, name := range listReportSnapshots(lctx, store) {
		seq, _ := streams.ReportSnapshotSeq(name)
		if seq > last {
			continue
		}
		data, err := store.GetBytes(lctx, name)
		if err == nil {
			var a *Aggregate
			if a, err = UnmarshalAggregate(data); err == nil && a.Position() == seq {
				return a
			}
		}
		g.log.Warn("report: snapshot unreadable; trying an older one", "snapshot", name, "err", err)
	}
	return nil
}

// listReportSnapshots names the report snapshots of store, newest first.
func listReportSnapshots(ctx context.Context, store jetstream.ObjectStore) []string {
	objs, err := store.List(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, o := range objs {
		if _, ok := streams.ReportSnapshotSeq(o.Name); ok && !o.Deleted {
			out = append(out, o.Name)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// writeSnapshot writes data as the report snapshot at pos and deletes all
// but the newest ReportSnapshotsKept.
func (g *Aggregator) writeSnapshot(ctx context.Context, pos uint64, data []byte) error {
	store, err := g.js.ObjectStore(ctx, g.layout.SnapshotBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		store, err = streams.EnsureSnapshots(ctx, g.js, g.layout)
	}
	if err != nil {
		return err
	}
	name := streams.ReportSnapshotName(pos)
	if _, err := store.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(data)); err != nil {
		return err
	}
	g.log.Info("report: wrote snapshot", "snapshot", name, "bytes", len(data))
	list := listReportSnapshots(ctx, store)
	for i, n := range list {
		if i >= ReportSnapshotsKept {
			if err := store.Delete(ctx, n); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				g.log.Warn("report: deleting old snapshot", "snapshot", n, "err", err)
			}
		}
	}
	return nil
}
