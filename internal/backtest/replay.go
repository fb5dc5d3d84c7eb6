package backtest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/streams"
)

// Policy is what a replay changes of the recorded budgets. Its zero value
// changes nothing: the replay then reproduces the recorded decisions.
type Policy struct {
	// Period selects the budget of the scope that Limit and FixedSlot
	// change (with Unit, when the scope has a money and a count budget in
	// that period); "" is the scope's only budget.
	Period events.Period
	Unit   string
	// Limit, when set, replaces the budget's limit in every definition.
	Limit *events.Money
	// FixedSlot, when set, replaces the budget's fixed slot in every
	// definition: each admit reserves it instead of its amount.
	FixedSlot *events.Money
	// Reserve, when set, is the amount an admit asks to reserve instead
	// of its recorded one (a reservation rule; it does not apply to a
	// budget with a fixed slot, whose slot wins, nor to denials). Money
	// only: never a float.
	Reserve func(s Step) events.Money
	// Learn, when set, reserves by observed cost (package internal/learn,
	// the rule the ledger applies). It becomes the learn rule of the
	// budget in every definition, so a priced admit (a step with Pricing)
	// is decided by the ledger's own rule: it reserves the rule's
	// percentile of the actual costs of the last calls of its model in
	// the scope, with the priced maximum as its ceiling (what
	// ExposureCap bounds and a settle is cut at). An admit with an amount
	// of its own (no Pricing) asks the same percentile of the calls of
	// its model (metadata "model") the replay settled without pricing, at
	// most what it asked, with no ceiling. On a cold start each asks what
	// it asked. It takes precedence over Reserve.
	Learn *events.LearnRule
	// ExposureCap, when set, replaces the budget's exposure cap in every
	// definition (events.BudgetDefinedV2.ExposureCap): an admit whose
	// ceiling would take the balance's exposure past it is denied
	// exposure_cap, and a settle is charged at most its ceiling (the
	// rest is excess, counted in Tally.Excess).
	ExposureCap *events.Money
}

// changes reports whether p changes anything.
func (p Policy) changes() bool {
	return p.Limit != nil || p.FixedSlot != nil || p.Reserve != nil || p.Learn != nil || p.ExposureCap != nil
}

// Options select what a replay reports.
type Options struct {
	// From and To report the admits and denials of [From, To) (a zero
	// bound is open). The replay still runs from the first recorded step:
	// the balances at From are what the policy left them.
	From, To time.Time
	// By are the metadata keys whose values group the blocked calls; nil
	// groups by every key the calls carry (at most MaxGroupKeys keys and
	// MaxGroupValues values per key; the rest add up under OtherValue).
	By []string
}

// Limits of a result's groups.
const (
	MaxGroupKeys   = 32
	MaxGroupValues = 500
	// OtherValue is the group of the values past MaxGroupValues.
	OtherValue = "(other)"
	// NoValue is the group of the calls without the key.
	NoValue = "(none)"
	// maxMismatches is how many mismatches a result lists (it counts all).
	maxMismatches = 20
)

