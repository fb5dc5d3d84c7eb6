package ledger

import (
	"fmt"
	"slices"
	"sort"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/streams"
)

// Tx is one change to the ledger: the balance keys it touches and a pure
// decision. Decide may run several times (after a conflict the ledger folds
// what it missed and decides again), so it must derive everything from the
// View and from fields fixed when the Tx was built, and reset any result it
// records on every call.
type Tx interface {
	// Balances returns the balances the Tx touches.
	Balances() []events.BalanceRef
	// Decide returns the events to commit (one or more per touched key,
	// each naming its balance), or none to commit nothing. An error is the
	// Tx's final answer; nothing of it is committed.
	Decide(v View) (events.Events, error)
}

// View is what a Tx decides against: the balances it touches and the
// reservations and request ids it reads, as of its decision. The ledger's
// is the group's overlay of the book (see group); a test of a Tx's
// decisions may give it any other.
type View interface {
	// Balance returns the balance of key as of this decision.
	Balance(key string) Balance
	// OpenAmount returns the amount reservation id holds in balance key,
	// if it is open there.
	OpenAmount(key, id string) (events.Money, bool)
	// Reservation returns a copy of reservation id as of this decision.
	Reservation(id string) (*Reservation, bool)
	// ByRequest returns a copy of the reservation opened for request id
	// rid, if any.
	ByRequest(rid string) (*Reservation, bool)
	// Voided reports whether request id rid is voided as of this
	// decision.
	Voided(rid string) bool
	// TenantOpen returns how many reservations tenant holds open as of
	// this decision (tenants.go).
	TenantOpen(tenant string) int
	// Learned returns a copy of the learned-reservation window of k (nil:
	// no call known) as of the revision of k's scope's lane the decision
	// is taken at; settles decided earlier in the same group are not in it
	// (they are learned when their revision is folded), so the amount an
	// admit reserves is a function of the ledger position its revision
	// follows (events.Chain.Prev).
	Learned(k learn.Key) *learn.Window
}

// group is the View the committer gives the Txs of one group: the
// touched balances at the lane revisions the write will require, plus the
// effect of the Txs decided before it in the same group. Open reservations and request ids are read
// from the book, which the follower may advance meanwhile; a read that
// finds one of the view's lanes folded past the view's revision makes the
// group decide again, so every answer rests on the revisions written or
// verified.
type group struct {
	l   *Ledger
	bal map[string]*viewBalance
	// anyGone: some balance of bal is gone (viewBalance.gone).
	anyGone bool
	lanes   map[string]uint64       // the revision of each lane the view was taken at (folded or skipped): the write's compare-and-set
	prev    map[string]uint64       // the last valid revision of each lane: what the write's chain names
	hash    map[string]string       // the payload hash of each prev revision
	res     map[string]*Reservation // reservations changed in this group
	req     map[string]*Reservation // request ids opened in this group
	voids   map[string]bool         // request ids voided in this group
	// tenantOpen is the change of each tenant's open reservations made
	// by the group's decisions so far (see TenantOpen, tenants.go).
	tenantOpen map[string]int
	// stale is set when a read from the book (open reservations, request
	// ids) found a lane of the view already folded past the revision the
	// view was taken at: the group is then decided again.
	stale bool
	// journal, touched and touchedRes are apply's, reused by every Tx
	// of the group.
	journal    []undoEntry
	touched    []*viewBalance
	touchedRes []string
	// cur is the balance of the event apply is applying.
	cur *viewBalance
}

// checkLanes marks the view stale if the book has folded any lane of the
// view, among those of refs, past the view's revision. The caller holds
// l.mu.
func (v *group) checkLanes(refs []events.BalanceRef) {
	for _, ref := range refs {
		lane := v.l.layout.LaneKey(ref)
		if at, ok := v.lanes[lane]; ok && v.l.bk.rev(lane) != at {
			v.stale = true
		}
	}
}

type viewBalance struct {
	Balance
	// gone: the balance is a retired budget's and the book no longer
	// holds it (pruned): nothing may be written to it (its revision would
	// state its totals from zero).
	gone    bool
	lane    string
	added   map[string]events.Money
	removed map[string]bool
	events  events.Events
}

func (l *Ledger) newView(refs []events.BalanceRef) *group {
	v := &group{l: l, bal: make(map[string]*viewBalance, len(refs)), lanes: map[string]uint64{}, prev: map[string]uint64{}, hash: map[string]string{}, res: map[string]*Reservation{}, req: map[string]*Reservation{}, voids: map[string]bool{}}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, ref := range refs {
		k := streams.BalanceKey(ref)
		lane := l.layout.LaneKey(ref)
		v.lanes[lane] = l.bk.rev(lane)
		v.prev[lane], v.hash[lane] = l.bk.valid(lane)
		vb := &viewBalance{lane: lane, added: map[string]events.Money{}, removed: map[string]bool{}}
		vb.Balance = l.bk.balance(k, ref)
		vb.gone = vb.Retired && l.bk.balances[k] == nil
		v.anyGone = v.anyGone || vb.gone
		v.bal[k] = vb
	}
	return v
}

