package report

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spendgate/spendgate/events"
)

// Shadow and check decisions in reports. An admit in mode check or shadow
// reserves nothing and writes nothing to the ledger; each replica records
// its answer (events.AdmitChecked) on the denial stream, and reports count
// those records apart from real spend (SpendReport.Shadow), grouped as the
// spend is (by scope: once in every scope the admit named; by a metadata
// key: under the admit's value, "" when not set) and by mode and unit,
// with what the admitted would have reserved, what the denied asked, and
// the denied per reason. Like denial records they are operational data:
// kept for the denial stream's max age, lost if a replica crashes before
// publishing them, never read by the audit.

// ShadowGroup is one line of a report's shadow decisions: the check or
// shadow answers of one group value, mode and unit.
type ShadowGroup struct {
	// Value is the scope, or the metadata value ("" when the key is not
	// set); Other is set on an Other group (see AggregateReport.Other).
	Value string
	Other bool
	// Mode is events.ModeCheck or events.ModeShadow.
	Mode string
	Unit string
	// Admitted and Denied count the answers; Amount sums what the
	// admitted would have reserved and Asked what the denied asked.
	Admitted, Denied int64
	Amount, Asked    events.Money
	// Reasons counts the denied by reason.
	Reasons map[events.Code]int64
}

// Wire is g as the report endpoint answers it.
func (g ShadowGroup) Wire() events.ShadowGroup {
	return events.ShadowGroup{Value: g.Value, Other: g.Other, Mode: g.Mode, Unit: g.Unit,
		Admitted: g.Admitted, Denied: g.Denied, Amount: g.Amount.String(), Asked: g.Asked.String(), Reasons: maps.Clone(g.Reasons)}
}

// add counts c in g.
func (g *ShadowGroup) add(c *events.AdmitChecked) {
	amount, err := events.ParseMoney(c.Amount)
	if err != nil {
		amount = events.Zero
	}
	if c.Admitted {
		g.Admitted++
		g.Amount = g.Amount.Add(amount)
		return
	}
	g.Denied++
	g.Asked = g.Asked.Add(amount)
	if g.Reasons == nil {
		g.Reasons = map[events.Code]int64{}
	}
	g.Reasons[c.Reason()]++
}

// merge adds o's counts to g.
func (g *ShadowGroup) merge(o *ShadowGroup) {
	g.Admitted += o.Admitted
	g.Denied += o.Denied
	g.Amount = g.Amount.Add(o.Amount)
	g.Asked = g.Asked.Add(o.Asked)
	for r, n := range o.Reasons {
		if g.Reasons == nil {
			g.Reasons = map[events.Code]int64{}
		}
		g.Reasons[r] += n
	}
}

// checkOf decodes a check record and the selection it is counted under;
// ok is false for one that does not decode (a denial record among them).
func checkOf(data []byte) (events.AdmitChecked, denialKind, bool) {
	c, err := events.DecodeAdmitChecked(data)
	if err != nil {
		return c, denialKind{}, false
	}
	k := denialKind{tenant: c.Tenant, unit: c.Unit, metadata: c.Metadata}
	for _, s := range c.Scopes {
		st := events.TenantScope(c.Tenant, events.Scope(s))
		if !slices.Contains(k.scopes, st) {
			k.scopes = append(k.scopes, st)
		}
	}
	return c, k, true
}

// shadowKey is a shadow group in one bucket.
type shadowKey struct {
	groupKey
	Mode string
}

// shadowAggregate counts check records per (hour bucket, tenant,
// dimension, value, unit, mode), with the Aggregate's limits on keys and
// values, which it shares with the denial records (track). Not safe for
// concurrent use.
type shadowAggregate struct {
	buckets map[int64]map[shadowKey]*ShadowGroup
	newest  map[int64]uint64
	sorted  []int64
	track   *denialAggregate
}

func newShadowAggregate(track *denialAggregate) *shadowAggregate {
	return &shadowAggregate{buckets: map[int64]map[shadowKey]*ShadowGroup{}, newest: map[int64]uint64{}, track: track}
}

// apply counts the check record data at seq and reports whether it was
// one.
func (a *shadowAggregate) apply(seq uint64, data []byte) bool {
	c, k, ok := checkOf(data)
	if !ok {
		return false
	}
	b := bucketOf(c.At)
	cells := a.buckets[b]
	if cells == nil {
		cells = map[shadowKey]*ShadowGroup{}
		a.buckets[b] = cells
		i, _ := slices.BinarySearch(a.sorted, b)
		a.sorted = slices.Insert(a.sorted, i, b)
	}
	a.newest[b] = max(a.newest[b], seq)
	for _, g := range a.track.groupsOf(k) {
		key := shadowKey{g, c.Mode}
		cell := cells[key]
		if cell == nil {
			cell = &ShadowGroup{Value: g.Value, Other: g.Other, Mode: c.Mode, Unit: g.Unit}
			cells[key] = cell
		}
		cell.add(&c)
	}
	return true
}

