package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// Snapshot defaults.
const (
	// DefaultSnapshotRevisions: a replica writes a snapshot once the stream
	// has this many revisions past the newest snapshot...
	DefaultSnapshotRevisions = 100_000
	// DefaultSnapshotEvents: ...or once its fold has folded this many
	// events since (a revision of a busy lane carries many: 1,000,000
	// reservations written by 64 callers come in fewer than 100,000
	// revisions, and a restart's fold costs the events as much as the
	// revisions).
	DefaultSnapshotEvents = 200_000
	// DefaultSnapshotInterval: a replica writes a snapshot this long after
	// the newest one if the stream moved meanwhile.
	DefaultSnapshotInterval = 15 * time.Minute
	// SnapshotsKept is how many snapshots the writer keeps; older ones are
	// deleted after a new one is written.
	SnapshotsKept = 3
	// snapshotTries bounds how many snapshots a replica reads at start
	// before it gives up on them and folds the whole stream. Each can
	// take seconds to fail (an object whose meta names chunks that never
	// come fails when the object store's read times out, 5 s), and
	// anyone who may write the bucket can write any number of them under
	// names below the stream's end: without a bound, a replica's start
	// took 5 s for each. A bucket holds SnapshotsKept snapshots of each
	// writer's trusted keys, and a few of keys it does not trust yet.
	snapshotTries = 2*SnapshotsKept + 2
	// snapshotLookup bounds finding and listing the snapshot bucket.
	snapshotLookup = 10 * time.Second
	// snapshotCheck is how often the periodic writer looks (or half the
	// snapshot interval, if shorter).
	snapshotCheck = 5 * time.Second
)

// SnapshotInfo describes one snapshot in the snapshot bucket.
type SnapshotInfo struct {
	// Name is the object name (streams.SnapshotName(Seq)).
	Name string
	// Seq is the stream sequence the snapshot covers: it holds every
	// revision up to and including Seq, and nothing after.
	Seq uint64
	// Size is the encoded size in bytes.
	Size uint64
	// At is when it was written: its object's modification time as the
	// bucket lists it, or the time this replica wrote it.
	At time.Time
	// Locked is how long this replica held its book's read lock to copy
	// the book for a snapshot it wrote: no commit applies meanwhile, so
	// every admit waits up to that long (0 for a listed snapshot).
	Locked time.Duration
	// Kept is set when a snapshot at the same position was stored
	// already and verified: it was kept, and nothing written.
	Kept bool
	// nuid names the chunks its meta says are its, and link is set when
	// its meta links to another object (a listed snapshot).
	nuid string
	link bool
}

// Snapshot writes a snapshot of this replica's book now and returns what
// it wrote. It waits (within ctx) for an instant at which the book holds
// exactly the revisions up to the follower's position (this replica's own
// writes are folded before the follower reaches them), dumps the book under
// the read lock, and encodes and writes it without the lock.
//
// Errors: CodeLedgerUnavailable if the follower is not running; ctx's
// error; an error from the object store (the bucket is created by
// streams.Ensure).
func (l *Ledger) Snapshot(ctx context.Context) (SnapshotInfo, error) {
	if err := l.live(); err != nil {
		return SnapshotInfo{}, err
	}
	store, err := l.snapshotBucket(ctx)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return l.writeSnapshot(ctx, store)
}

// snapshotBucket opens the snapshot bucket, creating it if it does not
// exist.
func (l *Ledger) snapshotBucket(ctx context.Context) (jetstream.ObjectStore, error) {
	store, err := l.js.ObjectStore(ctx, l.layout.SnapshotBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		store, err = streams.EnsureSnapshots(ctx, l.js, l.layout)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: snapshot bucket %s: %w", l.layout.SnapshotBucket(), err)
	}
	return store, nil
}