// Validate checks p against h without replaying: the budget it changes
// must exist, the limit must not be negative, a slot must be positive.
//
// Errors (*events.Error): CodeInvalidAmount, CodeUnknownBudget (no budget
// of the scope in Period), CodeInvalidPeriod (several budgets and no
// Period to choose).
func (p Policy) Validate(h *History) (events.BudgetRef, error) {
	if p.Limit != nil && p.Limit.Sign() < 0 {
		return events.BudgetRef{}, events.Errorf(events.CodeInvalidAmount, "limit %s must not be negative", p.Limit)
	}
	if p.FixedSlot != nil && p.FixedSlot.Sign() <= 0 {
		return events.BudgetRef{}, events.Errorf(events.CodeInvalidAmount, "fixed slot %s must be greater than zero", p.FixedSlot)
	}
	if p.Learn != nil {
		if err := p.Learn.Validate(); err != nil {
			return events.BudgetRef{}, err
		}
	}
	if p.ExposureCap != nil && p.ExposureCap.Sign() < 0 {
		return events.BudgetRef{}, events.Errorf(events.CodeInvalidAmount, "exposure cap %s must not be negative", p.ExposureCap)
	}
	var refs []events.BudgetRef
	var all []string
	for _, s := range h.Steps {
		if s.Kind != KindBudget {
			continue
		}
		r := s.Budget.Ref
		name := string(r.Period)
		if r.Unit != "" {
			name += " (" + r.Unit + ")"
		}
		if !contains(all, name) {
			all = append(all, name)
		}
		if (p.Period == "" || r.Period == p.Period) && (p.Unit == "" || r.Unit == p.Unit) && !containsRef(refs, r) {
			refs = append(refs, r)
		}
	}
	sort.Strings(all)
	switch {
	case len(refs) == 1:
		return refs[0], nil
	case len(refs) == 0:
		return events.BudgetRef{}, events.Errorf(events.CodeUnknownBudget, "scope %s has no budget per %s; it has budgets per %v", h.Scope.Local(), p.Period, all)
	}
	return events.BudgetRef{}, events.Errorf(events.CodeInvalidPeriod, "scope %s has budgets per %v: name the period (and unit) whose limit the replay changes", h.Scope.Local(), all)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func containsRef(rs []events.BudgetRef, r events.BudgetRef) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// call is what the replay knows of one recorded admit.
type call struct {
	at       time.Time
	metadata map[string]string
	inWindow bool
	// id is the reservation the replay opened for it ("" when the replay
	// denied it), in refs.
	id   string
	refs []events.BalanceRef
	// asked is what it asked to reserve; model its model (metadata
	// "model"), what a learned reservation learns by; priced whether it
	// was replayed as a priced admit (the ledger learns from it).
	asked  events.Money
	model  string
	priced bool
}

// replay is one run of Replay.
type replay struct {
	h      *History
	pol    Policy
	target events.BudgetRef
	opts   Options
	exact  bool

	now   time.Time
	mem   *ledger.Memory
	adm   *admit.Admitter
	stl   *settle.Settler
	calls map[string]*call
	// learned is what a learned reservation rule has observed: the
	// actual costs the replay settled, by model.
	learned learn.State
	res     *Result
	grp     *grouper
	// ranOut is the first limit denial per balance of the target budget.
	ranOut map[string]*RunOut
	// final are the last stated numbers of each balance of the target;
	// touched every balance of the target the replay reserved in.
	final   map[string]events.BalanceRevision
	touched map[string]events.BalanceRef
	// finalAt is the step number at which final was last stated;
	// defined the limit of the target's recorded definition (before the
	// policy), and definedAt its step number: a definition after a
	// balance's last statement (a limit lowered with no admit since) is
	// the recorded limit at the end.
	finalAt   map[string]int
	defined   events.Money
	definedAt int
	// stepN numbers the step being replayed, from 1.
	stepN int
	// unit is the target budget's unit, as recorded.
	unit string
	// peak is the largest exposure and spent + reserved + exposure of
	// each balance of the target after any step.
	peak map[string]*[2]events.Money
	// stepRefs are the balances the current step reserved in or closed.
	stepRefs []events.BalanceRef
	seq      int
}

// Replay decides every admit of h again under pol, in h's order, with a
// ledger.Memory (the live ledger's book and rules) through the admit and
// settle packages (the live decisions): each admit at its recorded time,
// asking what it asked; each reservation the replay opened is settled,
// released or expired as recorded, with its recorded actual at its
// recorded time. A recorded admit the replay denies makes no call: its
// settle is not replayed, and its actual is what the policy saves. A
// recorded denial (by a budget of the scope) the replay admits is a call
// that would have been made: it is settled at once at what it asked (its
// cost was never measured; the reservation is its bound).
//
// Under a policy that changes nothing, the result's Exact says whether the
// replay reproduced every recorded decision and every stated balance.
//
// Errors: pol.Validate's; CodeInternal if the replay cannot run.
func Replay(ctx context.Context, h *History, pol Policy, opts Options) (*Result, error) {
	target, err := pol.Validate(h)
	if err != nil {
		return nil, err
	}
	r := &replay{h: h, pol: pol, target: target, opts: opts, exact: !pol.changes(), mem: ledger.NewMemory(),
		calls: map[string]*call{}, ranOut: map[string]*RunOut{}, final: map[string]events.BalanceRevision{}, finalAt: map[string]int{},
		touched: map[string]events.BalanceRef{}, peak: map[string]*[2]events.Money{},
		grp: newGrouper(opts.By)}
	clock := func() time.Time { return r.now }
	if r.adm, err = admit.New(r.mem, admit.WithClock(clock), admit.WithTTL(events.DefaultTTL, events.MinTTL, events.MaxTTL)); err != nil {
		return nil, events.Errorf(events.CodeInternal, "backtest: %v", err)
	}
	if r.stl, err = settle.New(r.mem, settle.WithClock(clock)); err != nil {
		return nil, events.Errorf(events.CodeInternal, "backtest: %v", err)
	}
	r.res = newResult(h, pol, target, opts)
	if t := h.Scope.Tenant(); t != "" {
		ctx = events.ContextWithTenant(ctx, t)
	}
	for i := range h.Steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.stepN = i + 1
		if err := r.step(ctx, &h.Steps[i]); err != nil {
			return nil, err
		}
	}
	r.finish()
	return r.res, nil
}

