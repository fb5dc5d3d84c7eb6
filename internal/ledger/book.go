package ledger

import (
	"slices"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/streams"
)

// book is the replica's folded state: budget definitions, balances, open
// and recently closed reservations, request ids, and the gate's heads (the
// last revision of every key, passed and seen). It is a pure fold: no I/O,
// no clock, no lock (the Ledger guards it with its mu). Revisions of one
// key reach it in stream order from three places (the follower, a catch-up
// after a lost compare-and-set, and this replica's own successful writes),
// each after the gate passed it and recorded it in heads (see apply).
type book struct {
	layout streams.Layout
	// born is when this book was made (this process's clock): a balance
	// whose latest event a snapshot did not say counts as active then
	// (IdleBudgets).
	born time.Time

	budgets map[string]*budget // by budget key
	// fromDefaults are the budgets created from a default and not
	// retired, by budget key: what the idle walk looks at (it would
	// otherwise walk every retired run's tombstone, once a minute).
	fromDefaults map[string]*budget
	// retired counts the retired budgets (their tombstones).
	retired  int
	prices   map[string]*pricing // by pricing key
	defaults map[string]*dflt    // by default key
	apikeys  map[string]*apiKey  // by API key's key
	// tenantLimits are the tenants' own limits, by tenant limits key.
	tenantLimits map[string]*tenantLimits
	// byKind indexes defaults by scope kind, in period order.
	byKind   map[string][]Default
	byScope  map[events.Scope][]Budget
	balances map[string]*balance // by balance key
	// heads is the gate's state of every key: the last revision that
	// passed (what the next chained revision names) and the last one
	// skipped after it (what this replica's next compare-and-set on the
	// key names, so its write lands after it).
	heads *gate.Heads
	// trust is the ledger's last trust revision (nil: none), kept for
	// snapshots; the gate holds what it means.
	trust        *gate.Revision
	reservations map[string]*Reservation
	requests     map[string]*Reservation // by request id
	// voids are the voided request ids (events.RequestVoided), each a
	// tombstone kept as a *Reservation of status StatusVoided and no
	// balances, forgotten after the retention of a closed reservation.
	voids map[string]*Reservation
	// due indexes the open reservations by expiry.
	due dueIndex
	// reservations and requests hold the open reservations and the
	// closed ones not yet stamped; win (window.go) holds the stamped
	// closed ones, compactly, in the order the follower stamped them, so
	// the book forgets them after their retention. voided queues the
	// voids (tombstones in voids) in the order they were stamped, forgotten
	// after the retention of a closed reservation. pending holds the
	// closes the follower has not folded yet (a committer applies its own
	// revision before the follower sees it); serverNow is the JetStream
	// timestamp of the last message the follower folded.
	win       *window
	voided    []closedRes
	pending   []pendingClose
	serverNow time.Time

	retention, expiredKeep time.Duration

	// learned is the state of learned reservations: the recent actual
	// costs of calls admitted under a learn rule, per scope and model.
	learned learn.State

	// cur and curSeq are the balance applyBalance is folding events into
	// and the revision they came in (see apply.go).
	cur    *balance
	curSeq uint64

	// tenants counts open reservations and budgets from defaults per
	// tenant (tenants.go), kept by this fold.
	tenants tenantCounts

	// short holds the minute and hour balances, which prune.go drops once
	// they can no longer change; unstamped queues their revisions the
	// follower has not stamped yet. nextPrune is when (server time)
	// prune runs next; pruned counts the balances dropped; noPrune turns
	// pruning off (a test's baseline).
	short     map[string]*balance
	unstamped []balStamp
	nextPrune time.Time
	pruned    int64
	noPrune   bool
}

