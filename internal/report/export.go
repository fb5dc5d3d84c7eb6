package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// DefaultLateSettleHold is how long after an expired reservation was
// released an export waits for a late settle before it writes the
// reservation's row, measured on the stream's message timestamps (the
// server's clock, as the ledger's own retention is). It is longer than the
// 48 hours a replica remembers an expired reservation
// (ledger.DefaultExpiredRetention), after which no late settle can land.
const DefaultLateSettleHold = 72 * time.Hour

// Filter selects the reservations of an export or a report.
type Filter struct {
	// From and To select reservations by the time they opened
	// (ReservationOpened.At): From <= opened < To. A zero bound is open.
	From, To time.Time
	// Scopes, when not empty, keeps only reservations admitted in at least
	// one of these scopes.
	Scopes []events.Scope
	// OneTenant keeps only the reservations of Tenant ("" for the
	// untenanted deployment's): those whose scopes carry that tenant
	// (events.Scope.Tenant). Scopes are then still the stored scopes
	// ("acme/team:search"). Without OneTenant, every tenant's.
	OneTenant bool
	Tenant    string
	// Hold overrides DefaultLateSettleHold when positive.
	Hold time.Duration
	// Times is how a CSV export (ExportCSV, ExportShadowCSV) writes
	// times; JSONL exports always write TimesExact.
	Times TimeFormat
	// Decimal is how a CSV export (ExportCSV, ExportShadowCSV) writes its
	// decimals and separates its fields; JSONL exports always write
	// decimals as recorded.
	Decimal Decimal
	// AsOf, when not 0, reads the book up to this position (the one an
	// earlier export or report said it was as of), and AsOfTime, when not
	// zero, up to the last revision stored at or before it: the rows as
	// they stood then (closed or open), the same however often the export
	// runs. Rows, MetadataKeys and the reservation exports take them.
	AsOf     uint64
	AsOfTime time.Time
	// denialsUntil, when not zero, leaves out the denial and check
	// records of a later time (Reader.Report as of a position or time).
	denialsUntil time.Time
	// MetadataColumns, when not nil, are a CSV export's metadata
	// columns, in this order, whether or not any row sets them, and no
	// others: a spreadsheet template's columns stay where they are from
	// one month's file to the next. Nil: one per key seen, sorted.
	MetadataColumns []string
}

// errPastAsOf ends a read at the first revision stored after
// Filter.AsOfTime.
var errPastAsOf = errors.New("report: past the as-of time")

// read is the projector's Read bounded by until (0: the last message as
// of the call) and by f's AsOf and AsOfTime. It returns the position read
// up to: with AsOfTime, that of the last revision stored at or before it
// (0 if none).
func (p *Reader) read(ctx context.Context, f Filter, until uint64, fn func(projector.Message) error) (uint64, error) {
	if f.AsOf > 0 && (until == 0 || f.AsOf < until) {
		until = f.AsOf
	}
	if f.AsOfTime.IsZero() {
		return p.p.Read(ctx, until, fn)
	}
	var last uint64
	pos, err := p.p.Read(ctx, until, func(m projector.Message) error {
		if m.At.After(f.AsOfTime) {
			return errPastAsOf
		}
		last = m.Seq
		return fn(m)
	})
	if errors.Is(err, errPastAsOf) {
		return last, nil
	}
	return pos, err
}

// view is r as an export of f writes it: as its scope sees it (seenBy)
// when f names one scope, so that the rows of a scope's export sum to its
// balances where its budgets hold or were charged other amounts than the
// reservation's other scopes.
func (f Filter) view(r *Row) *Row {
	if len(f.Scopes) == 1 {
		return r.seenBy(f.Scopes[0])
	}
	return r
}

// selects reports whether a reservation opened with ev is in the filter.
func (f Filter) selects(ev events.ReservationOpened) bool {
	if !f.From.IsZero() && ev.At.Before(f.From) {
		return false
	}
	if !f.To.IsZero() && !ev.At.Before(f.To) {
		return false
	}
	// An admit qualifies all its scopes by one tenant.
	if f.OneTenant && ev.Balance.Scope.Tenant() != f.Tenant {
		return false
	}
	if len(f.Scopes) == 0 {
		return true
	}
	for _, b := range ev.Balances {
		if slices.Contains(f.Scopes, b.Scope) {
			return true
		}
	}
	return false
}