func (r *replay) inWindow(t time.Time) bool {
	return (r.opts.From.IsZero() || !t.Before(r.opts.From)) && (r.opts.To.IsZero() || t.Before(r.opts.To))
}

// mismatch records a difference from the record under an unchanged policy.
func (r *replay) mismatch(s *Step, format string, args ...any) {
	if !r.exact {
		return
	}
	r.res.Exact.Mismatches++
	if len(r.res.Exact.Examples) < maxMismatches {
		r.res.Exact.Examples = append(r.res.Exact.Examples, fmt.Sprintf("seq %d %s %s at %s: ", s.Seq, s.Kind, s.ReservationID, s.At.Format(time.RFC3339Nano))+fmt.Sprintf(format, args...))
	}
}

func (r *replay) step(ctx context.Context, s *Step) error {
	r.now = s.At
	switch s.Kind {
	case KindBudget:
		def := *s.Budget
		if def.Ref == r.target {
			r.defined, r.definedAt, r.unit = def.Limit, r.stepN, def.Unit
			if r.pol.Limit != nil {
				def.Limit = *r.pol.Limit
			}
			if r.pol.FixedSlot != nil {
				slot := *r.pol.FixedSlot
				def.FixedSlot = &slot
			}
			if r.pol.Learn != nil {
				rule := *r.pol.Learn
				def.Learn = &rule
			}
			if r.pol.ExposureCap != nil {
				c := *r.pol.ExposureCap
				def.ExposureCap = &c
			}
		}
		if err := r.mem.Define(def); err != nil {
			return err
		}
	case KindAdmit:
		r.admit(ctx, s)
	case KindSettle, KindRelease, KindExpire:
		r.close(ctx, s)
	case KindDenial:
		r.denial(ctx, s)
	}
	r.check(s)
	r.watch()
	return nil
}

// watch records the peaks of the target's balances the step changed.
func (r *replay) watch() {
	refs := r.stepRefs
	r.stepRefs = nil
	for _, ref := range refs {
		if ref.Budget() != r.target {
			continue
		}
		k := streams.BalanceKey(ref)
		b := r.mem.Balance(ref)
		p := r.peak[k]
		if p == nil {
			p = &[2]events.Money{}
			r.peak[k] = p
		}
		p[0] = p[0].Max(b.Exposure)
		p[1] = p[1].Max(b.Spent.Add(b.Reserved).Add(b.Exposure))
	}
}

// request is the admit request that asks again what s asked.
func (r *replay) request(s *Step, id string, amount events.Money) events.AdmitRequest {
	unit := s.Unit
	if amount.Sign() <= 0 {
		// Only count budgets: the amount decides nothing.
		amount, unit = events.MoneyFromInt(1), ""
	}
	req := events.AdmitRequest{RequestID: id, Scopes: []string{string(r.h.Scope.Local())},
		Amount: amount.String(), Unit: unit}
	if s.TTL > 0 {
		req.TTL = s.TTL.String()
	}
	if s.Count > 1 {
		req.Count = s.Count
	}
	return req
}

// pricedRequest is the priced admit that asks again what s asked: its
// model, input and maximum output tokens, at the recorded quote's prices
// (made the replay's current price of the model first, when they are
// not). The ledger prices it, and a budget with a learn rule reserves
// by its own rule, with the priced maximum as the ceiling.
func (r *replay) pricedRequest(s *Step, id string) events.AdmitRequest {
	q := s.Pricing
	p, ok := r.mem.Price(q.Model)
	if !ok || p.Unit != q.Unit || p.Input.Cmp(q.Input) != 0 || p.Output.Cmp(q.Output) != 0 || (p.CachedInput == nil) != (q.CachedInput == nil) ||
		p.CachedInput != nil && p.CachedInput.Cmp(*q.CachedInput) != 0 {
		r.mem.DefinePrice(ledger.Price{Model: q.Model, Unit: q.Unit, Input: q.Input, Output: q.Output, CachedInput: q.CachedInput})
	}
	req := events.AdmitRequest{RequestID: id, Scopes: []string{string(r.h.Scope.Local())}, Model: q.Model,
		InputTokens: q.InputTokens, MaxOutputTokens: q.MaxOutputTokens}
	if s.TTL > 0 {
		req.TTL = s.TTL.String()
	}
	if s.Count > 1 {
		req.Count = s.Count
	}
	return req
}