func newBook(layout streams.Layout, retention, expiredKeep time.Duration) *book {
	return &book{
		born:         time.Now(),
		layout:       layout,
		budgets:      map[string]*budget{},
		fromDefaults: map[string]*budget{},
		prices:       map[string]*pricing{},
		defaults:     map[string]*dflt{},
		byKind:       map[string][]Default{},
		byScope:      map[events.Scope][]Budget{},
		balances:     map[string]*balance{},
		heads:        gate.NewHeads(),
		reservations: map[string]*Reservation{},
		requests:     map[string]*Reservation{},
		win:          newWindow(),
		voids:        map[string]*Reservation{},
		retention:    retention,
		expiredKeep:  expiredKeep,
		tenants:      newTenantCounts(),
		short:        map[string]*balance{},
	}
}

// rev returns the last revision of key this book has seen, passed or
// skipped, 0 if none: what a compare-and-set on the key names.
func (b *book) rev(key string) uint64 { return b.heads.Rev(key) }

// valid returns the last revision of key that passed the gate and its
// payload hash: what the key's next chained revision names.
func (b *book) valid(key string) (uint64, string) { return b.heads.Valid(key) }

// apply folds rev, which the gate has just passed and recorded in heads.
// It is the one fold of a revision's content into the book, whoever read
// it: the follower, a catch-up, or this replica's own write.
func (b *book) apply(rev *gate.Revision) {
	switch rev.Kind {
	case gate.KindLane:
		for i := range rev.Lane.Balances {
			b.applyBalance(streams.BalanceKey(rev.Lane.Balances[i].Balance), rev.Seq, &rev.Lane.Balances[i])
		}
	case gate.KindBudget:
		b.setBudget(rev.Key, rev.Seq, rev.Budget, rev.Zone)
	case gate.KindPricing:
		b.setPricing(rev.Key, rev.Seq, rev.Pricing)
	case gate.KindDefault:
		b.setDefault(rev.Key, rev.Seq, rev.Default)
	case gate.KindTrust:
		b.trust = rev
	case gate.KindAPIKey:
		b.setAPIKey(rev.Key, rev.Seq, rev.APIKey)
	case gate.KindTenantLimits:
		b.setTenantLimits(rev.Key, rev.Seq, rev.TenantLimits)
	}
}

// setBudget makes rev, at seq, the budget key's definition, in time zone
// loc (nil: UTC): what apply does with a budget revision the gate passed,
// and what a snapshot's load does with the revision it carries.
func (b *book) setBudget(key string, seq uint64, rev *events.BudgetRevision, loc *time.Location) {
	b.setBudgetArm(key, seq, rev, loc, nil)
}

