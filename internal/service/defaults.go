package service

import (
	"context"
	"fmt"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
)

// defaultPut defines the default budget of a scope kind (budget.put with
// scope "kind:*"), or changes the fields the put names, as a budget put
// does: one default.defined.v1 event. Budgets already created from the
// default keep their definition.
func (s *Service) defaultPut(ctx context.Context, kind string, req events.BudgetPutRequest) (any, error) {
	// Validated as a budget of one scope of the kind would be.
	req.Scope = kind + ":x"
	local := kind
	kind = storedKind(ctx, kind)
	ref, edit, err := parseBudgetPut(req)
	if err != nil {
		return nil, err
	}
	ch, err := s.l.EditDefault(ctx, kind, ref.Period, edit, req.Replace, s.now())
	if err != nil {
		return nil, err
	}
	return putReply(defaultView(local, ch.Budget), ch), nil
}

// defaultGet answers budget.get of "kind:*": the kind's defaults (of one
// period, or all), each as the budget a new scope of the kind would get.
func (s *Service) defaultGet(ctx context.Context, kind, period string) (any, error) {
	if period != "" {
		if _, err := events.ParsePeriod(period); err != nil {
			return nil, err
		}
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	ds := s.l.DefaultsOf(storedKind(ctx, kind))
	out := events.BudgetListReply{Budgets: []events.BudgetView{}}
	for _, d := range ds {
		if period == "" || string(d.Def.Ref.Period) == period {
			out.Budgets = append(out.Budgets, defaultView(kind, d.Def))
		}
	}
	if period != "" {
		if len(out.Budgets) == 0 {
			return nil, events.Errorf(events.CodeUnknownBudget, "no default budget is defined for kind %s per %s", kind, period)
		}
		return out.Budgets[0], nil
	}
	if len(out.Budgets) == 0 {
		return nil, events.Errorf(events.CodeUnknownBudget, "no default budget is defined for kind %s", kind)
	}
	return out, nil
}

// storedKind is kind as the ledger stores it for the request's tenant:
// a tenant's defaults apply to its own scopes only ("<tenant>/<kind>").
func storedKind(ctx context.Context, kind string) string {
	return events.TenantScope(events.TenantFromContext(ctx), events.Scope(kind+":x")).Kind()
}

// defaultView shows a default as the budget a new scope of its kind gets:
// scope "kind:*", nothing spent, no period instance.
func defaultView(kind string, b ledger.Budget) events.BudgetView {
	v := events.BudgetView{
		Scope: events.Scope(kind + ":" + events.DefaultScopeID), Period: b.Ref.Period, Limit: b.Limit.String(), Unit: b.Unit,
		Spent: "0", Reserved: "0", Overrun: "0", Available: b.Limit.String(), TZ: b.TZ, Disabled: b.Disabled,
		Thresholds: moneyStrings(b.Thresholds),
	}
	if b.FixedSlot != nil {
		n := b.Limit.Slots(*b.FixedSlot)
		v.FixedSlot, v.MaxInFlight = b.FixedSlot.String(), n.String()
		v.OvershootBound = fmt.Sprintf("%s x (cost of one call - %s)", n, b.FixedSlot)
	}
	if b.ExposureCap != nil {
		v.Exposure, v.ExposureCap = "0", b.ExposureCap.String()
	}
	if b.Learn != nil {
		v.Learn = b.Learn.String()
	}
	return v
}