func (l *Ledger) writeSnapshot(ctx context.Context, store jetstream.ObjectStore) (SnapshotInfo, error) {
	// Nothing goes into a bucket whose stream captures other subjects
	// (its update is the operator's alone): a replica writing on would
	// keep the damage out of sight.
	if err := streams.CheckSnapshotBucket(ctx, l.js, l.layout); err != nil {
		return SnapshotInfo{}, fmt.Errorf("ledger: snapshot not written: %w", err)
	}
	// A snapshot signed by a key the ledger does not trust to write now
	// (retired, distrusted, or in no list) is one no replica loads: written
	// over the good one at its position (the one a trim kept), it would
	// leave nothing to start from.
	if err := l.CheckWriter(); err != nil {
		return SnapshotInfo{}, fmt.Errorf("ledger: snapshot not written: %w", err)
	}
	st, locked, err := l.dumpExact(ctx, SnapshotVersion)
	if err != nil {
		return SnapshotInfo{}, err
	}
	name := streams.SnapshotName(st.Seq)
	if kept, ok := l.keepStored(ctx, store, name, st.Seq); ok {
		return kept, nil
	}
	data, err := encodeSnapshot(st, l.layout.Bucket(), l.keys.signer.Load())
	if err != nil {
		return SnapshotInfo{}, err
	}
	info, err := store.PutBytes(ctx, name, data)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("ledger: writing snapshot %s: %w", name, err)
	}
	now := time.Now()
	l.snapshotAt(st.Seq, now)
	return SnapshotInfo{Name: name, Seq: st.Seq, Size: info.Size, At: now, Locked: locked}, nil
}

// keepStored reports whether the bucket holds a snapshot named name that
// this replica verifies (signature, digest, the book it states): such a
// snapshot is never written over, since another writer's bytes for the
// same position would at best be the same book. One that does not verify
// is written over.
func (l *Ledger) keepStored(ctx context.Context, store jetstream.ObjectStore, name string, seq uint64) (SnapshotInfo, bool) {
	oi, err := store.GetInfo(ctx, name)
	if err != nil || oi.Deleted {
		return SnapshotInfo{}, false
	}
	if _, _, err := l.readSnapshot(ctx, store, name); err != nil {
		l.opts.log.Warn("ledger: writing over a stored snapshot that does not verify", "snapshot", name, "err", err)
		return SnapshotInfo{}, false
	}
	l.snapshotAt(seq, oi.ModTime)
	return SnapshotInfo{Name: name, Seq: seq, Size: oi.Size, At: oi.ModTime, Kept: true}, true
}

// snapshotAt records that a snapshot of the book at seq is stored.
func (l *Ledger) snapshotAt(seq uint64, at time.Time) {
	l.snapWritten.Store(seq)
	l.snapAt.Store(at.UnixNano())
	l.foldedEvents.Store(0)
}

// FinalSnapshot writes a snapshot as a replica stops gracefully, so that
// its restart costs what is live, not the history since the last periodic
// one: it waits for the follower to fold the stream's end (its callers
// stopped first) and writes one, unless the newest snapshot is at that
// position already or snapshots are off (WithSnapshotEvery(0, ...)). It
// is bounded by ctx; its error says why none was written.
func (l *Ledger) FinalSnapshot(ctx context.Context) error {
	if l.opts.snapRevisions == 0 {
		return nil
	}
	if err := l.Sync(ctx); err != nil {
		return err
	}
	if l.applied.Load() <= l.snapWritten.Load() {
		return nil
	}
	info, err := l.Snapshot(ctx)
	if err != nil {
		return err
	}
	l.opts.log.Info("ledger: wrote a snapshot on stop", "snapshot", info.Name, "seq", info.Seq, "bytes", info.Size, "locked", info.Locked)
	if store := l.snapStore; store != nil {
		l.pruneSnapshots(ctx, store)
	}
	return nil
}