// setBudgetArm is setBudget with the arm generation given (a snapshot's
// load), or computed when arm is nil: kept from the definition before,
// unless this one changes an arming field (events.ArmingChange), which
// makes seq the generation; 0 for a budget's first definition.
func (b *book) setBudgetArm(key string, seq uint64, rev *events.BudgetRevision, loc *time.Location, arm *uint64) {
	d := b.budgets[key]
	wasRetired := d != nil && d.def.Retired
	src := *rev
	if wasRetired && !src.Retired {
		// Retired is final: a later definition (which no replica writes:
		// a put of a retired budget is refused) does not bring it back.
		src.Retired = true
	}
	var retiredAt time.Time
	var retiredReason string
	if wasRetired {
		retiredAt, retiredReason = d.def.RetiredAt, d.def.RetiredReason
	}
	if src.Retired {
		for _, e := range rev.Events {
			if r, ok := e.(events.BudgetRetired); ok && retiredAt.IsZero() {
				retiredAt, retiredReason = r.At, r.Reason
			}
		}
		// A tombstone: what a snapshot needs is the definition; the
		// event and the chain are the stream's (the key's head keeps
		// the hash a later revision would name).
		src.Events, src.Chain = nil, events.Chain{}
	}
	// A retired budget no longer counts toward its tenant's budgets (from
	// defaults, or its own): it holds no room any more.
	before := budgetNone
	if d != nil {
		before = budgetClassOf(d.def.FromDefault, wasRetired)
	}
	b.budgetChanged(rev.Budget.Scope, before, budgetClassOf(src.FromDefault, src.Retired))
	if d == nil {
		d = &budget{}
		b.budgets[key] = d
	}
	if src.FromDefault != 0 && !src.Retired {
		b.fromDefaults[key] = d
	} else {
		delete(b.fromDefaults, key)
	}
	def := Budget{Ref: rev.Budget, Limit: rev.Limit, Unit: rev.Unit, TZ: rev.TZ, Loc: loc, Disabled: rev.Disabled,
		FixedSlot: rev.FixedSlot, Thresholds: rev.Thresholds, ExposureCap: rev.ExposureCap, Learn: rev.Learn,
		Revision: seq, FromDefault: rev.FromDefault, Retired: src.Retired, RetiredAt: retiredAt, RetiredReason: retiredReason}
	switch {
	case arm != nil:
		def.Arm = *arm
	case d.rev == 0 || d.rev >= seq:
		// New, or this revision folded again: its generation stays.
		def.Arm = d.def.Arm
	case events.ArmingChange(def.Changes(d.def)):
		def.Arm = seq
	default:
		def.Arm = d.def.Arm
	}
	d.rev = seq
	d.src = src
	d.def = def
	if def.Retired && !wasRetired {
		b.retired++
		b.retire(d)
		// What the scope's calls taught its learned reservations is of no
		// use any more: no call is admitted in it again.
		b.learned.Forget(rev.Budget.Scope)
	}
	// Rebuild the scope's index (a new slice: readers hold the old one),
	// in period order, a budget alongside another after it.
	old := b.byScope[rev.Budget.Scope]
	defs := make([]Budget, 0, len(old)+1)
	for _, o := range old {
		if o.Ref != rev.Budget {
			defs = append(defs, o)
		}
	}
	defs = append(defs, d.def)
	sort.Slice(defs, func(i, j int) bool { return budgetBefore(defs[i].Ref, defs[j].Ref) })
	b.byScope[rev.Budget.Scope] = defs
}

// applyBalance folds one balance of a lane revision at seq.
func (b *book) applyBalance(key string, seq uint64, rev *events.BalanceRevision) {
	bl := b.balances[key]
	if bl == nil {
		bl = &balance{key: key, ref: rev.Balance, self: []events.BalanceRef{rev.Balance}, open: map[string]*Reservation{}}
		b.balances[key] = bl
		b.indexBalance(bl)
	}
	if seq <= bl.rev {
		return
	}
	for _, e := range rev.Events {
		b.applyEvent(bl, key, seq, e)
		if t := events.TimeOf(e); t.After(bl.lastAt) {
			bl.lastAt = t
		}
	}
	bl.rev = seq
	bl.unit, bl.limit = rev.Unit, rev.Limit
	bl.spent, bl.reserved, bl.overrun = rev.Spent, rev.Reserved, rev.Overrun
	bl.exposure = events.Money{}
	if rev.Exposure != nil {
		bl.exposure = *rev.Exposure
	}
	if b.prunable(rev.Balance) {
		b.queueStamp(bl, seq, rev.Events)
	}
}

// closedRes is a void (a tombstone in book.voids) and the stamp its
// retention runs from.
type closedRes struct {
	r  *Reservation
	at time.Time
}

type pendingClose struct {
	r   *Reservation
	seq uint64
	// status is r's status when it closed: the queue its retention runs
	// in is decided by it, not by r's status when the close is stamped (a
	// reservation that expired and was then settled late, both before the
	// follower stamped either, is queued once as expired and once as
	// closed, as it is when the follower stamps between the two).
	status string
}

