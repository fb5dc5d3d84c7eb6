package projector

import (
	"maps"
	"slices"
	"time"

	"github.com/spendgate/spendgate/events"
)

// An audit's memory follows what is live, not what is past: a State with
// a window forgets a closed reservation once nothing in a valid stream
// can refer to it any more, the way a ledger replica forgets it from its
// idempotency window. A settled or released reservation is referred to by
// nothing after its close; the window keeps it for the ledger's retention
// (plus a margin) so that a snapshot's idempotency window can still be
// compared with the replay. An expired reservation may still be settled
// late for as long as the ledger remembers it (its expired retention), so
// it is kept that long plus a margin. Times are the JetStream server's
// timestamps of the messages, the clock the ledger stamps closes with.
//
// A voided request id (events.RequestVoided) is remembered the same way:
// a replica refuses an admit of it for its retention of a closed
// reservation from the void, then forgets it, so the window keeps it for
// its closed retention from the revision that voided it (the newest, if
// voided again) and then forgets it. The replay needs a void for nothing
// else than comparing a snapshot's remembered voids: a fold never looks
// a request id up among the voids (an admit of a voided id is the
// writer's to refuse; once written it folds like any admit).
//
// A reservation is checked on its own (every balance it lists opened, its
// parts agreeing on a status) as it is forgotten; Check reports what that
// finds as it would have at the end of the replay.

// Default retentions of an audit's window: the ledger's defaults
// (ledger.DefaultRetention, ledger.DefaultExpiredRetention) plus a margin.
const (
	DefaultWindowClosed  = 15*time.Minute + 5*time.Minute
	DefaultWindowExpired = 48*time.Hour + time.Hour
)

// voidRef is one void in the window's queue: the request id, the
// sequence of the revision that voided it, and that revision's server
// time (Unix nanoseconds).
type voidRef struct {
	rid string
	seq uint64
	at  int64
}

type closedRef struct {
	id  string
	seq uint64 // the last message that changed the reservation
	at  int64  // server time of its close, Unix nanoseconds
}

// window is a State's forgetting of closed reservations (nil: keep all).
type window struct {
	closed, expired time.Duration
	queues          [2][]closedRef // settled or released; expired
	// digests holds the status of each settled or released reservation
	// still in the window, in place of the whole reservation: nothing
	// valid refers to it again, and a snapshot's window is compared by
	// status.
	digests map[string]string
	// voids queues the voids of State.voided in the order they were
	// stamped, each with the sequence that voided it.
	voids     []voidRef
	now       time.Time
	forgotten int
	// onForget, if set, sees each reservation as it is forgotten.
	onForget func(*Reservation)
}

func (w *window) clone() *window {
	if w == nil {
		return nil
	}
	c := *w
	c.queues = [2][]closedRef{slices.Clone(w.queues[0]), slices.Clone(w.queues[1])}
	c.digests = maps.Clone(w.digests)
	c.voids = slices.Clone(w.voids)
	return &c
}

// setWindow makes s forget closed reservations after these retentions.
func (s *State) setWindow(closed, expired time.Duration, onForget func(*Reservation)) {
	s.win = &window{closed: closed, expired: expired, onForget: onForget, digests: map[string]string{}}
}

// advance records that the next message was stored at t (server time) and
// forgets what the window no longer holds as of t.
func (s *State) advance(t time.Time) {
	if t.After(s.at) {
		s.at = t
	}
	w := s.win
	if w == nil {
		return
	}
	if t.After(w.now) {
		w.now = t
	}
	for i, keep := range []time.Duration{w.closed, w.expired} {
		before := w.now.Add(-keep).UnixNano()
		q := w.queues[i]
		n := 0
		for n < len(q) && q[n].at < before {
			s.forget(q[n])
			n++
		}
		if n > 0 {
			if n > len(q)/2 {
				q = append(q[:0:0], q[n:]...)
			} else {
				q = q[n:]
			}
			w.queues[i] = q
		}
	}
	before := w.now.Add(-w.closed).UnixNano()
	n := 0
	for n < len(w.voids) && w.voids[n].at < before {
		if v := w.voids[n]; s.voided[v.rid] == v.seq {
			delete(s.voided, v.rid)
		}
		n++
	}
	if n > 0 {
		if n > len(w.voids)/2 {
			w.voids = append(w.voids[:0:0], w.voids[n:]...)
		} else {
			w.voids = w.voids[n:]
		}
	}
}

