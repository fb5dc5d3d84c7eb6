package ledger

import (
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Pruning past minute and hour balances. A per-minute budget leaves one
// balance per minute it was used in (1,440 a day); nothing decides on
// them once their minute is over and every reservation in them is closed
// and forgotten, yet the book and every snapshot would carry them for
// ever. The book drops such a balance once it can no longer change:
//
//   - its period instance ended more than the retention ago (an admit
//     computes its instance on its replica's clock: a replica behind the
//     server by more than that could still admit into it);
//   - no reservation is open in it (an open one may still be settled,
//     released or expired there);
//   - its last revision was stamped by the follower more than the
//     retention ago, and the last one that expired a reservation in it
//     more than the expired retention ago. Every close of a reservation in
//     the balance is one of its revisions, so every such reservation has
//     then left the idempotency window: a settle of it, late or not, finds
//     no reservation and writes nothing, and no Tx can name the balance
//     again (a void names the current instance, or a reservation the book
//     still holds).
//
// Its numbers are then final, and the stream holds them (the projector's
// replay, reports and backtests read them there). Balance returns a
// dropped balance's zero, as for one never used: no decision reads it.
// Calendar periods longer than an hour are kept (a few a year).
//
// Stamps use the JetStream server's clock, as the window's retention does
// (forgetUntil): a balance revision's stamp is the server time of the
// follower's latest message once the follower has reached it, an upper
// bound of the revision's own timestamp.

// short reports whether balances of period p are pruned.
func short(p events.Period) bool { return p == events.PeriodMinute || p == events.PeriodHour }

// Retired budgets. A retired budget's balances (every period) are pruned
// as a short one's, but without waiting for the instance to end: no admit
// is decided into them any more (a retired budget denies every admit), so
// once nothing is open in one and its last revision is stamped past the
// retentions, nothing can change it. An admit decided before the
// retirement was folded may still land in one: it is open there, and the
// balance waits for it as for any other.

// prunable reports whether the balance ref is pruned: a short one, or one
// of a retired budget.
func (b *book) prunable(ref events.BalanceRef) bool {
	if short(ref.Period) {
		return true
	}
	d := b.budgets[streams.BudgetKey(ref.Budget())]
	return d != nil && d.def.Retired
}

// indexBalance records new balance bl under its budget (budget.bals), or
// queues it for pruning when the budget is retired already.
func (b *book) indexBalance(bl *balance) {
	if short(bl.ref.Period) {
		return
	}
	d := b.budgets[streams.BudgetKey(bl.ref.Budget())]
	if d == nil || d.def.Retired {
		return
	}
	d.bals = append(d.bals, bl)
}

// retire makes the balances of d, just retired, prunable: each waits for
// the follower to stamp its last revision, for the expired retention
// after the last expiry in it (balance.expiredAt, which the book keeps
// for every balance), and for nothing to be open in it.
func (b *book) retire(d *budget) {
	for _, bl := range d.bals {
		if b.balances[bl.key] == bl {
			b.queueStamp(bl, bl.rev, nil)
		}
	}
	d.bals = nil
}

// balStamp is a revision of a short balance the follower has not stamped
// yet; expiry is whether it expired a reservation in the balance.
type balStamp struct {
	bl     *balance
	seq    uint64
	expiry bool
}

// queueStamp queues the revision at seq of short balance bl for stamping,
// keeping the queue in revision order (a writer folds its own revisions
// before the follower reaches them; those arrive almost always in order).
func (b *book) queueStamp(bl *balance, seq uint64, evs events.Events) {
	if b.noPrune {
		return
	}
	expiry := false
	for _, e := range evs {
		if r, ok := e.(events.ReservationReleased); ok && r.Reason == events.ReasonExpired {
			expiry = true
		}
	}
	b.unstamped = append(b.unstamped, balStamp{bl, seq, expiry})
	for i := len(b.unstamped) - 1; i > 0 && b.unstamped[i-1].seq > b.unstamped[i].seq; i-- {
		b.unstamped[i-1], b.unstamped[i] = b.unstamped[i], b.unstamped[i-1]
	}
	b.short[bl.key] = bl
}

// queueUnknownStamp queues the revision at seq of short balance bl as
// one that may have expired a reservation (a snapshot's balance whose
// last revision the follower had not stamped: what it did is not known).
func (b *book) queueUnknownStamp(bl *balance, seq uint64) {
	b.queueStamp(bl, seq, events.Events{events.ReservationReleased{Reason: events.ReasonExpired}})
}

// stampBalances stamps the queued balance revisions up to seq at the
// server time the follower has reached, and prunes the short balances
// that can no longer change, at most once per pruneEvery of server time.
// forgetUntil calls it.
func (b *book) stampBalances(seq uint64) {
	n := 0
	for ; n < len(b.unstamped) && b.unstamped[n].seq <= seq; n++ {
		s := b.unstamped[n]
		if s.seq > s.bl.stampedSeq {
			s.bl.stampedSeq = s.seq
		}
		s.bl.stampedAt = b.serverNow
		if s.expiry {
			s.bl.expiredAt = b.serverNow
		}
	}
	if n > 0 {
		m := copy(b.unstamped, b.unstamped[n:])
		clear(b.unstamped[m:])
		b.unstamped = b.unstamped[:m]
	}
	if b.noPrune || b.serverNow.Before(b.nextPrune) {
		return
	}
	b.nextPrune = b.serverNow.Add(min(b.retention, time.Minute))
	b.prune()
}

// prune drops the short balances that can no longer change (see above).
func (b *book) prune() {
	closedBefore, expiredBefore := b.serverNow.Add(-b.retention), b.serverNow.Add(-b.expiredKeep)
	for key, bl := range b.short {
		if b.balances[key] != bl {
			delete(b.short, key)
			continue
		}
		if len(bl.open) > 0 || bl.stampedSeq < bl.rev || !bl.stampedAt.Before(closedBefore) ||
			!bl.expiredAt.IsZero() && !bl.expiredAt.Before(expiredBefore) {
			continue
		}
		var cal events.Calendar
		d := b.budgets[streams.BudgetKey(bl.ref.Budget())]
		if d != nil {
			cal = events.CalendarOf(bl.ref.Period, d.def.Loc)
		} else {
			cal = events.CalendarOf(bl.ref.Period, nil)
		}
		if d == nil || !d.def.Retired {
			_, end, ok := cal.InstanceBounds(bl.ref.Instance)
			if !ok || !end.Before(closedBefore) {
				continue
			}
		}
		if d != nil && d.def.Retired && (d.last == nil || bl.rev >= d.last.rev) {
			d.last = &lastBalance{key: key, ref: bl.ref, rev: bl.rev, spent: bl.spent, overrun: bl.overrun}
		}
		delete(b.balances, key)
		delete(b.short, key)
		b.pruned++
	}
}
