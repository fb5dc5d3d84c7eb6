package report

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spendgate/spendgate/events"
)

// AggregateFormat and AggregateVersion name the encoding of an Aggregate's
// snapshot (MarshalJSON). Version 2 added the roll-up of old hours into
// days (latest, day_before); a version 1 snapshot reads as one with
// nothing rolled up. Version 3 marks the count parts of the reservations
// it follows (a reservation in a money budget and a count budget counts
// in its money). A version 1 or 2 snapshot still loads, so that a replica
// on a trimmed stream can start: its sums counted such a reservation in
// the unit of its first part, and they stay as they were; the replay
// (spendgate report --replay) counts them in their money. A binary that
// knows only version 2 refuses version 3 and folds the stream. Version 4
// keeps what each scope of a reservation was charged (Row.ChargedIn) and
// a row's actual as the caller gave it (excess included); a reservation
// half settled in a version 3 snapshot goes on as it was recorded.
// Version 5 keeps the tracked metadata keys and values per tenant
// (slots); a version 4 snapshot's, shared by every tenant, become each
// tenant's it counted. Version 6 keeps what each scope of a reservation
// holds (Row.ReservedIn) where a fixed slot or a learned reservation makes
// them differ; a reservation open in an earlier snapshot goes on counting
// the amount it was recorded with in every scope. Version 7 tracks
// MaxReportValues scopes per scope kind instead of MaxReportValues scopes
// in all (the values written are the same, the count per kind is made
// when read) and keeps what an earlier snapshot had counted in the one
// Other group of scopes (legacy_until, legacy: see legacyScopes); an
// earlier snapshot's tenant that had counted scopes there gets them when
// loaded (upgradeSlots).
const (
	AggregateFormat  = "spendgate.report"
	AggregateVersion = 7
)

// aggSlots is one tenant's slots (version 5). LegacyUntil and Legacy are
// its legacyScopes' until and known, sorted (version 7; none when
// LegacyUntil is 0).
type aggSlots struct {
	Tenant      string              `json:"tenant"`
	Keys        []string            `json:"keys"`
	OverKeys    bool                `json:"over_keys,omitempty"`
	Values      map[string][]string `json:"values"`
	LegacyUntil int64               `json:"legacy_until,omitempty"`
	Legacy      []string            `json:"legacy,omitempty"`
}

func (t *tenantSlots) marshal(tenant string) aggSlots {
	out := aggSlots{Tenant: tenant, OverKeys: t.overKeys, Values: map[string][]string{}}
	if l := t.legacy; l != nil {
		out.LegacyUntil = l.until
		out.Legacy = make([]string, 0, len(l.known))
		for v := range l.known {
			out.Legacy = append(out.Legacy, v)
		}
		slices.Sort(out.Legacy)
	}
	for k := range t.keys {
		out.Keys = append(out.Keys, k)
	}
	slices.Sort(out.Keys)
	for d, vs := range t.values {
		l := make([]string, 0, len(vs))
		for v := range vs {
			l = append(l, v)
		}
		slices.Sort(l)
		out.Values[d] = l
	}
	return out
}

// tenantSlotsOf reads what marshal wrote (or a version 4 snapshot's
// shared slots) in a snapshot of version, checking the limits: before
// version 7, MaxReportValues scopes in all; from it, MaxReportValues per
// kind, of at most MaxReportValues kinds (MaxReportKinds, or the kinds
// among the scopes an earlier snapshot left).
func tenantSlotsOf(keys []string, overKeys bool, values map[string][]string, version int) (*tenantSlots, error) {
	if len(keys) > MaxReportKeys {
		return nil, fmt.Errorf("report: report snapshot: %d metadata keys tracked, more than %d", len(keys), MaxReportKeys)
	}
	t := newTenantSlots()
	t.overKeys = overKeys
	for _, k := range keys {
		t.track(k)
	}
	for d, vs := range values {
		if len(vs) > MaxReportValues && (d != dimScope || version < 7) {
			return nil, fmt.Errorf("report: report snapshot: %d values of %s tracked, more than %d", len(vs), d, MaxReportValues)
		}
		m := make(map[string]bool, len(vs))
		for _, v := range vs {
			m[v] = true
		}
		t.values[d] = m
	}
	t.countKinds()
	if len(t.kinds) > MaxReportValues {
		return nil, fmt.Errorf("report: report snapshot: scopes of %d kinds tracked, more than %d", len(t.kinds), MaxReportValues)
	}
	for kind, n := range t.kinds {
		if n > MaxReportValues {
			return nil, fmt.Errorf("report: report snapshot: %d scopes of kind %q tracked, more than %d", n, kind, MaxReportValues)
		}
	}
	return t, nil
}