// gone returns the first balance evs write to that is gone (see
// viewBalance.gone).
func (v *group) gone(evs events.Events) (events.BalanceRef, bool) {
	if !v.anyGone {
		return events.BalanceRef{}, false // the commit path's case: no key to build
	}
	for _, e := range evs {
		if be, ok := e.(events.BalanceEvent); ok {
			if vb := v.bal[streams.BalanceKey(be.BalanceOf())]; vb != nil && vb.gone {
				return vb.Ref, true
			}
		}
	}
	return events.BalanceRef{}, false
}

// Balance returns the balance of key as of this decision.
func (v *group) Balance(key string) Balance {
	if vb := v.bal[key]; vb != nil {
		return vb.Balance
	}
	return Balance{}
}

// OpenAmount returns the amount reservation id holds in balance key, if it
// is open there.
func (v *group) OpenAmount(key, id string) (events.Money, bool) {
	vb := v.bal[key]
	if vb == nil {
		return events.Money{}, false
	}
	if vb.removed[id] {
		return events.Money{}, false
	}
	if amt, ok := vb.added[id]; ok {
		return amt, true
	}
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	if v.l.bk.rev(vb.lane) != v.lanes[vb.lane] {
		v.stale = true
	}
	if b := v.l.bk.balances[key]; b != nil {
		if r := b.open[id]; r != nil {
			if p := r.Part(key); p != nil {
				return p.Amount, true
			}
		}
	}
	return events.Money{}, false
}

// Reservation returns a copy of reservation id as of this decision.
func (v *group) Reservation(id string) (*Reservation, bool) {
	if r := v.res[id]; r != nil {
		return r.clone(), true
	}
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	r, ok := v.l.bk.get(id)
	if !ok {
		return nil, false
	}
	v.checkLanes(r.Balances)
	return r.clone(), true
}

// ByRequest returns the reservation opened for request id rid, if any.
func (v *group) ByRequest(rid string) (*Reservation, bool) {
	if r := v.req[rid]; r != nil {
		return r.clone(), true
	}
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	if r, ok := v.l.bk.byRequest(rid); ok {
		v.checkLanes(r.Balances)
		return r.clone(), true
	}
	return nil, false
}

// Voided reports whether request id rid is voided as of this decision (an
// events.RequestVoided the book remembers, or one decided earlier in the
// group). A void is written into a lane of every scope it names, and an
// admit of those scopes writes at least one of them: the compare-and-set
// on that shared lane orders the two, so a void absent here is absent at
// the revision the write requires, or the write fails and the group
// decides again.
func (v *group) Voided(rid string) bool {
	if v.voids[rid] {
		return true
	}
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	return v.l.bk.voids[rid] != nil
}

// Learned returns a copy of k's window as of the view's revision of its
// scope's lane (see View.Learned), marking the view stale if the book has
// folded that lane past it.
func (v *group) Learned(k learn.Key) *learn.Window {
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	v.checkLanes([]events.BalanceRef{{Scope: k.Scope}})
	return v.l.bk.learned.Window(k).Clone()
}

// undoOp names what an undoEntry puts back.
type undoOp uint8

const (
	undoBalance undoOp = iota // vb's numbers and events
	undoOpen                  // vb's record of reservation id (added, removed)
	undoRes                   // the group's reservation id, as saved
	undoResNew                // the group had no reservation id
	undoReq                   // the group's reservation of request id
	undoVoid                  // the group had not voided request id
	undoTenant                // tenantOpen[id] moved by n
)

// undoEntry is one change apply journals: typed, so a Tx's journal is a
// slice the view reuses rather than a closure per change.
type undoEntry struct {
	op    undoOp
	vb    *viewBalance
	bal   Balance      // undoBalance
	n     int          // undoBalance: len(vb.events); undoTenant: the change
	id    string       // the reservation or request id; undoTenant: the tenant
	amt   events.Money // undoOpen: the added amount
	hadA  bool         // undoOpen: id was added; undoReq: rid had a reservation
	hadR  bool         // undoOpen: id was removed
	saved *Reservation // undoRes: the copy to restore; undoReq: the previous reservation
	r     *Reservation // undoRes: the group's reservation
}

