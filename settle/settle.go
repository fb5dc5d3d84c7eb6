package settle

import (
	"context"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/ledger"
	"github.com/spendgate/spendgate/streams"
)

// Settler settles, releases and expires reservations.
type Settler struct {
	l   *ledger.Ledger
	now func() time.Time
}

// New returns a Settler over l.
func New(l *ledger.Ledger, opts ...Option) (*Settler, error) {
	s := &Settler{l: l, now: time.Now}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type kind int

const (
	kindSettle kind = iota
	kindRelease
	kindExpire
)

// Settle closes a reservation with its actual cost: spent grows by actual
// and reserved shrinks by the reserved amount in every balance of the
// reservation (a budget counted in requests records 1). An actual above the
// reserved amount is recorded in full and reported as Overrun. A settle after
// the reservation expired still records the spend in the reservation's own
// period, flagged late. Settling again with the same actual is answered with
// Replayed set.
//
// If ctx carries a tenant (events.ContextWithTenant), only that tenant's
// reservations can be settled: any other is CodeUnknownReservation, as if
// it did not exist; the same holds for release. The untenanted deployment
// (no tenant) cannot settle a tenant's reservation either.
//
// Errors (*events.Error), in precedence order: CodeInvalidIdentifier,
// CodeInvalidAmount; CodeUnknownReservation; CodeAlreadyReleased (it was
// released by a caller); CodeAlreadySettled (it was settled with another
// actual); CodeLedgerBusy, CodeLedgerUnavailable. CodeAlreadyReleased and
// CodeAlreadySettled carry the reservation's ReservationID and Status.
func (s *Settler) Settle(ctx context.Context, req events.SettleRequest) (events.CloseReply, error) {
	if err := events.ValidateToken("reservation_id", req.ReservationID, events.MaxIDLen); err != nil {
		return events.CloseReply{}, err
	}
	actual, err := events.ParseMoney(req.Actual)
	if err != nil {
		return events.CloseReply{}, err
	}
	return s.close(ctx, req.ReservationID, kindSettle, actual)
}

// Release gives a whole reservation back. Releasing a released or expired
// reservation is answered with Replayed set.
//
// Errors (*events.Error), in precedence order: CodeInvalidIdentifier;
// CodeUnknownReservation (also another tenant's reservation, see Settle);
// CodeAlreadySettled (with the reservation's
// ReservationID and Status); CodeLedgerBusy, CodeLedgerUnavailable.
func (s *Settler) Release(ctx context.Context, req events.ReleaseRequest) (events.CloseReply, error) {
	if err := events.ValidateToken("reservation_id", req.ReservationID, events.MaxIDLen); err != nil {
		return events.CloseReply{}, err
	}
	return s.close(ctx, req.ReservationID, kindRelease, events.Money{})
}

// Expire releases reservation id with reason expired if it is still open and
// its expiry is not after now. It is what the sweeper calls; a reservation
// that was settled, released or extended in the meantime is left alone.
//
// Errors: CodeUnknownReservation, CodeLedgerBusy, CodeLedgerUnavailable.
func (s *Settler) Expire(ctx context.Context, id string) (events.CloseReply, error) {
	return s.close(ctx, id, kindExpire, events.Money{})
}

func (s *Settler) close(ctx context.Context, id string, k kind, actual events.Money) (events.CloseReply, error) {
	// A caller closes only its own tenant's reservations; the sweeper
	// expires everyone's.
	tenant, sweeper := events.TenantFromContext(ctx), k == kindExpire
	r, ok := s.l.Reservation(id)
	if !ok || !(sweeper || ownedBy(r, tenant)) {
		if err := s.l.Sync(ctx); err != nil {
			return events.CloseReply{}, err
		}
		if r, ok = s.l.Reservation(id); !ok || !(sweeper || ownedBy(r, tenant)) {
			// Another tenant's reservation is answered exactly as one
			// that does not exist: no tenant learns what another holds.
			return events.CloseReply{}, events.Errorf(events.CodeUnknownReservation, "reservation %s is unknown", id)
		}
	}
	tx := &closeTx{id: id, kind: k, actual: actual, now: s.now().UTC(), refs: r.Balances}
	if err := s.l.Submit(ctx, tx); err != nil {
		return events.CloseReply{}, err
	}
	if tenant != "" {
		tx.reply.Balances = events.LocalBalances(tx.reply.Balances)
	}
	return tx.reply, nil
}

// ownedBy reports whether every balance of r belongs to tenant ("" for the
// untenanted deployment). An admit qualifies all its scopes by one tenant,
// so a reservation belongs to exactly one.
func ownedBy(r *ledger.Reservation, tenant string) bool {
	for _, b := range r.Balances {
		if b.Scope.Tenant() != tenant {
			return false
		}
	}
	return true
}

type closeTx struct {
	id     string
	kind   kind
	actual events.Money
	now    time.Time
	refs   []events.BalanceRef
	reply  events.CloseReply
}

func (t *closeTx) Balances() []events.BalanceRef { return t.refs }

func (t *closeTx) Decide(v *ledger.View) (events.Events, error) {
	r, ok := v.Reservation(t.id)
	if !ok {
		return nil, events.Errorf(events.CodeUnknownReservation, "reservation %s is unknown", t.id)
	}
	t.reply = events.CloseReply{ReservationID: t.id, Balances: r.Balances, Reserved: r.Amount().String()}
	open := true
	for _, ref := range t.refs {
		if _, ok := v.OpenAmount(streams.BalanceKey(ref), t.id); !ok {
			open = false
		}
	}
	if open {
		return t.decideOpen(r)
	}
	return t.decideClosed(r)
}

// decideOpen closes a reservation that is open in all its balances.
func (t *closeTx) decideOpen(r *ledger.Reservation) (events.Events, error) {
	late := t.now.After(r.ExpiresAt)
	var evs events.Events
	switch t.kind {
	case kindExpire:
		if late || t.now.Equal(r.ExpiresAt) {
			t.reply.Status = events.StatusExpired
			for _, ref := range t.refs {
				evs = append(evs, events.ReservationReleased{ReservationID: t.id, Balance: ref,
					Reserved: amountIn(r, ref), Reason: events.ReasonExpired, At: t.now})
			}
			return evs, nil
		}
		t.reply.Status = events.StatusOpen
		return nil, nil
	case kindRelease:
		t.reply.Status = events.StatusReleased
		for _, ref := range t.refs {
			evs = append(evs, events.ReservationReleased{ReservationID: t.id, Balance: ref,
				Reserved: amountIn(r, ref), Reason: events.ReasonReleased, At: t.now})
		}
		return evs, nil
	}
	return t.settle(r, late, false), nil
}

func (t *closeTx) settle(r *ledger.Reservation, late, afterExpiry bool) events.Events {
	var evs events.Events
	t.reply.Overrun = ""
	for _, ref := range t.refs {
		key := streams.BalanceKey(ref)
		reserved := amountIn(r, ref)
		actual := t.actual
		count := false
		if p := r.Part(key); p != nil && events.IsCount(p.Unit) {
			actual, count = events.MoneyFromInt(1), true
		}
		// Spend beyond the reservation is recorded in full. After the
		// sweeper returned the reservation, all of it is beyond.
		overrun := actual.Sub(reserved).Max(events.Zero)
		if afterExpiry {
			overrun = actual
		}
		if !count && overrun.Sign() > 0 {
			t.reply.Overrun = overrun.String()
		}
		evs = append(evs, events.ReservationSettled{ReservationID: t.id, Balance: ref, Reserved: reserved,
			Actual: actual, Overrun: overrun, Late: late, AfterExpiry: afterExpiry, At: t.now})
	}
	t.reply.Status = events.StatusSettled
	t.reply.Actual = t.actual.String()
	t.reply.Late = late
	return evs
}

// hasMoney reports whether r holds a money (not count) balance.
func hasMoney(r *ledger.Reservation) bool {
	for _, p := range r.Parts {
		if !events.IsCount(p.Unit) {
			return true
		}
	}
	return false
}

// decideClosed answers a close of a reservation that is no longer open.
func (t *closeTx) decideClosed(r *ledger.Reservation) (events.Events, error) {
	t.reply.Status = r.Status
	switch t.kind {
	case kindExpire:
		t.reply.Replayed = true
		return nil, nil
	case kindRelease:
		switch r.Status {
		case events.StatusReleased, events.StatusExpired:
			t.reply.Replayed = true
			return nil, nil
		}
		return nil, events.ReservationErrorf(events.CodeAlreadySettled, t.id, r.Status,
			"reservation %s was already settled with actual %s; it cannot be released", t.id, r.ActualAmount())
	}
	switch r.Status {
	case events.StatusSettled:
		recorded := r.ActualAmount()
		// A reservation held only in count budgets records 1 per balance,
		// not the caller's actual: any settle of it again is a replay.
		if recorded.Cmp(t.actual) == 0 || !hasMoney(r) {
			t.reply.Actual, t.reply.Late, t.reply.Replayed = recorded.String(), r.Late, true
			if !hasMoney(r) {
				t.reply.Actual = t.actual.String()
			} else if over := recorded.Sub(r.Amount()); over.Sign() > 0 {
				t.reply.Overrun = over.String()
			}
			return nil, nil
		}
		return nil, events.ReservationErrorf(events.CodeAlreadySettled, t.id, r.Status,
			"reservation %s was already settled with actual %s", t.id, recorded)
	case events.StatusExpired:
		// The sweeper returned the reservation, but the money was spent:
		// record it, late, in the reservation's own period.
		return t.settle(r, true, true), nil
	}
	return nil, events.ReservationErrorf(events.CodeAlreadyReleased, t.id, r.Status,
		"reservation %s was already released; its actual cost cannot be recorded", t.id)
}

// amountIn is what reservation r holds in balance ref.
func amountIn(r *ledger.Reservation, ref events.BalanceRef) events.Money {
	if p := r.Part(streams.BalanceKey(ref)); p != nil {
		return p.Amount
	}
	return events.Zero
}
