package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// follower is the state of the part of the Ledger that folds the stream
// into the book (Run) and owns the Ledger's lifetime: decisions are taken
// only while it runs (see live).
type follower struct {
	applied  atomic.Uint64 // last stream sequence folded by the follower
	lag      atomic.Uint64 // messages the follower's consumer had pending after the last one folded
	progress chan struct{} // closed and replaced whenever applied advances
	progMu   sync.Mutex

	ready     chan struct{}
	readyOnce sync.Once

	// ownApplied is closed and replaced whenever a committer folds its own
	// write (see awaitOwn).
	ownApplied chan struct{}
	ownMu      sync.Mutex
	// ownWrites counts this replica's writes in flight: with none, a
	// revision naming this replica as its writer is not waited for (it is
	// an old revision written again, and would hold the follower up).
	ownWrites atomic.Int64
	// untrustedWrites counts the writes refused because the ledger no
	// longer trusts this replica's signing key (writable).
	untrustedWrites atomic.Uint64
}

// Lifecycle states of a Ledger.
const (
	stateNew = iota
	stateRunning
	stateStopped
)

// errFold marks the tail of a loaded snapshot that does not follow it: the
// snapshot does not describe this stream, and Run folds the whole stream
// instead. Nothing else stops the follower: a revision the gate refuses is
// skipped (see Rejection).
var errFold = errors.New("ledger: the stream does not follow the loaded snapshot")

// ErrTrimmed: the ledger stream was trimmed (spendgate audit trim: it
// starts after sequence 1, or a key's old revisions were purged) and the
// replica loaded no snapshot to start from. A fold from the stream's first
// message would skip every revision whose predecessor the trim dropped, as
// off its chain, and hold a wrong book (balances without what they held
// at the trim): the replica stops instead.
var ErrTrimmed = errors.New("ledger: the stream was trimmed and no snapshot was loaded")

// progressEvery is how often the follower logs its progress while it
// folds the stream at start.
const progressEvery = 2 * time.Second

// isReady reports whether Ready is closed.
func (l *Ledger) isReady() bool {
	select {
	case <-l.ready:
		return true
	default:
		return false
	}
}

// followRetry is the pause before the follower re-creates its consumer
// after losing it (a server restart, a leader change).
const followRetry = 250 * time.Millisecond

// live returns nil if decisions may be taken: the follower runs and has
// folded the stream as it was when it started. Otherwise it returns a
// CodeLedgerUnavailable error: a book that does not advance must not
// decide (fail closed).
func (l *Ledger) live() error {
	l.life.Lock()
	state, err := l.state, l.stopErr
	l.life.Unlock()
	switch state {
	case stateNew:
		return events.Errorf(events.CodeLedgerUnavailable, "the ledger follower is not running")
	case stateStopped:
		return &events.Error{Code: events.CodeLedgerUnavailable, Message: "the ledger follower has stopped", Err: err}
	}
	select {
	case <-l.ready:
		return nil
	default:
		return events.Errorf(events.CodeLedgerUnavailable, "the ledger is still folding the stream")
	}
}

// goOwned runs f on a goroutine that Run waits for before it returns. It
// reports false, running nothing, once Run has stopped (or before it
// started).
func (l *Ledger) goOwned(f func()) bool {
	l.life.Lock()
	defer l.life.Unlock()
	if l.state != stateRunning {
		return false
	}
	l.owned.Add(1)
	go func() {
		defer l.owned.Done()
		f()
	}()
	return true
}