// closeRes queues r, which closed in the revision at seq, for forgetting
// after its retention. Retention runs on one clock, the JetStream
// server's: r's retention starts at the timestamp of the message at seq,
// which the follower stamps when it folds that message (see forgetUntil).
// Neither a replica's own clock nor the time of an earlier message plays a
// part: one skewed replica cannot shrink anyone's replay window, and a
// close after a quiet spell is remembered for the whole retention from the
// close, not from the last write before it.
func (b *book) closeRes(r *Reservation, seq uint64) {
	b.pending = append(b.pending, pendingClose{r, seq, r.Status})
	b.settlePending(len(b.pending) - 1)
}

// settlePending moves pending entry i left until the queue is in
// revision order again (stable: after entries of the same revision).
// Entries almost always arrive in order, so this costs nothing.
func (b *book) settlePending(i int) {
	for ; i > 0 && b.pending[i-1].seq > b.pending[i].seq; i-- {
		b.pending[i-1], b.pending[i] = b.pending[i], b.pending[i-1]
	}
}

// closedAgain records that r, already closed, was closed in another
// balance by the revision at seq (a close over two lanes is two
// revisions). Its stamp is that of the first of them, whichever this
// replica folded first (a writer folds its own batch in its own order),
// so that every replica stamps it alike. The queue may hold another copy
// of r (by id): one the window has since kept compact hands out a new
// copy to each close (see stamped).
func (b *book) closedAgain(r *Reservation, seq uint64) {
	for i := len(b.pending) - 1; i >= 0; i-- {
		if p := b.pending[i].r; p == r || (b.pending[i].status != events.StatusVoided && p.ID == r.ID) {
			if seq < b.pending[i].seq {
				b.pending[i].seq = seq
				b.settlePending(i)
			}
			return
		}
	}
}

// forgetUntil records that the follower folded the message at seq, whose
// server timestamp is t: the closes of revisions up to seq start their
// retention at t, and the closed reservations whose retention ended before
// t are forgotten. Only the follower calls it, in stream order.
func (b *book) forgetUntil(seq uint64, t time.Time) {
	if t.After(b.serverNow) {
		b.serverNow = t
	}
	// pending is in the order of the revisions that closed them, whatever
	// order this replica folded them in (a writer folds its own first):
	// the closes up to seq are a prefix, stamped in that order.
	n := 0
	for ; n < len(b.pending) && b.pending[n].seq <= seq; n++ {
		p := b.pending[n]
		r := p.r
		// The ring is chosen by the status r closed with, not by its
		// status now: a writer may already have folded a later close of r
		// (a late settle after its expiry).
		which := winClosed
		if p.status == events.StatusExpired {
			which = winExpired
			// Every balance keeps when a reservation last expired in it:
			// a late settle may land there for the expired retention, so
			// a balance of a retired budget waits that long (prune.go).
			for _, ref := range r.Balances {
				if bl := b.balances[streams.BalanceKey(ref)]; bl != nil {
					bl.expiredAt = b.serverNow
				}
			}
		}
		switch {
		case p.status == events.StatusVoided:
			// The tombstone, unless the request id was voided already
			// and the earlier tombstone is still remembered (see
			// bookApply.void; forgetVoids hands the tombstone on).
			if cur := b.voids[r.RequestID]; cur == nil || cur == r {
				b.voids[r.RequestID] = r
				b.voided = append(b.voided, closedRes{r, b.serverNow})
			}
		case r.Status == events.StatusOpen:
			// Reopened by a malformed history: nothing to stamp.
		case b.reservations[r.ID] == r:
			delete(b.reservations, r.ID)
			if b.requests[r.RequestID] == r {
				delete(b.requests, r.RequestID)
			}
			b.win.add(which, r, b.balances, b.serverNow)
		default:
			// Stamped already by an earlier close (an expiry) and closed
			// again before this stamp (its late settle): it moves to the
			// ring of this close, stamped now, as when the follower
			// folds the settle itself. If its retention ended before
			// this stamp, the window has forgotten it, as a fold in
			// stream order had before the settle (see stamped). What
			// moves is the window's reservation, not r: the earlier stamp
			// may have kept it compact, and a close folded since (a late
			// settle in another lane, through stamped) changed the
			// window's copy, not r.
			if _, h, ok := b.win.get(r.ID, false); ok {
				b.win.add(which, b.win.take(h), b.balances, b.serverNow)
			}
		}
	}
	if n > 0 {
		m := copy(b.pending, b.pending[n:])
		clear(b.pending[m:])
		b.pending = b.pending[:m]
	}
	b.win.forget(winClosed, t.Add(-b.retention))
	b.win.forget(winExpired, t.Add(-b.expiredKeep))
	b.voided = b.forgetVoids(b.voided, t.Add(-b.retention))
	b.stampBalances(seq)
}

