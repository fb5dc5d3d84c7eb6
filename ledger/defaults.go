package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Default is the default budget of a scope kind for a period: its
// definition (Budget's fields but Ref) applies to every scope of Kind that
// has no budget of its own.
type Default struct {
	Kind string
	// Def is the definition; Def.Ref.Scope is empty and Def.Ref.Period
	// the period. Def.Revision is the default's revision.
	Def Budget
}

// For returns the budget the default gives scope: its definition under
// scope's ref, FromDefault naming the default's revision.
func (d Default) For(scope events.Scope) Budget {
	b := d.Def
	b.Ref.Scope = scope
	b.FromDefault, b.Revision = d.Def.Revision, 0
	return b
}

// dflt is the replica's folded state of one default key.
type dflt struct {
	def Default
	src events.DefaultRevision
}

// applyDefault folds one default revision at seq, checking its chain.
func (b *book) applyDefault(key string, seq uint64, rev *events.DefaultRevision, hash string) error {
	if seq <= b.rev(key) {
		return nil
	}
	if err := events.CheckChain(key, seq, rev.Chain, b.valid(key), b.hashes[key]); err != nil {
		return err
	}
	return b.setDefault(key, seq, rev, hash)
}

// setDefault makes rev, at seq, the default key's definition.
func (b *book) setDefault(key string, seq uint64, rev *events.DefaultRevision, hash string) error {
	loc, err := events.LoadZone(rev.TZ)
	if err != nil {
		return fmt.Errorf("default revision %d of %s: %w", seq, key, err)
	}
	if loc == time.UTC {
		loc = nil
	}
	b.defaults[key] = &dflt{def: Default{Kind: rev.Kind, Def: Budget{Ref: events.BudgetRef{Period: rev.Period},
		Limit: rev.Limit, Unit: rev.Unit, TZ: rev.TZ, Loc: loc, Disabled: rev.Disabled, FixedSlot: rev.FixedSlot,
		Thresholds: rev.Thresholds, Revision: seq}}, src: *rev}
	b.hashes[key] = hash
	delete(b.seen, key)
	var ds []Default
	for _, p := range events.Periods {
		if d := b.defaults[streams.DefaultKey(rev.Kind, p)]; d != nil {
			ds = append(ds, d.def)
		}
	}
	b.byKind[rev.Kind] = ds
	return nil
}

// DefaultsOf returns the default budgets of a scope kind, in period order.
func (l *Ledger) DefaultsOf(kind string) []Default {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.byKind[kind] // never mutated in place
}

