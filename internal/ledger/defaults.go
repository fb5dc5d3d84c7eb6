package ledger

import (
	"context"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Default is the default budget of a scope kind for a period: its
// definition (Budget's fields but Ref) applies to every scope of Kind that
// has no budget of its own in that period.
type Default struct {
	Kind string
	// Def is the definition; Def.Ref.Scope is empty and Def.Ref.Period
	// the period. Def.Revision is the default's revision.
	Def Budget
}

// For returns the budget the default gives scope, whose budgets are bs:
// its definition under scope's ref, FromDefault naming the default's
// revision. When bs hold a budget of the other kind (count or money) in
// the default's period, the one from the default is defined alongside it,
// its ref carrying its unit, as a put of the other kind would be.
func (d Default) For(scope events.Scope, bs []Budget) Budget {
	b := d.Def
	b.Ref.Scope = scope
	b.FromDefault, b.Revision = d.Def.Revision, 0
	for _, o := range bs {
		if o.Ref.Period == b.Ref.Period && events.IsCount(o.Unit) != events.IsCount(b.Unit) {
			b.Ref.Unit = b.Unit
		}
	}
	return b
}

// Covers reports whether budget b, a budget of a scope, stands in the
// scope for the default d: the same period and the same kind of unit
// (count or money). A scope takes a kind's default in each period and
// kind it has no budget of its own in.
func (d Default) Covers(b Budget) bool {
	return b.Ref.Period == d.Def.Ref.Period && events.IsCount(b.Unit) == events.IsCount(d.Def.Unit)
}

// dflt is the replica's folded state of one default key.
type dflt struct {
	def Default
	src events.DefaultRevision
}

// setDefault makes rev, at seq, the default key's definition. The gate
// has checked that its time zone loads.
func (b *book) setDefault(key string, seq uint64, rev *events.DefaultRevision) {
	loc, _ := events.LoadZone(rev.TZ)
	if loc == time.UTC {
		loc = nil
	}
	b.defaults[key] = &dflt{def: Default{Kind: rev.Kind, Def: Budget{Ref: events.BudgetRef{Period: rev.Period},
		Limit: rev.Limit, Unit: rev.Unit, TZ: rev.TZ, Loc: loc, Disabled: rev.Disabled, FixedSlot: rev.FixedSlot,
		Thresholds: rev.Thresholds, ExposureCap: rev.ExposureCap, Learn: rev.Learn, Revision: seq}}, src: *rev}
	var ds []Default
	for _, p := range events.Periods {
		if d := b.defaults[streams.DefaultKey(rev.Kind, p)]; d != nil {
			ds = append(ds, d.def)
		}
	}
	b.byKind[rev.Kind] = ds
}

// DefaultsOf returns the default budgets of a scope kind, in period order.
func (l *Ledger) DefaultsOf(kind string) []Default {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.byKind[kind] // never mutated in place
}

// DefineDefault sets the default budget of kind for def.Ref.Period to def
// (its Limit, Unit, TZ, Disabled, FixedSlot, Thresholds, ExposureCap and
// Learn): EditDefault
// with an edit that replaces the whole definition.
//
// Errors: *events.Error with CodeInvalidTZ, then EditDefault's.
func (l *Ledger) DefineDefault(ctx context.Context, kind string, def Budget, now time.Time) (BudgetChange, error) {
	if _, err := events.LoadZone(def.TZ); err != nil {
		return BudgetChange{}, err
	}
	return l.EditDefault(ctx, kind, def.Ref.Period, func(Budget, bool) (Budget, error) { return def, nil }, true, now)
}

// EditDefault defines or changes the default budget of kind for period:
// edit decides the new definition from the current one (see BudgetEdit),
// and one DefaultDefined event is written in one compare-and-set write of
// the default key. It changes no budget that exists: a scope's budget is
// created from the default on the scope's first admit in the period, and
// keeps that definition. A definition equal to the current one changes
// nothing. A change of the default's unit is refused unless unitChange
// (a put with replace) says it is meant.
//
// Errors: edit's own; *events.Error with CodeUnitChangeRefused,
// CodeLedgerUnavailable or CodeLedgerBusy.
func (l *Ledger) EditDefault(ctx context.Context, kind string, period events.Period, edit BudgetEdit, unitChange bool, now time.Time) (BudgetChange, error) {
	key := streams.DefaultKey(kind, period)
	var def, cur Budget
	var existed bool
	var changed []string
	_, wrote, err := l.define(ctx, "default "+kind+"/"+string(period), func(b *book) (string, func(events.Chain) any, bool, error) {
		cur, existed, changed = Budget{}, false, []string{}
		if d := b.defaults[key]; d != nil {
			cur, existed = d.def.Def, true
		}
		var err error
		if def, err = edit(cur, existed); err != nil {
			return "", nil, false, err
		}
		if existed {
			if changed = def.Changes(cur); len(changed) == 0 {
				return key, nil, true, nil
			}
			if cur.Unit != def.Unit && !unitChange {
				// A put of the other kind meant as a second default
				// would otherwise take the place of the first: the
				// kind's new scopes would lose their money (or count)
				// cap without a word.
				return "", nil, false, events.Errorf(events.CodeUnitChangeRefused,
					"the default of kind %s per %s is in %s; a kind has one default per period, and its unit changes to %s only with replace (the scopes created from it keep theirs). For a cap in %s too, define it for another period, or give the scopes budgets of their own",
					kind, period, cur.Unit, def.Unit, def.Unit)
			}
		}
		d := def
		return key, func(ch events.Chain) any {
			ev := events.DefaultDefined{Kind: kind, Period: period, Limit: d.Limit, Unit: d.Unit, TZ: d.TZ, Disabled: d.Disabled,
				FixedSlot: d.FixedSlot, Thresholds: d.Thresholds, ExposureCap: d.ExposureCap, Learn: d.Learn,
				Changed: nilIfEmpty(changed), At: now.UTC()}
			return events.DefaultRevision{Schema: events.SchemaDefault, Chain: ch,
				Kind: kind, Period: period, Limit: d.Limit, Unit: d.Unit, TZ: d.TZ, Disabled: d.Disabled,
				FixedSlot: d.FixedSlot, Thresholds: d.Thresholds, ExposureCap: d.ExposureCap, Learn: d.Learn, Events: events.Events{ev}}
		}, false, nil
	})
	if err != nil {
		return BudgetChange{}, err
	}
	if !wrote {
		return BudgetChange{Budget: cur, Existed: true, Prev: cur, Changed: []string{}}, nil
	}
	l.mu.RLock()
	after := l.bk.defaults[key].def.Def
	l.mu.RUnlock()
	return BudgetChange{Budget: after, Existed: existed, Prev: cur, Changed: changed}, nil
}

// CreateFromDefault creates scope's budget for d's period from the default
// d, if the budget does not exist: one BudgetDefinedV2 (FromDefault set to
// d's revision) written with a create-only compare-and-set (the key must
// have no revision). Replicas that create the same budget at once write it
// once: the others lose the compare-and-set, fold the winner's revision
// and use it. It reports whether this call created it.
//
// Errors: *events.Error with CodeLedgerUnavailable or CodeLedgerBusy.
func (l *Ledger) CreateFromDefault(ctx context.Context, scope events.Scope, d Default, now time.Time) (bool, error) {
	def := d.For(scope, nil)
	_, wrote, err := l.define(ctx, "budget "+string(scope)+"/"+string(def.Ref.Period)+" from its default", func(b *book) (string, func(events.Chain) any, bool, error) {
		// Alongside a budget of the other kind in the period, if the
		// scope has one (as a put of the other kind is).
		ref := b.target(def.Ref, def.Unit)
		key := streams.BudgetKey(ref)
		// The existence check and the revision the write expects are read
		// together (define reads both under one lock): a budget folded
		// between them (another goroutine's create) would otherwise be
		// overwritten by a second create. Expecting the key's last
		// revision as read with the check (0: none) makes the write
		// create-only.
		if _, exists := b.budgets[key]; exists {
			return key, nil, false, nil
		}
		return key, func(ch events.Chain) any {
			ev := events.BudgetDefinedV2{Budget: ref, Limit: def.Limit, Unit: def.Unit, TZ: def.TZ, Disabled: def.Disabled,
				FixedSlot: def.FixedSlot, Thresholds: def.Thresholds, ExposureCap: def.ExposureCap, Learn: def.Learn,
				FromDefault: def.FromDefault, At: now.UTC()}
			return events.BudgetRevision{Schema: events.SchemaBudget, Chain: ch, Budget: ref, Limit: def.Limit, Unit: def.Unit,
				TZ: def.TZ, Disabled: def.Disabled, FixedSlot: def.FixedSlot, Thresholds: def.Thresholds,
				ExposureCap: def.ExposureCap, Learn: def.Learn, FromDefault: def.FromDefault, Events: events.Events{ev}}
		}, false, nil
	})
	return wrote, err
}