// dumpExact waits for an instant at which the book is exact at the
// follower's position and dumps it in version. It returns how long it
// held the read lock for the dump that it returns.
func (l *Ledger) dumpExact(ctx context.Context, version int) (*snapshotState, time.Duration, error) {
	for {
		l.progMu.Lock()
		ch := l.progress
		l.progMu.Unlock()
		l.mu.RLock()
		t0 := time.Now()
		seq := l.applied.Load()
		var st *snapshotState
		var err error
		if seq > 0 && l.bk.exactAt(seq) {
			st, err = l.bk.snapshotCopy(seq, version)
			if err == nil && version >= 4 {
				// The readers are at seq too: the follower feeds them
				// before it advances, and cannot fold seq+1 into the book
				// while the lock is held.
				err = l.dumpSections(st)
			}
		}
		locked := time.Since(t0)
		l.mu.RUnlock()
		if err == nil && st != nil {
			// The window's entries written whole are encoded now, off
			// the lock (snapshotCopy took copies of them).
			err = st.finish()
		}
		if err != nil || st != nil {
			return st, locked, err
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, 0, fmt.Errorf("ledger: snapshot: no instant at which the book was exact: %w", ctx.Err())
		}
		t.Stop()
	}
}

// ListSnapshots returns the snapshots in layout's snapshot bucket, newest
// first (none if the bucket does not exist).
func ListSnapshots(ctx context.Context, js jetstream.JetStream, layout streams.Layout) ([]SnapshotInfo, error) {
	list, err := listSnapshots(ctx, js, layout.SnapshotBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	return list, err
}

// listSnapshots lists the objects of bucket named as snapshots, newest
// first. It reads only their metas' names, sizes and times
// (streams.ListObjects): metas are anyone's who may write the bucket.
func listSnapshots(ctx context.Context, js jetstream.JetStream, bucket string) ([]SnapshotInfo, error) {
	objs, err := streams.ListObjects(ctx, js, bucket, func(name string) bool {
		_, ok := streams.SnapshotSeq(name)
		return ok
	})
	if err != nil {
		return nil, err
	}
	var out []SnapshotInfo
	for _, o := range objs {
		seq, _ := streams.SnapshotSeq(o.Name)
		out = append(out, SnapshotInfo{Name: o.Name, Seq: seq, Size: o.Size, At: o.ModTime, nuid: o.NUID, link: o.Link})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq > out[j].Seq })
	return out, nil
}