func (r *replay) admit(ctx context.Context, s *Step) {
	in := r.inWindow(s.At)
	c := &call{at: s.At, metadata: s.Metadata, inWindow: in, asked: s.Amount, model: s.Metadata[report.MetadataModel]}
	r.calls[s.ReservationID] = c
	amount := s.Amount
	// The request id is the recorded reservation's id: unique, where a
	// request id may come back after the ledger forgot it.
	var req events.AdmitRequest
	switch {
	case s.Pricing != nil && r.pol.Reserve == nil:
		// Priced as recorded: the ledger's rules decide what it reserves.
		c.priced = true
		req = r.pricedRequest(s, s.ReservationID)
	case r.pol.Learn != nil && amount.Sign() > 0:
		amount = learn.Reserve(*r.pol.Learn, r.learned.Window(r.learnKey(c.model)), amount).Amount
		req = r.request(s, s.ReservationID, amount)
	case r.pol.Reserve != nil:
		req = r.request(s, s.ReservationID, r.pol.Reserve(*s))
	default:
		req = r.request(s, s.ReservationID, amount)
	}
	reply, err := r.adm.Admit(ctx, req)
	if in {
		r.res.Recorded.Admitted++
	}
	switch {
	case err != nil:
		r.mismatch(s, "the replay's admit failed: %v", err)
		r.res.Errors++
	case reply.Admitted:
		c.id, c.refs = reply.ReservationID, reply.Balances
		r.touch(reply.Balances)
		if in {
			r.res.Replayed.Admitted++
		}
	default:
		r.mismatch(s, "recorded admitted, the replay denies it: %s", reply.Denial.Message)
		r.denied(s, reply.Denial, in)
		if in {
			r.res.NewlyDenied.Calls++
			r.res.NewlyDenied.Asked = r.res.NewlyDenied.Asked.Add(s.Amount)
			r.grp.add(s.Metadata, func(g *Group) {
				g.NewlyDenied++
				g.ReplayDenied++
				g.ReplayDeniedAmount = g.ReplayDeniedAmount.Add(s.Amount)
			})
		}
	}
}

// learnKey is the learned window a call of model learns from.
func (r *replay) learnKey(model string) learn.Key { return learn.Key{Scope: r.h.Scope, Model: model} }

// observe folds a settled call's actual cost into the learned state (of
// the calls replayed without pricing: the ledger learns from the priced
// ones).
func (r *replay) observe(model string, actual events.Money) {
	if r.pol.Learn != nil {
		r.learned.Observe(r.learnKey(model), actual)
	}
}

// denied counts a denial of the replay.
func (r *replay) denied(s *Step, d *events.Denial, in bool) {
	if !in {
		return
	}
	r.res.Replayed.Denied++
	r.res.Replayed.DeniedAmount = r.res.Replayed.DeniedAmount.Add(r.askedIn(s))
	if d != nil && d.Reason == events.ReasonExposureCap {
		r.res.Replayed.ExposureCapDenied++
	}
	if d != nil && d.Reason == events.ReasonLimitReached && d.Scope == r.target.Scope && d.Period == r.target.Period {
		r.runOut(d.Instance, s.At, false)
	}
}

func (r *replay) runOut(instance string, at time.Time, recorded bool) {
	ro := r.ranOut[instance]
	if ro == nil {
		ro = &RunOut{Instance: instance}
		r.ranOut[instance] = ro
	}
	p := &ro.Replayed
	if recorded {
		p = &ro.Recorded
	}
	if *p == nil {
		t := at
		*p = &t
	}
}