type aggPart struct {
	Balance events.BalanceRef `json:"balance"`
	State   partState         `json:"state"`
	// Count marks a part in a count unit (tracked.counts).
	Count bool `json:"count,omitempty"`
}

type aggTracked struct {
	Row   Row       `json:"row"`
	Parts []aggPart `json:"parts"`
	Order uint64    `json:"order"`
	Held  bool      `json:"held,omitempty"`
	// MoneySettled and Charges are tracked's (version 4).
	MoneySettled bool        `json:"money_settled,omitempty"`
	Charges      []aggCharge `json:"charges,omitempty"`
	// Holds are tracked's (version 6).
	Holds []aggHold `json:"holds,omitempty"`
}

type aggHold struct {
	Scope  events.Scope `json:"scope"`
	Amount events.Money `json:"amount"`
}

type aggCharge struct {
	Scope   events.Scope `json:"scope"`
	Actual  events.Money `json:"actual"`
	Overrun events.Money `json:"overrun"`
}

type aggHeld struct {
	ID       string    `json:"id"`
	Deadline time.Time `json:"deadline"`
}

type aggCell struct {
	Bucket int64 `json:"bucket"`
	groupKey
	cell
}

// UnmarshalJSON reads a cell as MarshalJSON wrote it. Its sums add up
// many reservations of many budgets, so they may pass the 18 integer
// digits of one amount (events.Money's own decoding): they are read with
// events.ParseSum, or a replica could never load the snapshot again.
func (c *aggCell) UnmarshalJSON(b []byte) error {
	var j struct {
		Bucket int64 `json:"bucket"`
		groupKey
		Reservations, Open, Settled, Released, Expired, Late int64
		Spend, Overrun, Reserved                             string
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = aggCell{Bucket: j.Bucket, groupKey: j.groupKey, cell: cell{Reservations: j.Reservations, Open: j.Open,
		Settled: j.Settled, Released: j.Released, Expired: j.Expired, Late: j.Late}}
	for _, f := range []struct {
		to *events.Money
		s  string
	}{{&c.Spend, j.Spend}, {&c.Overrun, j.Overrun}, {&c.Reserved, j.Reserved}} {
		neg := strings.HasPrefix(f.s, "-")
		v, err := events.ParseSum(strings.TrimPrefix(f.s, "-"))
		if err != nil {
			return err
		}
		if neg {
			v = events.Zero.Sub(v)
		}
		*f.to = v
	}
	return nil
}

type aggChain struct {
	Key string `json:"key"`
	events.Chain
}

type aggSnapshot struct {
	Format  string       `json:"format"`
	Version int          `json:"version"`
	Seq     uint64       `json:"seq"`
	Order   uint64       `json:"order"`
	Chain   []aggChain   `json:"chain"`
	Live    []aggTracked `json:"live"`
	Held    []aggHeld    `json:"held"`
	// Slots are the tracked keys and values per tenant (version 5);
	// Keys, OverKeys and Values those shared by every tenant (versions 1
	// to 4, read only).
	Slots    []aggSlots          `json:"slots,omitempty"`
	Keys     []string            `json:"keys,omitempty"`
	OverKeys bool                `json:"over_keys,omitempty"`
	Values   map[string][]string `json:"values,omitempty"`
	Cells    []aggCell           `json:"cells"`
	// Latest and DayBefore are the Aggregate's latest and dayBefore
	// (unix seconds; version 2).
	Latest    int64 `json:"latest,omitempty"`
	DayBefore int64 `json:"day_before,omitempty"`
}

// MarshalJSON writes the whole Aggregate (its sums, the reservations it
// follows, and the chain of every lane it folded) at its position, in a
// deterministic order.
func (a *Aggregate) MarshalJSON() ([]byte, error) { return a.snapshotCopy().encode() }

// snapshotCopy copies what MarshalJSON writes, unsorted: what a later
// fold changes is not shared with it (rows and cells are copied by value;
// the maps and slices they hold are written once, when a reservation
// opens). encode sorts and encodes it, so that a replica writing a
// snapshot holds its book's lock only for the copy.
func (a *Aggregate) snapshotCopy() *aggSnapshot {
	rf := a.rf
	s := &aggSnapshot{Format: AggregateFormat, Version: AggregateVersion, Seq: a.pos, Order: rf.order,
		Latest: a.latest, DayBefore: a.dayBefore, Chain: make([]aggChain, 0, len(rf.chain)), Live: make([]aggTracked, 0, len(rf.live))}
	for k, c := range rf.chain {
		s.Chain = append(s.Chain, aggChain{Key: k, Chain: c})
	}
	for _, t := range rf.live {
		at := aggTracked{Row: t.row, Order: t.order, Held: t.held, MoneySettled: t.moneySettled}
		for _, c := range t.charges {
			at.Charges = append(at.Charges, aggCharge{Scope: c.scope, Actual: c.actual, Overrun: c.overrun})
		}
		for _, h := range t.holds {
			at.Holds = append(at.Holds, aggHold{Scope: h.scope, Amount: h.amount})
		}
		for _, p := range t.parts {
			at.Parts = append(at.Parts, aggPart{Balance: p.ref, State: p.state, Count: slices.Contains(t.counts, p.ref)})
		}
		s.Live = append(s.Live, at)
	}
	for _, h := range rf.held {
		if h.t.held && rf.live[h.t.row.ReservationID] == h.t {
			s.Held = append(s.Held, aggHeld{ID: h.t.row.ReservationID, Deadline: h.deadline})
		}
	}
	for tenant, t := range a.slots {
		s.Slots = append(s.Slots, t.marshal(tenant))
	}
	for _, b := range a.sorted {
		for k, c := range a.buckets[b] {
			s.Cells = append(s.Cells, aggCell{Bucket: b, groupKey: k, cell: *c})
		}
	}
	return s
}

// encode sorts s as MarshalJSON writes it (every part by what names it;
// cells by bucket, then group) and encodes it.
func (s *aggSnapshot) encode() ([]byte, error) {
	sort.Slice(s.Chain, func(i, j int) bool { return s.Chain[i].Key < s.Chain[j].Key })
	for i := range s.Live {
		ps := s.Live[i].Parts
		sort.Slice(ps, func(i, j int) bool { return ps[i].Balance.String() < ps[j].Balance.String() })
	}
	sort.Slice(s.Live, func(i, j int) bool { return s.Live[i].Order < s.Live[j].Order })
	sort.Slice(s.Slots, func(i, j int) bool { return s.Slots[i].Tenant < s.Slots[j].Tenant })
	sort.Slice(s.Cells, func(i, j int) bool {
		x, y := s.Cells[i], s.Cells[j]
		if x.Bucket != y.Bucket {
			return x.Bucket < y.Bucket
		}
		if x.Tenant != y.Tenant {
			return x.Tenant < y.Tenant
		}
		if x.Dim != y.Dim {
			return x.Dim < y.Dim
		}
		if x.Value != y.Value {
			return x.Value < y.Value
		}
		if x.Other != y.Other {
			return !x.Other
		}
		return x.Unit < y.Unit
	})
	return json.Marshal(s)
}

// UnmarshalAggregate reads what MarshalJSON wrote. An unknown format or
// version, or an inconsistent body, is an error.
func UnmarshalAggregate(data []byte) (*Aggregate, error) {
	var s aggSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("report: report snapshot: %w", err)
	}
	if s.Format != AggregateFormat || s.Version < 1 || s.Version > AggregateVersion {
		return nil, fmt.Errorf("report: report snapshot: format %q version %d, want %q version %d", s.Format, s.Version, AggregateFormat, AggregateVersion)
	}
	a := NewAggregate()
	a.pos, a.rf.order = s.Seq, s.Order
	a.latest, a.dayBefore = s.Latest, s.DayBefore
	for _, c := range s.Chain {
		a.rf.chain[c.Key] = c.Chain
	}
	for _, at := range s.Live {
		t := &tracked{row: at.Row, order: at.Order, held: at.Held, moneySettled: at.MoneySettled, parts: make(parts, 0, len(at.Parts))}
		for _, c := range at.Charges {
			t.charges = append(t.charges, scopeCharge{scope: c.Scope, charge: charge{c.Actual, c.Overrun}})
		}
		t.refreshCharged()
		for _, h := range at.Holds {
			t.holds = append(t.holds, scopeAmount{scope: h.Scope, amount: h.Amount})
		}
		t.refreshReserved()
		for _, p := range at.Parts {
			t.parts.set(p.Balance, p.State)
			if p.Count {
				t.counts = append(t.counts, p.Balance)
			}
		}
		if _, dup := a.rf.live[t.row.ReservationID]; dup {
			return nil, fmt.Errorf("report: report snapshot: reservation %s twice", t.row.ReservationID)
		}
		a.rf.live[t.row.ReservationID] = t
	}
	for _, h := range s.Held {
		t := a.rf.live[h.ID]
		if t == nil || !t.held {
			return nil, fmt.Errorf("report: report snapshot: held reservation %s is not followed", h.ID)
		}
		a.rf.held = append(a.rf.held, heldEntry{t: t, deadline: h.Deadline})
	}
	for _, ts := range s.Slots {
		if _, dup := a.slots[ts.Tenant]; dup {
			return nil, fmt.Errorf("report: report snapshot: slots of tenant %q twice", ts.Tenant)
		}
		t, err := tenantSlotsOf(ts.Keys, ts.OverKeys, ts.Values, s.Version)
		if err != nil {
			return nil, err
		}
		if ts.LegacyUntil != 0 {
			t.legacy = &legacyScopes{until: ts.LegacyUntil, known: make(map[string]bool, len(ts.Legacy))}
			for _, v := range ts.Legacy {
				t.legacy.known[v] = true
			}
		}
		a.slots[ts.Tenant] = t
	}
	for _, c := range s.Cells {
		cs := a.buckets[c.Bucket]
		if cs == nil {
			cs = map[groupKey]*cell{}
			a.buckets[c.Bucket] = cs
			a.sorted = append(a.sorted, c.Bucket)
		}
		cc := c.cell
		cs[c.groupKey] = &cc
	}
	if !slices.IsSorted(a.sorted) {
		return nil, fmt.Errorf("report: report snapshot: buckets out of order")
	}
	if s.Version < 5 {
		// The slots were shared: each tenant the sums count starts with
		// them, so that what it counted under a value (or under Other) is
		// found there again.
		shared, err := tenantSlotsOf(s.Keys, s.OverKeys, s.Values, s.Version)
		if err != nil {
			return nil, err
		}
		tenants := map[string]bool{"": true}
		for _, cs := range a.buckets {
			for k := range cs {
				tenants[k.Tenant] = true
			}
		}
		for tenant := range tenants {
			a.slots[tenant] = shared.clone()
		}
	}
	if s.Version == 1 && len(a.sorted) > 0 {
		// Hours only; the latest is at least the newest bucket's, and the
		// next message rolls up what is past the horizon.
		a.latest = a.sorted[len(a.sorted)-1]
	}
	if a.dayBefore%(24*60*60) != 0 || a.dayBefore > a.latest {
		return nil, fmt.Errorf("report: report snapshot: day_before %d is not a day at or before the latest hour %d", a.dayBefore, a.latest)
	}
	if s.Version < 7 {
		a.upgradeSlots()
	}
	return a, nil
}