func (f Filter) hold() time.Duration {
	if f.Hold > 0 {
		return f.Hold
	}
	return DefaultLateSettleHold
}

// Row is one reservation as an export writes it: its whole lifecycle
// across every balance it was admitted in, flattened.
type Row struct {
	// ReservationID and RequestID name the reservation and its admit.
	ReservationID, RequestID string
	// Scopes are the distinct scopes of Balances, in the order Balances
	// names them; Balances every balance it was admitted in.
	Scopes   []events.Scope
	Balances []events.BalanceRef
	// Unit is the admit's (a row of a reservation in money and count
	// budgets, requests, is the money's). Reserved is what its money
	// budgets hold for it: the admit's amount, or where a budget's fixed
	// slot or learned reservation holds another amount than the rest, the
	// most any of them holds (what one scope holds is ReservedIn's). A
	// row of count budgets alone has the count. Actual and Overrun below
	// are the money part's settle's likewise.
	Unit     string
	Reserved events.Money
	// reserved is what each scope's money budgets hold, set only when
	// some scope holds another amount than Reserved.
	reserved []scopeAmount
	// Count is the count its count budgets (requests) hold for it, the
	// admit's count, which a settle charges them in full and a release
	// gives back; nil when it names no count budget.
	Count *events.Money
	// OpenedAt and ExpiresAt come from ReservationOpened. SettledAt is the
	// settle's At, ReleasedAt a release's At with reason "released",
	// ExpiredAt the sweeper's release's At (reason "expired"); zero when
	// it did not happen.
	OpenedAt, ExpiresAt, SettledAt, ReleasedAt, ExpiredAt time.Time
	// Status is events.StatusOpen while any balance holds it, else
	// StatusSettled if it was settled (after expiry too), else
	// StatusExpired or StatusReleased.
	Status string
	// Settled says Actual, Overrun and Excess are set (by a settle).
	// Actual is what the settle said the call cost (the settle's reply's
	// actual), Excess the part of it a budget with an exposure cap was
	// not charged (zero when every budget was charged in full: the most
	// any of its budgets left out), Overrun what a budget was charged
	// above the reservation (the most, over its budgets; where they hold
	// different amounts, that of the budgets holding Reserved: see
	// refreshOverrun). What one scope was charged is ChargedIn's.
	Settled                 bool
	Actual, Overrun, Excess events.Money
	// Note is the settle's note (events.SettleRequest.Note): how its
	// caller knew the actual ("" when it said nothing).
	Note string
	// charged is what each scope was charged, set only when the scopes'
	// budgets were charged differently (an exposure cap in some of them).
	charged []scopeCharge
	// Late: the settle arrived after ExpiresAt.
	Late bool
	// ReleaseReason is events.ReasonReleased or ReasonExpired, or "".
	ReleaseReason string
	// Metadata is the admit's metadata, as recorded, with the priced
	// model under "model" when the admit was priced from a model and its
	// metadata names none (see MetadataModel): what reports group by and
	// exports write.
	Metadata map[string]string
	// Pricing is the price quote of a reservation priced from a model
	// (model, price version, prices, tokens), nil otherwise; Usage the
	// usage its settle gave, nil for a settle with an actual.
	Pricing *events.PriceQuote
	Usage   *events.Usage
}

// charge is what one scope's budgets were charged by a settle: the
// event's actual (excess left out) and overrun, the most over the
// scope's money budgets.
type charge struct{ actual, overrun events.Money }

// scopeCharge is what one scope was charged.
type scopeCharge struct {
	scope events.Scope
	charge
}

// scopeAmount is what one scope's money budgets hold for a reservation:
// the most over them.
type scopeAmount struct {
	scope  events.Scope
	amount events.Money
}

// Tenant is the tenant whose scopes the row's reservation was admitted in
// ("" for the untenanted deployment's).
func (r *Row) Tenant() string {
	if len(r.Scopes) == 0 {
		return ""
	}
	return r.Scopes[0].Tenant()
}

// ReservedIn returns what scope s's money budgets hold for the row's
// reservation (the most over them, as a scope's budgets of two periods
// may hold different amounts): Reserved unless a fixed slot or a learned
// reservation holds another amount in some budget.
func (r *Row) ReservedIn(s events.Scope) events.Money {
	for _, h := range r.reserved {
		if h.scope == s {
			return h.amount
		}
	}
	return r.Reserved
}

