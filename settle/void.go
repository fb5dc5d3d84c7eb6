package settle

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// maxVoidRounds bounds how often Void rebuilds its Tx when the admit's
// reservation turns out to hold balances the Tx did not name (it landed,
// through another replica, while the void was being decided).
const maxVoidRounds = 3

// errNeedRefs makes Void rebuild its Tx with the reservation's balances.
var errNeedRefs = errors.New("settle: the void must also name the reservation's balances")

// Void voids request id req.RequestID, whether or not its admit has
// landed: it records an events.RequestVoided (a tombstone) in one balance
// of each scope of req that has a budget, and if the admit's reservation
// is open it releases it in the same write (reason voided). Every admit of
// those scopes writes the commit lane of each of its scopes, so the
// tombstone and any admit of the request share a lane compare-and-set:
// either the admit landed first and the void releases it, or the void
// landed first and the admit, deciding against it, reserves nothing
// (admit answers CodeRequestVoided). The tombstone is remembered for the
// ledger's retention of closed reservations (its idempotency window).
//
// req.Scopes must name at least one scope of the admit (the same list is
// simplest). If ctx carries a tenant (events.ContextWithTenant), the void
// acts for that tenant: its request id and scopes are the tenant's, as an
// admit of that tenant qualifies them, so it can void only the tenant's own
// admits; the reply names them as the tenant sent them. When none of them has a budget and no reservation of the
// request is known, nothing is written: no admit of those scopes can
// reserve. Voiding a voided request id answers Replayed.
//
// Errors (*events.Error), in precedence order: CodeInvalidIdentifier
// (request id, a scope), CodeInvalidRequest (no scopes, too many),
// CodeInvalidIdentifier (ctx's tenant);
// CodeAlreadySettled (the admit landed and its reservation was settled:
// the money was spent; with the reservation's ReservationID and Status;
// nothing is written); CodeLedgerBusy, CodeLedgerUnavailable.
func (s *Settler) Void(ctx context.Context, req events.VoidRequest) (events.VoidReply, error) {
	if err := events.ValidateToken("request_id", req.RequestID, events.MaxIDLen); err != nil {
		return events.VoidReply{}, err
	}
	if len(req.Scopes) == 0 {
		return events.VoidReply{}, events.Errorf(events.CodeInvalidRequest, "scopes: at least one scope is required (the admit's)")
	}
	if len(req.Scopes) > events.MaxScopes {
		return events.VoidReply{}, events.Errorf(events.CodeInvalidRequest, "scopes: at most %d scopes per void", events.MaxScopes)
	}
	var scopes []events.Scope
	for _, sc := range req.Scopes {
		p, err := events.ParseScope(sc)
		if err != nil {
			return events.VoidReply{}, err
		}
		scopes = append(scopes, p)
	}
	tenant := events.TenantFromContext(ctx)
	if tenant != "" {
		if err := events.ValidateTenant(tenant); err != nil {
			return events.VoidReply{}, err
		}
		for i, sc := range scopes {
			scopes[i] = events.TenantScope(tenant, sc)
		}
	}
	if err := events.CheckHeld(ctx, "void", req.RequestID); err != nil {
		return events.VoidReply{}, err
	}
	rid := events.TenantRequestID(tenant, req.RequestID)
	scopes = events.SortScopes(scopes)
	reply, err := s.void(ctx, rid, scopes)
	if err != nil {
		return events.VoidReply{}, err
	}
	reply.RequestID = req.RequestID
	if tenant != "" {
		reply.Balances = events.LocalBalances(reply.Balances)
	}
	return reply, nil
}

// void is Void of the stored request id rid over the stored scopes.
func (s *Settler) void(ctx context.Context, rid string, scopes []events.Scope) (events.VoidReply, error) {
	now := s.now().UTC()
	// A budget defined a moment ago through another replica must not be
	// missed: a scope without one here is read again after a sync.
	marks := s.marks(scopes, now)
	if len(marks) < len(scopes) {
		if err := s.l.Sync(ctx); err != nil {
			return events.VoidReply{}, err
		}
		marks = s.marks(scopes, now)
	}
	marks = slices.DeleteFunc(marks, func(r events.BalanceRef) bool { return r == events.BalanceRef{} })
	tx := &voidTx{rid: rid, scopes: scopes, marks: marks, now: now}
	if r, ok := s.l.ByRequest(rid); ok {
		tx.refs = union(marks, r.Balances)
	} else {
		tx.refs = marks
	}
	for round := 1; ; round++ {
		if len(tx.refs) == 0 {
			// No budget in any scope and no reservation known: nothing
			// can reserve, nothing to write.
			return events.VoidReply{RequestID: rid, Status: events.StatusVoided}, nil
		}
		err := s.l.Submit(ctx, tx)
		if errors.Is(err, errNeedRefs) && round < maxVoidRounds {
			tx.refs = union(marks, tx.need)
			continue
		}
		if errors.Is(err, errNeedRefs) {
			return events.VoidReply{}, events.Errorf(events.CodeLedgerBusy, "void of request %s: its reservation kept moving; retry", events.LocalRequestID(rid))
		}
		if err != nil {
			return events.VoidReply{}, err
		}
		return tx.reply, nil
	}
}