// DefineDefault sets the default budget of kind for def.Ref.Period to def
// (its Limit, Unit, TZ, Disabled, FixedSlot, Thresholds): one
// DefaultDefined event in one compare-and-set write of the default key.
// It changes no budget that exists: a scope's budget is created from the
// default on the scope's first admit, and keeps that definition. Putting
// the definition it already has changes nothing.
//
// Errors: *events.Error with CodeInvalidTZ, CodeLedgerUnavailable or
// CodeLedgerBusy.
func (l *Ledger) DefineDefault(ctx context.Context, kind string, def Budget, now time.Time) (BudgetChange, error) {
	if _, err := events.LoadZone(def.TZ); err != nil {
		return BudgetChange{}, err
	}
	if err := l.live(); err != nil {
		return BudgetChange{}, err
	}
	ctx, cancel := l.commitContext(ctx)
	defer cancel()
	period := def.Ref.Period
	key := streams.DefaultKey(kind, period)
	for attempt := 0; attempt < l.opts.maxAttempts; attempt++ {
		if err := l.live(); err != nil {
			return BudgetChange{}, err
		}
		if ctx.Err() != nil {
			return BudgetChange{}, &events.Error{Code: events.CodeLedgerUnavailable, Message: "deadline passed writing default", Err: ctx.Err()}
		}
		l.mu.RLock()
		// rev names the compare-and-set, valid the chain (see
		// DefineBudget).
		var cur Budget
		var valid uint64
		if d := l.bk.defaults[key]; d != nil {
			cur, valid = d.def.Def, d.def.Def.Revision
		}
		rev := l.bk.rev(key)
		prevHash := l.bk.hashes[key]
		l.mu.RUnlock()
		var changed []string
		if valid > 0 {
			if changed = def.Changes(cur); len(changed) == 0 {
				latest, err := l.latestRev(ctx, key)
				if err != nil {
					return BudgetChange{}, err
				}
				if latest == rev {
					return BudgetChange{Budget: cur, Existed: true, Prev: cur, Changed: []string{}}, nil
				}
				if err := l.catchUp(ctx, key); err != nil {
					return BudgetChange{}, err
				}
				continue
			}
		}
		ev := events.DefaultDefined{Kind: kind, Period: period, Limit: def.Limit, Unit: def.Unit, TZ: def.TZ, Disabled: def.Disabled,
			FixedSlot: def.FixedSlot, Thresholds: def.Thresholds, Changed: changed, At: now.UTC()}
		value := events.DefaultRevision{Schema: events.SchemaDefault, Chain: events.Chain{Prev: valid, PrevHash: prevHash},
			Kind: kind, Period: period, Limit: def.Limit, Unit: def.Unit, TZ: def.TZ, Disabled: def.Disabled,
			FixedSlot: def.FixedSlot, Thresholds: def.Thresholds, Events: events.Events{ev}}
		data, err := json.Marshal(value)
		if err != nil {
			return BudgetChange{}, &events.Error{Code: events.CodeInternal, Message: "encoding default", Err: err}
		}
		seq, err := l.publishOne(ctx, key, rev, data)
		if err == nil {
			l.mu.Lock()
			err = l.bk.applyDefault(key, seq, &value, events.HashPayload(data))
			l.mu.Unlock()
			if err != nil {
				return BudgetChange{}, &events.Error{Code: events.CodeInternal, Message: "folding own default write", Err: err}
			}
			l.ownFolded()
			l.mu.RLock()
			now := l.bk.defaults[key].def.Def
			l.mu.RUnlock()
			if changed == nil {
				changed = []string{}
			}
			return BudgetChange{Budget: now, Existed: valid > 0, Prev: cur, Changed: changed}, nil
		}
		if !streams.IsConflict(err) && !isTimeout(err) {
			return BudgetChange{}, &events.Error{Code: events.CodeLedgerUnavailable, Message: "writing default", Err: err}
		}
		if err := l.catchUp(ctx, key); err != nil {
			return BudgetChange{}, err
		}
	}
	return BudgetChange{}, events.Errorf(events.CodeLedgerBusy, "default %s/%s: too many concurrent writers", kind, period)
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
	if err := l.live(); err != nil {
		return false, err
	}
	ctx, cancel := l.commitContext(ctx)
	defer cancel()
	def := d.For(scope)
	ref := def.Ref
	key := streams.BudgetKey(ref)
	for attempt := 0; attempt < l.opts.maxAttempts; attempt++ {
		// The existence check and the revision the write expects are read
		// together: a budget folded between them (another goroutine's
		// create) would otherwise be overwritten by a second create.
		l.mu.RLock()
		_, exists := l.bk.budgets[key]
		rev, valid, prevHash := l.bk.rev(key), l.bk.valid(key), l.bk.hashes[key]
		l.mu.RUnlock()
		if exists {
			return false, nil
		}
		if ctx.Err() != nil {
			return false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "deadline passed creating budget from default", Err: ctx.Err()}
		}
		ev := events.BudgetDefinedV2{Budget: ref, Limit: def.Limit, Unit: def.Unit, TZ: def.TZ, Disabled: def.Disabled,
			FixedSlot: def.FixedSlot, Thresholds: def.Thresholds, FromDefault: def.FromDefault, At: now.UTC()}
		value := events.BudgetRevision{Schema: events.SchemaBudget, Budget: ref, Limit: def.Limit, Unit: def.Unit,
			TZ: def.TZ, Disabled: def.Disabled, FixedSlot: def.FixedSlot, Thresholds: def.Thresholds,
			FromDefault: def.FromDefault, Events: events.Events{ev}}
		data, err := json.Marshal(value)
		if err != nil {
			return false, &events.Error{Code: events.CodeInternal, Message: "encoding budget", Err: err}
		}
		// Expecting the key's last revision as read with the check (0:
		// none) makes the write create-only: no valid budget existed, and
		// a skipped revision of the key, if any, is what it must follow.
		value.Chain = events.Chain{Prev: valid, PrevHash: prevHash}
		if data, err = json.Marshal(value); err != nil {
			return false, &events.Error{Code: events.CodeInternal, Message: "encoding budget", Err: err}
		}
		seq, err := l.publishOne(ctx, key, rev, data)
		if err == nil {
			l.mu.Lock()
			err = l.bk.applyBudget(key, seq, &value, events.HashPayload(data))
			l.mu.Unlock()
			if err != nil {
				return false, &events.Error{Code: events.CodeInternal, Message: "folding own budget write", Err: err}
			}
			l.ownFolded()
			return true, nil
		}
		if !streams.IsConflict(err) && !isTimeout(err) {
			return false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "creating budget from default", Err: err}
		}
		if err := l.catchUp(ctx, key); err != nil {
			return false, err
		}
	}
	return false, events.Errorf(events.CodeLedgerBusy, "budget %s/%s: too many concurrent writers", ref.Scope, ref.Period)
}