// ChargedIn returns what scope s was charged for the row's settle: the
// spend and overrun its budget counts. It is Actual and Overrun unless a
// budget of s with an exposure cap left part of the cost out (Excess).
func (r *Row) ChargedIn(s events.Scope) (spent, overrun events.Money) {
	for _, c := range r.charged {
		if c.scope == s {
			return c.actual, c.overrun
		}
	}
	return r.Actual, r.Overrun
}

// MetadataModel is the metadata key under which a reservation priced from
// a model is reported and exported when its admit's metadata does not set
// it: the model is in the reservation's price quote, and report --by model
// must count it under its model, not under "".
const MetadataModel = "model"

// rowMetadata is the metadata of ev's row: the admit's, plus the priced
// model under MetadataModel when the metadata has no such key. The
// event's map is never modified (it may be shared).
func rowMetadata(ev events.ReservationOpened) map[string]string {
	if ev.Pricing == nil || ev.Pricing.Model == "" {
		return ev.Metadata
	}
	if _, set := ev.Metadata[MetadataModel]; set {
		return ev.Metadata
	}
	m := make(map[string]string, len(ev.Metadata)+1)
	maps.Copy(m, ev.Metadata)
	m[MetadataModel] = ev.Pricing.Model
	return m
}

// partState is one balance's lifecycle of a tracked reservation.
type partState uint8

const (
	partOpen partState = iota + 1
	partSettled
	partReleased
	partExpired // released by the sweeper, no late settle yet
	partExpiredSettled
)

// part is one balance's state of a tracked reservation.
type part struct {
	ref   events.BalanceRef
	state partState
}

// parts are a tracked reservation's balances that an event named, in the
// order it named them: a reservation names a few balances, so a slice
// scanned costs less than a map per reservation (a map was a sixth of a
// report's fold, BenchmarkAggregate_Fold).
type parts []part

// get returns the state of the part in balance ref (0: none yet).
func (ps parts) get(ref events.BalanceRef) partState {
	for i := range ps {
		if ps[i].ref == ref {
			return ps[i].state
		}
	}
	return 0
}

// set sets the state of the part in balance ref, adding it if new.
func (ps *parts) set(ref events.BalanceRef, s partState) {
	for i := range *ps {
		if (*ps)[i].ref == ref {
			(*ps)[i].state = s
			return
		}
	}
	*ps = append(*ps, part{ref: ref, state: s})
}

// tracked is a reservation the export has not written yet.
type tracked struct {
	row   Row
	parts parts
	// counts are the parts in a count unit (requests): the row's unit,
	// amount and actual are those of its money parts when it has any,
	// whichever part an event names first.
	counts []events.BalanceRef
	// moneySettled: a money part has settled (and set the row); charges
	// are what each scope's money parts were charged.
	moneySettled bool
	charges      []scopeCharge
	// holds are what each scope's money parts hold (hold).
	holds []scopeAmount
	order uint64 // opening order, for the rows written at the end
	held  bool   // every part closed, some expired: waiting for a late settle
}

// settle folds a settle of the row's part in balance ref. The row's
// Actual is the cost as the caller gave it (the event's actual plus its
// excess); a money part's settle sets the row, a count part's only while
// no other part has. What each scope was charged is kept apart when the
// scopes' budgets were charged differently.
func (t *tracked) settle(ref events.BalanceRef, ev events.ReservationSettled) {
	r := &t.row
	excess := events.Zero
	if ev.Excess != nil {
		excess = *ev.Excess
	}
	cost := ev.Actual.Add(excess)
	if slices.Contains(t.counts, ref) {
		if !r.Settled {
			r.Settled, r.Actual, r.Overrun, r.Excess, r.Usage, r.Note = true, cost, ev.Overrun, excess, ev.Usage, ev.Note
		}
		return
	}
	if !t.moneySettled {
		t.moneySettled = true
		r.Settled, r.Actual, r.Overrun, r.Excess, r.Note = true, cost, ev.Overrun, excess, ev.Note
	} else {
		r.Actual, r.Overrun, r.Excess = maxMoney(r.Actual, cost), maxMoney(r.Overrun, ev.Overrun), maxMoney(r.Excess, excess)
	}
	r.Usage = ev.Usage
	c := scopeCharge{scope: ref.Scope, charge: charge{ev.Actual, ev.Overrun}}
	i := slices.IndexFunc(t.charges, func(o scopeCharge) bool { return o.scope == ref.Scope })
	if i < 0 {
		t.charges = append(t.charges, c)
	} else {
		o := &t.charges[i].charge
		o.actual, o.overrun = maxMoney(o.actual, c.actual), maxMoney(o.overrun, c.overrun)
	}
	t.refreshOverrun()
	t.refreshCharged()
}