// prune drops the buckets whose records all left the stream.
func (a *shadowAggregate) prune(first uint64) {
	for len(a.sorted) > 0 && a.newest[a.sorted[0]] < first {
		b := a.sorted[0]
		delete(a.buckets, b)
		delete(a.newest, b)
		a.sorted = a.sorted[1:]
	}
}

// groups sums the check records f selects (by its whole-hour bounds and
// tenant) grouped by, sorted (sortShadow). A metadata key the records did
// not track while others were dropped gives ErrKeyNotTracked.
func (a *shadowAggregate) groups(by GroupBy, f Filter) ([]ShadowGroup, error) {
	dim, err := a.track.dimOf(by, f)
	if err != nil {
		return nil, err
	}
	type gk struct {
		value      string
		other      bool
		unit, mode string
	}
	out := map[gk]*ShadowGroup{}
	totals := map[gk]*ShadowGroup{}
	into := func(m map[gk]*ShadowGroup, k gk, g *ShadowGroup) {
		if m[k] == nil {
			m[k] = &ShadowGroup{Value: k.value, Other: k.other, Unit: k.unit, Mode: k.mode, Amount: events.Zero, Asked: events.Zero}
		}
		m[k].merge(g)
	}
	for _, b := range bucketRange(a.sorted, f) {
		for k, g := range a.buckets[b] {
			if f.OneTenant && k.Tenant != f.Tenant {
				continue
			}
			switch k.Dim {
			case dim:
				into(out, gk{k.Value, k.Other, k.Unit, k.Mode}, g)
			case dimTotal:
				into(totals, gk{unit: k.Unit, mode: k.Mode}, g)
			}
		}
	}
	if !by.scope {
		// A metadata key's "" group: the records without the key.
		for k, g := range out {
			t := totals[gk{unit: k.unit, mode: k.mode}]
			t.Admitted -= g.Admitted
			t.Denied -= g.Denied
			t.Amount = t.Amount.Sub(g.Amount)
			t.Asked = t.Asked.Sub(g.Asked)
			for r, n := range g.Reasons {
				t.Reasons[r] -= n
				if t.Reasons[r] == 0 {
					delete(t.Reasons, r)
				}
			}
		}
		for k, t := range totals {
			if t.Admitted+t.Denied > 0 {
				into(out, gk{unit: k.unit, mode: k.mode}, t)
			}
		}
	}
	groups := make([]ShadowGroup, 0, len(out))
	for _, g := range out {
		groups = append(groups, *g)
	}
	sortShadow(groups)
	return groups, nil
}

// foldShadow counts the groups of the scopes fold maps to their kind's
// Other group there (see AggregateReport.fold), sorted again.
func foldShadow(gs []ShadowGroup, fold func(string) (string, bool)) []ShadowGroup {
	if fold == nil {
		return gs
	}
	type gk struct {
		value      string
		other      bool
		unit, mode string
	}
	at := map[gk]int{}
	out := gs[:0:0]
	for _, g := range gs {
		if !g.Other {
			g.Value, g.Other = fold(g.Value)
		}
		k := gk{g.Value, g.Other, g.Unit, g.Mode}
		if i, ok := at[k]; ok {
			out[i].merge(&g)
			continue
		}
		if g.Other {
			// merge adds to the group's own reasons: not those of gs.
			g.Reasons = maps.Clone(g.Reasons)
		}
		at[k] = len(out)
		out = append(out, g)
	}
	sortShadow(out)
	return out
}

// sortShadow sorts shadow groups by unit, then the most denied first, then
// by value (Other last), then mode.
func sortShadow(gs []ShadowGroup) {
	slices.SortFunc(gs, func(a, b ShadowGroup) int {
		switch {
		case a.Unit != b.Unit:
			return strings.Compare(a.Unit, b.Unit)
		case a.Denied != b.Denied:
			return int(b.Denied - a.Denied)
		case a.Other != b.Other:
			if a.Other {
				return 1
			}
			return -1
		case a.Value != b.Value:
			return strings.Compare(a.Value, b.Value)
		}
		return strings.Compare(a.Mode, b.Mode)
	})
}

