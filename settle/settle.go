package settle

import (
	"context"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// Settler settles, releases and expires reservations.
type Settler struct {
	l      Ledger
	now    func() time.Time
	alerts func([]events.ThresholdCrossed)
}

// Ledger is what a Settler uses of the ledger: a *ledger.Ledger, or in a
// test of its decisions anything that hands its Txs a ledger.View.
type Ledger interface {
	// Reservation and ByRequest read the book (a copy).
	Reservation(id string) (*ledger.Reservation, bool)
	ByRequest(rid string) (*ledger.Reservation, bool)
	// BudgetsOf returns the budgets of scope.
	BudgetsOf(scope events.Scope) []ledger.Budget
	// Sync returns once what the ledger stream held at the call is
	// folded.
	Sync(ctx context.Context) error
	// Submit decides and commits tx; SubmitAll does so for txs and
	// returns each one's error.
	Submit(ctx context.Context, tx ledger.Tx) error
	SubmitAll(ctx context.Context, txs []ledger.Tx) []error
}

var _ Ledger = (*ledger.Ledger)(nil)

// New returns a Settler over l.
func New(l Ledger, opts ...Option) (*Settler, error) {
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
//
// A reservation priced from a model may be settled from usage instead:
// Actual empty and the token counts given; the actual is their cost at the
// reservation's price version (events.PriceQuote.Cost), and the events
// record the usage. Usage errors come after CodeInvalidIdentifier:
// CodeInvalidRequest (actual and usage both given), CodeInvalidTokens;
// after CodeUnknownReservation: CodeNotPriced (the reservation was not
// priced from a model).
func (s *Settler) Settle(ctx context.Context, req events.SettleRequest) (events.CloseReply, error) {
	out, errs := s.SettleAll(ctx, []events.SettleRequest{req})
	return out[0], errs[0]
}

// SettleAll settles every request of reqs as Settle would, each answered
// on its own (out[i], errs[i] answer reqs[i]), submitted to the ledger at
// once so that they fold into the same group commits.
func (s *Settler) SettleAll(ctx context.Context, reqs []events.SettleRequest) (out []events.CloseReply, errs []error) {
	txs, errs := make([]*closeTx, len(reqs)), make([]error, len(reqs))
	for i, req := range reqs {
		if errs[i] = events.ValidateToken("reservation_id", req.ReservationID, events.MaxIDLen); errs[i] != nil {
			continue
		}
		if errs[i] = events.ValidateNote(req.Note); errs[i] != nil {
			continue
		}
		usage := events.Usage{InputTokens: req.InputTokens, OutputTokens: req.OutputTokens, CachedInputTokens: req.CachedInputTokens}
		if req.Actual == "" && usage != (events.Usage{}) {
			if errs[i] = events.ValidateUsage(usage); errs[i] != nil {
				continue
			}
			if txs[i], errs[i] = s.prepare(ctx, req.ReservationID, kindSettle, events.Money{}); txs[i] != nil {
				txs[i].usage, txs[i].note = &usage, req.Note
			}
			continue
		}
		if usage != (events.Usage{}) {
			errs[i] = events.Errorf(events.CodeInvalidRequest, "give actual or usage (input_tokens, output_tokens, cached_input_tokens), not both")
			continue
		}
		actual, err := events.ParseMoneyField("actual", req.Actual)
		if errs[i] = err; err != nil {
			continue
		}
		if txs[i], errs[i] = s.prepare(ctx, req.ReservationID, kindSettle, actual); txs[i] != nil {
			txs[i].note = req.Note
		}
	}
	return s.submit(ctx, txs, errs)
}

// ReleaseAll releases every request of reqs as Release would, each
// answered on its own, submitted to the ledger at once.
func (s *Settler) ReleaseAll(ctx context.Context, reqs []events.ReleaseRequest) (out []events.CloseReply, errs []error) {
	txs, errs := make([]*closeTx, len(reqs)), make([]error, len(reqs))
	for i, req := range reqs {
		if errs[i] = events.ValidateToken("reservation_id", req.ReservationID, events.MaxIDLen); errs[i] != nil {
			continue
		}
		txs[i], errs[i] = s.prepare(ctx, req.ReservationID, kindRelease, events.Money{})
	}
	return s.submit(ctx, txs, errs)
}

// Release gives a whole reservation back. Releasing a released or expired
// reservation is answered with Replayed set.
//
// Errors (*events.Error), in precedence order: CodeInvalidIdentifier;
// CodeUnknownReservation (also another tenant's reservation, see Settle);
// CodeAlreadySettled (with the reservation's
// ReservationID and Status); CodeLedgerBusy, CodeLedgerUnavailable.
func (s *Settler) Release(ctx context.Context, req events.ReleaseRequest) (events.CloseReply, error) {
	out, errs := s.ReleaseAll(ctx, []events.ReleaseRequest{req})
	return out[0], errs[0]
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
	tx, err := s.prepare(ctx, id, k, actual)
	out, errs := s.submit(ctx, []*closeTx{tx}, []error{err})
	return out[0], errs[0]
}

// prepare finds reservation id (after a sync if this replica has not seen
// it, or has not seen it as the caller's tenant's) and returns the Tx that
// closes it.
func (s *Settler) prepare(ctx context.Context, id string, k kind, actual events.Money) (*closeTx, error) {
	// A caller closes only its own tenant's reservations; the sweeper
	// expires everyone's.
	tenant, sweeper := events.TenantFromContext(ctx), k == kindExpire
	r, ok := s.l.Reservation(id)
	if !ok || !(sweeper || ownedBy(r, tenant)) {
		if err := s.l.Sync(ctx); err != nil {
			return nil, err
		}
		if r, ok = s.l.Reservation(id); !ok || !(sweeper || ownedBy(r, tenant)) {
			// Another tenant's reservation is answered exactly as one
			// that does not exist: no tenant learns what another holds.
			return nil, events.Errorf(events.CodeUnknownReservation, "reservation %s is unknown", id)
		}
	}
	if !sweeper {
		what := "settle"
		if k == kindRelease {
			what = "release"
		}
		if err := events.CheckHeld(ctx, what, r.RequestID); err != nil {
			return nil, err
		}
	}
	return &closeTx{id: id, kind: k, actual: actual, now: s.now().UTC(), refs: r.Balances}, nil
}

// submit submits every non-nil Tx of txs whose errs entry is nil, at once,
// and returns each one's answer.
func (s *Settler) submit(ctx context.Context, txs []*closeTx, errs []error) ([]events.CloseReply, []error) {
	out := make([]events.CloseReply, len(txs))
	var sub []ledger.Tx
	var idx []int
	for i, tx := range txs {
		if tx != nil && errs[i] == nil {
			sub = append(sub, tx)
			idx = append(idx, i)
		}
	}
	if len(sub) == 0 {
		return out, errs
	}
	tenant := events.TenantFromContext(ctx)
	for j, err := range s.l.SubmitAll(ctx, sub) {
		if errs[idx[j]] = err; err == nil {
			if as := txs[idx[j]].alerts; len(as) > 0 && s.alerts != nil {
				s.alerts(as)
			}
			out[idx[j]] = txs[idx[j]].reply
			if tenant != "" {
				out[idx[j]].Balances = events.LocalBalances(out[idx[j]].Balances)
				out[idx[j]].Budgets = localBudgets(out[idx[j]].Budgets)
			}
		}
	}
	return out, errs
}

// localBudgets returns bs (a new slice) with every scope as its tenant
// names it, as the reply's balances are.
func localBudgets(bs []events.BudgetClose) []events.BudgetClose {
	if len(bs) == 0 {
		return bs
	}
	out := make([]events.BudgetClose, len(bs))
	for i, b := range bs {
		b.Scope = b.Scope.Local()
		out[i] = b
	}
	return out
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
	// usage, when set, is a settle from usage: Decide prices it at the
	// reservation's quote into actual and priced.
	usage  *events.Usage
	priced *events.Usage
	// note is the settle's note (events.SettleRequest.Note).
	note string
	// alerts are the thresholds the decision crossed (a settle above its
	// reservation can cross one).
	alerts []events.ThresholdCrossed
	now    time.Time
	refs   []events.BalanceRef
	reply  events.CloseReply
	view   ledger.View
}

func (t *closeTx) Balances() []events.BalanceRef { return t.refs }

func (t *closeTx) Decide(v ledger.View) (events.Events, error) {
	r, ok := v.Reservation(t.id)
	if !ok {
		return nil, events.Errorf(events.CodeUnknownReservation, "reservation %s is unknown", t.id)
	}
	t.reply = events.CloseReply{ReservationID: t.id, Balances: r.Balances, Reserved: r.Amount().String()}
	t.alerts = nil
	t.view = v
	if t.usage != nil {
		if r.Pricing == nil {
			return nil, events.Errorf(events.CodeNotPriced, "reservation %s was not priced from a model: settle it with actual", t.id)
		}
		u := *t.usage
		u.PriceVersion = r.Pricing.Version
		t.actual, t.priced = r.Pricing.Cost(u), &u
	}
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
	return t.settle(r, late, false)
}

func (t *closeTx) settle(r *ledger.Reservation, late, afterExpiry bool) (events.Events, error) {
	var evs events.Events
	t.reply.Overrun, t.reply.Excess, t.reply.Budgets = "", "", nil
	// The reply's Reserved is the head part's (Reservation.Amount): its
	// Overrun must be that part's too, not another budget's.
	head := headPart(r)
	for _, ref := range t.refs {
		key := streams.BalanceKey(ref)
		reserved := amountIn(r, ref)
		actual := t.actual
		count := false
		if p := r.Part(key); p != nil && events.IsCount(p.Unit) {
			// A requests budget records the count it reserved.
			actual, count = p.Amount, true
		}
		var excess *events.Money
		if b, p := t.view.Balance(key), r.Part(key); !count && b.ExposureCap != nil && p != nil && p.Ceiling != nil {
			// A budget with an exposure cap charges a reservation with a
			// ceiling (a learned one) at most what its rules allow: the
			// ceiling, or after expiry, when nothing is held for it any
			// more, the budget's headroom above limit + cap. The rest is
			// recorded as excess, never spent: spent stays <= limit + cap.
			// A reservation without a ceiling reserved what its caller
			// said the call may cost: what it cost above that is charged
			// in full, as in a budget without a cap, so that an
			// under-reserving caller is stopped by the limit instead of
			// spending past it unseen.
			bound := p.Amount.Add(p.Exposure())
			if afterExpiry {
				bound = b.Headroom()
			}
			if actual.Cmp(bound) > 0 {
				x := actual.Sub(bound)
				actual, excess = bound, &x
			}
		}
		// Spend beyond the reservation is recorded in full. After the
		// sweeper returned the reservation, all of it is beyond.
		overrun := actual.Sub(reserved).Max(events.Zero)
		if afterExpiry {
			overrun = actual
		}
		if !count && overrun.Sign() > 0 && key == head {
			t.reply.Overrun = overrun.String()
		}
		if excess != nil && key == head {
			t.reply.Excess = excess.String()
		}
		if len(t.refs) > 1 {
			t.reply.Budgets = append(t.reply.Budgets, budgetClose(r, ref, reserved, actual, overrun, excess, count))
		}
		// The balance's totals must stay what the ledger can store: a
		// revision with a total past MaxIntegerDigits would be read back
		// as malformed by every replay and every restarting replica, and
		// the settle lost. Refuse it whole, before anything is written.
		if b := t.view.Balance(key); !b.Spent.Add(actual).Recordable() || !b.Overrun.Add(overrun).Recordable() {
			return nil, events.ReservationErrorf(events.CodeInvalidAmount, t.id, r.Status,
				"actual %s would take the spent of %s per %s (%s) to %s, past the %d integer digits the ledger records; nothing was settled",
				actual, ref.Scope, ref.Period, ref.Instance, b.Spent.Add(actual), events.MaxIntegerDigits)
		}
		evs = append(evs, events.ReservationSettled{ReservationID: t.id, Balance: ref, Reserved: reserved,
			Actual: actual, Overrun: overrun, Late: late, AfterExpiry: afterExpiry, At: t.now, Usage: t.priced, Excess: excess, Note: t.note})
		if b := t.view.Balance(key); len(b.Thresholds) > 0 {
			used := b.Spent.Add(actual).Add(b.Reserved)
			if !afterExpiry {
				used = used.Sub(reserved)
			}
			for _, th := range events.Crossed(b.Thresholds, b.Alerted, b.Limit, used) {
				a := events.ThresholdCrossed{Balance: ref, Threshold: th, Limit: b.Limit, Used: used, Unit: b.Unit,
					ReservationID: t.id, At: t.now, Arm: b.Arm}
				evs = append(evs, a)
				t.alerts = append(t.alerts, a)
			}
		}
	}
	t.reply.Usage = t.priced
	t.reply.Status = events.StatusSettled
	t.reply.Actual = t.actual.String()
	t.reply.Late = late
	return evs, nil
}

// clampedBefore reports whether a settle of r with t.actual, above the
// recorded actual, is the retry of a settle a budget's exposure cap
// clamped (see settle): the head part's balance has a cap. Its excess
// was recorded with the first settle.
func (t *closeTx) clampedBefore(r *ledger.Reservation, recorded events.Money) bool {
	if t.actual.Cmp(recorded) <= 0 {
		return false
	}
	head := headPart(r)
	return t.view.Balance(head).ExposureCap != nil
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
		if recorded.Cmp(t.actual) == 0 || !hasMoney(r) || t.clampedBefore(r, recorded) {
			t.reply.Actual, t.reply.Late, t.reply.Replayed = recorded.String(), r.Late, true
			// A settle from usage retried: its usage priced at the
			// reservation's version, as the first reply said (the same
			// cost, or it would not be a replay).
			t.reply.Usage = t.priced
			// The overrun the first settle answered: the actual beyond the
			// reservation, or all of it when it came after the sweeper
			// had released the reservation.
			overrun := func(reserved, actual events.Money) events.Money {
				if r.AfterExpiry {
					return actual
				}
				return actual.Sub(reserved).Max(events.Zero)
			}
			if !hasMoney(r) {
				t.reply.Actual = t.actual.String()
			} else if over := overrun(r.Amount(), recorded); over.Sign() > 0 {
				t.reply.Overrun = over.String()
			}
			if len(r.Balances) > 1 {
				for _, ref := range r.Balances {
					p := r.Part(streams.BalanceKey(ref))
					if p == nil {
						continue
					}
					count := events.IsCount(p.Unit)
					t.reply.Budgets = append(t.reply.Budgets, budgetClose(r, ref, p.Amount, p.Actual, overrun(p.Amount, p.Actual), nil, count))
				}
			}
			return nil, nil
		}
		return nil, events.ReservationErrorf(events.CodeAlreadySettled, t.id, r.Status,
			"reservation %s was already settled with actual %s", t.id, recorded)
	case events.StatusExpired:
		// The sweeper returned the reservation, but the money was spent:
		// record it, late, in the reservation's own period.
		return t.settle(r, true, true)
	}
	return nil, events.ReservationErrorf(events.CodeAlreadyReleased, t.id, r.Status,
		"reservation %s was already released; its actual cost cannot be recorded", t.id)
}

// headPart is the balance key of the part whose amount Reservation.Amount
// reports: the first money part, or the last count part when there is
// none (Reservation.pick).
func headPart(r *ledger.Reservation) string {
	head := ""
	for i := range r.Parts {
		head = r.Parts[i].Key
		if !events.IsCount(r.Parts[i].Unit) {
			break
		}
	}
	return head
}

// budgetClose is one budget's line of a settle reply.
func budgetClose(r *ledger.Reservation, ref events.BalanceRef, reserved, actual, overrun events.Money, excess *events.Money, count bool) events.BudgetClose {
	c := events.BudgetClose{Scope: ref.Scope, Period: ref.Period, Instance: ref.Instance, Reserved: reserved.String(), Actual: actual.String()}
	if p := r.Part(streams.BalanceKey(ref)); p != nil {
		c.Unit = p.Unit
	}
	if !count && overrun.Sign() > 0 {
		c.Overrun = overrun.String()
	}
	if excess != nil {
		c.Excess = excess.String()
	}
	return c
}

// amountIn is what reservation r holds in balance ref.
func amountIn(r *ledger.Reservation, ref events.BalanceRef) events.Money {
	if p := r.Part(streams.BalanceKey(ref)); p != nil {
		return p.Amount
	}
	return events.Zero
}