// refreshOverrun sets the row's Overrun, where its scopes hold different
// amounts (a fixed slot, a learned reservation), to what the scopes
// holding its Reserved were charged above it, so that the row reads as
// one budget's (reserved, then overrun above it), not the most hold
// beside another budget's overrun; what each scope was charged stays
// ChargedIn's. Until one of those scopes has settled, the most over the
// scopes that have.
func (t *tracked) refreshOverrun() {
	r := &t.row
	if r.reserved == nil || !t.moneySettled {
		return
	}
	var most *events.Money
	for _, h := range t.holds {
		if h.amount.Cmp(r.Reserved) != 0 {
			continue
		}
		for _, c := range t.charges {
			if c.scope == h.scope && (most == nil || c.overrun.Cmp(*most) > 0) {
				o := c.overrun
				most = &o
			}
		}
	}
	if most != nil {
		r.Overrun = *most
	}
}

// seenBy is r as scope s's budgets hold and were charged it: Reserved
// ReservedIn's, Overrun ChargedIn's, and Excess what s was not charged of
// Actual. An export of one scope writes its rows so, and they sum to the
// scope's balances.
func (r *Row) seenBy(s events.Scope) *Row {
	if r.reserved == nil && r.charged == nil {
		return r
	}
	v := *r
	v.Reserved = r.ReservedIn(s)
	if r.Settled {
		spent, overrun := r.ChargedIn(s)
		v.Overrun, v.Excess = overrun, r.Actual.Sub(spent)
	}
	return &v
}

// hold folds what a money part of the row's, in scope, holds: the row's
// Reserved is the most any part holds, and what each scope holds is kept
// apart when the scopes hold different amounts.
func (t *tracked) hold(scope events.Scope, amount events.Money) {
	r := &t.row
	if len(t.holds) == 0 {
		r.Reserved = amount
	} else {
		r.Reserved = maxMoney(r.Reserved, amount)
	}
	i := slices.IndexFunc(t.holds, func(h scopeAmount) bool { return h.scope == scope })
	if i < 0 {
		t.holds = append(t.holds, scopeAmount{scope, amount})
	} else {
		t.holds[i].amount = maxMoney(t.holds[i].amount, amount)
	}
	t.refreshReserved()
	if t.moneySettled {
		t.refreshOverrun()
		t.refreshCharged()
	}
}

// refreshReserved sets the row's holds by scope: none while every scope
// holds the row's Reserved, else t.holds.
func (t *tracked) refreshReserved() {
	r := &t.row
	r.reserved = nil
	for _, h := range t.holds {
		if h.amount.Cmp(r.Reserved) != 0 {
			r.reserved = slices.Clone(t.holds)
			return
		}
	}
}

// refreshCharged sets the row's charges by scope: none while every scope
// was charged the row's Actual and Overrun, else t.charges.
func (t *tracked) refreshCharged() {
	r := &t.row
	r.charged = nil
	for _, c := range t.charges {
		if c.actual.Cmp(r.Actual) != 0 || c.overrun.Cmp(r.Overrun) != 0 {
			r.charged = t.charges
			return
		}
	}
}

