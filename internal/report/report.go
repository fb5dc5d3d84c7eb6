package report

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// GroupBy says how a spend report groups reservations: ByScope or
// ByMetadata(key).
type GroupBy struct {
	scope bool
	key   string
}

// ByScope groups by scope.
var ByScope = GroupBy{scope: true}

// ByMetadata groups by the value of a metadata key.
func ByMetadata(key string) GroupBy { return GroupBy{key: key} }

// String is "scope" or "metadata.KEY".
func (g GroupBy) String() string {
	if g.scope {
		return "scope"
	}
	return MetadataColumnPrefix + g.key
}

// SpendGroup is one line of a spend report: the reservations of one group
// value in one unit.
type SpendGroup struct {
	// Value is the scope, or the metadata value ("" when the key is not
	// set); Unit the reservations' unit (amounts of different units are
	// never added).
	Value string
	Unit  string
	// Reservations counts the group's reservations; Open, Settled,
	// Released, Expired by status; Late those settled late.
	Reservations, Open, Settled, Released, Expired, Late int64
	// Spend sums the settled costs and Overrun the overruns: by scope,
	// what the scope's budgets were charged (Row.ChargedIn: an exposure
	// cap's excess left out, as the balance has it); by a metadata key,
	// the costs as the settles gave them (Row.Actual). Reserved sums the
	// amounts the group's open reservations still hold: by scope, what the
	// scope's budgets hold (Row.ReservedIn); by a metadata key, Row.Reserved.
	Spend, Overrun, Reserved events.Money
	// Denials counts the group's denied admits, from the denial records
	// (not the ledger; see aggregate_denials.go).
	Denials int64
}

// SpendReport is spend grouped by a scope or a metadata key.
type SpendReport struct {
	// By is the grouping; Filter what was read.
	By     GroupBy
	Filter Filter
	// Groups are sorted by unit, then by spend descending, then by value.
	Groups []SpendGroup
	// Position is the stream sequence the report read up to.
	Position uint64
	// Shadow are the check and shadow decisions f selects, apart from
	// the spend (see shadow.go).
	Shadow []ShadowGroup
}

