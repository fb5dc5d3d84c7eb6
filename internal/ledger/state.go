package ledger

import (
	"slices"
	"time"

	"github.com/spendgate/spendgate/events"
)

// Balance is a balance as a Tx sees it: the budget's current definition and
// the balance's numbers at the revision the Tx is decided against.
type Balance struct {
	Ref events.BalanceRef
	// Defined is false when no budget exists for Ref's scope and period.
	Defined bool
	// Disabled is the budget's Disabled; FixedSlot its FixedSlot.
	Disabled  bool
	FixedSlot *events.Money
	// Retired is the budget's Retired.
	Retired bool
	// Thresholds are the budget's alert thresholds; Alerted those already
	// crossed in this balance (events.ThresholdCrossed), in the order
	// crossed. Append to Alerted only through a copy.
	Thresholds []events.Money
	Alerted    []events.Money
	// Arm is the budget's arm generation (Budget.Arm): Alerted holds only
	// the crossings of this generation.
	Arm      uint64
	Unit     string
	Limit    events.Money
	Spent    events.Money
	Reserved events.Money
	Overrun  events.Money
	Open     int
	// Exposure is the most the open reservations may still add above what
	// they hold (the sum of their parts' Ceiling - Amount); ExposureCap
	// the budget's cap on it (nil: none) and Learn its learned-reservation
	// rule (nil: reserve the maximum).
	Exposure    events.Money
	ExposureCap *events.Money
	Learn       *events.LearnRule
}

// Headroom is limit + exposure cap - spent - reserved - exposure: what a
// settle after its reservation expired may still be charged in a budget
// with an exposure cap (never below zero).
func (b Balance) Headroom() events.Money {
	var cap events.Money
	if b.ExposureCap != nil {
		cap = *b.ExposureCap
	}
	h := b.Limit.Add(cap).Sub(b.Spent).Sub(b.Reserved).Sub(b.Exposure)
	if h.Sign() < 0 {
		return events.Money{}
	}
	return h
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
	// TZ is the IANA time zone of the period's calendar ("" is UTC); Loc
	// is that zone loaded (nil for UTC).
	TZ  string
	Loc *time.Location
	// Disabled: admits naming the budget are denied (budget_disabled).
	Disabled bool
	// Retired: the budget was retired for good (events.BudgetRetired):
	// admits naming it are denied (budget_retired), no default creates it
	// again and a put of it is refused. RetiredAt and RetiredReason are
	// the event's (zero and "" for a tombstone loaded from a snapshot
	// written before they were kept).
	Retired       bool
	RetiredAt     time.Time
	RetiredReason string
	// FixedSlot, when not nil, is what an admit reserves in this budget
	// instead of the requested amount; Thresholds are alert thresholds.
	// Both are carried from the definition as they are.
	FixedSlot  *events.Money
	Thresholds []events.Money
	// ExposureCap and Learn: see events.BudgetDefinedV2.
	ExposureCap *events.Money
	Learn       *events.LearnRule
	// Revision is the stream sequence of the definition.
	Revision uint64
	// FromDefault is the revision of the kind's default the budget was
	// created from on its scope's first admit; 0 for a budget put for the
	// scope itself.
	FromDefault uint64
	// Arm is the budget's arm generation (events.ThresholdCrossed.Arm): 0
	// as created, else the Revision of the definition that last changed
	// its limit, unit, zone or thresholds (events.ArmingChange). The fold
	// computes it; snapshots carry it.
	Arm uint64
}

// Instance returns the budget's period instance at t, in its time zone.
func (b Budget) Instance(t time.Time) string { return b.Ref.Period.InstanceIn(t, b.Loc) }

// Balance returns the balance of the budget's period instance at t.
func (b Budget) Balance(t time.Time) events.BalanceRef {
	return events.BalanceRef{Scope: b.Ref.Scope, Period: b.Ref.Period, Instance: b.Instance(t), Unit: b.Ref.Unit}
}