func maxMoney(a, b events.Money) events.Money {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// done reports whether every balance the reservation names has closed and
// none waits for a late settle; held whether every one closed but some
// expired part has not been settled.
func (t *tracked) state() (closed, waiting bool) {
	if len(t.parts) < len(t.row.Balances) {
		return false, false
	}
	for _, p := range t.parts {
		switch p.state {
		case partOpen:
			return false, false
		case partExpired:
			waiting = true
		}
	}
	return true, waiting
}

func (t *tracked) refreshStatus() {
	var has [partExpiredSettled + 1]bool
	for _, p := range t.parts {
		has[p.state] = true
	}
	switch {
	case has[partOpen] || len(t.parts) < len(t.row.Balances):
		t.row.Status = events.StatusOpen
	case has[partSettled] || has[partExpiredSettled]:
		t.row.Status = events.StatusSettled
	case has[partExpired]:
		t.row.Status = events.StatusExpired
	default:
		t.row.Status = events.StatusReleased
	}
}

// heldEntry is an expired reservation waiting for a late settle until
// deadline (a message timestamp).
type heldEntry struct {
	t        *tracked
	deadline time.Time
}

// rowFold is the streaming fold of an export: it keeps only the
// reservations it has not written yet (those open, and those expired and
// within their late-settle hold), so its memory is bounded by what is
// live, not by the number of rows.
type rowFold struct {
	f     Filter
	live  map[string]*tracked
	held  []heldEntry // FIFO, deadlines non-decreasing (stream order)
	order uint64
	emit  func(*Row) error
	// keys collects metadata keys of selected reservations in
	// collectKeys.
	keys map[string]struct{}
	// chain is the last revision folded per lane key (sequence and payload
	// hash), so that an export stops on a gap or a fork as a replay does.
	chain map[string]events.Chain
}

func newRowFold(f Filter, emit func(*Row) error) *rowFold {
	return &rowFold{f: f, live: map[string]*tracked{}, emit: emit, chain: map[string]events.Chain{}}
}

// decodeLane reads a lane revision of version 1 or 2 for an export and, for
// version 2, checks that it follows the last revision of its key folded (a
// gap or a fork is an projector.ErrChain error, as in a replay): an export is never
// built from a book that a replay would refuse.
func (rf *rowFold) decodeLane(m message) (*events.LaneRevision, error) {
	var rev events.LaneRevision
	if m.rev != nil && m.rev.Lane != nil {
		rev = *m.rev.Lane // decoded by the gate
	} else {
		if err := projector.DecodeStrict(m.data, &rev); err != nil {
			return nil, err
		}
		if err := events.UpcastLane(&rev); err != nil {
			return nil, projector.Errorf(projector.ErrMalformed, "%v", err)
		}
	}
	last := rf.chain[m.key]
	if rev.Chained() {
		if err := events.CheckChain(m.key, m.seq, rev.Chain, last.Prev, last.PrevHash); err != nil {
			return nil, fmt.Errorf("%w: %w", projector.ErrChain, err)
		}
	}
	hash := ""
	if m.rev != nil {
		hash = m.rev.Hash // the gate hashed it (a replica's own write has no payload here)
	} else {
		hash = events.HashPayload(m.data)
	}
	rf.chain[m.key] = events.Chain{Prev: m.seq, PrevHash: hash}
	return &rev, nil
}

// keysOnly is what the first pass of a CSV export reads of a lane
// revision: the events, undecoded.
type keysOnly struct {
	Balances []struct {
		Events []json.RawMessage `json:"events"`
	} `json:"balances"`
}

// openedPrefix starts every encoded ReservationOpened (the encoder writes
// the type first); an event that does not start with it or with another
// type is decoded in full to be sure.
var openedPrefix = []byte(`{"type":"` + string(events.TypeReservationOpened) + `"`)

// collectKeys is the first pass of a CSV export: it adds the metadata keys
// of the reservations the filter selects and decodes nothing else. It does
// not verify the revision: the second pass reads it strictly.
func (rf *rowFold) collectKeys(m message) error {
	if !streams.IsLaneKey(m.key) {
		return nil
	}
	var rev keysOnly
	if err := json.Unmarshal(m.data, &rev); err != nil {
		return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: projector.Errorf(projector.ErrMalformed, "decode: %v", err)}
	}
	for _, b := range rev.Balances {
		for _, raw := range b.Events {
			if !bytes.HasPrefix(raw, openedPrefix) && bytes.HasPrefix(raw, []byte(`{"type":"`)) {
				continue // another event type
			}
			e, err := events.DecodeEvent(raw)
			if err != nil {
				return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: projector.Errorf(projector.ErrMalformed, "decode: %v", err)}
			}
			if ev, ok := e.(events.ReservationOpened); ok && rf.f.selects(ev) {
				for k := range rowMetadata(ev) {
					rf.keys[k] = struct{}{}
				}
			}
		}
	}
	return nil
}