// forgetVoids drops the voids of q stamped before before, and their
// tombstones. A tombstone whose request id was voided again by a revision
// folded but not stamped yet (bookApply.void) hands over to that void's
// tombstone, so that the book never forgets a void it has folded.
func (b *book) forgetVoids(q []closedRes, before time.Time) []closedRes {
	n := 0
	for n < len(q) && q[n].at.Before(before) {
		r := q[n].r
		if b.voids[r.RequestID] == r {
			if v := b.pendingVoid(r.RequestID); v != nil {
				b.voids[r.RequestID] = v
			} else {
				delete(b.voids, r.RequestID)
			}
		}
		n++
	}
	if n == 0 {
		return q
	}
	if n > len(q)/2 {
		// Compact so the backing array does not grow without bound.
		return append(q[:0:0], q[n:]...)
	}
	return q[n:]
}

// pendingVoid returns the first void of request id rid that waits for its
// stamp, nil if none.
func (b *book) pendingVoid(rid string) *Reservation {
	for _, p := range b.pending {
		if p.status == events.StatusVoided && p.r.RequestID == rid {
			return p.r
		}
	}
	return nil
}

// get returns reservation id: open, closed and not yet stamped, or in the
// idempotency window. The caller must not change it.
func (b *book) get(id string) (*Reservation, bool) {
	if r := b.reservations[id]; r != nil {
		return r, true
	}
	r, _, ok := b.win.get(id, false)
	return r, ok
}

// byRequest returns the reservation opened for request id rid (see get).
func (b *book) byRequest(rid string) (*Reservation, bool) {
	if r := b.requests[rid]; r != nil {
		return r, true
	}
	r, _, ok := b.win.get(rid, true)
	return r, ok
}

// rehydrate takes reservation id out of the window back into the book's
// maps, to fold a change of its status; nil if the window does not hold
// it.
func (b *book) rehydrate(id string) *Reservation {
	_, h, ok := b.win.get(id, false)
	if !ok {
		return nil
	}
	r := b.win.take(h)
	b.reservations[id] = r
	b.requests[r.RequestID] = r
	return r
}

// applyEvent folds event e of balance bl (whose key is key), from the
// revision at seq, with the ledger's one rule set.
func (b *book) applyEvent(bl *balance, key string, seq uint64, e events.Event) {
	b.cur, b.curSeq = bl, seq
	applyEvent((*bookApply)(b), key, e)
	b.cur = nil
}

// bookApply is the book as applyEvent's target. Its balance methods change cur, the
// balance whose events applyBalance folds, at seq. A balance's numbers are
// taken from the revision that states them (its writer computed them with
// applyEvent), so reserve, unreserve and spend change nothing here; the
// thresholds crossed are the events'.
type bookApply book

func (b *bookApply) reserve(string, events.Money, events.Money)   {}
func (b *bookApply) unreserve(string, events.Money, events.Money) {}
func (b *bookApply) spend(string, events.Money, events.Money)     {}
func (b *bookApply) alert(_ string, e events.ThresholdCrossed) {
	if e.Arm != b.cur.arm {
		// Re-armed: the crossings of the earlier generation are forgotten
		// (a new slice: a Balance handed out holds the old one).
		b.cur.alerted, b.cur.arm = nil, e.Arm
	}
	b.cur.alerted = append(b.cur.alerted, e.Threshold)
}
func (b *bookApply) learn(k learn.Key, actual events.Money) {
	if (*book)(b).scopeRetired(k.Scope) {
		// A settle after its scope's budget was retired: no call is
		// admitted there again, and the scope's windows were dropped.
		return
	}
	b.learned.Observe(k, actual)
}