// Changes names the fields of the definition that differ from prev, in the
// order limit, unit, tz, disabled, fixed_slot, thresholds, exposure_cap,
// learn.
func (b Budget) Changes(prev Budget) []string {
	out := []string{}
	if b.Limit.Cmp(prev.Limit) != 0 {
		out = append(out, "limit")
	}
	if b.Unit != prev.Unit {
		out = append(out, "unit")
	}
	if b.TZ != prev.TZ {
		out = append(out, "tz")
	}
	if b.Disabled != prev.Disabled {
		out = append(out, "disabled")
	}
	if (b.FixedSlot == nil) != (prev.FixedSlot == nil) || b.FixedSlot != nil && b.FixedSlot.Cmp(*prev.FixedSlot) != 0 {
		out = append(out, "fixed_slot")
	}
	same := len(b.Thresholds) == len(prev.Thresholds)
	for i := 0; same && i < len(b.Thresholds); i++ {
		same = b.Thresholds[i].Cmp(prev.Thresholds[i]) == 0
	}
	if !same {
		out = append(out, "thresholds")
	}
	if (b.ExposureCap == nil) != (prev.ExposureCap == nil) || b.ExposureCap != nil && b.ExposureCap.Cmp(*prev.ExposureCap) != 0 {
		out = append(out, "exposure_cap")
	}
	if (b.Learn == nil) != (prev.Learn == nil) || b.Learn != nil && (b.Learn.Percentile != prev.Learn.Percentile ||
		b.Learn.Window != prev.Learn.Window || b.Learn.MinSamples != prev.Learn.MinSamples || b.Learn.Floor.Cmp(prev.Learn.Floor) != 0) {
		out = append(out, "learn")
	}
	return out
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
	// AfterExpiry is set when the settle came after the sweeper had
	// released the reservation: its whole actual was overrun (a retried
	// settle answers so again).
	AfterExpiry bool
	// Pricing is the price quote of a reservation priced from a model
	// (nil otherwise): a settle from usage prices at it.
	Pricing *events.PriceQuote

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
	// Ceiling, when set, is the most the part may settle at, above Amount
	// (events.ReservationOpened.Ceiling).
	Ceiling *events.Money
}

// Exposure is what the part may still add above Amount: Ceiling - Amount,
// zero without a ceiling.
func (p *Part) Exposure() events.Money {
	if p == nil || p.Ceiling == nil || p.Ceiling.Cmp(p.Amount) <= 0 {
		return events.Money{}
	}
	return p.Ceiling.Sub(p.Amount)
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
	// Parts stay in key order (parallel to Balances), whichever lane's
	// revision a replica folds first.
	i := 0
	for i < len(r.Parts) && r.Parts[i].Key < key {
		i++
	}
	r.Parts = slices.Insert(r.Parts, i, Part{Key: key})
	return &r.Parts[i]
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
	exposure events.Money
	// alerted are the thresholds crossed in this balance in arm
	// generation arm (a crossing of a later generation starts them anew).
	alerted []events.Money
	arm     uint64
	// open holds the reservations open in this balance, by id.
	open map[string]*Reservation
	// stampedSeq is the last revision of a short (minute or hour)
	// balance the follower stamped, at stampedAt (server time);
	// expiredAt is the stamp of the last one that expired a reservation
	// in it (zero: none). See prune.go.
	stampedSeq           uint64
	stampedAt, expiredAt time.Time
	// lastAt is the time of the latest event folded into the balance
	// (events.TimeOf; zero: none since a snapshot that did not say): how
	// long a budget has been idle (Ledger.IdleBudgets).
	lastAt time.Time
}

// budget is the replica's folded state of one budget key.
type budget struct {
	rev uint64
	def Budget
	// bals are the balances of the budget's calendar periods longer than
	// an hour and of lifetime that the book holds or held (minute and hour
	// ones are pruned on their own: prune.go), so that a retirement finds
	// them without a walk of every balance. Nil once retired.
	bals []*balance
	// src is the revision def was folded from: a snapshot carries it
	// whole, so whatever a budget revision holds travels with it.
	src events.BudgetRevision
	// last is, for a retired budget, the final numbers of the latest of
	// its balances the book has dropped (nil: none dropped yet), so that
	// reading the budget does not show zero for what a finished run
	// spent. A snapshot carries it.
	last *lastBalance
}

// lastBalance is the final state of a retired budget's balance that left
// the book: nothing was open in it, so reserved and exposure were zero.
type lastBalance struct {
	key            string
	ref            events.BalanceRef
	rev            uint64
	spent, overrun events.Money
}
