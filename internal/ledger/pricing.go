package ledger

import (
	"context"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/streams"
)

// Price is a model's prices, per million tokens, at one version.
type Price struct {
	Model       string
	Unit        string
	Input       events.Money
	Output      events.Money
	CachedInput *events.Money
	// Version is the stream sequence of the definition, At when it was
	// put (its event's time).
	Version uint64
	At      time.Time
}

// Quote returns the quote of pricing inputTokens and maxOutputTokens at p.
func (p Price) Quote(inputTokens, maxOutputTokens int64) events.PriceQuote {
	return events.PriceQuote{Model: p.Model, Version: p.Version, Unit: p.Unit, Input: p.Input, Output: p.Output,
		CachedInput: p.CachedInput, InputTokens: inputTokens, MaxOutputTokens: maxOutputTokens}
}

// Changes names the fields of p that differ from prev, in the order unit,
// input, output, cached_input.
func (p Price) Changes(prev Price) []string {
	out := []string{}
	if p.Unit != prev.Unit {
		out = append(out, "unit")
	}
	if p.Input.Cmp(prev.Input) != 0 {
		out = append(out, "input")
	}
	if p.Output.Cmp(prev.Output) != 0 {
		out = append(out, "output")
	}
	if (p.CachedInput == nil) != (prev.CachedInput == nil) || p.CachedInput != nil && p.CachedInput.Cmp(*prev.CachedInput) != 0 {
		out = append(out, "cached_input")
	}
	return out
}

// pricing is the replica's folded state of one pricing key.
type pricing struct {
	def Price
	src events.PricingRevision
}

// setPricing makes rev, at seq, the pricing key's definition.
func (b *book) setPricing(key string, seq uint64, rev *events.PricingRevision) {
	p := Price{Model: rev.Model, Unit: rev.Unit, Input: rev.Input, Output: rev.Output, CachedInput: rev.CachedInput, Version: seq}
	for _, e := range rev.Events {
		if ev, ok := e.(events.PricingDefined); ok {
			p.At = ev.At
		}
	}
	b.prices[key] = &pricing{def: p, src: *rev}
}

// Price returns the current price of model as this replica has folded it.
func (l *Ledger) Price(model string) (Price, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	p := l.bk.prices[streams.PricingKey(model)]
	if p == nil {
		return Price{}, false
	}
	return p.def, true
}

// Prices returns every model's current price, sorted by model.
func (l *Ledger) Prices() []Price {
	l.mu.RLock()
	out := make([]Price, 0, len(l.bk.prices))
	for _, p := range l.bk.prices {
		out = append(out, p.def)
	}
	l.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// PriceChange is what DefinePrice did.
type PriceChange struct {
	// Price is the definition now (its Version the revision).
	Price Price
	// Existed is true when the model had a price; Prev is then that price.
	Existed bool
	Prev    Price
	// Changed names the changed fields (see Price.Changes); empty for a
	// new model and when nothing changed.
	Changed []string
}

// DefinePrice sets a model's prices to def (its Model, Unit, Input,
// Output and CachedInput; Version is ignored): one PricingDefined event in
// one compare-and-set write of the model's pricing key, chained to the
// key's previous revision. Putting the prices it already has changes
// nothing and returns them. All attempts share one deadline, as in
// DefineBudget.
//
// Errors: *events.Error with CodeLedgerUnavailable or CodeLedgerBusy.
func (l *Ledger) DefinePrice(ctx context.Context, def Price, now time.Time) (PriceChange, error) {
	key := streams.PricingKey(def.Model)
	var cur Price
	var existed bool
	var changed []string
	seq, wrote, err := l.define(ctx, "pricing "+def.Model, func(b *book) (string, func(events.Chain) any, bool, error) {
		cur, existed, changed = Price{}, false, []string{}
		if p := b.prices[key]; p != nil {
			cur, existed = p.def, true
			if changed = def.Changes(cur); len(changed) == 0 {
				return key, nil, true, nil
			}
		}
		return key, func(ch events.Chain) any {
			ev := events.PricingDefined{Model: def.Model, Unit: def.Unit, Input: def.Input, Output: def.Output,
				CachedInput: def.CachedInput, Changed: nilIfEmpty(changed), At: now.UTC()}
			return events.PricingRevision{Schema: events.SchemaPricing, Chain: ch,
				Model: def.Model, Unit: def.Unit, Input: def.Input, Output: def.Output, CachedInput: def.CachedInput,
				Events: events.Events{ev}}
		}, false, nil
	})
	if err != nil {
		return PriceChange{}, err
	}
	if !wrote {
		return PriceChange{Price: cur, Existed: true, Prev: cur, Changed: []string{}}, nil
	}
	def.Version, def.At = seq, now.UTC()
	return PriceChange{Price: def, Existed: existed, Prev: cur, Changed: changed}, nil
}

// nilIfEmpty keeps an event's "changed" absent for a new definition.
func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Learned returns a copy of the learned-reservation window of k as this
// replica has folded it (nil: no call of k known).
func (l *Ledger) Learned(k learn.Key) *learn.Window {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.learned.Window(k).Clone()
}
