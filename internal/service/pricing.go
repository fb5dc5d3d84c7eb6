package service

import (
	"context"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
)

// pricingPut sets a model's prices: one pricing.defined.v1 event.
func (s *Service) pricingPut(ctx context.Context, data []byte) (any, error) {
	var req events.PricingPutRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if events.TenantFromContext(ctx) != "" {
		// One pricing table serves every tenant: only the deployment's
		// own administration changes it.
		return nil, events.Errorf(events.CodeInvalidRequest, "the pricing table is shared by every tenant; prices are set on spendgate.pricing.put, not for one tenant")
	}
	def, err := ParsePricingPut(req)
	if err != nil {
		return nil, err
	}
	ch, err := s.l.DefinePrice(ctx, def, s.now())
	if err != nil {
		return nil, err
	}
	out := events.PricingPutReply{PriceView: PriceView(ch.Price), Created: !ch.Existed, Changed: ch.Changed}
	if ch.Existed && len(ch.Changed) > 0 {
		prev := PriceView(ch.Prev)
		out.Previous = &prev
	}
	return out, nil
}

// ParsePricingPut validates a pricing put. Errors (*events.Error), in
// precedence order: CodeInvalidModel, CodeInvalidUnit (not a currency),
// CodeInvalidAmount (input, output, cached_input: each message names its
// field).
func ParsePricingPut(req events.PricingPutRequest) (ledger.Price, error) {
	if err := events.ValidateModel(req.Model); err != nil {
		return ledger.Price{}, err
	}
	unit := req.Unit
	if unit == "" {
		unit = "USD"
	}
	if err := events.ValidateUnit(unit); err != nil {
		return ledger.Price{}, err
	}
	if events.IsCount(unit) {
		return ledger.Price{}, events.Errorf(events.CodeInvalidUnit, "a price is in a currency, not in %s", unit)
	}
	in, err := events.ParsePrice("input", req.Input)
	if err != nil {
		return ledger.Price{}, err
	}
	out, err := events.ParsePrice("output", req.Output)
	if err != nil {
		return ledger.Price{}, err
	}
	p := ledger.Price{Model: req.Model, Unit: unit, Input: in, Output: out}
	if req.CachedInput != "" {
		c, err := events.ParsePrice("cached_input", req.CachedInput)
		if err != nil {
			return ledger.Price{}, err
		}
		p.CachedInput = &c
	}
	return p, nil
}

// PriceView is p on the wire.
func PriceView(p ledger.Price) events.PriceView {
	v := events.PriceView{Model: p.Model, Unit: p.Unit, Input: p.Input.String(), Output: p.Output.String(), Version: p.Version, DefinedAt: p.At}
	if p.CachedInput != nil {
		v.CachedInput = p.CachedInput.String()
	}
	return v
}

// pricingGet reads one model's current prices (read-your-writes: it syncs
// first). An unpriced model is the error unpriced_model.
func (s *Service) pricingGet(ctx context.Context, data []byte) (any, error) {
	var req events.PricingGetRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if err := events.ValidateModel(req.Model); err != nil {
		return nil, err
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	p, ok := s.l.Price(req.Model)
	if !ok {
		return nil, events.Errorf(events.CodeUnpricedModel, "model %s has no price", req.Model)
	}
	return PriceView(p), nil
}

// pricingList lists every priced model, sorted by model.
func (s *Service) pricingList(ctx context.Context, data []byte) (any, error) {
	var req events.PricingListRequest
	if len(data) > 0 {
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	ps := s.l.Prices()
	out := events.PricingListReply{Prices: make([]events.PriceView, 0, len(ps))}
	for _, p := range ps {
		out.Prices = append(out.Prices, PriceView(p))
	}
	return out, nil
}