// loadSnapshot loads the newest valid snapshot at or below last into the
// book and returns its sequence (0: none, the follower folds from the
// first revision), and whether it passed over a snapshot because a reader
// (the feed) stands before it. A snapshot that cannot be read or fails its checks is
// logged as an error, counted (SnapshotsSkipped), and skipped for an older
// one, up to snapshotTries tried. It runs before the follower starts, so
// the book is this goroutine's.
func (l *Ledger) loadSnapshot(ctx context.Context, last uint64, ignoreReaders bool) (seq uint64, heldBack bool) {
	// Finding and listing are bounded: a replica whose permissions do not
	// cover the bucket must not wait long to fold the whole stream.
	lctx, cancel := context.WithTimeout(ctx, snapshotLookup)
	defer cancel()
	store, err := l.js.ObjectStore(lctx, l.layout.SnapshotBucket())
	if err != nil {
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			l.opts.log.Warn("ledger: snapshot bucket unreadable; folding the whole stream", "bucket", l.layout.SnapshotBucket(), "err", err)
		}
		return 0, false
	}
	l.snapStore = store
	if err := streams.CheckSnapshotBucket(lctx, l.js, l.layout); errors.Is(err, streams.ErrSnapshotSubjects) {
		// Its snapshots are checked like any others; what it captures
		// besides them is the operator's to repair.
		l.opts.log.Error("ledger: the snapshot bucket's stream captures other subjects; no snapshot will be written into it", "err", err)
	}
	list, err := listSnapshots(lctx, l.js, l.layout.SnapshotBucket())
	if err != nil {
		l.opts.log.Warn("ledger: listing snapshots failed; folding the whole stream", "err", err)
		return 0, false
	}
	ceiling := last
	if !ignoreReaders {
		ceiling = l.snapshotCeiling(lctx, last)
	}
	tried := 0
	for _, s := range list {
		if s.Seq > last {
			// Written against a stream that has since been reset, or
			// named so by someone else.
			l.snapSkipped.Add(1)
			l.opts.log.Warn("ledger: snapshot named past the stream's end skipped", "snapshot", s.Name, "last", last)
			continue
		}
		if s.Seq > ceiling {
			heldBack = true // a reader (the feed) stands before it
			continue
		}
		if tried == snapshotTries {
			l.opts.log.Error("ledger: too many snapshots failed their checks; folding the whole stream without trying older ones", "tried", tried, "next", s.Name)
			return 0, false
		}
		tried++
		// Reading a large snapshot takes seconds (most of a restart): say
		// what the replica is doing before it goes quiet.
		l.opts.log.Info("ledger: loading snapshot", "snapshot", s.Name, "seq", s.Seq, "bytes", s.Size, "tail", last-s.Seq)
		start := time.Now()
		var b *book
		var sections map[string]json.RawMessage
		err := l.snapshotChunked(ctx, s)
		if err == nil {
			b, sections, err = l.readSnapshot(ctx, store, s.Name)
		}
		if err == nil {
			err = l.checkAnchors(ctx, b)
		}
		if err == nil {
			err = l.loadSections(s.Seq, sections)
		}
		if err != nil {
			l.snapSkipped.Add(1)
			l.opts.log.Error("ledger: snapshot skipped", "snapshot", s.Name, "err", err)
			l.resetSections()
			continue
		}
		if b.trust != nil {
			if err := l.gate.LoadTrust(*b.trust.Trust, b.trust.Seq); err != nil {
				l.snapSkipped.Add(1)
				l.opts.log.Error("ledger: snapshot skipped", "snapshot", s.Name, "err", err)
				continue
			}
		}
		l.mu.Lock()
		l.bk = b
		l.publishTenantLimits()
		l.mu.Unlock()
		l.advance(s.Seq)
		l.snapLoaded.Store(s.Seq)
		l.snapWritten.Store(s.Seq)
		l.seenSnapshot(s)
		l.opts.log.Info("ledger: loaded snapshot", "snapshot", s.Name, "seq", s.Seq, "bytes", s.Size,
			"reservations", len(b.reservations), "took", time.Since(start), "tail", last-s.Seq)
		return s.Seq, heldBack
	}
	return 0, heldBack
}

// checkAnchors checks that every lane revision a snapshot's book names is
// in this stream: the message at that sequence is under that lane's key and
// its payload hashes to the snapshot's hash. The tail's chain only checks
// the lanes the tail touches; this catches a snapshot written against
// another stream (a bucket left behind by a reset stream) whose lanes the
// tail does not touch. Budget keys are not read back (there may be many);
// a lane check is one leader read per lane.
func (l *Ledger) checkAnchors(ctx context.Context, b *book) error {
	var err error
	b.heads.Each(func(key string, hd gate.Head) {
		if err != nil || hd.Valid == 0 || !(streams.IsLaneKey(key) || streams.IsTrustKey(key)) {
			return
		}
		m, found, rerr := l.leaderGet(ctx, leaderGetRequest{Seq: hd.Valid})
		if rerr != nil {
			err = fmt.Errorf("%w: reading %s at %d: %w", ErrSnapshotInvalid, key, hd.Valid, rerr)
			return
		}
		if !found {
			// A trim keeps each key's revision at the snapshot it trims
			// to; older snapshots name revisions it dropped.
			err = fmt.Errorf("%w: the stream no longer holds %s's revision at %d, which the snapshot names (trimmed past it; or a snapshot of another stream)", ErrSnapshotInvalid, key, hd.Valid)
			return
		}
		if m.subject != l.layout.Subject(key) || events.HashPayload(m.data) != hd.Hash {
			err = fmt.Errorf("%w: the stream's message at %d is not the revision of %s the snapshot names (a snapshot of another stream?)", ErrSnapshotInvalid, hd.Valid, key)
		}
	})
	return err
}

