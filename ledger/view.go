package ledger

import (
	"fmt"
	"slices"
	"sort"

	"github.com/spendgate/spendgate/events"
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
	Decide(v *View) (events.Events, error)
}

// View is what a Tx decides against: the touched balances at the lane
// revisions the write will require, plus the effect of the Txs decided
// before it in the same group. Open reservations and request ids are read
// from the book, which the follower may advance meanwhile; a read that
// finds one of the view's lanes folded past the view's revision makes the
// group decide again, so every answer rests on the revisions written or
// verified.
type View struct {
	l     *Ledger
	bal   map[string]*viewBalance
	lanes map[string]uint64       // the revision of each lane the view was taken at (folded or skipped): the write's compare-and-set
	prev  map[string]uint64       // the last valid revision of each lane: what the write's chain names
	hash  map[string]string       // the payload hash of each prev revision
	res   map[string]*Reservation // reservations changed in this group
	req   map[string]*Reservation // request ids opened in this group
	voids map[string]bool         // request ids voided in this group
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
}

// checkLanes marks the view stale if the book has folded any lane of the
// view, among those of refs, past the view's revision. The caller holds
// l.mu.
func (v *View) checkLanes(refs []events.BalanceRef) {
	for _, ref := range refs {
		lane := v.l.layout.LaneKey(ref)
		if at, ok := v.lanes[lane]; ok && v.l.bk.rev(lane) != at {
			v.stale = true
		}
	}
}

type viewBalance struct {
	Balance
	lane    string
	added   map[string]events.Money
	removed map[string]bool
	events  events.Events
}

func (l *Ledger) newView(refs []events.BalanceRef) *View {
	v := &View{l: l, bal: make(map[string]*viewBalance, len(refs)), lanes: map[string]uint64{}, prev: map[string]uint64{}, hash: map[string]string{}, res: map[string]*Reservation{}, req: map[string]*Reservation{}, voids: map[string]bool{}}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, ref := range refs {
		k := streams.BalanceKey(ref)
		lane := l.layout.LaneKey(ref)
		v.lanes[lane] = l.bk.rev(lane)
		v.prev[lane], v.hash[lane] = l.bk.valid(lane)
		vb := &viewBalance{lane: lane, added: map[string]events.Money{}, removed: map[string]bool{}}
		vb.Balance = l.bk.balance(k, ref)
		v.bal[k] = vb
	}
	return v
}

// Balance returns the balance of key as of this decision.
func (v *View) Balance(key string) Balance {
	if vb := v.bal[key]; vb != nil {
		return vb.Balance
	}
	return Balance{}
}