func (r *replay) close(ctx context.Context, s *Step) {
	c := r.calls[s.ReservationID]
	if c == nil {
		// Opened before the scope's history (cannot happen in a whole
		// history) or in another scope only.
		r.mismatch(s, "closes a reservation the history never opened")
		return
	}
	if s.Kind == KindSettle && c.inWindow {
		r.res.Recorded.Spent = r.res.Recorded.Spent.Add(s.Amount.Sub(s.Excess))
		r.res.Recorded.Excess = r.res.Recorded.Excess.Add(s.Excess)
	}
	if c.id == "" {
		// The replay denied its admit: the call was never made.
		if s.Kind == KindSettle && c.inWindow {
			r.res.NewlyDenied.Spent = r.res.NewlyDenied.Spent.Add(s.Amount)
			r.grp.add(c.metadata, func(g *Group) { g.Saved = g.Saved.Add(s.Amount) })
		}
		return
	}
	var err error
	var reply events.CloseReply
	r.stepRefs = c.refs
	switch s.Kind {
	case KindSettle:
		reply, err = r.stl.Settle(ctx, events.SettleRequest{ReservationID: c.id, Actual: s.Amount.String()})
		if err == nil && !c.priced {
			r.observe(c.model, s.Amount)
		}
		if err == nil && c.inWindow {
			r.res.Replayed.Spent = r.res.Replayed.Spent.Add(s.Amount)
			if reply.Excess != "" {
				if x, perr := events.ParseMoney(reply.Excess); perr == nil {
					r.res.Replayed.Excess = r.res.Replayed.Excess.Add(x)
				}
			}
		}
	case KindRelease:
		reply, err = r.stl.Release(ctx, events.ReleaseRequest{ReservationID: c.id})
	case KindExpire:
		reply, err = r.stl.Expire(ctx, c.id)
	}
	if err != nil {
		r.mismatch(s, "the replay's %s failed: %v", s.Kind, err)
		r.res.Errors++
		return
	}
	if reply.Replayed {
		r.mismatch(s, "the replay's %s found it already %s", s.Kind, reply.Status)
	}
}

// askedIn is what denial s asked, counted in the target budget's
// amounts: nothing when it asked in another currency (a unit_mismatch
// denial by the scope's budget), which no sum in the budget's unit holds.
func (r *replay) askedIn(s *Step) events.Money {
	unit := s.Unit
	if unit == "" {
		unit = defaultUnit
	}
	if r.unit != "" && !events.IsCount(r.unit) && unit != r.unit {
		return events.Zero
	}
	return s.Amount
}

// defaultUnit is an admit's unit when it names none.
const defaultUnit = "USD"

func (r *replay) denial(ctx context.Context, s *Step) {
	in := r.inWindow(s.At)
	if in {
		r.res.Recorded.Denied++
		r.res.Recorded.DeniedAmount = r.res.Recorded.DeniedAmount.Add(r.askedIn(s))
		if d := s.Denial; d.Reason == events.ReasonLimitReached && d.Scope == r.target.Scope && d.Period == r.target.Period {
			r.runOut(d.Instance, s.At, true)
		}
		if d := s.Denial; d.Reason == events.ReasonExposureCap && d.Scope == r.target.Scope && d.Period == r.target.Period {
			r.res.Recorded.ExposureCapDenied++
		}
		if s.Placed == PlacedByTime {
			r.res.PlacedByTime++
		}
	}
	if !s.Redecide {
		// Denied by another scope's budget, or for a reason no limit
		// changes: denied again.
		if in {
			r.res.DeniedElsewhere++
			r.denied(s, nil, in)
			r.grp.add(s.Metadata, func(g *Group) {
				g.RecordedDenied++
				g.ReplayDenied++
				g.ReplayDeniedAmount = g.ReplayDeniedAmount.Add(r.askedIn(s))
			})
		}
		return
	}
	r.seq++
	id := "backtest-denial-" + strconv.Itoa(r.seq)
	reply, err := r.adm.Admit(ctx, r.request(s, id, s.Amount))
	switch {
	case err != nil:
		r.mismatch(s, "the replay's admit of a recorded denial failed: %v", err)
		r.res.Errors++
	case reply.Admitted:
		r.touch(reply.Balances)
		r.mismatch(s, "recorded denied (%s), the replay admits it", s.Denial.Reason)
		// Its cost was never measured: settled at what it asked.
		if _, err := r.stl.Settle(ctx, events.SettleRequest{ReservationID: reply.ReservationID, Actual: s.Amount.String()}); err != nil {
			r.res.Errors++
		} else {
			r.observe(s.Metadata[report.MetadataModel], s.Amount)
		}
		if in {
			r.res.Replayed.Admitted++
			r.res.Replayed.Spent = r.res.Replayed.Spent.Add(s.Amount)
			r.res.NewlyAdmitted.Calls++
			r.res.NewlyAdmitted.Asked = r.res.NewlyAdmitted.Asked.Add(s.Amount)
			r.grp.add(s.Metadata, func(g *Group) { g.RecordedDenied++; g.NewlyAdmitted++ })
		}
	default:
		d := reply.Denial
		if ref := s.Refs[0]; d.Scope != ref.Scope || d.Period != ref.Period || d.Instance != ref.Instance || d.Reason != s.Denial.Reason {
			r.mismatch(s, "recorded denied by %s per %s %s (%s), the replay by %s per %s %s (%s)",
				ref.Scope, ref.Period, ref.Instance, s.Denial.Reason, d.Scope, d.Period, d.Instance, d.Reason)
		}
		r.denied(s, d, in)
		if in {
			r.grp.add(s.Metadata, func(g *Group) {
				g.RecordedDenied++
				g.ReplayDenied++
				g.ReplayDeniedAmount = g.ReplayDeniedAmount.Add(r.askedIn(s))
			})
		}
	}
}

