package ledger

import (
	"github.com/spendgate/spendgate/events"
)

// target is what applyEvent folds into: the book (book.go), when a
// revision is folded, or a group's overlay of the book (view.go), when a
// Tx's events are decided. A target only stores; every rule of what an
// event does is applyEvent's.
type target interface {
	// reserve and unreserve move amt into and out of balance key's
	// reserved, one open reservation with it; spend adds to its spent and
	// overrun; alert records a threshold crossed in it (in the crossing's
	// arm generation, which forgets those of an earlier one).
	reserve(key string, amt events.Money)
	unreserve(key string, amt events.Money)
	spend(key string, actual, overrun events.Money)
	alert(key string, e events.ThresholdCrossed)
	// held returns reservation id, to change, if the target holds it open
	// or closed and not yet stamped (a group's overlay holds every
	// reservation the book knows); nil otherwise.
	held(id string) *Reservation
	// stamped returns reservation id, to change, from the idempotency
	// window (closed and stamped), nil if it is not there.
	stamped(id string) *Reservation
	// opened makes the reservation e opens, open and with no parts yet.
	opened(e events.ReservationOpened) *Reservation
	// opens and closes record that r is, or reservation id no longer is,
	// open in balance key.
	opens(key string, r *Reservation)
	closes(key, id string)
	// closed records that r has closed; again when it had closed already
	// (in another balance, or at its expiry before a late settle).
	closed(r *Reservation, again bool)
	// openChanged records that r became open (d = 1) or stopped being
	// open (d = -1): its tenant's count of open reservations (tenants.go).
	openChanged(r *Reservation, d int)
	// void records request id e.RequestID as voided.
	void(e events.RequestVoided)
}

// applyEvent is the ledger's one rule set: what event e, in balance key,
// does to the balance and to its reservation. The committer applies a
// Tx's events with it to the group's overlay of the book as the group is
// decided, and the book applies every revision the gate passes with it,
// this replica's own included; package projector folds the same events
// independently (the auditor's oracle), and the two must agree. An event
// type added to package events is added here, and nowhere else in this
// package.
func applyEvent(t target, key string, e events.Event) {
	switch e := e.(type) {
	case events.ReservationOpened:
		t.reserve(key, e.Amount)
		r := t.held(e.ReservationID)
		if r == nil {
			r = t.opened(e)
			if r.Status == events.StatusOpen {
				// (The book's opened may find the id closed in its
				// window: a malformed history, not a new open.)
				t.openChanged(r, 1)
			}
		}
		p := r.part(key)
		p.Unit, p.Amount = e.Unit, e.Amount
		t.opens(key, r)
	case events.ReservationSettled:
		t.spend(key, e.Actual, e.Overrun)
		if !e.AfterExpiry {
			// A settle after the reservation expired finds its amount
			// released already, by the expiry.
			t.unreserve(key, e.Reserved)
			t.closes(key, e.ReservationID)
		}
		r := t.held(e.ReservationID)
		if r == nil {
			r = t.stamped(e.ReservationID)
		}
		if r == nil {
			return
		}
		was := r.Status
		if was == events.StatusOpen {
			t.openChanged(r, -1)
		}
		r.Status = events.StatusSettled
		r.part(key).Actual = e.Actual
		r.Late = r.Late || e.Late
		t.closed(r, was == events.StatusSettled)
	case events.ReservationReleased:
		t.unreserve(key, e.Reserved)
		t.closes(key, e.ReservationID)
		r := t.held(e.ReservationID)
		switch {
		case r == nil:
		case r.Status == events.StatusOpen:
			t.openChanged(r, -1)
			r.Status = events.StatusReleased
			if e.Reason == events.ReasonExpired {
				r.Status = events.StatusExpired
			}
			t.closed(r, false)
		default:
			// Released in another balance already.
			t.closed(r, true)
		}
	case events.ThresholdCrossed:
		t.alert(key, e)
	case events.RequestVoided:
		// A tombstone: no number of the balance changes.
		t.void(e)
	}
}