func (l *Ledger) readSnapshot(ctx context.Context, store jetstream.ObjectStore, name string) (*book, map[string]json.RawMessage, error) {
	o, err := streams.ReadObjectAhead(ctx, store, name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading %s: %w", ErrSnapshotInvalid, name, err)
	}
	defer o.Close()
	// Decoded while it arrives: the book is built from bytes whose digest
	// is checked only once they all arrived (ahead.check), and dropped if
	// it does not match.
	st, h, ahead, err := decodeSnapshotAhead(o, func(h snapshotHeader) error { return l.checkHeader(h, name) })
	if err != nil {
		return nil, nil, err
	}
	checked := l.signaturesChecked()
	b, err := bookFromSnapshot(l.layout, l.opts.retention, l.opts.expiredKeep, st)
	if err = ahead.checkFirst(h, err); err != nil {
		return nil, nil, err
	}
	if checked && b.trust != nil {
		// The ledger, as the snapshot states it, must have trusted its
		// signer at its sequence.
		ts, err := gate.TrustSet(*b.trust.Trust)
		if err != nil || !ts.Trusts(h.Signer, h.Seq) {
			return nil, nil, fmt.Errorf("%w: %w: it is signed by %s, which the ledger's trusted keys it states do not trust", ErrSnapshotInvalid, gate.ErrSnapshotUntrusted, h.Signer)
		}
	}
	return b, st.Sections, nil
}

// signaturesChecked reports whether this replica checks snapshots'
// signatures: it has trusted keys or a signing key of its own.
func (l *Ledger) signaturesChecked() bool {
	return l.gate.Anchor() != nil || l.keys.signer.Load() != nil
}

// checkHeader checks that header h is that of the snapshot named name,
// signed by a key this replica trusts at its sequence (when it checks
// signatures). Errors wrap ErrSnapshotInvalid.
func (l *Ledger) checkHeader(h snapshotHeader, name string) error {
	if err := h.checkName(name); err != nil {
		return err
	}
	if err := l.verifySignature(h); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotInvalid, err)
	}
	return nil
}

// verifySignature checks that h is signed by a key this replica trusts at
// its sequence, when it checks signatures.
func (l *Ledger) verifySignature(h snapshotHeader) error {
	if !l.signaturesChecked() {
		return nil
	}
	return gate.VerifySnapshot(h.id(l.layout.Bucket()), h.Signer, h.Sig, l.snapshotSigner(h.Seq))
}

// snapshotSigner returns whom this replica trusts to sign a snapshot at
// seq: a key its own trusted keys trust there, or its own signing key.
func (l *Ledger) snapshotSigner(seq uint64) func(string) bool {
	return func(pub string) bool {
		if s := l.keys.signer.Load(); s != nil && s.PublicKey() == pub {
			return true
		}
		return l.gate.Anchor().Trusts(pub, seq)
	}
}

// dumpSections adds every Section reader's state to st. The caller holds
// l.mu (see dumpExact).
func (l *Ledger) dumpSections(st *snapshotState) error {
	for _, r := range l.readers {
		sec, ok := r.(Section)
		if !ok {
			continue
		}
		if c, ok := sec.(SectionCopier); ok {
			// Encoded by st.finish, after the lock.
			st.sectionsLater = append(st.sectionsLater, laterSection{sec.SectionName(), c.CopySection()})
			continue
		}
		data, err := sec.MarshalSection()
		if err != nil {
			return fmt.Errorf("ledger: snapshot section %s: %w", sec.SectionName(), err)
		}
		if st.Sections == nil {
			st.Sections = map[string]json.RawMessage{}
		}
		st.Sections[sec.SectionName()] = data
	}
	return nil
}