// undo puts back what e journaled.
func (v *group) undo(e *undoEntry) {
	switch e.op {
	case undoBalance:
		e.vb.Balance, e.vb.events = e.bal, e.vb.events[:e.n]
	case undoOpen:
		restoreOpen(e.vb, e.id, e.amt, e.hadA, e.hadR)
	case undoRes:
		*e.r = *e.saved
	case undoResNew:
		delete(v.res, e.id)
	case undoReq:
		if e.hadA {
			v.req[e.id] = e.saved
		} else {
			delete(v.req, e.id)
		}
	case undoVoid:
		delete(v.voids, e.id)
	case undoTenant:
		v.tenantOpen[e.id] -= e.n
	}
}

// apply folds a Tx's events into the view with applyEvent, the rule set
// the book folds revisions with, so that later Txs in the group see them,
// all or none: every change it makes is journaled, and on an error the
// journal is rolled back, so the view (and so the group's write) is
// exactly as if the Tx had decided nothing.
func (v *group) apply(es events.Events) (err error) {
	// The journal, and the balances and reservations this Tx has touched,
	// live on the view and are reused by every Tx of the group.
	v.journal, v.touched, v.touchedRes = v.journal[:0], v.touched[:0], v.touchedRes[:0]
	defer func() {
		if err != nil {
			for i := len(v.journal) - 1; i >= 0; i-- {
				v.undo(&v.journal[i])
			}
		}
		clear(v.journal) // drop the references the entries hold
		v.cur = nil
	}()
	for _, e := range es {
		be, ok := e.(events.BalanceEvent)
		if !ok {
			return fmt.Errorf("ledger: %s is not a balance event", e.EventType())
		}
		key := streams.BalanceKey(be.BalanceOf())
		vb := v.bal[key]
		if vb == nil {
			return fmt.Errorf("ledger: event for %s outside the Tx's keys", key)
		}
		if !slices.Contains(v.touched, vb) {
			v.touched = append(v.touched, vb)
			v.journal = append(v.journal, undoEntry{op: undoBalance, vb: vb, bal: vb.Balance, n: len(vb.events)})
		}
		v.cur = vb
		applyEvent((*overlay)(v), key, e)
		vb.events = append(vb.events, e)
	}
	return nil
}

// overlay is the group as applyEvent's target: the group's changes on top
// of the book, each journaled so that a Tx's can be undone. Its balance
// methods change v.cur, the balance of the event applied (the key they are
// given is cur's).
type overlay group

func (o *overlay) reserve(_ string, amt, exposure events.Money) {
	o.cur.Reserved = o.cur.Reserved.Add(amt)
	o.cur.Exposure = o.cur.Exposure.Add(exposure)
	o.cur.Open++
}

func (o *overlay) unreserve(_ string, amt, exposure events.Money) {
	o.cur.Reserved = o.cur.Reserved.Sub(amt)
	o.cur.Exposure = o.cur.Exposure.Sub(exposure)
	o.cur.Open--
}

func (o *overlay) spend(_ string, actual, overrun events.Money) {
	o.cur.Spent = o.cur.Spent.Add(actual)
	o.cur.Overrun = o.cur.Overrun.Add(overrun)
}

func (o *overlay) alert(_ string, e events.ThresholdCrossed) {
	// A copy: the book's slice is shared (and undo restores the old
	// header with the Balance).
	a := o.cur.Alerted
	if e.Arm != o.cur.Arm {
		a, o.cur.Arm = nil, e.Arm
	}
	o.cur.Alerted = append(a[:len(a):len(a)], e.Threshold)
}

// held returns the group's copy of reservation id, copying it in from the
// book (open, closed or in the window) on first change.
func (o *overlay) held(id string) *Reservation {
	o.saveRes(id)
	if r := o.res[id]; r != nil {
		return r
	}
	r, ok := o.l.Reservation(id)
	if !ok {
		return nil
	}
	o.res[id] = r
	return r
}

// stamped: held has looked in the window already.
func (o *overlay) stamped(string) *Reservation { return nil }

func (o *overlay) opened(e events.ReservationOpened) *Reservation {
	r := &Reservation{
		ID: e.ReservationID, RequestID: e.RequestID, RequestHash: e.RequestHash,
		Balances: e.Balances, Parts: make([]Part, 0, len(e.Balances)),
		OpenedAt: e.At, ExpiresAt: e.ExpiresAt, Status: events.StatusOpen, Pricing: e.Pricing,
	}
	o.res[e.ReservationID] = r // journaled by held
	rid := e.RequestID
	prev, had := o.req[rid]
	o.req[rid] = r
	o.journal = append(o.journal, undoEntry{op: undoReq, id: rid, hadA: had, saved: prev})
	return r
}