// Run follows the ledger stream from its first revision and folds every
// revision that passes the gate into the book until ctx ends. A lost
// consumer (server restart, leader change, network) is re-created from the
// next unfolded revision. A message the gate refuses (a *Rejection: under
// a key this code does not fold, a bad or missing signature, malformed,
// replayed, off its key's chain) is skipped, logged and counted
// (Stats.Rejected): no message stops the follower.
//
// Run owns the ledger: Submit and PutBudget decide only while Run runs
// (after Ready), and answer CodeLedgerUnavailable once it has returned.
// Before returning, Run waits for every background committer it owns (each
// ends within the commit deadline of the Txs it holds). Run may be called
// once. It returns ctx's error, or the fold error.
func (l *Ledger) Run(ctx context.Context) (err error) {
	l.life.Lock()
	if l.state != stateNew {
		l.life.Unlock()
		return errors.New("ledger: Run called twice")
	}
	l.state = stateRunning
	l.life.Unlock()
	l.openWriter()
	defer func() {
		l.life.Lock()
		l.state, l.stopErr = stateStopped, err
		l.life.Unlock()
		// A Sync waiting for the follower learns that it stopped.
		l.progMu.Lock()
		close(l.progress)
		l.progress = make(chan struct{})
		l.progMu.Unlock()
		l.owned.Wait()
		l.closeWriter()
	}()
	var startLast uint64
	trimmed := false
	for {
		sent := l.opts.clock()
		info, err := l.stream.Info(ctx)
		if err == nil {
			// The first sample of the clock's skew, before the replica
			// decides anything (see Now).
			l.sampleInfo(sent, info)
			startLast = info.State.LastSeq
			// The stream denies deletes and keeps every revision: only a
			// trim (a purge) leaves it starting late or with gaps.
			trimmed = info.State.FirstSeq > 1 || info.State.NumDeleted > 0
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.opts.log.Warn("ledger follower: stream info", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followRetry):
		}
	}
	if l.opts.snapLoad {
		_, heldBack := l.loadSnapshot(ctx, startLast, false)
		if trimmed && l.snapLoaded.Load() == 0 && heldBack {
			// A reader (the feed) stands before every snapshot, or
			// cannot say where (a feed stalled by junk), but what lies
			// between is trimmed: no fold can give it those revisions.
			// The book comes first: start from the newest snapshot, and
			// that reader misses what the trim dropped (the archive
			// holds it).
			l.opts.log.Error("ledger: a reader (the feed) stands before every snapshot of a trimmed stream; starting from the newest snapshot anyway: what the trim dropped does not reach that reader (the archive holds it)")
			l.loadSnapshot(ctx, startLast, true)
		}
	}
	if trimmed && l.snapLoaded.Load() == 0 {
		return l.trimmedStop()
	}
	if l.applied.Load() >= startLast {
		l.readyOnce.Do(func() { close(l.ready) })
	}
	// The periodic snapshot writer ends when Run returns, before Run
	// waits for what it owns.
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	l.goOwned(func() { l.snapshotLoop(loopCtx) })
	l.goOwned(func() { l.probeClock(loopCtx) })
	for {
		err := l.follow(ctx, l.applied.Load()+1, startLast)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrOwnWriteRefused) {
			l.opts.log.Error("ledger: follower stopped", "err", err)
			return err
		}
		if errors.Is(err, errFold) && l.snapLoaded.Load() != 0 && !l.isReady() && trimmed {
			// Folding the whole stream instead is no way out of a
			// trimmed one.
			l.snapSkipped.Add(1)
			l.opts.log.Error("ledger: the stream does not follow the loaded snapshot", "snapshot_seq", l.snapLoaded.Load(), "err", err)
			return l.trimmedStop()
		}
		if errors.Is(err, errFold) && l.snapLoaded.Load() != 0 && !l.isReady() {
			// The tail does not follow the snapshot (its chain names other
			// revisions): the snapshot does not describe this stream.
			l.snapSkipped.Add(1)
			l.opts.log.Error("ledger: the stream does not follow the loaded snapshot; folding the whole stream", "snapshot_seq", l.snapLoaded.Load(), "err", err)
			l.resetBook()
			continue
		}
		l.opts.log.Warn("ledger follower lost its consumer; resuming", "from", l.applied.Load()+1, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followRetry):
		}
	}
}

