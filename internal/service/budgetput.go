package service

import (
	"context"
	"strconv"
	"strings"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
)

func (s *Service) budgetPut(ctx context.Context, data []byte) (any, error) {
	var req events.BudgetPutRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if kind, ok, err := events.ParseDefaultScope(req.Scope); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return s.defaultPut(ctx, kind, req)
	}
	ref, edit, err := parseBudgetPut(req)
	if err != nil {
		return nil, err
	}
	ref.Scope = events.TenantScope(events.TenantFromContext(ctx), ref.Scope)
	// Fold every lane and definition written so far, from any replica,
	// before the edit reads the definition it changes.
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	// A tenant's put that would create a budget past its limit is refused
	// before anything is written; a change of one it has never is.
	ch, err := s.l.EditBudgetWithin(ctx, ref, req.Unit, edit, s.budgetLimit(ref.Scope.Tenant()), s.now())
	if err != nil {
		return nil, err
	}
	v, err := s.BudgetView(ch.Budget.Ref)
	if err != nil {
		return nil, err
	}
	return putReply(v, ch), nil
}

func (s *Service) budgetRetire(ctx context.Context, data []byte) (any, error) {
	var req events.BudgetRetireRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if kind, id, ok := strings.Cut(req.Scope, ":"); ok && id == events.DefaultScopeID {
		return nil, events.Errorf(events.CodeInvalidIdentifier,
			"%s is a default, not a budget: a default is never retired; retire the budgets it created one by one (--scope %s:ID), or let serve --retire-idle %s=DURATION retire them once idle", req.Scope, kind, kind)
	}
	scope, err := events.ParseScope(req.Scope)
	if err != nil {
		return nil, err
	}
	period, err := events.ParsePeriod(req.Period)
	if err != nil {
		return nil, err
	}
	if req.Unit != "" {
		if err := events.ValidateUnit(req.Unit); err != nil {
			return nil, err
		}
	}
	ref := events.BudgetRef{Scope: events.TenantScope(events.TenantFromContext(ctx), scope), Period: period}
	// Fold every definition written so far, from any replica, first.
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	b, already, err := s.l.RetireBudget(ctx, ref, req.Unit, req.Reason, s.now())
	if err != nil {
		return nil, err
	}
	v, err := s.BudgetView(b.Ref)
	if err != nil {
		return nil, err
	}
	return events.BudgetRetireReply{BudgetView: v, Already: already}, nil
}

// putReply is the reply to a put of a budget (v, its view) or a default.
func putReply(v events.BudgetView, ch ledger.BudgetChange) events.BudgetPutReply {
	out := events.BudgetPutReply{BudgetView: v, Created: !ch.Existed, Changed: ch.Changed}
	if ch.Existed && len(ch.Changed) > 0 {
		out.Previous = &events.BudgetDefinition{Limit: ch.Prev.Limit.String(), Unit: ch.Prev.Unit, TZ: ch.Prev.TZ, Disabled: ch.Prev.Disabled,
			Thresholds: moneyStrings(ch.Prev.Thresholds)}
		if ch.Prev.FixedSlot != nil {
			out.Previous.FixedSlot = ch.Prev.FixedSlot.String()
		}
		if ch.Prev.ExposureCap != nil {
			out.Previous.ExposureCap = ch.Prev.ExposureCap.String()
		}
		if ch.Prev.Learn != nil {
			out.Previous.Learn = ch.Prev.Learn.String()
		}
	}
	return out
}