// replayShadow reads the denial stream up to its last record as of the
// call and groups the check records f selects by (the replay's side of
// shadowAggregate.groups, without its limits).
func (p *Reader) replayShadow(ctx context.Context, f Filter, by GroupBy) ([]ShadowGroup, error) {
	agg := map[[3]string]*ShadowGroup{}
	add := func(value string, c *events.AdmitChecked) {
		k := [3]string{value, c.Unit, c.Mode}
		if agg[k] == nil {
			agg[k] = &ShadowGroup{Value: value, Unit: c.Unit, Mode: c.Mode, Amount: events.Zero, Asked: events.Zero}
		}
		agg[k].add(c)
	}
	err := p.eachCheck(ctx, f, func(c *events.AdmitChecked, k denialKind) error {
		if by.scope {
			for _, s := range k.scopes {
				add(string(s), c)
			}
			return nil
		}
		add(k.metadata[by.key], c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	groups := make([]ShadowGroup, 0, len(agg))
	for _, g := range agg {
		groups = append(groups, *g)
	}
	sortShadow(groups)
	return groups, nil
}

// eachCheck hands fn every check record of the denial stream (up to its
// last record as of the call) that f selects, in stream order; a missing
// stream has none.
func (p *Reader) eachCheck(ctx context.Context, f Filter, fn func(*events.AdmitChecked, denialKind) error) error {
	_, last, err := denialState(ctx, p.js, p.layout)
	if err != nil || last == 0 {
		return err
	}
	var ferr error
	err = readDenials(ctx, p.js, p.layout, p.check, 1, last, func(_ uint64, data []byte) {
		if ferr != nil {
			return
		}
		c, k, ok := checkOf(data)
		if ok && f.selectsDenial(c.At, k) {
			ferr = fn(&c, k)
		}
	})
	if errors.Is(err, errNoDenialStream) {
		return nil
	}
	if err == nil {
		err = ferr
	}
	return err
}

// ShadowColumns are the fixed columns of ExportShadowCSV, before one
// "metadata.KEY" column per metadata key.
var ShadowColumns = []string{"at", "replica", "tenant", "mode", "request_id", "result", "reason", "blocked_by", "scopes", "amount", "unit", "model"}

// ExportShadowCSV writes the check and shadow decisions f selects (from
// the denial stream, not the ledger) as CSV: a header, then one row per
// decision in stream order, the columns of ShadowColumns and one
// "metadata.KEY" per metadata key met (sorted). result is "admitted" or
// "denied"; reason and blocked_by ("scope per period") are a denied
// one's; scopes are joined by spaces; cells are SafeCell'd. It returns
// how many rows it wrote.
func (p *Reader) ExportShadowCSV(ctx context.Context, w io.Writer, f Filter) (int64, error) {
	// Two passes: the metadata keys, then the rows.
	keys := map[string]bool{}
	if err := p.eachCheck(ctx, f, func(c *events.AdmitChecked, _ denialKind) error {
		for k := range c.Metadata {
			keys[k] = true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	sorted := slices.Sorted(maps.Keys(keys))
	header := append(slices.Clone(ShadowColumns), make([]string, len(sorted))...)
	for i, k := range sorted {
		header[len(ShadowColumns)+i] = MetadataColumnPrefix + k
	}
	cw := NewCSVWriter(w, f.Decimal, header, "amount")
	if err := cw.Write(header); err != nil {
		return 0, err
	}
	var n int64
	err := p.eachCheck(ctx, f, func(c *events.AdmitChecked, _ denialKind) error {
		result, reason, blocked := "admitted", "", ""
		if !c.Admitted {
			result, reason = "denied", string(c.Reason())
			if c.Denial != nil && c.Denial.Scope != "" {
				blocked = string(c.Denial.Scope.Local())
				if c.Denial.Period != "" {
					blocked += " per " + string(c.Denial.Period)
				}
			}
		}
		rec := []string{f.Times.format(c.At), c.Replica, c.Tenant, c.Mode, c.RequestID, result, reason, blocked,
			strings.Join(c.Scopes, " "), c.Amount, c.Unit, c.Model}
		for _, k := range sorted {
			rec = append(rec, c.Metadata[k])
		}
		for i := range rec {
			rec[i] = SafeCell(rec[i])
		}
		n++
		return cw.Write(rec)
	})
	if err != nil {
		return n, err
	}
	cw.Flush()
	return n, cw.Error()
}

// ExportShadowJSONL writes the check and shadow decisions f selects as
// JSON lines, each record as the replica wrote it (admit.checked.v1), in
// stream order. It returns how many it wrote.
func (p *Reader) ExportShadowJSONL(ctx context.Context, w io.Writer, f Filter) (int64, error) {
	var n int64
	err := p.eachCheck(ctx, f, func(c *events.AdmitChecked, _ denialKind) error {
		data, err := events.EncodeAdmitChecked(*c)
		if err != nil {
			return err
		}
		n++
		_, err = w.Write(append(data, '\n'))
		return err
	})
	return n, err
}