// OpenAmount returns the amount reservation id holds in balance key, if it
// is open there.
func (v *View) OpenAmount(key, id string) (events.Money, bool) {
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
func (v *View) Reservation(id string) (*Reservation, bool) {
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
func (v *View) ByRequest(rid string) (*Reservation, bool) {
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
func (v *View) Voided(rid string) bool {
	if v.voids[rid] {
		return true
	}
	v.l.mu.RLock()
	defer v.l.mu.RUnlock()
	return v.l.bk.voids[rid] != nil
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
func (v *View) undo(e *undoEntry) {
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

// apply folds a Tx's events into the view so that later Txs in the group
// see them, all or none: every change it makes is journaled, and on an
// error the journal is rolled back, so the view (and so the group's write)
// is exactly as if the Tx had decided nothing. It is the writer's fold;
// package projector folds the same events independently, and the two must
// agree.
func (v *View) apply(es events.Events) (err error) {
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
	}()
	// saveRes journals reservation id as the group had it before this Tx.
	saveRes := func(id string) {
		if slices.Contains(v.touchedRes, id) {
			return
		}
		v.touchedRes = append(v.touchedRes, id)
		if r, ok := v.res[id]; ok {
			saved := new(Reservation)
			*saved = *r
			saved.Parts = slices.Clone(r.Parts)
			v.journal = append(v.journal, undoEntry{op: undoRes, r: r, saved: saved})
			return
		}
		v.journal = append(v.journal, undoEntry{op: undoResNew, id: id})
	}
	// open and close journal the per-reservation maps of vb.
	open := func(vb *viewBalance, id string, amt events.Money) {
		a, hadA := vb.added[id]
		_, hadR := vb.removed[id]
		v.journal = append(v.journal, undoEntry{op: undoOpen, vb: vb, id: id, amt: a, hadA: hadA, hadR: hadR})
		vb.added[id] = amt
		delete(vb.removed, id)
	}
	closeRes := func(vb *viewBalance, id string) {
		a, hadA := vb.added[id]
		_, hadR := vb.removed[id]
		v.journal = append(v.journal, undoEntry{op: undoOpen, vb: vb, id: id, amt: a, hadA: hadA, hadR: hadR})
		vb.removed[id] = true
		delete(vb.added, id)
	}
	for _, e := range es {
		var ref events.BalanceRef
		switch e := e.(type) {
		case events.ReservationOpened:
			ref = e.Balance
		case events.ReservationSettled:
			ref = e.Balance
		case events.ReservationReleased:
			ref = e.Balance
		case events.ThresholdCrossed:
			ref = e.Balance
		case events.RequestVoided:
			ref = e.Balance
		default:
			return fmt.Errorf("ledger: %s is not a balance event", e.EventType())
		}
		key := streams.BalanceKey(ref)
		vb := v.bal[key]
		if vb == nil {
			return fmt.Errorf("ledger: event for %s outside the Tx's keys", key)
		}
		if !slices.Contains(v.touched, vb) {
			v.touched = append(v.touched, vb)
			v.journal = append(v.journal, undoEntry{op: undoBalance, vb: vb, bal: vb.Balance, n: len(vb.events)})
		}
		switch e := e.(type) {
		case events.ThresholdCrossed:
			// A copy: the book's slice is shared (and undo restores the
			// old header with the Balance).
			vb.Alerted = append(vb.Alerted[:len(vb.Alerted):len(vb.Alerted)], e.Threshold)
		case events.ReservationOpened:
			vb.Reserved = vb.Reserved.Add(e.Amount)
			vb.Open++
			open(vb, e.ReservationID, e.Amount)
			saveRes(e.ReservationID)
			r := v.res[e.ReservationID]
			if r == nil {
				r = &Reservation{
					ID: e.ReservationID, RequestID: e.RequestID, RequestHash: e.RequestHash,
					Balances: e.Balances, Parts: make([]Part, 0, len(e.Balances)),
					OpenedAt: e.At, ExpiresAt: e.ExpiresAt, Status: events.StatusOpen, Pricing: e.Pricing,
				}
				v.res[e.ReservationID] = r
				v.openDelta(r, 1)
				rid := e.RequestID
				prev, had := v.req[rid]
				v.req[rid] = r
				v.journal = append(v.journal, undoEntry{op: undoReq, id: rid, hadA: had, saved: prev})
			}
			p := r.part(key)
			p.Unit, p.Amount = e.Unit, e.Amount
		case events.ReservationSettled:
			vb.Spent = vb.Spent.Add(e.Actual)
			vb.Overrun = vb.Overrun.Add(e.Overrun)
			if !e.AfterExpiry {
				vb.Reserved = vb.Reserved.Sub(e.Reserved)
				vb.Open--
				closeRes(vb, e.ReservationID)
			}
			saveRes(e.ReservationID)
			r := v.overlay(e.ReservationID)
			if r.Status == events.StatusOpen {
				v.openDelta(r, -1)
			}
			r.Status = events.StatusSettled
			r.part(key).Actual = e.Actual
			r.Late = r.Late || e.Late
		case events.ReservationReleased:
			vb.Reserved = vb.Reserved.Sub(e.Reserved)
			vb.Open--
			closeRes(vb, e.ReservationID)
			saveRes(e.ReservationID)
			r := v.overlay(e.ReservationID)
			if r.Status == events.StatusOpen {
				v.openDelta(r, -1)
			}
			r.Status = events.StatusReleased
			if e.Reason == events.ReasonExpired {
				r.Status = events.StatusExpired
			}
		case events.RequestVoided:
			// A tombstone: no number of the balance changes.
			rid := e.RequestID
			if !v.voids[rid] {
				v.voids[rid] = true
				v.journal = append(v.journal, undoEntry{op: undoVoid, id: rid})
			}
		}
		vb.events = append(vb.events, e)
	}
	return nil
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

// overlay returns the group's copy of reservation id, copying it in from the
// book on first change.
func (v *View) overlay(id string) *Reservation {
	if r := v.res[id]; r != nil {
		return r
	}
	r, ok := v.l.Reservation(id)
	if !ok {
		r = &Reservation{ID: id}
	}
	v.res[id] = r
	return r
}

type keyedRevision struct {
	key   string // the lane key
	rev   uint64 // the revision the write requires
	value events.LaneRevision
}

// revisions returns the lane revisions to write, sorted by lane key, each
// naming its changed balances in balance key order.
func (v *View) revisions() []keyedRevision {
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
		}
		out = append(out, keyedRevision{key: lane, rev: v.lanes[lane], value: rev})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// unwritten returns the lanes of the view that no decision wrote to. A lane
// the group writes is vouched for by its compare-and-set, for every balance
// of the lane, written or not.
func (v *View) unwritten() []string {
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