// parseBudgetPut validates a budget put and returns the budget it names
// and the edit that applies it to the current definition: the fields the
// put names replace the current ones, the others are kept (all of them
// reset with Replace). Errors (*events.Error), in precedence order:
// CodeInvalidIdentifier (scope), CodeInvalidPeriod, CodeInvalidAmount
// (limit: its message names "limit"; 0 without allow_zero),
// CodeInvalidUnit, CodeInvalidTZ, CodeInvalidAmount (fixed_slot: not a
// decimal > 0), the thresholds' code, CodeInvalidRequest (alerts false
// with thresholds). With replace, a missing limit or unit is
// CodeInvalidAmount or CodeInvalidUnit. The edit returns, when the budget
// does not exist, CodeUnknownBudget (no limit) or CodeInvalidUnit (no
// unit), and CodeInvalidAmount for a fixed slot on a count budget.
func parseBudgetPut(req events.BudgetPutRequest) (events.BudgetRef, ledger.BudgetEdit, error) {
	scope, err := events.ParseScope(req.Scope)
	if err != nil {
		return events.BudgetRef{}, nil, err
	}
	period, err := events.ParsePeriod(req.Period)
	if err != nil {
		return events.BudgetRef{}, nil, err
	}
	var limit *events.Money
	if req.Limit != "" || req.Replace {
		l, err := events.ParseMoneyField("limit", req.Limit)
		if err != nil {
			return events.BudgetRef{}, nil, err
		}
		if l.IsZero() && !req.AllowZero {
			return events.BudgetRef{}, nil, events.Errorf(events.CodeInvalidAmount,
				"limit 0 denies every admit; to mean that, put \"allow_zero\": true (or \"disabled\": true to switch the budget off)")
		}
		limit = &l
	}
	if req.Unit != "" || req.Replace {
		if err := events.ValidateUnit(req.Unit); err != nil {
			return events.BudgetRef{}, nil, err
		}
	}
	if req.TZ != nil {
		if _, err := events.LoadZone(*req.TZ); err != nil {
			return events.BudgetRef{}, nil, err
		}
	}
	var slot *events.Money
	if req.FixedSlot != nil && *req.FixedSlot != "" {
		s, err := events.ParseMoneyField("fixed_slot", *req.FixedSlot)
		if err != nil {
			return events.BudgetRef{}, nil, err
		}
		if s.IsZero() {
			return events.BudgetRef{}, nil, events.Errorf(events.CodeInvalidAmount, "fixed_slot must be greater than zero (\"\" removes it)")
		}
		slot = &s
	}
	var thresholds []events.Money
	if len(req.Thresholds) > 0 {
		if req.Alerts != nil && !*req.Alerts {
			return events.BudgetRef{}, nil, events.Errorf(events.CodeInvalidRequest, "alerts false turns alerts off; thresholds turn them on: give one or the other")
		}
		if thresholds, err = events.ParseThresholds(req.Thresholds); err != nil {
			return events.BudgetRef{}, nil, err
		}
	}
	var exposureCap *events.Money
	if req.ExposureCap != nil && *req.ExposureCap != "" {
		c, err := events.ParseMoneyField("exposure_cap", *req.ExposureCap)
		if err != nil {
			return events.BudgetRef{}, nil, err
		}
		exposureCap = &c
	}
	learnRule, err := parseLearn(req)
	if err != nil {
		return events.BudgetRef{}, nil, err
	}
	edit := func(cur ledger.Budget, existed bool) (ledger.Budget, error) {
		def := cur
		if !existed || req.Replace {
			def = ledger.Budget{}
		}
		switch {
		case limit != nil:
			def.Limit = *limit
		case !existed && req.Unit != "":
			// It names a unit: it defines the budget, and lacks its limit.
			return ledger.Budget{}, events.Errorf(events.CodeInvalidAmount, "limit is required to define the budget %s per %s", scope.Local(), period)
		case !existed:
			return ledger.Budget{}, events.Errorf(events.CodeUnknownBudget, "no budget is defined for scope %s per %s; a put that defines one needs limit and unit", scope.Local(), period)
		}
		if req.Unit != "" {
			def.Unit = req.Unit
		} else if !existed {
			return ledger.Budget{}, events.Errorf(events.CodeInvalidUnit, "unit is required to define the budget %s per %s (a currency such as USD, or requests)", scope.Local(), period)
		}
		if req.TZ != nil {
			def.TZ = *req.TZ
		}
		if req.Disabled != nil {
			def.Disabled = *req.Disabled
		}
		if req.FixedSlot != nil {
			def.FixedSlot = slot
		}
		switch {
		case thresholds != nil:
			def.Thresholds = thresholds
		case req.Alerts != nil && !*req.Alerts:
			def.Thresholds = nil
		case req.Alerts != nil && len(def.Thresholds) == 0:
			def.Thresholds = events.DefaultThresholds
		}
		if req.ExposureCap != nil {
			def.ExposureCap = exposureCap
		}
		if req.Learn != nil {
			def.Learn = learnRule
		}
		if def.Learn != nil && events.IsCount(def.Unit) {
			return ledger.Budget{}, events.Errorf(events.CodeInvalidRequest, "learn applies to money budgets; a %s budget reserves 1 per admit", def.Unit)
		}
		if def.FixedSlot != nil && events.IsCount(def.Unit) {
			return ledger.Budget{}, events.Errorf(events.CodeInvalidAmount, "fixed_slot applies to money budgets; a %s budget reserves 1 per admit", def.Unit)
		}
		return def, nil
	}
	return events.BudgetRef{Scope: scope, Period: period}, edit, nil
}

// parseLearn reads the learn fields of a put: nil when learn is absent or
// "" (removed). Errors: CodeInvalidRequest (learn is not "p1" to "p100",
// learn_* without learn, a bound out of range), CodeInvalidAmount
// (learn_floor).
func parseLearn(req events.BudgetPutRequest) (*events.LearnRule, error) {
	if req.Learn == nil || *req.Learn == "" {
		if req.LearnWindow != 0 || req.LearnMinSamples != 0 || req.LearnFloor != "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "learn_window, learn_min_samples and learn_floor shape a learn rule: give learn (\"p95\") with them")
		}
		return nil, nil
	}
	r := events.DefaultLearnRule()
	p, ok := strings.CutPrefix(*req.Learn, "p")
	n, err := strconv.Atoi(p)
	if !ok || err != nil || strconv.Itoa(n) != p {
		return nil, events.Errorf(events.CodeInvalidRequest, "learn %q must be a percentile from \"p1\" to \"p100\", like \"p95\"", *req.Learn)
	}
	r.Percentile = n
	if req.LearnWindow != 0 {
		r.Window = req.LearnWindow
	}
	if req.LearnMinSamples != 0 {
		r.MinSamples = req.LearnMinSamples
	} else if r.MinSamples > r.Window {
		r.MinSamples = r.Window
	}
	if req.LearnFloor != "" {
		f, err := events.ParseMoneyField("learn_floor", req.LearnFloor)
		if err != nil {
			return nil, err
		}
		r.Floor = f
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}
