package gate

import (
	"fmt"

	"github.com/spendgate/spendgate/events"
)

// wellFormed checks that a writer of the ledger could have written lane
// revision r: every balance named once, by a valid reference, in a valid
// unit, with amounts that are not negative; every event of a balance about
// that balance, naming the reservation or request it changes. It checks
// no transition (a settle of a reservation the book does not hold is the
// fold's to ignore and the audit's to report): only what the book and its
// snapshot must be able to hold, so that a revision folded is one the
// replica's next snapshot carries and loads.
func wellFormed(r *events.LaneRevision) error {
	for i := range r.Balances {
		b := &r.Balances[i]
		if err := b.Balance.Validate(); err != nil {
			return fmt.Errorf("balance %d: %w", i, err)
		}
		for j := range i {
			if r.Balances[j].Balance == b.Balance {
				return fmt.Errorf("balance %s twice", b.Balance)
			}
		}
		if err := events.ValidateUnit(b.Unit); err != nil {
			return fmt.Errorf("balance %s: %w", b.Balance, err)
		}
		if b.Limit.Sign() < 0 || b.Spent.Sign() < 0 || b.Reserved.Sign() < 0 || b.Overrun.Sign() < 0 ||
			b.Open < 0 || b.Exposure != nil && b.Exposure.Sign() < 0 {
			return fmt.Errorf("balance %s: a negative amount or count", b.Balance)
		}
		for j, e := range b.Events {
			if err := wellFormedEvent(b.Balance, e); err != nil {
				return fmt.Errorf("balance %s, event %d: %w", b.Balance, j, err)
			}
		}
	}
	return nil
}

// wellFormedEvent checks one event of balance ref's revision.
func wellFormedEvent(ref events.BalanceRef, e events.Event) error {
	be, ok := e.(events.BalanceEvent)
	if !ok {
		return fmt.Errorf("%s in a lane revision", e.EventType())
	}
	if be.BalanceOf() != ref {
		return fmt.Errorf("%s of balance %s", e.EventType(), be.BalanceOf())
	}
	var id string
	switch e := e.(type) {
	case events.ReservationOpened:
		if e.RequestID == "" {
			return fmt.Errorf("%s with no request id", e.EventType())
		}
		named := false
		for _, b := range e.Balances {
			named = named || b == ref
		}
		if !named {
			return fmt.Errorf("%s %s does not name its balance among its balances", e.EventType(), e.ReservationID)
		}
		id = e.ReservationID
	case events.ReservationSettled:
		id = e.ReservationID
	case events.ReservationReleased:
		id = e.ReservationID
	case events.RequestVoided:
		id = e.RequestID
	case events.ThresholdCrossed:
		return nil
	default:
		return fmt.Errorf("%s in a lane revision", e.EventType())
	}
	if id == "" {
		return fmt.Errorf("%s with no id", e.EventType())
	}
	return nil
}