// apply folds one stream message. Its events come before the holds it
// ends: a late settle in the first revision written after a hold's
// deadline still finds its reservation (the ledger accepts it when no
// revision came between to make it forget the reservation, as after a
// quiet period longer than the hold).
func (rf *rowFold) apply(m message) error {
	if err := rf.applyEvents(m); err != nil {
		return err
	}
	return rf.expireHolds(m.at)
}

func (rf *rowFold) applyEvents(m message) error {
	switch {
	case streams.IsLaneKey(m.key):
	case streams.IsBalanceKey(m.key):
		return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: projector.Errorf(projector.ErrMalformed, "balance key outside a lane: a stream of an older layout")}
	default:
		return nil
	}
	rev, err := rf.decodeLane(m)
	if err != nil {
		return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: err}
	}
	for i := range rev.Balances {
		br := &rev.Balances[i]
		for j, e := range br.Events {
			if err := rf.event(m, br.Balance, e); err != nil {
				return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: fmt.Errorf("balance %s: event %d (%s): %w", br.Balance, j, projector.EventType(e), err)}
			}
		}
	}
	return nil
}

// event folds one reservation event of balance ref.
func (rf *rowFold) event(m message, ref events.BalanceRef, e events.Event) error {
	switch ev := e.(type) {
	case events.ReservationOpened:
		if !rf.f.selects(ev) {
			return nil
		}
		t := rf.live[ev.ReservationID]
		if t == nil {
			rf.order++
			t = &tracked{
				row: Row{
					ReservationID: ev.ReservationID, RequestID: ev.RequestID,
					Balances: slices.Clone(ev.Balances), Unit: ev.Unit, Reserved: ev.Amount,
					OpenedAt: ev.At, ExpiresAt: ev.ExpiresAt, Metadata: rowMetadata(ev), Pricing: ev.Pricing,
				},
				parts: make(parts, 0, len(ev.Balances)),
				order: rf.order,
			}
			for _, b := range ev.Balances {
				if !slices.Contains(t.row.Scopes, b.Scope) {
					t.row.Scopes = append(t.row.Scopes, b.Scope)
				}
			}
			rf.live[ev.ReservationID] = t
		}
		if t.parts.get(ref) != 0 {
			return projector.Errorf(projector.ErrTransition, "reservation %s opened twice in balance %s", ev.ReservationID, ref)
		}
		if events.IsCount(ev.Unit) {
			t.counts = append(t.counts, ref)
			if t.row.Count == nil {
				c := ev.Amount
				t.row.Count = &c
			}
		} else {
			if events.IsCount(t.row.Unit) {
				// The money part of a reservation whose count part
				// came first: the row is the money's.
				t.row.Unit, t.row.Reserved = ev.Unit, ev.Amount
			}
			t.hold(ref.Scope, ev.Amount)
		}
		t.parts.set(ref, partOpen)
		t.refreshStatus()
		return nil
	case events.ReservationSettled:
		t := rf.live[ev.ReservationID]
		if t == nil {
			return nil // not selected (or its row was written after its hold)
		}
		p := t.parts.get(ref)
		switch {
		case p == partOpen && !ev.AfterExpiry:
			t.parts.set(ref, partSettled)
		case p == partExpired && ev.AfterExpiry:
			t.parts.set(ref, partExpiredSettled)
		default:
			return projector.Errorf(projector.ErrTransition, "settle of reservation %s in balance %s in an impossible state", ev.ReservationID, ref)
		}
		t.settle(ref, ev)
		if ev.At.After(t.row.SettledAt) {
			t.row.SettledAt = ev.At
		}
		t.row.Late = t.row.Late || ev.Late
	case events.ReservationReleased:
		t := rf.live[ev.ReservationID]
		if t == nil {
			return nil
		}
		if t.parts.get(ref) != partOpen {
			return projector.Errorf(projector.ErrTransition, "release of reservation %s, which is not open in balance %s", ev.ReservationID, ref)
		}
		t.row.ReleaseReason = ev.Reason
		if ev.Reason == events.ReasonExpired {
			t.parts.set(ref, partExpired)
			if ev.At.After(t.row.ExpiredAt) {
				t.row.ExpiredAt = ev.At
			}
		} else {
			t.parts.set(ref, partReleased)
			if ev.At.After(t.row.ReleasedAt) {
				t.row.ReleasedAt = ev.At
			}
		}
	default:
		return nil
	}
	id := eventReservation(e)
	t := rf.live[id]
	t.refreshStatus()
	closed, waiting := t.state()
	switch {
	case closed && !waiting:
		delete(rf.live, id)
		t.held = false
		return rf.write(t)
	case closed && waiting && !t.held:
		t.held = true
		rf.held = append(rf.held, heldEntry{t: t, deadline: m.at.Add(rf.f.hold())})
	}
	return nil
}