// loadSections loads every Section reader from a snapshot's sections, as
// of seq. A snapshot without a reader's section (written before the
// reader existed, or by a replica without it) is refused: the reader's
// state could only be rebuilt from the stream's start.
func (l *Ledger) loadSections(seq uint64, sections map[string]json.RawMessage) error {
	for _, r := range l.readers {
		sec, ok := r.(Section)
		if !ok {
			continue
		}
		data, ok := sections[sec.SectionName()]
		if !ok {
			return fmt.Errorf("%w: no %q section (written without that reader, or by an older version)", ErrSnapshotInvalid, sec.SectionName())
		}
		if err := sec.LoadSection(seq, data); err != nil {
			return fmt.Errorf("%w: section %s: %w", ErrSnapshotInvalid, sec.SectionName(), err)
		}
	}
	return nil
}

// resetSections makes every Section reader start from the stream's first
// revision.
func (l *Ledger) resetSections() {
	for _, r := range l.readers {
		if sec, ok := r.(Section); ok {
			sec.ResetSection()
		}
	}
}

// resetBook drops a book loaded from a snapshot whose tail did not fold
// (its revisions do not follow the snapshot's), so the follower folds the
// whole stream. Only before Ready: nothing has decided on the book.
func (l *Ledger) resetBook() {
	l.mu.Lock()
	l.bk = newBook(l.layout, l.opts.retention, l.opts.expiredKeep)
	l.publishTenantLimits()
	l.gate.ResetTrust()
	l.skipped.reset() // refused under the dropped book's heads
	l.mu.Unlock()
	l.ahead.dropUntil(^uint64(0))
	l.resetSections()
	l.progMu.Lock()
	l.applied.Store(0)
	l.progMu.Unlock()
	l.snapLoaded.Store(0)
}

// snapshotLoop writes a snapshot whenever the stream has moved
// DefaultSnapshotRevisions (see WithSnapshotEvery) past the newest one
// this replica knows of, or the interval passed and it moved at all, and
// keeps the newest SnapshotsKept.
func (l *Ledger) snapshotLoop(ctx context.Context) {
	if l.opts.snapRevisions == 0 {
		return
	}
	t := time.NewTicker(min(snapshotCheck, l.opts.snapInterval/2))
	defer t.Stop()
	lastAt := time.Now()
	var notBefore time.Time // after a failure, wait an interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		applied, last := l.applied.Load(), l.snapWritten.Load()
		due := applied-last >= l.opts.snapRevisions || l.foldedEvents.Load() >= l.opts.snapEvents || time.Since(lastAt) >= l.opts.snapInterval
		if time.Now().Before(notBefore) || applied <= last || !due {
			continue
		}
		if l.live() != nil {
			continue
		}
		store := l.snapStore
		if store == nil {
			bctx, cancel := context.WithTimeout(ctx, snapshotLookup)
			var err error
			store, err = l.snapshotBucket(bctx)
			cancel()
			if err != nil {
				l.opts.log.Warn("ledger: cannot write periodic snapshots", "err", err)
				notBefore = time.Now().Add(l.opts.snapInterval)
				continue
			}
			l.snapStore = store
		}
		// Another replica may have written one meanwhile.
		list, err := listSnapshots(ctx, l.js, l.layout.SnapshotBucket())
		if err == nil && len(list) > 0 && list[0].Seq > last {
			l.snapWritten.Store(list[0].Seq)
			l.seenSnapshot(list[0])
			if applied-list[0].Seq < l.opts.snapRevisions && l.foldedEvents.Load() < l.opts.snapEvents && time.Since(lastAt) < l.opts.snapInterval {
				continue
			}
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		info, err := l.writeSnapshot(wctx, store)
		cancel()
		lastAt = time.Now()
		if errors.Is(err, streams.ErrSnapshotSubjects) {
			l.opts.log.Error("ledger: periodic snapshot not written: the snapshot bucket's stream captures other subjects", "err", err)
			notBefore = time.Now().Add(l.opts.snapInterval)
			continue
		}
		if err != nil {
			l.opts.log.Warn("ledger: periodic snapshot failed", "err", err)
			notBefore = time.Now().Add(l.opts.snapInterval)
			continue
		}
		l.opts.log.Info("ledger: wrote snapshot", "snapshot", info.Name, "seq", info.Seq, "bytes", info.Size, "locked", info.Locked)
		l.pruneSnapshots(ctx, store)
	}
}