func (o *overlay) opens(key string, r *Reservation) {
	vb := o.cur
	a, hadA := vb.added[r.ID]
	_, hadR := vb.removed[r.ID]
	o.journal = append(o.journal, undoEntry{op: undoOpen, vb: vb, id: r.ID, amt: a, hadA: hadA, hadR: hadR})
	vb.added[r.ID] = r.Part(key).Amount
	delete(vb.removed, r.ID)
}

func (o *overlay) closes(_ string, id string) {
	vb := o.cur
	a, hadA := vb.added[id]
	_, hadR := vb.removed[id]
	o.journal = append(o.journal, undoEntry{op: undoOpen, vb: vb, id: id, amt: a, hadA: hadA, hadR: hadR})
	vb.removed[id] = true
	delete(vb.added, id)
}

func (o *overlay) openChanged(r *Reservation, d int) { (*group)(o).openDelta(r, d) }

// learn: an admit decides on the learned state of the revision its view
// was taken at (View.Learned); the book learns when it folds the write.
func (o *overlay) learn(learn.Key, events.Money) {}

// closed: the book queues the close when it folds the group's write.
func (o *overlay) closed(*Reservation, bool) {}

func (o *overlay) void(e events.RequestVoided) {
	if !o.voids[e.RequestID] {
		o.voids[e.RequestID] = true
		o.journal = append(o.journal, undoEntry{op: undoVoid, id: e.RequestID})
	}
}

// saveRes journals reservation id as the group had it before this Tx.
func (o *overlay) saveRes(id string) {
	if slices.Contains(o.touchedRes, id) {
		return
	}
	o.touchedRes = append(o.touchedRes, id)
	if r, ok := o.res[id]; ok {
		saved := new(Reservation)
		*saved = *r
		saved.Parts = slices.Clone(r.Parts)
		o.journal = append(o.journal, undoEntry{op: undoRes, r: r, saved: saved})
		return
	}
	o.journal = append(o.journal, undoEntry{op: undoResNew, id: id})
}

// restoreOpen puts back vb's record of reservation id as it was.
func restoreOpen(vb *viewBalance, id string, added events.Money, hadAdded, hadRemoved bool) {
	if hadAdded {
		vb.added[id] = added
	} else {
		delete(vb.added, id)
	}
	if hadRemoved {
		vb.removed[id] = true
	} else {
		delete(vb.removed, id)
	}
}

type keyedRevision struct {
	key   string // the lane key
	rev   uint64 // the revision the write requires
	value events.LaneRevision
}

// revisions returns the lane revisions to write, sorted by lane key, each
// naming its changed balances in balance key order.
func (v *group) revisions() []keyedRevision {
	byLane := map[string][]string{}
	for k, vb := range v.bal {
		if len(vb.events) > 0 {
			byLane[vb.lane] = append(byLane[vb.lane], k)
		}
	}
	out := make([]keyedRevision, 0, len(byLane))
	for lane, keys := range byLane {
		sort.Strings(keys)
		rev := events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: v.prev[lane], PrevHash: v.hash[lane]},
			Balances: make([]events.BalanceRevision, len(keys))}
		for i, k := range keys {
			vb := v.bal[k]
			rev.Balances[i] = events.BalanceRevision{
				Schema: events.SchemaBalance, Balance: vb.Ref, Unit: vb.Unit, Limit: vb.Limit,
				Spent: vb.Spent, Reserved: vb.Reserved, Overrun: vb.Overrun, Open: int64(vb.Open),
				Events: vb.events,
			}
			if !vb.Exposure.IsZero() {
				exp := vb.Exposure
				rev.Balances[i].Exposure = &exp
			}
		}
		out = append(out, keyedRevision{key: lane, rev: v.lanes[lane], value: rev})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// unwritten returns the lanes of the view that no decision wrote to. A lane
// the group writes is vouched for by its compare-and-set, for every balance
// of the lane, written or not.
func (v *group) unwritten() []string {
	written := map[string]bool{}
	for _, vb := range v.bal {
		if len(vb.events) > 0 {
			written[vb.lane] = true
		}
	}
	var out []string
	for lane := range v.lanes {
		if !written[lane] {
			out = append(out, lane)
		}
	}
	sort.Strings(out)
	return out
}

// lanesOf returns the distinct lanes of refs, sorted.
func (l *Ledger) lanesOf(refs []events.BalanceRef) []string {
	if len(refs) == 1 {
		return []string{l.layout.LaneKey(refs[0])}
	}
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, l.layout.LaneKey(r))
	}
	sort.Strings(out)
	return slices.Compact(out)
}
