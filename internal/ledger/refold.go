package ledger

import (
	"context"
	"errors"
	"sync"

	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
)

// maxSkips bounds the refusals a replica remembers for Refold.
const maxSkips = 1 << 16

// skips is the sequences the fold refused (every gate rejection), the
// last maxSkips of them: what Refold must not hand out again.
type skips struct {
	mu   sync.Mutex
	set  map[uint64]struct{}
	ring []uint64
	next int
	// floor is the highest sequence forgotten: Refold cannot tell what
	// the fold did at or below it.
	floor uint64
}

func (s *skips) add(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = map[uint64]struct{}{}
		s.ring = make([]uint64, 0, 1024)
	}
	if _, ok := s.set[seq]; ok {
		return
	}
	if len(s.ring) < maxSkips {
		s.ring = append(s.ring, seq)
	} else {
		old := s.ring[s.next]
		delete(s.set, old)
		s.floor = max(s.floor, old)
		s.ring[s.next] = seq
		s.next = (s.next + 1) % maxSkips
	}
	s.set[seq] = struct{}{}
}

// reset forgets every refusal: the fold starts again.
func (s *skips) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set, s.ring, s.next, s.floor = nil, nil, 0, 0
}

// refused reports whether the fold refused seq, or that it cannot tell
// (forgotten: seq is at or below a refusal it no longer remembers). One
// look under the lock: a refusal evicted between two separate looks
// (more than maxSkips refusals coming in meanwhile) would otherwise read
// as passed.
func (s *skips) refused(seq uint64) (refused, forgotten bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.floor {
		return false, true
	}
	_, refused = s.set[seq]
	return refused, false
}

func (s *skips) forgotten(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return seq <= s.floor
}

// ErrRefoldForgotten: Refold was asked for sequences at or below a
// refusal this replica no longer remembers (more than maxSkips refusals
// came after it), so it cannot tell which of them the fold passed.
var ErrRefoldForgotten = errors.New("ledger: the fold's refusals that far back are no longer remembered")

// Refold hands out again what the fold passed at the sequences from to to
// (at most max messages read): for a reader that dropped some of what the
// fold handed it (a feed relay whose feed took nothing for a while) and
// must not wait for a restart to get it back. It reads the messages with
// one batched direct get (no consumer; through the stream's leader, one
// message, when that returns none), and returns, in stream order, those
// the fold passed, decoded by the gate as the fold decoded them; the
// fold's refusals, which this replica remembers (the last maxSkips),
// stay refused. A message signed by a key the ledger's trust no longer
// admits (distrusted, dropped or retired since the fold passed it) is
// handed out as the fold passed it, if its signature holds; any other
// refusal on the second read is left out and logged. next is the
// sequence after the last one read.
//
// Sequences past what the fold has handed its readers are not read (next
// then stops there). Once the fold's refusals at or below from are forgotten, it
// returns ErrRefoldForgotten.
func (l *Ledger) Refold(ctx context.Context, from, to uint64, max int) (revs []*gate.Revision, next uint64, err error) {
	return l.refold(ctx, from, to, max, true)
}

// RefoldPassed is Refold for a reader that knows the fold passed every
// sequence from from to to that is in the stream (it was handed each: a
// feed relay keeps the sequences of the revisions it dropped): the
// fold's refusals are not consulted, so it never answers
// ErrRefoldForgotten, however many refusals came since. The trust
// changing since is handled as Refold handles it.
func (l *Ledger) RefoldPassed(ctx context.Context, from, to uint64, max int) (revs []*gate.Revision, next uint64, err error) {
	return l.refold(ctx, from, to, max, false)
}

func (l *Ledger) refold(ctx context.Context, from, to uint64, max int, skips bool) (revs []*gate.Revision, next uint64, err error) {
	if from == 0 {
		from = 1
	}
	// What the fold has not handed its readers yet is not theirs to
	// read again: a later call gets it.
	to = min(to, l.applied.Load())
	if skips && l.skipped.forgotten(from) {
		return nil, from, ErrRefoldForgotten
	}
	next = from
	if next > to || max < 1 {
		return nil, next, nil
	}
	ms, err := l.directBatch(ctx, next, int(min(uint64(max), to-next+1)))
	if err != nil && len(ms) == 0 {
		l.opts.log.Debug("ledger: refold: a batched read failed; reading through the leader", "err", err)
	}
	if len(ms) == 0 {
		// None from the batched read (an error, or a replica behind):
		// one message through the stream's leader.
		m, found, err := l.leaderGet(ctx, leaderGetRequest{Seq: next})
		if err != nil {
			return nil, next, err
		}
		if found {
			ms = []storedMsg{m}
		} else {
			next++ // not in the stream (trimmed)
		}
	}
	for _, m := range ms {
		if m.seq < next || m.seq > to {
			break
		}
		if skips {
			refused, forgotten := l.skipped.refused(m.seq)
			if forgotten {
				// More than maxSkips refusals came in while this call read.
				return nil, from, ErrRefoldForgotten
			}
			if refused {
				next = m.seq + 1
				continue // refused by the fold
			}
		}
		next = m.seq + 1
		msg := &gate.Message{Seq: m.seq, Subject: m.subject, Header: m.header, Data: m.data, At: m.at}
		rev, rej := l.gate.Inspect(msg)
		if rej != nil && trustMovedOn(rej.Reason) {
			// The fold passed it under the trust state of its place in the
			// stream; the ledger's trust changed since (its key distrusted,
			// dropped or retired before it). Its signature still holds:
			// hand it out as the fold did, so a reader never lacks what the
			// book holds.
			if _, ok := signing.VerifyBy(rej.Key, m.header, m.data); ok {
				rev, rej = gate.NewUnverified(l.layout).Inspect(msg)
			}
		}
		if rej != nil {
			l.opts.log.Warn("ledger: a revision the fold passed is refused on a second read (the trusted keys changed since); not handed out again", "seq", m.seq, "reason", string(rej.Reason))
			continue
		}
		if rev.At.IsZero() {
			rev.At = m.at
		}
		revs = append(revs, rev)
	}
	return revs, next, nil
}

// trustMovedOn reports whether a second read's refusal is the ledger's
// trust having changed since the fold passed the revision.
func trustMovedOn(r signing.Reason) bool {
	return r == signing.ReasonDistrustedKey || r == signing.ReasonUntrustedKey || r == signing.ReasonRetiredKey
}