// readyPending is how many revisions may still follow the one a starting
// replica folded past the stream's end at start for it to be ready. A fold
// that took minutes (a feed's back-fill paces it) ended that far behind a
// stream under traffic: the replica answered, and its requests were
// refused "ledger follower is behind" until /readyz caught it
// (--ready-max-delay) and the follower caught up.
const readyPending = 16

// follow folds revisions from seq from with one ordered consumer until the
// consumer fails or ctx ends.
func (l *Ledger) follow(ctx context.Context, from, startLast uint64) error {
	cons, err := l.js.OrderedConsumer(ctx, l.layout.StreamName(), jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
	})
	if err != nil {
		return fmt.Errorf("ledger: follower: %w", err)
	}
	// Short pulls with a 1 s heartbeat: after a server restart or a
	// leader change the ordered consumer notices within seconds (the
	// defaults, 30 s and 15 s, left a replica's follower stalled that long).
	it, err := cons.Messages(jetstream.PullMaxMessages(1024), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("ledger: follower: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	logged := time.Now()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("ledger: follower: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("ledger: follower metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq <= l.applied.Load() {
			continue
		}
		if msg.Headers().Get(streams.HeaderWriter) == l.id {
			l.awaitOwn(msg.Subject(), seq)
		}
		gm := &gate.Message{Seq: seq, Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data(), At: meta.Timestamp}
		passed, rej, folded := l.fold(gm, true)
		if passed != nil && passed.Kind == gate.KindTrust {
			if err := l.ownWritesRefused(seq); err != nil {
				return err
			}
		}
		if rej != nil && rej.Reason == signing.ReasonChain && l.snapLoaded.Load() != 0 && !l.isReady() {
			// A gap or a fork in the tail of a loaded snapshot: the
			// snapshot may not describe this stream (Run then folds the
			// whole stream, and skips it if it recurs).
			return fmt.Errorf("%w: seq %d: %w", errFold, seq, rej)
		}
		if rev := l.feed(gm, passed, folded); rev != nil && rev.Kind == gate.KindLane {
			n := 0
			for i := range rev.Lane.Balances {
				n += len(rev.Lane.Balances[i].Events)
			}
			l.foldedEvents.Add(uint64(n))
		}
		if l.isReady() {
			l.noteStamp(meta.Timestamp)
		}
		l.mu.Lock()
		l.bk.forgetUntil(seq, meta.Timestamp)
		l.lag.Store(meta.NumPending)
		l.mu.Unlock()
		l.advance(seq)
		if seq >= startLast && !l.isReady() {
			// The end the stream had when the fold began: ready if the
			// stream has not grown much past it meanwhile (a long fold
			// under traffic), else fold on to its end now.
			if end, err := l.streamEnd(ctx); err == nil && end > seq+readyPending {
				startLast = end
			} else {
				l.opts.log.Info("ledger: folded the stream; ready", "seq", seq, "folded", seq-from+1, "from_snapshot", l.snapLoaded.Load())
				l.readyOnce.Do(func() { close(l.ready) })
			}
		} else if seq < startLast && time.Since(logged) >= progressEvery {
			logged = time.Now()
			l.opts.log.Info("ledger: folding the stream", "folded", seq-from+1, "of", startLast-from+1, "seq", seq, "from_snapshot", l.snapLoaded.Load())
		}
	}
}

// awaitOwn waits (bounded) until the committer that wrote seq has folded it,
// so the follower need not decode a revision this replica already holds in
// memory. Revisions of one key must be folded in order, so the follower
// cannot simply skip it.
func (l *Ledger) awaitOwn(subject string, seq uint64) {
	key, ok := l.layout.KeyOf(subject)
	if !ok {
		return
	}
	deadline := time.NewTimer(ownWait)
	defer deadline.Stop()
	for {
		l.ownMu.Lock()
		ch := l.ownApplied
		l.ownMu.Unlock()
		if l.revOf(key) >= seq || l.ownWrites.Load() == 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}

func (l *Ledger) revOf(key string) uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.rev(key)
}

