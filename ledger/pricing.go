package ledger

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Price is a model's prices, per million tokens, at one version.
type Price struct {
	Model       string
	Unit        string
	Input       events.Money
	Output      events.Money
	CachedInput *events.Money
	// Version is the stream sequence of the definition.
	Version uint64
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

// applyPricing folds one pricing revision at seq whose payload hashes to
// hash, checking its chain.
func (b *book) applyPricing(key string, seq uint64, rev *events.PricingRevision, hash string) error {
	if seq <= b.rev(key) {
		return nil
	}
	if err := events.CheckChain(key, seq, rev.Chain, b.valid(key), b.hashes[key]); err != nil {
		return err
	}
	b.setPricing(key, seq, rev, hash)
	return nil
}

// setPricing makes rev, at seq, the pricing key's definition.
func (b *book) setPricing(key string, seq uint64, rev *events.PricingRevision, hash string) {
	b.prices[key] = &pricing{def: Price{Model: rev.Model, Unit: rev.Unit, Input: rev.Input, Output: rev.Output,
		CachedInput: rev.CachedInput, Version: seq}, src: *rev}
	b.hashes[key] = hash
	delete(b.seen, key)
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
	if err := l.live(); err != nil {
		return PriceChange{}, err
	}
	ctx, cancel := l.commitContext(ctx)
	defer cancel()
	key := streams.PricingKey(def.Model)
	for attempt := 0; attempt < l.opts.maxAttempts; attempt++ {
		if err := l.live(); err != nil {
			return PriceChange{}, err
		}
		if ctx.Err() != nil {
			return PriceChange{}, &events.Error{Code: events.CodeLedgerUnavailable, Message: "deadline passed writing pricing", Err: ctx.Err()}
		}
		l.mu.RLock()
		// rev names the compare-and-set, valid the chain (they differ
		// after a skipped revision; see DefineBudget).
		var cur Price
		var valid uint64
		if p := l.bk.prices[key]; p != nil {
			cur, valid = p.def, p.def.Version
		}
		rev := l.bk.rev(key)
		prevHash := l.bk.hashes[key]
		l.mu.RUnlock()
		var changed []string
		if valid > 0 {
			changed = def.Changes(cur)
			if len(changed) == 0 {
				latest, err := l.latestRev(ctx, key)
				if err != nil {
					return PriceChange{}, err
				}
				if latest == rev {
					return PriceChange{Price: cur, Existed: true, Prev: cur, Changed: []string{}}, nil
				}
				if err := l.catchUp(ctx, key); err != nil {
					return PriceChange{}, err
				}
				continue
			}
		}
		ev := events.PricingDefined{Model: def.Model, Unit: def.Unit, Input: def.Input, Output: def.Output,
			CachedInput: def.CachedInput, Changed: changed, At: now.UTC()}
		value := events.PricingRevision{Schema: events.SchemaPricing, Chain: events.Chain{Prev: valid, PrevHash: prevHash},
			Model: def.Model, Unit: def.Unit, Input: def.Input, Output: def.Output, CachedInput: def.CachedInput,
			Events: events.Events{ev}}
		data, err := json.Marshal(value)
		if err != nil {
			return PriceChange{}, &events.Error{Code: events.CodeInternal, Message: "encoding pricing", Err: err}
		}
		seq, err := l.publishOne(ctx, key, rev, data)
		if err == nil {
			l.mu.Lock()
			err = l.bk.applyPricing(key, seq, &value, events.HashPayload(data))
			l.mu.Unlock()
			if err != nil {
				return PriceChange{}, &events.Error{Code: events.CodeInternal, Message: "folding own pricing write", Err: err}
			}
			l.ownFolded()
			def.Version = seq
			if changed == nil {
				changed = []string{}
			}
			return PriceChange{Price: def, Existed: valid > 0, Prev: cur, Changed: changed}, nil
		}
		if !streams.IsConflict(err) && !isTimeout(err) {
			return PriceChange{}, &events.Error{Code: events.CodeLedgerUnavailable, Message: "writing pricing", Err: err}
		}
		if err := l.catchUp(ctx, key); err != nil {
			return PriceChange{}, err
		}
	}
	return PriceChange{}, events.Errorf(events.CodeLedgerBusy, "pricing %s: too many concurrent writers", def.Model)
}
