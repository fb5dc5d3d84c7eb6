package ledger

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
)

// IdleBudget is a budget IdleBudgets found idle.
type IdleBudget struct {
	Ref events.BudgetRef
	// Since is the time of the latest event in its balances.
	Since time.Time
}

// IdleBudgets returns up to max budgets created from defaults (never one
// put for its scope, nor one of a scope that has a budget put for it:
// retiring it would deny that one's admits too) that are not retired and
// have been idle for their scope kind's rule: rules maps a scope kind
// ("run", of the scope's own name, without its tenant) to how long. A
// budget is idle when it has a balance of a period longer than an hour
// (month, week, day, lifetime), nothing is open in any of them, and the
// latest event in them is at least that long before now; or when such a
// budget has no balance at all (nothing was ever admitted into it) and was
// defined at least that long before now. A balance whose
// latest event is not known (loaded from a snapshot written before it was
// kept) counts as active when this book was made. Oldest first.
func (l *Ledger) IdleBudgets(rules map[string]time.Duration, now time.Time, max int) []IdleBudget {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.idleBudgets(rules, now, max)
}

// idleBudgets is IdleBudgets on the book.
func (b *book) idleBudgets(rules map[string]time.Duration, now time.Time, max int) []IdleBudget {
	if len(rules) == 0 || max <= 0 {
		return nil
	}
	var out []IdleBudget
	for _, d := range b.fromDefaults {
		idle, ok := rules[d.def.Ref.Scope.Local().Kind()]
		if !ok || !idleIn(b, d, idle, now) {
			continue
		}
		var since time.Time
		if len(d.bals) == 0 {
			since = b.definedAt(d)
		}
		for _, bl := range d.bals {
			if b.balances[bl.key] != bl {
				continue
			}
			if at := b.activeAt(bl); at.After(since) {
				since = at
			}
		}
		out = append(out, IdleBudget{Ref: d.def.Ref, Since: since})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Since.Equal(out[j].Since) {
			return out[i].Since.Before(out[j].Since)
		}
		return out[i].Ref.Scope < out[j].Ref.Scope
	})
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// RetireIdle retires up to max budgets IdleBudgets finds idle under rules
// at now, each as RetireBudget does, with a reason naming its rule, and
// returns how many it retired. A budget is checked again under the book's
// lock just before its retirement is written (a call admitted since makes
// it busy). It stops at the first error that says the ledger is
// unavailable, and skips a budget whose retirement failed otherwise
// (logged).
func (l *Ledger) RetireIdle(ctx context.Context, rules map[string]time.Duration, now time.Time, max int) (int, error) {
	n := 0
	for _, ib := range l.IdleBudgets(rules, now, max) {
		idle := rules[ib.Ref.Scope.Local().Kind()]
		reason := fmt.Sprintf("idle for %s (serve --retire-idle %s=%s)", idle, ib.Ref.Scope.Local().Kind(), idle)
		_, already, err := l.retireBudget(ctx, ib.Ref, "", reason, now, func(bk *book, d *budget) bool {
			return idleIn(bk, d, idle, now)
		})
		switch {
		case err != nil && (events.CodeOf(err) == events.CodeLedgerUnavailable || ctx.Err() != nil):
			return n, err
		case err != nil:
			l.opts.log.Warn("ledger: retiring an idle budget failed; skipping it", "scope", ib.Ref.Scope, "period", ib.Ref.Period, "err", err)
		case !already:
			n++
		}
	}
	return n, nil
}

// idleIn reports whether budget d of bk has been idle for idle at now
// (see IdleBudgets), nothing open in its balances included.
func idleIn(bk *book, d *budget, idle time.Duration, now time.Time) bool {
	if d.def.FromDefault == 0 || d.def.Retired {
		return false
	}
	for _, o := range bk.byScope[d.def.Ref.Scope] {
		if o.FromDefault == 0 && !o.Retired {
			// A budget put for the scope: retiring this one would deny
			// every admit naming the scope, the put one's included.
			return false
		}
	}
	if len(d.bals) == 0 {
		// Never admitted into (a denied admit made it, which admits
		// denied by a budget with alerts did before they stopped making
		// budgets from defaults): idle since it was defined. A minute or hour budget keeps no bals (prune.go)
		// however busy it is: never idle here.
		return !short(d.def.Ref.Period) && now.Sub(bk.definedAt(d)) >= idle
	}
	for _, bl := range d.bals {
		if bk.balances[bl.key] != bl {
			continue
		}
		if len(bl.open) > 0 || now.Sub(bk.activeAt(bl)) < idle {
			return false
		}
	}
	return true
}

// activeAt is when balance bl was last active: its latest event, or when
// the book was made if that is not known.
// definedAt is when budget d was defined: the time of its revision's
// definition event, or, when that is not known, when this book was made.
func (b *book) definedAt(d *budget) time.Time {
	for _, e := range d.src.Events {
		switch ev := e.(type) {
		case events.BudgetDefinedV2:
			return ev.At
		case events.BudgetDefined:
			return ev.At
		}
	}
	return b.born
}

func (b *book) activeAt(bl *balance) time.Time {
	if bl.lastAt.IsZero() {
		return b.born
	}
	return bl.lastAt
}