// scopeRetired reports whether a budget of scope is retired: every admit
// naming it is denied.
func (b *book) scopeRetired(scope events.Scope) bool {
	return slices.ContainsFunc(b.byScope[scope], func(o Budget) bool { return o.Retired })
}
func (b *bookApply) held(id string) *Reservation    { return b.reservations[id] }
func (b *bookApply) opens(_ string, r *Reservation) { b.cur.open[r.ID] = r }
func (b *bookApply) closes(_ string, id string)     { delete(b.cur.open, id) }

// stamped returns reservation id from the window, to change in place: a
// settle of another balance of a reservation settled and stamped already
// (a settle over two lanes) changes the window's entry; so does a settle
// after its expiry, which closes it again (closeRes), and its entry stays
// in the expired ring until the follower stamps that close (forgetUntil
// moves it to the closed ring then).
//
// It stays there because whether the settle finds it must not depend on
// who folds the settle: the follower, in stream order, has forgotten the
// expiry if its retention ended by the message before the settle; a
// committer folds its own settle ahead of the follower, whose window may
// still hold the expiry. Left in its ring, the entry is forgotten as the
// follower reaches the messages before the settle, exactly when a fold
// forgets it, and the stamp then finds nothing to move, as a fold finds
// nothing to settle. Taken out of the window into the book's maps (as it
// was), the writer kept and re-stamped a reservation that a fold of the
// same stream had forgotten: its book, and a snapshot of it, held a
// closed reservation that a replica folding the stream did not.
func (b *bookApply) stamped(id string) *Reservation {
	_, h, ok := b.win.get(id, false)
	if !ok {
		return nil
	}
	return b.win.shared(h)
}

func (b *bookApply) opened(e events.ReservationOpened) *Reservation {
	// An id the window holds opened again: only a malformed history does
	// this; fold it as before the window existed.
	if r := (*book)(b).rehydrate(e.ReservationID); r != nil {
		(*book)(b).closeRes(r, b.curSeq)
		return r
	}
	balances := e.Balances
	if len(balances) == 1 && balances[0] == b.cur.ref {
		balances = b.cur.self
	}
	r := &Reservation{
		ID: e.ReservationID, RequestID: e.RequestID, RequestHash: e.RequestHash,
		Balances: balances, Parts: make([]Part, 0, len(balances)),
		OpenedAt: e.At, ExpiresAt: e.ExpiresAt, Status: events.StatusOpen, Pricing: e.Pricing,
	}
	b.reservations[e.ReservationID] = r
	b.requests[e.RequestID] = r
	b.due.add(r)
	return r
}

func (b *bookApply) closed(r *Reservation, again bool) {
	b.due.remove(r)
	if again {
		(*book)(b).closedAgain(r, b.curSeq)
	} else {
		(*book)(b).closeRes(r, b.curSeq)
	}
}

func (b *bookApply) openChanged(r *Reservation, d int) { (*book)(b).openChanged(r, d) }

func (b *bookApply) void(e events.RequestVoided) {
	// A void names one balance per scope: the first folded makes the
	// tombstone, its retention starting with this revision. A void of a
	// request id the book remembers voided already is queued too, and the
	// follower decides when it stamps it (forgetUntil) whether it makes a
	// tombstone: only if the one remembered was forgotten by then, as a
	// fold in stream order finds it forgotten (see stamped).
	v := &Reservation{RequestID: e.RequestID, OpenedAt: e.At, Status: events.StatusVoided}
	if b.voids[e.RequestID] == nil {
		b.voids[e.RequestID] = v
	}
	(*book)(b).closeRes(v, b.curSeq)
}

