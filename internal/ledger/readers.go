package ledger

import (
	"context"
	"errors"
	"sync"

	"github.com/spendgate/spendgate/internal/gate"
)

// Reader is a reader of the ledger fed by the replica's one fold: every
// revision the gate passes is handed to every reader once, in stream
// order, after the book folded it, on the follower's goroutine. Nothing a
// replica skipped reaches a reader, and no reader opens a consumer of its
// own on the ledger stream. Fold must not block on I/O: a reader that
// writes elsewhere queues what it needs (a full queue holds the follower
// back, which the replica's lag shows). rev is shared by every reader:
// it must not be changed. own reports that this replica wrote it.
type Reader interface {
	Fold(rev *gate.Revision, own bool)
}

// Section is a Reader whose state travels in the replica's snapshots, as
// of the snapshot's sequence, so that a restart costs what follows the
// snapshot for it as for the book. A snapshot without a reader's section
// (written before the reader existed) is not loaded: the replica folds the
// stream from its start instead, once.
type Section interface {
	Reader
	// SectionName names the section in a snapshot (a JSON object key).
	SectionName() string
	// MarshalSection returns the state after the last revision folded.
	MarshalSection() ([]byte, error)
	// LoadSection replaces the state by a snapshot's, as of seq.
	LoadSection(seq uint64, data []byte) error
	// ResetSection forgets everything: the fold starts again from the
	// stream's first revision.
	ResetSection()
}

// SectionCopier is a Section whose state is quicker to copy than to
// encode: a replica writing a snapshot calls CopySection while it holds
// its book's lock (the book and the readers stand at the snapshot's
// sequence), and the function it returns, which encodes the copy as
// MarshalSection would, after it lets go, so that admits do not wait for
// the encoding.
type SectionCopier interface {
	Section
	CopySection() func() ([]byte, error)
}

// Ceiling is a Reader that needs the fold to start at or before a
// position (a feed relay: events between where the feed stands and a
// snapshot would never reach it): the replica loads no snapshot past the
// lowest Ceiling of its readers (an error: none at all).
type Ceiling interface {
	Reader
	Ceiling(ctx context.Context) (uint64, error)
}

// AddReader has r fed by the fold. Call it before Run.
func (l *Ledger) AddReader(r Reader) error {
	l.life.Lock()
	defer l.life.Unlock()
	if l.state != stateNew {
		return errors.New("ledger: AddReader after Run")
	}
	l.readers = append(l.readers, r)
	return nil
}

// maxAhead bounds the revisions kept for the readers while they wait for
// the follower (a revision this replica wrote or caught up on before its
// follower reached it): past it, the follower decodes such a revision
// again.
const maxAhead = 1 << 16

// ahead holds the revisions folded before the follower reached them (this
// replica's own writes, catch-ups), by sequence, so the follower hands
// them to the readers without decoding them again.
type ahead struct {
	mu sync.Mutex
	m  map[uint64]aheadEntry
}

type aheadEntry struct {
	passed *gate.Revision // nil: skipped
	own    bool
}

func (a *ahead) put(seq uint64, passed *gate.Revision, own bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[uint64]aheadEntry{}
	}
	if len(a.m) < maxAhead {
		a.m[seq] = aheadEntry{passed, own}
	}
}

// each calls f with every entry, under a's lock (f must not call a).
func (a *ahead) each(f func(seq uint64, e aheadEntry)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s, e := range a.m {
		f(s, e)
	}
}

func (a *ahead) take(seq uint64) (aheadEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[seq]
	if ok {
		delete(a.m, seq)
	}
	return e, ok
}

// dropUntil forgets entries at or below seq (the follower passed them).
func (a *ahead) dropUntil(seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s := range a.m {
		if s <= seq {
			delete(a.m, s)
		}
	}
}

// feed hands the revision of the message at seq to the readers: passed
// when the follower folded it itself, else what was folded ahead of it
// (decoded again if that was not kept). It returns the revision (nil: the
// message was skipped), for the follower's counts.
func (l *Ledger) feed(m *gate.Message, passed *gate.Revision, foldedHere bool) *gate.Revision {
	own := l.isOwn(m)
	if !foldedHere {
		if e, ok := l.ahead.take(m.Seq); ok {
			passed, own = e.passed, own || e.own
		} else if key, ok := l.layout.KeyOf(m.Subject); ok && len(l.readers) > 0 && l.revOf(key) >= m.Seq {
			// Folded ahead but not kept: decode it again. It passed then;
			// what the gate says now about what needs no heads is the
			// same unless the trusted keys changed in between.
			if rev, rej := l.gate.Inspect(m); rej == nil {
				passed = rev
			}
		}
	}
	if passed == nil {
		return nil
	}
	if passed.At.IsZero() {
		passed.At = m.At
	}
	for _, rd := range l.readers {
		rd.Fold(passed, own)
	}
	return passed
}

// snapshotCeiling is the newest snapshot sequence the readers let the
// replica start from (no limit: the stream's last sequence).
func (l *Ledger) snapshotCeiling(ctx context.Context, last uint64) uint64 {
	ceiling := last
	for _, r := range l.readers {
		c, ok := r.(Ceiling)
		if !ok {
			continue
		}
		v, err := c.Ceiling(ctx)
		if err != nil {
			l.opts.log.Warn("ledger: a reader cannot say where it stands; folding the whole stream for it", "err", err)
			return 0
		}
		ceiling = min(ceiling, v)
	}
	return ceiling
}