// upgradeSlots makes the slots of a snapshot before version 7 (the first
// MaxReportValues scopes of every kind together, the rest counted in the
// one Other group) go on as per-kind slots. The scopes tracked stay
// tracked (countKinds made their counts per kind). A tenant that counted
// scopes in the one Other group keeps which scopes were tracked then and
// the end of the last bucket that group is in (legacyScopes), and each
// reservation it still follows with a scope counted there is moved to
// where that scope counts now (tracked, or its kind's Other group), in
// the order it was opened: the next change to it takes it out of there.
func (a *Aggregate) upgradeSlots() {
	const hour, day = 60 * 60, 24 * 60 * 60
	until := map[string]int64{}
	for b, cs := range a.buckets {
		end := b + hour
		if b < a.dayBefore {
			end = b + day
		}
		for k := range cs {
			if k.Dim == dimScope && k.Other && k.Value == "" {
				until[k.Tenant] = max(until[k.Tenant], end)
			}
		}
	}
	if len(until) == 0 {
		return
	}
	for tenant, u := range until {
		t := a.slots.of(tenant)
		known := make(map[string]bool, len(t.values[dimScope]))
		for v := range t.values[dimScope] {
			known[v] = true
		}
		t.legacy = &legacyScopes{until: u, known: known}
	}
	live := make([]*tracked, 0, len(a.rf.live))
	for _, t := range a.rf.live {
		live = append(live, t)
	}
	sort.Slice(live, func(i, j int) bool { return live[i].order < live[j].order })
	for _, tr := range live {
		r := &tr.row
		tenant := rowTenant(r)
		t := a.slots[tenant]
		if t == nil || t.legacy == nil {
			continue // every scope it counted is tracked
		}
		for _, s := range r.Scopes {
			if t.legacy.known[string(s)] {
				continue
			}
			v, other := a.slots.value(tenant, dimScope, string(s))
			if v == "" && other {
				continue // a kind past MaxReportKinds: still there
			}
			b := a.bucket(r.OpenedAt)
			cells := a.cells(b)
			spent, overrun := r.ChargedIn(s)
			touchCell(cells, groupKey{Tenant: tenant, Dim: dimScope, Other: true, Unit: r.Unit}, r, r.ReservedIn(s), spent, overrun, -1)
			touchCell(cells, groupKey{Tenant: tenant, Dim: dimScope, Value: v, Other: other, Unit: r.Unit}, r, r.ReservedIn(s), spent, overrun, +1)
			a.dropEmpty(b)
		}
	}
}