// void records that the revision at seq voided the request ids rids. A
// request id voided again (in another scope's lane, or after a replica
// forgot it and a client voided it anew) is stamped again: the window
// keeps it at least as long as any replica does.
func (s *State) void(rids []string, seq uint64) {
	for _, rid := range rids {
		s.voided[rid] = seq
		if s.win != nil {
			s.win.voids = append(s.win.voids, voidRef{rid: rid, seq: seq, at: s.win.now.UnixNano()})
		}
	}
}

// Voided reports whether the State remembers request id rid as voided
// (without a window: whether any revision folded voided it).
func (s *State) Voided(rid string) bool {
	_, ok := s.voided[rid]
	return ok
}

func (s *State) forget(c closedRef) {
	if _, ok := s.win.digests[c.id]; ok && c.seq == 0 {
		delete(s.win.digests, c.id)
		return
	}
	r := s.reservations[c.id]
	if r == nil || r.Status == events.StatusOpen || lastSeq(r) != c.seq {
		return // changed since (a settle after expiry queued it again)
	}
	if s.win.onForget != nil {
		s.win.onForget(r)
	}
	delete(s.reservations, c.id)
	s.win.forgotten++
}

// closed queues reservation r, which the message at seq closed (or
// changed while closed), for forgetting.
func (s *State) closed(r *Reservation, seq uint64) {
	if s.win == nil || r.Status == events.StatusOpen {
		return
	}
	at := s.win.now.UnixNano()
	if r.Expired && hasExpiredPart(r) {
		// A part still expired may be settled late (in its own lane's
		// revision, later): kept whole.
		s.win.queues[1] = append(s.win.queues[1], closedRef{id: r.ID, seq: seq, at: at})
		return
	}
	// Settled or released: checked now, kept as a digest.
	if s.win.onForget != nil {
		s.win.onForget(r)
	}
	delete(s.reservations, r.ID)
	s.win.forgotten++
	s.win.digests[r.ID] = r.Status
	s.win.queues[0] = append(s.win.queues[0], closedRef{id: r.ID, at: at})
}

func hasExpiredPart(r *Reservation) bool {
	for _, p := range r.Parts {
		if p.Status == events.StatusExpired {
			return true
		}
	}
	return false
}

// statusOf returns reservation id's status, from the reservation or its
// digest; r is nil for a digest.
func (s *State) statusOf(id string) (r *Reservation, status string, ok bool) {
	if r := s.reservations[id]; r != nil {
		return r, r.Status, true
	}
	if s.win != nil {
		status, ok = s.win.digests[id]
	}
	return nil, status, ok
}

// lastSeq is the last message that changed r (0: none known, a
// reservation loaded from a snapshot).
func lastSeq(r *Reservation) uint64 {
	if len(r.Seqs) == 0 {
		return 0
	}
	return r.Seqs[len(r.Seqs)-1]
}

// Forgotten is the number of closed reservations the State no longer
// holds (see CheckOption WithWindow); Reservations lists the rest.
func (s *State) Forgotten() int {
	if s.win == nil {
		return 0
	}
	return s.win.forgotten
}

// newState returns a fresh State with the window the options ask for.
func (o *checkOptions) newState() *State {
	st := NewState()
	if o.window {
		st.setWindow(o.closed, o.expired, nil)
	}
	return st
}