// pruneSnapshots keeps the SnapshotsKept newest snapshots of the bucket
// and deletes the older ones. Only snapshots whose header this replica
// verifies (their name is their header's sequence, signed by a key it
// trusts) count as kept: objects written under snapshot names by anyone
// else, say with names past the stream's end, must not push the real
// ones out. An object whose header names another sequence than its name,
// or has no readable header, is no snapshot any writer made: it is
// deleted, as is an unsigned one when this replica checks signatures (no
// such replica loads it). One this replica cannot verify but another
// might (a newer format, a key it does not trust yet) is left alone and
// not counted.
func (l *Ledger) pruneSnapshots(ctx context.Context, store jetstream.ObjectStore) {
	bucket := l.layout.SnapshotBucket()
	list, err := listSnapshots(ctx, l.js, bucket)
	if err != nil {
		return
	}
	// Chunks named by more than one live object (any name, the feed's
	// checkpoint too): deleting one of them must leave them. Listed after
	// the snapshots, so that it holds every meta the list does (a meta
	// written in between is in this one only).
	all, err := streams.ListObjects(ctx, l.js, bucket, nil)
	if err != nil {
		return
	}
	owners := map[string]int{}
	live := map[string]bool{}
	for _, o := range all {
		owners[o.NUID]++
		live[o.NUID] = true
	}
	// A snapshot whose writer was killed mid-write left chunks and no
	// meta: tens of MB each, which nothing else deletes.
	if n, err := streams.PurgeOrphanChunks(ctx, l.js, bucket, live, l.opts.orphanAge); err != nil {
		l.opts.log.Warn("ledger: purging chunks no snapshot names", "err", err)
	} else if n > 0 {
		l.opts.log.Info("ledger: purged the chunks of unfinished snapshots", "objects", n)
	}
	if len(list) <= SnapshotsKept {
		return
	}
	kept := 0
	for _, s := range list {
		var line []byte
		err := l.snapshotChunked(ctx, s)
		if err == nil {
			line, err = streams.ReadObjectLine(ctx, store, s.Name, snapshotHeaderMax)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !errors.Is(err, streams.ErrNoLine) && !errors.Is(err, errNoObject):
			// Not read (slow, gone): not junk for sure.
			l.opts.log.Warn("ledger: snapshot header unreadable; left alone", "snapshot", s.Name, "err", err)
			continue
		}
		var h snapshotHeader
		if err == nil {
			var perr error
			h, perr = parseSnapshotHeader(line)
			if perr != nil && h.Format == SnapshotFormat && h.Version > SnapshotVersion {
				l.opts.log.Warn("ledger: snapshot of a newer version left alone", "snapshot", s.Name, "version", h.Version)
				continue
			}
			err = perr
			if err == nil {
				err = h.checkName(s.Name)
			}
		}
		if err == nil && l.signaturesChecked() && h.Signer == "" {
			// Unsigned (written before snapshots were signed): no replica
			// that checks signatures loads it.
			err = fmt.Errorf("unsigned")
		}
		if err == nil {
			if verr := l.verifySignature(h); verr != nil {
				l.opts.log.Warn("ledger: snapshot this replica does not trust left alone", "snapshot", s.Name, "err", verr)
				continue
			}
		}
		switch {
		case errors.Is(err, errNoObject) && objectGone(ctx, store, s.Name):
			// Another replica pruned it while this one read it: its
			// chunks went first, then its meta.
			l.opts.log.Debug("ledger: a snapshot another replica pruned meanwhile", "snapshot", s.Name)
			continue
		case err != nil:
			l.opts.log.Warn("ledger: deleting an object that is not a snapshot of this ledger", "snapshot", s.Name, "err", err)
		case h.Seq > l.applied.Load():
			// Past this replica's fold: another replica's, ahead of it,
			// or one of a stream since reset. Not counted either way.
			continue
		case kept < SnapshotsKept:
			kept++
			continue
		}
		var derr error
		if owners[s.nuid] > 1 || !streams.PlainNUID(s.nuid) {
			// Its chunks are another object's too (a copy of its meta
			// under another name), or its meta names all of them ("*",
			// ">"): the object store's Delete purges what the meta
			// names, so only the meta is deleted.
			derr = streams.DeleteObjectMeta(ctx, l.js, bucket, s.Name)
		} else {
			derr = store.Delete(ctx, s.Name)
		}
		if derr != nil && !errors.Is(derr, jetstream.ErrObjectNotFound) {
			l.opts.log.Warn("ledger: deleting old snapshot", "snapshot", s.Name, "err", derr)
		}
	}
}

