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

// Reservation is what the ledger knows about one reservation.
type Reservation struct {
	ID          string
	RequestID   string
	RequestHash string
	Unit        string
	Balances    []events.BalanceRef
	// Amounts is the amount held in each balance, by balance key.
	Amounts map[string]events.Money
	// Units is each balance's unit, by balance key.
	Units     map[string]string
	OpenedAt  time.Time
	ExpiresAt time.Time
	// Status is events.StatusOpen, StatusSettled, StatusReleased or
	// StatusExpired.
	Status string
	// Actual is the settled actual cost, by balance key.
	Actual map[string]events.Money
	// Late is set when the settle arrived after ExpiresAt.
	Late bool
}

func (r *Reservation) clone() *Reservation {
	c := *r
	c.Amounts = cloneMap(r.Amounts)
	c.Actual = cloneMap(r.Actual)
	c.Units = make(map[string]string, len(r.Units))
	for k, v := range r.Units {
		c.Units[k] = v
	}
	return &c
}

// Amount is the amount the reservation holds in its money balances (all hold
// the request's amount); for a reservation only in count budgets, 1.
func (r *Reservation) Amount() events.Money { return r.pick(r.Amounts) }

// ActualAmount is the settled actual cost (see Amount).
func (r *Reservation) ActualAmount() events.Money { return r.pick(r.Actual) }

func (r *Reservation) pick(m map[string]events.Money) events.Money {
	var count events.Money
	for k, v := range m {
		if !events.IsCount(r.Units[k]) {
			return v
		}
		count = v
	}
	return count
}

func cloneMap(m map[string]events.Money) map[string]events.Money {
	if m == nil {
		return nil
	}
	c := make(map[string]events.Money, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// balance is the replica's folded state of one balance key.
type balance struct {
	ref      events.BalanceRef
	rev      uint64
	unit     string
	limit    events.Money
	spent    events.Money
	reserved events.Money
	overrun  events.Money
	// open maps reservation id -> amount held in this balance.
	open map[string]events.Money
}

// budget is the replica's folded state of one budget key.
type budget struct {
	rev uint64
	def Budget
}