func eventReservation(e events.Event) string {
	switch ev := e.(type) {
	case events.ReservationSettled:
		return ev.ReservationID
	case events.ReservationReleased:
		return ev.ReservationID
	}
	return ""
}

// expireHolds writes the rows of held reservations whose hold ended
// before now.
func (rf *rowFold) expireHolds(now time.Time) error {
	for len(rf.held) > 0 && rf.held[0].deadline.Before(now) {
		h := rf.held[0]
		rf.held[0] = heldEntry{}
		rf.held = rf.held[1:]
		if !h.t.held || rf.live[h.t.row.ReservationID] != h.t {
			continue // written when its late settle arrived
		}
		delete(rf.live, h.t.row.ReservationID)
		if err := rf.write(h.t); err != nil {
			return err
		}
	}
	if len(rf.held) == 0 {
		rf.held = nil // let the backing array go
	}
	return nil
}

func (rf *rowFold) write(t *tracked) error {
	if rf.emit == nil {
		return nil
	}
	return rf.emit(&t.row)
}

// finish writes every reservation not written yet (open, or expired and
// within its hold) in the order they opened.
func (rf *rowFold) finish() error {
	rest := make([]*tracked, 0, len(rf.live))
	for _, t := range rf.live {
		rest = append(rest, t)
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].order < rest[j].order })
	rf.live, rf.held = map[string]*tracked{}, nil
	for _, t := range rest {
		if err := rf.write(t); err != nil {
			return err
		}
	}
	return nil
}

// Rows reads the ledger stream from its first message to its last as of
// the call and hands fn every reservation that f selects, once, as a Row:
//
//   - when it closes in every balance it was admitted in (the stream
//     order of the revision that closed it last), settled or released;
//   - an expired reservation when a late settle arrives, or when its
//     late-settle hold (f.Hold) has passed on the stream's clock;
//   - then, at the end, every reservation still open or still held, in
//     the order they opened.
//
// Memory is bounded by the reservations not yet handed over (open ones and
// expired ones within their hold), never by the number of rows. fn must
// not keep the *Row. Rows does not verify the book (audit check does) and
// does not change the projector's state. It returns the stream position
// it read up to.
//
// It returns the stream lookup or consumer error, ctx's error, an
// *projector.ApplyError for a message it cannot read as a lane revision or an
// impossible transition, or fn's error.
func (p *Reader) Rows(ctx context.Context, f Filter, fn func(*Row) error) (uint64, error) {
	return p.rows(ctx, f, 0, fn)
}

// rows is Rows up to until (0: the last message as of the call).
func (p *Reader) rows(ctx context.Context, f Filter, until uint64, fn func(*Row) error) (uint64, error) {
	rf := newRowFold(f, fn)
	pos, err := p.read(ctx, f, until, func(m projector.Message) error { return rf.apply(fromProjector(m)) })
	if err != nil {
		return 0, err
	}
	return pos, rf.finish()
}

// MetadataKeys reads the stream up to its last message as of the call (or
// f's AsOf or AsOfTime) and
// returns the sorted union of the metadata keys of the reservations f
// selects, and the position it read up to. It keeps only the keys (at
// most events.MaxMetadata per reservation), so its memory is bounded by
// the number of distinct keys.
func (p *Reader) MetadataKeys(ctx context.Context, f Filter) ([]string, uint64, error) {
	rf := newRowFold(f, nil)
	rf.keys = map[string]struct{}{}
	last, err := p.read(ctx, f, 0, func(m projector.Message) error { return rf.collectKeys(fromProjector(m)) })
	if err != nil {
		return nil, 0, err
	}
	keys := make([]string, 0, len(rf.keys))
	for k := range rf.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, last, nil
}