// ownFolded wakes a follower waiting in awaitOwn.
func (l *Ledger) ownFolded() {
	l.ownMu.Lock()
	close(l.ownApplied)
	l.ownApplied = make(chan struct{})
	l.ownMu.Unlock()
}

func (l *Ledger) advance(seq uint64) {
	l.progMu.Lock()
	if seq > l.applied.Load() {
		l.applied.Store(seq)
		close(l.progress)
		l.progress = make(chan struct{})
	}
	l.progMu.Unlock()
}

// Sync waits until this replica has folded every revision that the stream
// held when Sync was called: a read-your-writes barrier for lookups that
// missed (a reservation or budget just created through another replica).
// Concurrent Syncs share one read of the stream's state (see syncer), so a
// flood of misses costs about one round trip per round trip time, not one
// per miss.
func (l *Ledger) Sync(ctx context.Context) error {
	if err := l.live(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	target, err := l.syncTarget(ctx)
	if err != nil {
		return err
	}
	for {
		l.progMu.Lock()
		ch := l.progress
		done := l.applied.Load() >= target
		l.progMu.Unlock()
		if done {
			return nil
		}
		// Run's end wakes ch after it marks the ledger stopped.
		if err := l.live(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return &events.Error{Code: events.CodeLedgerUnavailable, Message: "ledger follower is behind", Err: ctx.Err()}
		}
	}
}

// catchUp folds the revisions of key written after the one this replica
// holds, reading them from the stream leader (next message by subject), so a
// replica that lost a compare-and-set learns what it missed without waiting
// for its follower.
func (l *Ledger) catchUp(ctx context.Context, key string) error {
	subj := l.layout.Subject(key)
	for {
		have := l.revOf(key)
		m, found, err := l.leaderGet(ctx, leaderGetRequest{Seq: have + 1, NextFor: subj})
		if err != nil {
			return err
		}
		if !found {
			return nil
		}
		gm := &gate.Message{Seq: m.seq, Subject: m.subject, Header: m.header, Data: m.data}
		if key != streams.TrustKey && !l.gate.KnowsSigner(gm) {
			// Read ahead of the follower, signed by a key this replica's
			// trust does not name: the ledger may have trusted it a
			// moment ago. Decide on it only with the trust key folded up
			// to date (and answer unavailable if that cannot be read),
			// never skip and write over a revision it could not verify.
			if err := l.catchUp(ctx, streams.TrustKey); err != nil {
				return err
			}
		}
		// A revision the gate skips is recorded in the heads: this
		// replica's next write of the key lands after it.
		l.fold(gm, false)
		// A follower waiting for this replica's own write (whose ack was
		// lost) may be waiting for exactly this revision.
		l.ownFolded()
	}
}

// Lag returns how many revisions of the stream the follower had still to
// fold after the last one it folded (0 when caught up): how far this
// replica's book is behind the stream, as of its last fold.
func (l *Ledger) Lag() uint64 { return l.lag.Load() }

// trimmedStop is Run's end on a trimmed stream it has no snapshot to start
// from (ErrTrimmed), logged with what to do.
func (l *Ledger) trimmedStop() error {
	l.opts.log.Error("ledger: the stream was trimmed and no snapshot could be loaded; not folding it from its first message, which would give a wrong book: put back the copy of the snapshot the trim kept in its archive directory (spendgate snapshot --restore DIR/snapshot-...) and start again (docs/operator.md, Archive and trim)",
		"stream", l.layout.StreamName(), "bucket", l.layout.SnapshotBucket())
	return fmt.Errorf("%w: put back the snapshot the trim kept (spendgate snapshot --restore DIR/snapshot-..., from the archive directory) into %s (docs/operator.md, Archive and trim)", ErrTrimmed, l.layout.SnapshotBucket())
}