// balance returns the balance of ref (whose balance key is key).
func (b *book) balance(key string, ref events.BalanceRef) Balance {
	out := Balance{Ref: ref}
	bl := b.balances[key]
	if bl != nil {
		out.Unit, out.Limit = bl.unit, bl.limit
		out.Spent, out.Reserved, out.Overrun, out.Open = bl.spent, bl.reserved, bl.overrun, len(bl.open)
		out.Exposure = bl.exposure
		out.Alerted, out.Arm = bl.alerted[:len(bl.alerted):len(bl.alerted)], bl.arm
	}
	if d := b.budgets[streams.BudgetKey(ref.Budget())]; d != nil {
		if bl == nil && d.last != nil && d.last.key == key {
			// A retired budget's balance the book dropped: its final
			// numbers (nothing was open in it).
			out.Spent, out.Overrun = d.last.spent, d.last.overrun
		}
		out.Defined, out.Unit, out.Limit = true, d.def.Unit, d.def.Limit
		out.Disabled, out.FixedSlot, out.Thresholds = d.def.Disabled, d.def.FixedSlot, d.def.Thresholds
		out.Retired = d.def.Retired
		if out.Arm != d.def.Arm {
			// Crossed in an earlier arm generation: re-armed.
			out.Alerted, out.Arm = nil, d.def.Arm
		}
		out.ExposureCap, out.Learn = d.def.ExposureCap, d.def.Learn
	}
	return out
}

// budgetList returns every budget, sorted by scope then period.
func (b *book) budgetList() []Budget {
	out := make([]Budget, 0, len(b.budgets))
	for _, d := range b.budgets {
		out = append(out, d.def)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ref.Scope != out[j].Ref.Scope {
			return out[i].Ref.Scope < out[j].Ref.Scope
		}
		if out[i].Ref.Period != out[j].Ref.Period {
			return out[i].Ref.Period < out[j].Ref.Period
		}
		return out[i].Ref.Unit < out[j].Ref.Unit
	})
	return out
}

// target is the budget a put of a budget of unit for ref defines: ref's
// own, unless a budget of the other kind (count or money) is defined in
// the same scope and period, and then the one alongside it, named with
// its unit (events.BudgetRef.Unit). A ref that names a Unit is its own
// target. A put of another currency for a money budget targets that
// budget (and is refused as a unit change).
func (b *book) target(ref events.BudgetRef, unit string) events.BudgetRef {
	if ref.Unit != "" {
		return ref
	}
	plain := b.budgets[streams.BudgetKey(ref)]
	if plain == nil || plain.def.Unit == unit || events.IsCount(plain.def.Unit) == events.IsCount(unit) {
		return ref
	}
	// A budget of the other kind alongside: the one of this kind there,
	// if any, whatever its currency (a change of it is refused).
	for _, o := range b.byScope[ref.Scope] {
		if o.Ref.Period == ref.Period && o.Ref.Unit != "" && events.IsCount(o.Unit) == events.IsCount(unit) {
			return o.Ref
		}
	}
	ref.Unit = unit
	return ref
}

// budgetBefore orders the budgets of one scope: by period (month, week,
// day, lifetime), then the plain budget before one alongside it.
func budgetBefore(a, b events.BudgetRef) bool {
	if a.Period != b.Period {
		return periodIndex(a.Period) < periodIndex(b.Period)
	}
	return a.Unit < b.Unit
}

func periodIndex(p events.Period) int {
	for i, q := range events.Periods {
		if q == p {
			return i
		}
	}
	return len(events.Periods)
}

// expiredBy returns the open reservations whose ExpiresAt is at or before
// now. It costs what is due (see dueIndex), not what is open.
func (b *book) expiredBy(now time.Time) []*Reservation {
	var due []*Reservation
	for _, r := range b.due.by(now) {
		if r.Status == events.StatusOpen {
			due = append(due, r)
		}
	}
	return due
}