// orphanChunkAge is how old the newest chunk of an object without a meta
// must be before pruning purges it: far longer than a snapshot's write
// (writeSnapshot gives it a minute), so another replica's write still
// under way is never taken for a dead one.
const orphanChunkAge = time.Hour

// errNoObject: a snapshot's meta is no object store's (snapshotChunked).
var errNoObject = errors.New("its meta was written by no object store")

// objectGone reports whether name's meta is gone from store now (a
// replica pruning it deletes its chunks, then its meta).
func objectGone(ctx context.Context, store jetstream.ObjectStore, name string) bool {
	_, err := store.GetInfo(ctx, name)
	return errors.Is(err, jetstream.ErrObjectNotFound)
}

// snapshotChunked checks that listed snapshot s's meta is no link and that
// the bucket holds a chunk under the NUID it names (one message get), else
// errNoObject: no writer links snapshots, and an object store writes an
// object's chunks before its meta. Reading such an object would follow its
// links (one to itself included) or wait for chunks that never come, until
// the object store's read times out (5 s), at start for each such object
// and at every pruning.
func (l *Ledger) snapshotChunked(ctx context.Context, s SnapshotInfo) error {
	if s.link {
		return fmt.Errorf("%w: %w: it links to another object", ErrSnapshotInvalid, errNoObject)
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotLookup)
	defer cancel()
	has, err := streams.ObjectHasChunks(ctx, l.js, l.layout.SnapshotBucket(), s.nuid)
	switch {
	case err != nil:
		return nil // unknown: the read says
	case !has && s.Size > 0:
		return fmt.Errorf("%w: %w: it names chunks %q, of which the bucket holds none", ErrSnapshotInvalid, errNoObject, s.nuid)
	}
	return nil
}

// snapshotHeaderMax bounds what pruning reads of an object for its header.
const snapshotHeaderMax = 4 << 10

// SnapshotStats says what this replica did with snapshots.
type SnapshotStats struct {
	// Loaded is the sequence of the snapshot the replica started from (0:
	// it folded the whole stream).
	Loaded uint64
	// Skipped counts snapshots that failed their checks at start.
	Skipped int64
	// Written is the sequence of the newest snapshot this replica wrote or
	// saw.
	Written uint64
}

// seenSnapshot records s as the newest snapshot this replica knows of, for
// SnapshotAge.
func (l *Ledger) seenSnapshot(s SnapshotInfo) {
	if !s.At.IsZero() && s.At.UnixNano() > l.snapAt.Load() {
		l.snapAt.Store(s.At.UnixNano())
	}
}

// SnapshotAge returns how long ago the newest snapshot this replica knows
// of was written (one it loaded at start, wrote, or found written by
// another replica when its own was due), or -1 if it knows of none.
func (l *Ledger) SnapshotAge() time.Duration {
	at := l.snapAt.Load()
	if at == 0 {
		return -1
	}
	return max(time.Since(time.Unix(0, at)), 0)
}

// SnapshotStats returns what this replica did with snapshots.
func (l *Ledger) SnapshotStats() SnapshotStats {
	return SnapshotStats{Loaded: l.snapLoaded.Load(), Skipped: l.snapSkipped.Load(), Written: l.snapWritten.Load()}
}
