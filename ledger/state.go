package ledger

import (
	"time"

	"github.com/spendgate/spendgate/events"
)

// Balance is a balance as a Tx sees it: the budget's current definition and
// the balance's numbers at the revision the Tx is decided against.
type Balance struct {
	Ref events.BalanceRef
	// Defined is false when no budget exists for Ref's scope and period.
	Defined  bool
	Unit     string
	Limit    events.Money
	Spent    events.Money
	Reserved events.Money
	Overrun  events.Money
	Open     int
}

// Available is limit - spent - reserved (negative after an overrun).
func (b Balance) Available() events.Money {
	return b.Limit.Sub(b.Spent).Sub(b.Reserved)
}

// Budget is a budget definition.
type Budget struct {
	Ref   events.BudgetRef
	Limit events.Money
	Unit  string
	// Revision is the stream sequence of the definition.
	Revision uint64
}

// Reservation is what the ledger knows about one reservation. It is kept
// compact (one allocation for the struct, one for Parts): a replica holds
// every reservation in memory.
type Reservation struct {
	ID          string
	RequestID   string
	RequestHash string
	// Balances are the balances the reservation holds, in key order.
	Balances []events.BalanceRef
	// Parts is what the reservation holds in each balance, parallel to
	// Balances.
	Parts     []Part
	OpenedAt  time.Time
	ExpiresAt time.Time
	// Status is events.StatusOpen, StatusSettled, StatusReleased or
	// StatusExpired.
	Status string
	// Late is set when the settle arrived after ExpiresAt.
	Late bool

	// due is 1 + the reservation's position in the book's expiry index,
	// 0 when it is not there (always 0 in a copy handed out).
	due int
}

// Part is a reservation's share of one balance.
type Part struct {
	// Key is the balance key (streams.BalanceKey).
	Key    string
	Unit   string
	Amount events.Money
	// Actual is the settled actual cost in this balance.
	Actual events.Money
}

func (r *Reservation) clone() *Reservation {
	c := *r
	c.due = 0
	c.Parts = append([]Part(nil), r.Parts...)
	return &c
}

// Part returns the reservation's part in balance key, or nil.
func (r *Reservation) Part(key string) *Part {
	for i := range r.Parts {
		if r.Parts[i].Key == key {
			return &r.Parts[i]
		}
	}
	return nil
}

// part returns the part for key, adding it if missing.
func (r *Reservation) part(key string) *Part {
	if p := r.Part(key); p != nil {
		return p
	}
	r.Parts = append(r.Parts, Part{Key: key})
	return &r.Parts[len(r.Parts)-1]
}

// Amount is the amount the reservation holds in its money balances (all hold
// the request's amount); for a reservation only in count budgets, 1.
func (r *Reservation) Amount() events.Money {
	return r.pick(func(p *Part) events.Money { return p.Amount })
}

// ActualAmount is the settled actual cost (see Amount).
func (r *Reservation) ActualAmount() events.Money {
	return r.pick(func(p *Part) events.Money { return p.Actual })
}

func (r *Reservation) pick(f func(*Part) events.Money) events.Money {
	var count events.Money
	for i := range r.Parts {
		if !events.IsCount(r.Parts[i].Unit) {
			return f(&r.Parts[i])
		}
		count = f(&r.Parts[i])
	}
	return count
}

// balance is the replica's folded state of one balance key.
type balance struct {
	key string
	ref events.BalanceRef
	// self is a one-element slice holding ref, shared by the single-balance
	// reservations of this balance (a replica holds every reservation).
	self     []events.BalanceRef
	rev      uint64
	unit     string
	limit    events.Money
	spent    events.Money
	reserved events.Money
	overrun  events.Money
	// open holds the reservations open in this balance, by id.
	open map[string]*Reservation
}

// budget is the replica's folded state of one budget key.
type budget struct {
	rev uint64
	def Budget
	// src is the revision def was folded from: a snapshot carries it
	// whole, so whatever a budget revision holds travels with it.
	src events.BudgetRevision
}