// marks returns one balance (its first period's, at now) of each scope
// that has a budget: where the tombstone is written. A scope with a
// retired budget gets none (every admit naming it is denied anyway, and
// a revision of a retired budget's balance that may have left memory
// would state its totals from zero); it still counts as marked.
func (s *Settler) marks(scopes []events.Scope, now time.Time) []events.BalanceRef {
	var out []events.BalanceRef
	for _, sc := range scopes {
		bs := s.l.BudgetsOf(sc)
		switch {
		case slices.ContainsFunc(bs, func(b ledger.Budget) bool { return b.Retired }):
			out = append(out, events.BalanceRef{})
		case len(bs) > 0:
			out = append(out, bs[0].Balance(now))
		}
	}
	return out
}

// union returns a and the refs of b not in a.
func union(a, b []events.BalanceRef) []events.BalanceRef {
	out := append([]events.BalanceRef(nil), a...)
	for _, r := range b {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// voidTx records a tombstone for a request id and releases its open
// reservation.
type voidTx struct {
	rid    string
	scopes []events.Scope
	marks  []events.BalanceRef
	now    time.Time
	refs   []events.BalanceRef
	need   []events.BalanceRef
	reply  events.VoidReply
}

func (t *voidTx) Balances() []events.BalanceRef { return t.refs }

func (t *voidTx) Decide(v ledger.View) (events.Events, error) {
	t.reply = events.VoidReply{RequestID: t.rid, Status: events.StatusVoided}
	t.need = nil
	r, found := v.ByRequest(t.rid)
	if found {
		t.reply.ReservationID, t.reply.ReservationStatus = r.ID, r.Status
		t.reply.Balances = r.Balances
	}
	if v.Voided(t.rid) {
		t.reply.Replayed = true
		return nil, nil
	}
	marks := t.marks
	var evs events.Events
	if found {
		for _, ref := range r.Balances {
			if !slices.Contains(t.refs, ref) {
				t.need = r.Balances
				return nil, errNeedRefs
			}
		}
		open := true
		for _, ref := range r.Balances {
			if _, ok := v.OpenAmount(streams.BalanceKey(ref), r.ID); !ok {
				open = false
			}
		}
		switch {
		case open:
			for _, ref := range r.Balances {
				evs = append(evs, events.ReservationReleased{ReservationID: r.ID, Balance: ref,
					Reserved: amountIn(r, ref), Reason: events.ReasonVoided, At: t.now})
			}
			t.reply.ReservationStatus = events.StatusReleased
			t.reply.Reserved = r.Amount().String()
		case r.Status == events.StatusSettled:
			return nil, events.ReservationErrorf(events.CodeAlreadySettled, r.ID, r.Status,
				"request %s was admitted as reservation %s, which was already settled: its spend cannot be voided", events.LocalRequestID(t.rid), r.ID)
		}
		// The tombstone also goes where the reservation is, for the scopes
		// the void did not find a budget for.
		for _, ref := range r.Balances {
			if !slices.ContainsFunc(marks, func(m events.BalanceRef) bool { return m.Scope == ref.Scope }) {
				marks = append(marks, ref)
			}
		}
	}
	var rsv string
	if found && t.reply.Reserved != "" {
		rsv = r.ID
	}
	// The event names every scope it is written into: the void's, and
	// those of the reservation it found.
	scopes := slices.Clone(t.scopes)
	for _, ref := range marks {
		if !slices.Contains(scopes, ref.Scope) {
			scopes = append(scopes, ref.Scope)
		}
	}
	scopes = events.SortScopes(scopes)
	for _, ref := range marks {
		evs = append(evs, events.RequestVoided{RequestID: t.rid, Balance: ref, Scopes: scopes,
			ReservationID: rsv, At: t.now})
	}
	return evs, nil
}
