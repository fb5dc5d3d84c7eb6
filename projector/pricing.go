package projector

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Price is one version of a model's prices, as folded from its
// pricing.defined.v1 events.
type Price struct {
	Model       string
	Unit        string
	Input       events.Money
	Output      events.Money
	CachedInput *events.Money
	// Version is the stream sequence of the revision that set it.
	Version uint64
}

// pricingState is every version of every model's prices: a priced
// reservation names the version it used, which stays checkable after the
// price changed. It grows with the number of price changes, not with
// traffic.
type pricingState struct {
	current  map[string]uint64            // model -> version
	versions map[string]map[uint64]*Price // model -> version -> price
}

func (p *pricingState) clone() pricingState {
	c := pricingState{current: maps.Clone(p.current), versions: make(map[string]map[uint64]*Price, len(p.versions))}
	for m, vs := range p.versions {
		c.versions[m] = maps.Clone(vs) // *Price values are never mutated
	}
	return c
}

// Price returns the current price of model.
func (s *State) Price(model string) (Price, bool) {
	v, ok := s.pricing.current[model]
	if !ok {
		return Price{}, false
	}
	return *s.pricing.versions[model][v], true
}

// Prices returns the current price of every model, sorted by model.
func (s *State) Prices() []Price {
	out := make([]Price, 0, len(s.pricing.current))
	for m, v := range s.pricing.current {
		out = append(out, *s.pricing.versions[m][v])
	}
	slices.SortFunc(out, func(a, b Price) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// applyPricing folds one pricing revision: its chain, its
// pricing.defined.v1 events, and that it states what they define.
func (s *State) applyPricing(seq uint64, key string, data []byte) error {
	var rev events.PricingRevision
	if err := decodeStrict(data, &rev); err != nil {
		return err
	}
	if rev.Schema != events.SchemaPricing {
		return errorf(ErrMalformed, "schema %q under a pricing key", rev.Schema)
	}
	if err := events.ValidateModel(rev.Model); err != nil {
		return errorf(ErrMalformed, "%v", err)
	}
	if want := streams.PricingKey(rev.Model); want != key {
		return errorf(ErrMalformed, "revision of model %s belongs under key %s", rev.Model, want)
	}
	if len(rev.Events) == 0 {
		return errorf(ErrMalformed, "pricing revision without a PricingDefined event")
	}
	if err := events.CheckChain(key, seq, rev.Chain, s.pricing.current[rev.Model], s.hashes[key]); err != nil {
		return fmt.Errorf("%w: %w", ErrChain, err)
	}
	var p *Price
	for i, e := range rev.Events {
		ev, ok := e.(events.PricingDefined)
		if !ok {
			return errorf(ErrMalformed, "event %d (%s): not a pricing definition in a pricing revision", i, eventType(e))
		}
		if ev.Model != rev.Model {
			return errorf(ErrMalformed, "event %d (%s): model %s differs from the revision's", i, eventType(e), ev.Model)
		}
		if err := events.ValidateUnit(ev.Unit); err != nil || events.IsCount(ev.Unit) {
			return errorf(ErrMalformed, "event %d (%s): unit %q is not a currency", i, eventType(e), ev.Unit)
		}
		if ev.Input.Sign() < 0 || ev.Output.Sign() < 0 || ev.CachedInput != nil && ev.CachedInput.Sign() < 0 {
			return errorf(ErrMalformed, "event %d (%s): a negative price", i, eventType(e))
		}
		p = &Price{Model: ev.Model, Unit: ev.Unit, Input: ev.Input, Output: ev.Output, CachedInput: ev.CachedInput, Version: seq}
	}
	if rev.Unit != p.Unit {
		return &MismatchError{Field: "unit", Stated: rev.Unit, Folded: p.Unit}
	}
	if rev.Input.Cmp(p.Input) != 0 {
		return &MismatchError{Field: "input", Stated: rev.Input.String(), Folded: p.Input.String()}
	}
	if rev.Output.Cmp(p.Output) != 0 {
		return &MismatchError{Field: "output", Stated: rev.Output.String(), Folded: p.Output.String()}
	}
	if st, fo := slotString(rev.CachedInput), slotString(p.CachedInput); st != fo {
		return &MismatchError{Field: "cached_input", Stated: st, Folded: fo}
	}
	if s.pricing.versions[rev.Model] == nil {
		s.pricing.versions[rev.Model] = map[uint64]*Price{}
	}
	s.pricing.versions[rev.Model][seq] = p
	s.pricing.current[rev.Model] = seq
	s.hashes[key] = events.HashPayload(data)
	s.events += len(rev.Events)
	return nil
}

// checkQuote checks a priced ReservationOpened: its quote names a version
// of its model that the fold holds, with that version's prices, and a
// money balance reserved exactly the quote's maximum cost.
func (s *State) checkQuote(ev events.ReservationOpened) error {
	q := ev.Pricing
	if q == nil {
		return nil
	}
	p := s.pricing.versions[q.Model][q.Version]
	if p == nil {
		return errorf(ErrTransition, "reservation %s was priced at version %d of model %s, which the ledger never defined", ev.ReservationID, q.Version, q.Model)
	}
	if p.Unit != q.Unit || p.Input.Cmp(q.Input) != 0 || p.Output.Cmp(q.Output) != 0 || slotString(p.CachedInput) != slotString(q.CachedInput) {
		return errorf(ErrTransition, "reservation %s quotes prices of %s that differ from version %d", ev.ReservationID, q.Model, q.Version)
	}
	if q.InputTokens < 0 || q.MaxOutputTokens < 0 || q.InputTokens > events.MaxTokens || q.MaxOutputTokens > events.MaxTokens {
		return errorf(ErrTransition, "reservation %s quotes token counts out of range", ev.ReservationID)
	}
	if ev.Unit == q.Unit && ev.Ceiling != nil {
		// A learned reservation: at most the maximum, which is its
		// ceiling.
		if ev.Ceiling.Cmp(q.MaxCost()) != 0 || ev.Amount.Sign() <= 0 || ev.Amount.Cmp(*ev.Ceiling) > 0 {
			return errorf(ErrTransition, "reservation %s reserved %s with ceiling %s, but its quote's maximum cost is %s", ev.ReservationID, ev.Amount, ev.Ceiling, q.MaxCost())
		}
		return nil
	}
	if ev.Unit == q.Unit && ev.Amount.Cmp(q.MaxCost()) != 0 {
		return errorf(ErrTransition, "reservation %s reserved %s, but its quote's maximum cost is %s", ev.ReservationID, ev.Amount, q.MaxCost())
	}
	return nil
}

// checkUsage checks a settle from usage: it names the reservation's price
// version, its counts are in range, and in a money balance its actual is
// exactly the usage's cost at the reservation's quote.
func checkUsage(r *Reservation, b *Balance, ev events.ReservationSettled) error {
	u := *ev.Usage
	if r.Pricing == nil {
		return errorf(ErrTransition, "settle of reservation %s from usage, but it was not priced from a model", ev.ReservationID)
	}
	if u.PriceVersion != r.Pricing.Version {
		return errorf(ErrTransition, "settle of reservation %s priced usage at version %d; it was admitted at %d", ev.ReservationID, u.PriceVersion, r.Pricing.Version)
	}
	if err := events.ValidateUsage(u); err != nil {
		return errorf(ErrTransition, "settle of reservation %s: %v", ev.ReservationID, err)
	}
	if !events.IsCount(b.Unit) {
		// An exposure cap may have charged part of the cost as excess.
		charged := ev.Actual
		if ev.Excess != nil {
			charged = charged.Add(*ev.Excess)
		}
		if want := r.Pricing.Cost(u); charged.Cmp(want) != 0 {
			return errorf(ErrTransition, "settle of reservation %s states actual %s, but its usage costs %s at version %d", ev.ReservationID, charged, want, u.PriceVersion)
		}
	}
	return nil
}