// Report reads the ledger stream like Rows and sums the reservations f
// selects by group: by scope (a reservation admitted in several scopes
// counts once in each of them, so the groups of one unit may add up to more
// than was spent), or by the value of a metadata key ("" when not set).
// Its memory is that of Rows plus one entry per group.
//
// Denials are not in the book of record: each group's Denials counts the
// denial records (streams.DenialStreamName, up to its last record as of
// the call) f selects, by the denial's time, tenant and scopes; by scope a
// denial counts in every scope the admit named, by a metadata key under
// its value ("" when not set). A missing denial stream counts none.
//
// It returns Rows' errors and the denial stream's read errors.
func (p *Reader) Report(ctx context.Context, f Filter, by GroupBy) (*SpendReport, error) {
	type gk struct{ value, unit string }
	groups := map[gk]*SpendGroup{}
	group := func(value, unit string) *SpendGroup {
		k := gk{value, unit}
		g := groups[k]
		if g == nil {
			g = &SpendGroup{Value: value, Unit: unit}
			groups[k] = g
		}
		return g
	}
	add := func(value string, r *Row, reserved, spent, overrun events.Money) {
		g := group(value, r.Unit)
		g.Reservations++
		switch r.Status {
		case events.StatusOpen:
			g.Open++
			g.Reserved = g.Reserved.Add(reserved)
		case events.StatusSettled:
			g.Settled++
		case events.StatusReleased:
			g.Released++
		case events.StatusExpired:
			g.Expired++
		}
		if r.Late {
			g.Late++
		}
		if r.Settled {
			g.Spend = g.Spend.Add(spent)
			g.Overrun = g.Overrun.Add(overrun)
		}
	}
	pos, err := p.Rows(ctx, f, func(r *Row) error {
		if by.scope {
			for _, s := range r.Scopes {
				spent, overrun := r.ChargedIn(s)
				add(string(s), r, r.ReservedIn(s), spent, overrun)
			}
			return nil
		}
		add(r.Metadata[by.key], r, r.Reserved, r.Actual, r.Overrun)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f.AsOf > 0 || !f.AsOfTime.IsZero() {
		// As of then: the denials and checks of that time or before (the
		// denial stream is not the book: a record is stored within
		// seconds of its time, never by a position).
		f.denialsUntil = f.AsOfTime
		if f.AsOf > 0 {
			if f.denialsUntil, err = p.storedAt(ctx, f.AsOf); err != nil {
				return nil, err
			}
		}
	}
	err = p.replayDenials(ctx, f, func(k denialKind) {
		if by.scope {
			for _, s := range k.scopes {
				group(string(s), k.unit).Denials++
			}
			return
		}
		group(k.metadata[by.key], k.unit).Denials++
	})
	if err != nil {
		return nil, err
	}
	shadow, err := p.replayShadow(ctx, f, by)
	if err != nil {
		return nil, err
	}
	rep := &SpendReport{By: by, Filter: f, Position: pos, Shadow: shadow}
	for _, g := range groups {
		rep.Groups = append(rep.Groups, *g)
	}
	slices.SortFunc(rep.Groups, func(a, b SpendGroup) int {
		if c := strings.Compare(a.Unit, b.Unit); c != 0 {
			return c
		}
		if c := b.Spend.Cmp(a.Spend); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return rep, nil
}

// DefinedLimits sets the Limit of each balance of bs whose budget was
// redefined after the balance's last revision, during the balance's own
// period instance, to that definition's limit. A balance's revisions carry
// the limit in force when they were written, so a limit changed after the
// last admit, settle or release of the period (a limit lowered to stop
// further spend, which denies every admit and so writes nothing) would
// otherwise show the old one; with the definition, audit balances shows the
// limit that applied, as budget get does. A definition made in a later
// instance leaves the balance's own.
func DefinedLimits(st *projector.State, bs []projector.Balance) {
	for i := range bs {
		b := &bs[i]
		def, ok := st.Budget(b.Ref.Budget())
		if !ok || def.Revision <= b.Revision {
			continue
		}
		loc, err := events.LoadZone(def.TZ)
		if err != nil {
			continue // the fold refused such a definition
		}
		if b.Ref.Period.InstanceIn(def.DefinedAt, loc) == b.Ref.Instance {
			b.Limit = def.Limit
		}
	}
}

// DefinedZones gives each balance of bs with no zone recorded (no admit
// folded into it since the fold started, from a snapshot) the zone of its
// budget's definition ("UTC" for none): see projector.Balance.Zones.
func DefinedZones(st *projector.State, bs []projector.Balance) {
	for i := range bs {
		b := &bs[i]
		if len(b.Zones) > 0 {
			continue
		}
		tz := "UTC"
		if def, ok := st.Budget(b.Ref.Budget()); ok && def.TZ != "" {
			tz = def.TZ
		}
		b.Zones = []string{tz}
	}
}

// IdleBalances returns, for every budget of st that has no balance in its
// period instance at t, that balance with zero totals: a budget defined
// but not used in the current period. Limit and Unit are the budget's;
// Lane is "" (no lane has named it yet). Sorted by key.
func IdleBalances(st *projector.State, t time.Time) []projector.Balance {
	var out []projector.Balance
	for _, b := range st.Budgets() {
		loc, err := events.LoadZone(b.TZ)
		if err != nil {
			continue // the fold refused such a definition
		}
		ref := events.BalanceRef{Scope: b.Ref.Scope, Period: b.Ref.Period, Instance: b.Ref.Period.InstanceIn(t, loc), Unit: b.Ref.Unit}
		if _, ok := st.Balance(ref); ok {
			continue
		}
		tz := b.TZ
		if tz == "" {
			tz = "UTC"
		}
		out = append(out, projector.Balance{Ref: ref, Key: streams.BalanceKey(ref), Unit: b.Unit, Limit: b.Limit, Zones: []string{tz}})
	}
	slices.SortFunc(out, func(a, b projector.Balance) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// storedAt is when the ledger stream stored the revision at seq.
func (p *Reader) storedAt(ctx context.Context, seq uint64) (time.Time, error) {
	s, err := p.js.Stream(ctx, p.layout.StreamName())
	if err != nil {
		return time.Time{}, err
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return time.Time{}, fmt.Errorf("report: the revision at position %d (its time bounds the denials counted as of it): %w; give --as-of a time instead", seq, err)
	}
	return m.Time, nil
}
