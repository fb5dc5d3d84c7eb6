package ledger

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/streams"
)

// target is what applyEvent folds into: the book (book.go), when a
// revision is folded, or a group's overlay of the book (view.go), when a
// Tx's events are decided. A target only stores; every rule of what an
// event does is applyEvent's.
type target interface {
	// reserve and unreserve move amt into and out of balance key's
	// reserved, and exposure into and out of its exposure, one open
	// reservation with them; spend adds to its spent and overrun; alert
	// records a threshold crossed in it (in the crossing's arm generation,
	// which forgets those of an earlier one).
	reserve(key string, amt, exposure events.Money)
	unreserve(key string, amt, exposure events.Money)
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
	// learn folds the actual cost of one settled call into the learned
	// reservations' state (package learn).
	learn(k learn.Key, actual events.Money)
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
		// A reservation with a ceiling above its amount adds the
		// difference to the balance's exposure while it is open: the
		// most its settle may add above what it holds.
		p0 := Part{Amount: e.Amount, Ceiling: e.Ceiling}
		t.reserve(key, e.Amount, p0.Exposure())
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
		p.Unit, p.Amount, p.Ceiling = e.Unit, e.Amount, e.Ceiling
		t.opens(key, r)
	case events.ReservationSettled:
		t.spend(key, e.Actual, e.Overrun)
		r := t.held(e.ReservationID)
		if r == nil {
			r = t.stamped(e.ReservationID)
		}
		if !e.AfterExpiry {
			// A settle after the reservation expired finds its amount
			// (and its exposure) released already, by the expiry.
			var exposure events.Money
			if r != nil {
				exposure = r.Part(key).Exposure()
			}
			t.unreserve(key, e.Reserved, exposure)
			t.closes(key, e.ReservationID)
		}
		if r == nil {
			return
		}
		if k, ok := learnedBy(r, key, e.Balance.Scope); ok {
			// What the call cost, excess included: a cap limits what the
			// budget is charged, not what the model costs.
			actual := e.Actual
			if e.Excess != nil {
				actual = actual.Add(*e.Excess)
			}
			t.learn(k, actual)
		}
		was := r.Status
		if was == events.StatusOpen {
			t.openChanged(r, -1)
		}
		r.Status = events.StatusSettled
		r.part(key).Actual = e.Actual
		r.Late = r.Late || e.Late
		r.AfterExpiry = r.AfterExpiry || e.AfterExpiry
		t.closed(r, was == events.StatusSettled)
	case events.ReservationReleased:
		r := t.held(e.ReservationID)
		var exposure events.Money
		if r != nil {
			exposure = r.Part(key).Exposure()
		}
		t.unreserve(key, e.Reserved, exposure)
		t.closes(key, e.ReservationID)
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

// learnedBy returns the key whose learned reservations a settle of r in
// balance key (of scope) teaches: a reservation priced from a model and
// admitted under a learn rule (its part has a Ceiling, which every admit
// in a budget with a learn rule sets) teaches its scope once, by the
// settle of the first such part of the scope in key order (one scope's
// balances are all in one lane, so every replica folds them in the same
// order). Only reservations admitted under a rule teach: a replica that
// loaded a snapshot written before learned reservations existed misses
// none.
func learnedBy(r *Reservation, key string, scope events.Scope) (learn.Key, bool) {
	if r.Pricing == nil {
		return learn.Key{}, false
	}
	for _, ref := range r.Balances {
		if ref.Scope != scope {
			continue
		}
		k := streams.BalanceKey(ref)
		if p := r.Part(k); p != nil && p.Ceiling != nil {
			return learn.Key{Scope: scope, Model: r.Pricing.Model}, k == key
		}
	}
	return learn.Key{}, false
}