// touch notes the balances of the target among refs.
func (r *replay) touch(refs []events.BalanceRef) {
	r.stepRefs = refs
	for _, b := range refs {
		if (events.BudgetRef{Scope: b.Scope, Period: b.Period, Unit: b.Unit}) == r.target {
			r.touched[streams.BalanceKey(b)] = b
		}
	}
}

// check compares the numbers a revision stated with the replay's.
func (r *replay) check(s *Step) {
	for _, b := range s.Stated {
		ref := events.BudgetRef{Scope: b.Balance.Scope, Period: b.Balance.Period, Unit: b.Balance.Unit}
		if ref == r.target {
			r.final[streams.BalanceKey(b.Balance)] = b
			r.finalAt[streams.BalanceKey(b.Balance)] = r.stepN
		}
		if !r.exact {
			continue
		}
		got := r.mem.Balance(b.Balance)
		if got.Limit.Cmp(b.Limit) != 0 || got.Spent.Cmp(b.Spent) != 0 || got.Reserved.Cmp(b.Reserved) != 0 ||
			got.Overrun.Cmp(b.Overrun) != 0 || int64(got.Open) != b.Open {
			r.mismatch(s, "balance %s per %s %s: recorded limit %s spent %s reserved %s overrun %s open %d, replayed limit %s spent %s reserved %s overrun %s open %d",
				b.Balance.Scope, b.Balance.Period, b.Balance.Instance, b.Limit, b.Spent, b.Reserved, b.Overrun, b.Open,
				got.Limit, got.Spent, got.Reserved, got.Overrun, got.Open)
		}
	}
}

// finish fills the result's balances, run-outs and groups.
func (r *replay) finish() {
	refs := map[string]events.BalanceRef{}
	for k, b := range r.final {
		refs[k] = b.Balance
	}
	for k, b := range r.touched {
		refs[k] = b
	}
	keys := make([]string, 0, len(refs))
	for k := range refs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		got := r.mem.Balance(refs[k])
		out := BalanceOutcome{Instance: refs[k].Instance,
			Replayed: Numbers{Limit: got.Limit, Spent: got.Spent, Reserved: got.Reserved, Overrun: got.Overrun, Open: int64(got.Open), Exposure: got.Exposure}}
		if b, ok := r.final[k]; ok {
			out.Recorded = &Numbers{Limit: b.Limit, Spent: b.Spent, Reserved: b.Reserved, Overrun: b.Overrun, Open: b.Open}
			if r.definedAt > r.finalAt[k] {
				out.Recorded.Limit = r.defined
			}
			if b.Exposure != nil {
				out.Recorded.Exposure = *b.Exposure
			}
		}
		if p := r.peak[k]; p != nil {
			out.MaxExposure, out.MaxCommitted = p[0], p[1]
		}
		r.res.Balances = append(r.res.Balances, out)
	}
	inst := make([]string, 0, len(r.ranOut))
	for k := range r.ranOut {
		inst = append(inst, k)
	}
	sort.Strings(inst)
	for _, k := range inst {
		r.res.RanOut = append(r.res.RanOut, *r.ranOut[k])
	}
	r.res.Groups = r.grp.groups()
	r.res.Exact.Same = r.res.Exact.Checked && r.res.Exact.Mismatches == 0
}
