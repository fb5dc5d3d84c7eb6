package admit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// Admitter admits reservations against a ledger.
type Admitter struct {
	l    Ledger
	opts options
	// defaults counts the budgets being created from defaults, per
	// tenant (tenants.go).
	defaults defaultBudgets
}

// Ledger is what an Admitter uses of the ledger: a *ledger.Ledger, or in
// a test of its decisions anything that hands its Txs a ledger.View.
type Ledger interface {
	// BudgetsOf returns the budgets of scope; DefaultsOf the defaults of
	// a scope kind; CreateFromDefault creates a scope's budget from a
	// default on its first admit.
	BudgetsOf(scope events.Scope) []ledger.Budget
	DefaultsOf(kind string) []ledger.Default
	CreateFromDefault(ctx context.Context, scope events.Scope, d ledger.Default, now time.Time) (bool, error)
	// Price returns a model's price.
	Price(model string) (ledger.Price, bool)
	// Sync returns once what the ledger stream held at the call is
	// folded.
	Sync(ctx context.Context) error
	// ByRequest returns the reservation the book holds for a request id;
	// TenantOpen a tenant's open reservations as folded, and
	// TenantDefaultBudgetsAnd its budgets from defaults as folded with
	// whether each of refs has no budget yet, read at one instant (for
	// the tenant limits, tenants.go).
	ByRequest(rid string) (*ledger.Reservation, bool)
	TenantOpen(tenant string) int
	TenantDefaultBudgetsAnd(tenant string, refs []events.BudgetRef) (int, []bool)
	// SubmitAll decides and commits txs, and returns each one's error.
	SubmitAll(ctx context.Context, txs []ledger.Tx) []error
}

var _ Ledger = (*ledger.Ledger)(nil)

// New returns an Admitter over l.
func New(l Ledger, opts ...Option) (*Admitter, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Admitter{l: l, opts: o}, nil
}

// request is a validated AdmitRequest.
type request struct {
	id       string
	scopes   []events.Scope
	amount   events.Money
	unit     string
	ttl      time.Duration
	metadata map[string]string
	mode     string
	hash     string
	// model, inputTokens and maxOutput price the request from the pricing
	// table (model != ""); quote is the price read, set by Admit.
	model       string
	inputTokens int64
	maxOutput   int64
	quote       *events.PriceQuote
	// count is what the request reserves in a requests budget.
	count int64
	// alertBlocking: a check decided for an admit (deniedAnyway) makes
	// the blocking alert of a budget with alerts that denies it, as the
	// admit would.
	alertBlocking bool
}

// Validate checks an AdmitRequest without touching the ledger.
//
// Errors (*events.Error), in precedence order: CodeInvalidIdentifier
// (request id), CodeInvalidRequest (no scopes, too many, one named twice),
// CodeInvalidIdentifier (a scope); for a request priced from a model
// CodeInvalidRequest (an amount too), CodeInvalidModel, CodeInvalidTokens,
// otherwise CodeInvalidRequest (token counts without a model),
// CodeInvalidAmount; then CodeInvalidAmount (count), CodeInvalidUnit,
// CodeInvalidTTL, CodeInvalidMetadata, CodeInvalidMode.
func (a *Admitter) Validate(req events.AdmitRequest) error {
	_, err := a.validate(req)
	return err
}

func (a *Admitter) validate(req events.AdmitRequest) (request, error) {
	var r request
	if err := events.ValidateToken("request_id", req.RequestID, events.MaxIDLen); err != nil {
		return r, err
	}
	r.id = req.RequestID
	if len(req.Scopes) == 0 {
		return r, events.Errorf(events.CodeInvalidRequest, "scopes: at least one scope is required")
	}
	if len(req.Scopes) > events.MaxScopes {
		return r, events.Errorf(events.CodeInvalidRequest, "scopes: at most %d scopes per admit", events.MaxScopes)
	}
	for _, s := range req.Scopes {
		sc, err := events.ParseScope(s)
		if err != nil {
			return r, err
		}
		if slices.Contains(r.scopes, sc) {
			// One scope twice would reserve once and read as two
			// budgets applied: refused, not merged.
			return r, events.Errorf(events.CodeInvalidRequest, "scopes: %s is named twice; name each scope once", sc)
		}
		r.scopes = append(r.scopes, sc)
	}
	r.scopes = events.SortScopes(r.scopes)
	if req.Model != "" {
		if err := r.priced(req); err != nil {
			return r, err
		}
	} else {
		if req.InputTokens != 0 || req.InputChars != 0 || req.MaxOutputTokens != 0 {
			return r, events.Errorf(events.CodeInvalidRequest, "input_tokens, input_chars and max_output_tokens price a model: give model with them, or an amount without them")
		}
		amt, err := events.ParseMoney(req.Amount)
		if err != nil {
			return r, err
		}
		if amt.IsZero() {
			return r, events.Errorf(events.CodeInvalidAmount, "amount must be greater than zero")
		}
		r.amount = amt
	}
	r.count = 1
	if req.Count != 0 {
		if req.Count < 0 || req.Count > events.MaxCount {
			return r, events.Errorf(events.CodeInvalidAmount, "count %d must be from 1 to %d", req.Count, events.MaxCount)
		}
		r.count = req.Count
	}
	r.unit = req.Unit
	if r.unit == "" && r.model == "" {
		r.unit = a.opts.defaultUnit
	}
	if err := events.ValidateUnit(r.unit); r.unit != "" && err != nil {
		return r, err
	}
	if events.IsCount(r.unit) {
		return r, events.Errorf(events.CodeInvalidUnit, "the request's unit is its currency; %q is a budget count unit", r.unit)
	}
	r.ttl = a.opts.defaultTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			return r, events.Errorf(events.CodeInvalidTTL, "ttl %q is not a duration such as \"30s\" or \"5m\"", req.TTL)
		}
		r.ttl = d
	}
	if r.ttl < a.opts.minTTL || r.ttl > a.opts.maxTTL {
		given := r.ttl.String()
		if req.TTL != "" {
			given = req.TTL // as the caller wrote it: 1000h, not 1000h0m0s
		}
		return r, events.Errorf(events.CodeInvalidTTL, "ttl %s is outside [%v, %v]", given, a.opts.minTTL, a.opts.maxTTL)
	}
	if len(req.Metadata) > events.MaxMetadata {
		return r, events.Errorf(events.CodeInvalidMetadata, "metadata has %d entries; the limit is %d", len(req.Metadata), events.MaxMetadata)
	}
	for k, v := range req.Metadata {
		if err := events.ValidateToken("metadata key", k, 64); err != nil {
			return r, &events.Error{Code: events.CodeInvalidMetadata, Message: err.(*events.Error).Message}
		}
		if len(v) > events.MaxMetaLen {
			return r, events.Errorf(events.CodeInvalidMetadata, "metadata %q is longer than %d bytes", k, events.MaxMetaLen)
		}
		if strings.IndexFunc(v, unprintable) >= 0 || !utf8.ValidString(v) {
			return r, events.Errorf(events.CodeInvalidMetadata, "metadata %q must be UTF-8 text without control characters (bidirectional controls included)", k)
		}
	}
	r.metadata = req.Metadata
	switch req.Mode {
	case "", events.ModeAdmit:
		r.mode = events.ModeAdmit
	case events.ModeCheck, events.ModeShadow:
		r.mode = req.Mode
	default:
		return r, events.Errorf(events.CodeInvalidMode, "mode %q must be \"admit\", \"check\" or \"shadow\"", req.Mode)
	}
	// The mode is not part of the request's fingerprint: a check of a
	// request id already admitted with the same body answers as the retry
	// would, a replay.
	r.hash = hashRequest(r)
	return r, nil
}

// priced validates the model fields of a request priced from the pricing
// table. Errors, in order: CodeInvalidRequest (an amount too),
// CodeInvalidModel, CodeInvalidTokens.
func (r *request) priced(req events.AdmitRequest) error {
	if req.Amount != "" {
		return events.Errorf(events.CodeInvalidRequest, "give an amount or a model to price, not both")
	}
	if err := events.ValidateModel(req.Model); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		n    int64
	}{{"input_tokens", req.InputTokens}, {"input_chars", req.InputChars}, {"max_output_tokens", req.MaxOutputTokens}} {
		if err := events.CheckTokens(f.name, f.n); err != nil {
			return err
		}
	}
	if req.InputTokens != 0 && req.InputChars != 0 {
		return events.Errorf(events.CodeInvalidTokens, "give input_tokens or input_chars, not both")
	}
	r.model = req.Model
	r.inputTokens = req.InputTokens
	if req.InputChars != 0 {
		r.inputTokens = req.InputChars * events.CharsPerToken
	}
	r.maxOutput = req.MaxOutputTokens
	if r.inputTokens == 0 && r.maxOutput == 0 {
		return events.Errorf(events.CodeInvalidTokens, "nothing to price: give input_tokens (or input_chars) and max_output_tokens")
	}
	return nil
}

// hashRequest fingerprints everything that determines an admission, in a
// canonical form, so a retry with an equal body matches whatever its JSON
// field order or amount spelling ("0.050" and "0.05"). Fields are written
// length-prefixed so no two different requests share an encoding.
func hashRequest(r request) string {
	h := sha256.New()
	var buf []byte
	field := func(s string) {
		buf = strconv.AppendInt(buf[:0], int64(len(s)), 10)
		buf = append(buf, ':')
		buf = append(buf, s...)
		h.Write(buf)
	}
	for _, s := range r.scopes {
		field(string(s))
	}
	field("|")
	if r.model != "" {
		// A priced request is fingerprinted by what it prices, not by the
		// amount the table gave it: a retry replays even if the price
		// changed in between.
		field("model")
		field(r.model)
		field(strconv.FormatInt(r.inputTokens, 10))
		field(strconv.FormatInt(r.maxOutput, 10))
	}
	field(r.amount.String())
	if r.count != 1 {
		field("count")
		field(strconv.FormatInt(r.count, 10))
	}
	field(r.unit)
	field(strconv.FormatInt(int64(r.ttl), 10))
	keys := make([]string, 0, len(r.metadata))
	for k := range r.metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field(k)
		field(r.metadata[k])
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// Admit reserves req.Amount in every budget of every scope of req, or in
// none. A denial is a reply, not an error: Admitted is false and Denial says
// which budget blocked it and why (limit_reached, unknown_budget,
// unit_mismatch, budget_disabled), with its limit, spent, reserved and the
// amount requested. An admission lists every budget it applied to in
// Budgets, with what remains after it. A budget with a fixed slot reserves
// the slot instead of req.Amount; a requests budget reserves 1.
//
// With req.Mode check or shadow, Admit decides exactly as an admit would,
// against the same balances (in the same commit group as concurrent
// admits), and writes nothing: no reservation, no request id remembered.
// Its reply has Mode set and no ReservationID, ExpiresAt or Status (a
// check of an id already admitted with the same body answers Replayed
// with that reservation, as a retry would).
//
// An admitted reply carries the reservation's Status: open for a new
// admission; for a replay (Replayed set: the request id and body were seen
// before), the reservation's state now, which may be settled, released or
// expired. A replay is answered only while the replica remembers the
// request id: while its reservation is open, then for the ledger's
// retention after it closed (ledger.DefaultRetention, 15 minutes, or
// ledger.DefaultExpiredRetention, 48 hours, for an expired one). A denial
// is not remembered: a retried denied request is decided again.
//
// A request priced from a model (Model set) reserves its maximum cost at
// the model's current price (see price); an unpriced model is denied
// (unpriced_model). A scope without a budget in a period takes its kind's
// default for that period (see budgets). A threshold an admission crosses is written with
// it (events.ThresholdCrossed) and handed to WithAlerts after the commit.
//
// If ctx carries a tenant (events.ContextWithTenant), the request acts
// for that tenant only: its scopes name the tenant's budgets and its
// request id is remembered apart from every other tenant's; the reply names
// scopes and the request id as the tenant sent them.
//
// Errors (*events.Error), in precedence order: the validation errors of
// Validate; CodeInvalidIdentifier (ctx's tenant); CodeTenantLimit (the
// tenant holds its limit of open reservations, or the admit would create a
// budget from a default past its limit: see WithTenantLimits; for a retry,
// req.Retry, CodeLedgerUnavailable instead); CodeInvalidUnit (a unit
// other than the model's price); CodeRequestVoided (the request id was
// voided, see settle.Settler.Void: nothing is reserved, however often it
// is retried); CodeIdempotencyMismatch (the request id was used with another
// body; it carries that reservation's ReservationID and Status);
// CodeLedgerBusy, CodeLedgerUnavailable (also for a retry, req.Retry,
// that would be denied: see events.AdmitRequest.Retry). On any error
// nothing was reserved by this attempt.
func (a *Admitter) Admit(ctx context.Context, req events.AdmitRequest) (events.AdmitReply, error) {
	out, errs := a.AdmitAll(ctx, []events.AdmitRequest{req})
	return out[0], errs[0]
}

// AdmitAll admits every request of reqs as Admit would, each validated,
// decided and answered on its own (out[i], errs[i] answer reqs[i]), and
// submits them to the ledger at once (ledger.Ledger.SubmitAll), so that
// they fold into the same group commits. They share ctx's deadline.
func (a *Admitter) AdmitAll(ctx context.Context, reqs []events.AdmitRequest) (out []events.AdmitReply, errs []error) {
	out, errs = make([]events.AdmitReply, len(reqs)), make([]error, len(reqs))
	var txs []ledger.Tx
	var idx []int
	for i, req := range reqs {
		tx, denied, err := a.prepare(ctx, req)
		switch {
		case err != nil:
			errs[i] = retryRefusal(req, err)
		case denied != nil:
			out[i], errs[i] = answerDenial(ctx, req, *denied)
		default:
			txs = append(txs, tx)
			idx = append(idx, i)
		}
	}
	if len(txs) == 0 {
		return out, errs
	}
	for j, err := range a.l.SubmitAll(ctx, txs) {
		if err != nil {
			errs[idx[j]] = retryRefusal(reqs[idx[j]], err)
			continue
		}
		tx := txs[j].(*admitTx)
		if len(tx.alerts) > 0 && tx.req.mode == events.ModeAdmit && a.opts.alerts != nil {
			// Crossings this commit wrote: published once, by this
			// replica, after the commit.
			a.opts.alerts(tx.alerts)
		}
		if tx.blocked != nil && tx.reply.Denial != nil && a.opts.blocking != nil {
			a.opts.blocking(*tx.blocked)
		}
		out[idx[j]], errs[idx[j]] = answerDenial(ctx, reqs[idx[j]], tx.reply)
	}
	return out, errs
}

// answerDenial is answer, except for a denied retry (req.Retry) of a real
// admit: its request id is not in the book (a replay would have been
// answered), but an earlier attempt of it may still be deciding or writing
// on some replica and commit after this answer; a denial now could then
// contradict what the ledger ends up holding (a committed admit was once
// answered limit_reached, whose reservation held budget until its TTL).
// So the retry's outcome is unknown: CodeLedgerUnavailable, which callers
// retry (or end with a void of the request id, as the Go client does).
// Any other reply is answer's.
func answerDenial(ctx context.Context, req events.AdmitRequest, reply events.AdmitReply) (events.AdmitReply, error) {
	if reply.Denial == nil || !req.Retry || (req.Mode != "" && req.Mode != events.ModeAdmit) {
		return answer(ctx, req, reply), nil
	}
	return events.AdmitReply{}, events.Errorf(events.CodeLedgerUnavailable,
		"request_id %s: this retry would be denied (%s), but an earlier attempt of it may still commit, so its outcome is unknown: retry with the same request, or void the request id",
		req.RequestID, reply.Denial.Reason)
}

// brief returns the budgets of a reply to req: none if it asked for a
// brief reply.
func brief(req events.AdmitRequest, budgets []events.BudgetUse) []events.BudgetUse {
	if req.Brief {
		return nil
	}
	return budgets
}

// prepare validates req (as its tenant's, if ctx names one) and finds its
// budgets: the Tx to submit, or the denial to answer, or the error.
func (a *Admitter) prepare(ctx context.Context, req events.AdmitRequest) (*admitTx, *events.AdmitReply, error) {
	r, err := a.validate(req)
	if err != nil {
		return nil, nil, err
	}
	if err := events.CheckHeld(ctx, "admit with", req.RequestID); err != nil {
		return nil, nil, err
	}
	if tenant := events.TenantFromContext(ctx); tenant != "" {
		if err := events.ValidateTenant(tenant); err != nil {
			return nil, nil, err
		}
		r = r.inTenant(tenant)
		if err := a.preCheckOpen(tenant, r); err != nil {
			return nil, nil, err
		}
	}
	return a.plan(ctx, r)
}

// answer is the reply to req: reply as req's tenant names things (if ctx
// names one), without budgets if req asked for a brief reply.
func answer(ctx context.Context, req events.AdmitRequest, reply events.AdmitReply) events.AdmitReply {
	if events.TenantFromContext(ctx) != "" {
		reply = localReply(reply, req.RequestID)
	}
	reply.Budgets = brief(req, reply.Budgets)
	return reply
}

// inTenant is r as tenant t's request: its scopes and request id qualified
// by t (events.TenantScope, events.TenantRequestID), so it can only touch
// t's budgets and only replay t's admissions.
func (r request) inTenant(t string) request {
	r.id = events.TenantRequestID(t, r.id)
	scopes := make([]events.Scope, len(r.scopes))
	for i, s := range r.scopes {
		scopes[i] = events.TenantScope(t, s)
	}
	r.scopes = scopes
	r.hash = hashRequest(r)
	return r
}

// localReply is reply as the tenant that sent request id names things:
// scopes without the tenant, its own request id.
func localReply(reply events.AdmitReply, id string) events.AdmitReply {
	reply.RequestID = id
	reply.Balances = events.LocalBalances(reply.Balances)
	if reply.Budgets != nil {
		uses := make([]events.BudgetUse, len(reply.Budgets))
		for i, u := range reply.Budgets {
			u.Scope = u.Scope.Local()
			uses[i] = u
		}
		reply.Budgets = uses
	}
	if reply.Denial != nil {
		d := *reply.Denial
		d.Scope = d.Scope.Local()
		reply.Denial = &d
	}
	return reply
}

// plan finds the budgets of the validated request r: the Tx to submit, or
// the denial to answer, or the error.
func (a *Admitter) plan(ctx context.Context, r request) (*admitTx, *events.AdmitReply, error) {
	now := a.opts.now().UTC()
	if r.model != "" {
		denial, err := a.price(ctx, &r)
		if err != nil {
			return nil, nil, err
		}
		if denial != nil {
			return nil, &events.AdmitReply{RequestID: r.id, Denial: denial, Mode: r.replyMode()}, nil
		}
	}
	if r.mode == events.ModeAdmit && a.needsDefaults(r) {
		if denied, err := a.deniedAnyway(ctx, r, now); err != nil || denied != nil {
			return nil, denied, err
		}
	}
	return a.planBudgets(ctx, r, now)
}

// needsDefaults reports whether a scope of r has no budget in a period its
// kind has a default for (as the book stands: budgets names it for sure).
func (a *Admitter) needsDefaults(r request) bool {
	for _, s := range r.scopes {
		if len(a.defaultsFor(s, a.l.BudgetsOf(s))) > 0 {
			return true
		}
	}
	return false
}

// deniedAnyway decides admit r as a check first, when a scope of it would
// take budgets from defaults (which, once created, stay for good): the
// denial, as r's reply, if the check is denied, so that an admit denied
// anyway creates none (a key whose every call is denied, naming a new end
// user each time, made a budget per call); nil, and r is decided for real,
// creating them, if it is admitted. A denial by a budget with alerts
// publishes its blocking alert from the check, as the admit would have:
// it creates nothing either (it used to be left to the real decision,
// which made the budgets of every scope from defaults on each denied call).
func (a *Admitter) deniedAnyway(ctx context.Context, r request, now time.Time) (*events.AdmitReply, error) {
	c := r
	c.mode = events.ModeCheck
	c.alertBlocking = r.mode == events.ModeAdmit
	tx, denied, err := a.planBudgets(ctx, c, now)
	if err != nil {
		return nil, err
	}
	if denied == nil {
		if err := a.l.SubmitAll(ctx, []ledger.Tx{tx})[0]; err != nil {
			return nil, err
		}
		if tx.reply.Denial == nil {
			return nil, nil
		}
		if tx.blocked != nil && a.opts.blocking != nil {
			a.opts.blocking(*tx.blocked)
		}
		denied = &tx.reply
	}
	reply := events.AdmitReply{RequestID: r.id, Denial: denied.Denial, Mode: r.replyMode()}
	return &reply, nil
}

// planBudgets is plan after pricing: r's budgets, and its Tx or denial.
func (a *Admitter) planBudgets(ctx context.Context, r request, now time.Time) (*admitTx, *events.AdmitReply, error) {
	budgets, virtual, denial, err := a.budgets(ctx, r, now)
	if err != nil {
		return nil, nil, err
	}
	if denial != nil {
		return nil, &events.AdmitReply{RequestID: r.id, Denial: denial, Mode: r.replyMode()}, nil
	}
	tx := &admitTx{req: r, now: now, virtual: virtual}
	if len(r.scopes) > 0 {
		tx.tenant = r.scopes[0].Tenant()
	}
	tx.maxOpen, _ = a.limitsOf(tx.tenant)
	if r.mode == events.ModeAdmit {
		tx.id = "rsv_" + uuid.Must(uuid.NewV7()).String()
	}
	// The period instance of each budget is computed once, here, in the
	// budget's time zone, and stored with the reservation.
	for _, b := range budgets {
		tx.refs = append(tx.refs, b.Balance(now))
		tx.locs = append(tx.locs, b.Loc)
	}
	return tx, nil, nil
}

// price sets r's amount, unit and quote from the pricing table: the
// maximum cost of its input and max output tokens at the model's current
// price. A model without a price is denied unpriced_model (after a sync,
// in case it was priced through another replica a moment ago), never
// costed at zero.
//
// Errors: CodeInvalidUnit (the request's unit is not the price's),
// CodeLedgerUnavailable.
func (a *Admitter) price(ctx context.Context, r *request) (*events.Denial, error) {
	p, ok := a.l.Price(r.model)
	if !ok {
		if err := a.l.Sync(ctx); err != nil {
			return nil, err
		}
		p, ok = a.l.Price(r.model)
	}
	if !ok {
		return &events.Denial{Reason: events.ReasonUnpricedModel, Model: r.model,
			Message: fmt.Sprintf("model %s has no price in the pricing table; it is never costed at zero", r.model)}, nil
	}
	if r.unit != "" && r.unit != p.Unit {
		return nil, events.Errorf(events.CodeInvalidUnit, "model %s is priced in %s, the request names %s", r.model, p.Unit, r.unit)
	}
	q := p.Quote(r.inputTokens, r.maxOutput)
	r.quote, r.unit, r.amount = &q, p.Unit, q.MaxCost()
	return nil, nil
}

// replyMode is the Mode of the reply: empty for a real admit.
func (r request) replyMode() string {
	if r.mode == events.ModeAdmit {
		return ""
	}
	return r.mode
}

// budgets returns every budget of every scope of r. A scope without a
// budget in a period takes its kind's default for that period: a real admit
// creates them for the scope (ledger.CreateFromDefault: once, whatever the
// replicas racing it); a check or shadow admit writes nothing and returns
// them as virtual budgets, which the Tx decides against as new, empty
// ones. A scope with neither denies the request (fail closed), after a
// sync with the stream in case a budget or default was defined through
// another replica a moment ago.
func (a *Admitter) budgets(ctx context.Context, r request, now time.Time) ([]ledger.Budget, map[string]ledger.Budget, *events.Denial, error) {
	var out []ledger.Budget
	var virtual map[string]ledger.Budget
	synced := false
	for _, s := range r.scopes {
		bs := a.l.BudgetsOf(s)
		if slices.ContainsFunc(bs, func(b ledger.Budget) bool { return b.Retired }) {
			// A scope with a retired budget is over (an agent run that
			// ended): no default creates a budget for it again, and the
			// Tx denies the admit (budget_retired) after it answers a
			// replay, a voided id or a reused one as for any scope.
			out = append(out, bs...)
			continue
		}
		ds := a.defaultsFor(s, bs)
		// "No budget" must be definitive, and a budget created from a
		// default must be created from the latest one (a default changed
		// through another replica a moment ago): both sync first. A
		// scope's first use is rare, so the sync costs little.
		if (len(bs) == 0 || len(ds) > 0) && !synced {
			// A tenant already at its limit of budgets from defaults is
			// refused before the sync: a flood of new scopes costs no
			// read of the stream (reserveDefault decides after it).
			if len(ds) > 0 {
				if err := a.checkDefaults(s, ds); err != nil {
					return nil, nil, nil, err
				}
			}
			synced = true
			// "No budget" must be a definitive answer: if the replica
			// cannot catch up, the ledger is unavailable, not the budget.
			if err := a.l.Sync(ctx); err != nil {
				return nil, nil, nil, err
			}
			bs = a.l.BudgetsOf(s)
			ds = a.defaultsFor(s, bs)
		}
		// A tenant's budgets from defaults are bounded: taken before any
		// is created, given back once they are folded (or not written).
		// A check or shadow admit creates none: it is only refused as its
		// admit would be.
		done := func() {}
		switch {
		case len(ds) == 0:
		case r.mode == events.ModeAdmit:
			var err error
			if done, err = a.reserveDefault(s, ds); err != nil {
				return nil, nil, nil, err
			}
		default:
			if err := a.checkDefaults(s, ds); err != nil {
				return nil, nil, nil, err
			}
		}
		for _, d := range ds {
			if r.mode != events.ModeAdmit {
				if virtual == nil {
					virtual = map[string]ledger.Budget{}
				}
				b := d.For(s, bs)
				virtual[streams.BalanceKey(b.Balance(now))] = b
				bs = append(bs, b)
				continue
			}
			if _, err := a.l.CreateFromDefault(ctx, s, d, now); err != nil {
				done()
				return nil, nil, nil, err
			}
		}
		done()
		if len(ds) > 0 && r.mode == events.ModeAdmit {
			bs = a.l.BudgetsOf(s)
		}
		if len(bs) == 0 {
			return nil, nil, &events.Denial{
				Reason: events.ReasonUnknownBudget, Scope: s,
				Message: fmt.Sprintf("no budget is defined for scope %s, and no default for kind %s", s.Local(), s.Local().Kind()),
			}, nil
		}
		out = append(out, bs...)
	}
	return out, virtual, nil, nil
}

// defaultsFor returns the defaults of s's kind for the periods and kinds
// of unit (count or money) in which s has no budget (bs, its budgets, own
// or from defaults): defaults apply per period and kind, so a scope with a
// day budget of its own still takes its kind's month default, and one
// with a requests budget of its own its kind's money default.
func (a *Admitter) defaultsFor(s events.Scope, bs []ledger.Budget) []ledger.Default {
	ds := a.l.DefaultsOf(s.Kind())
	if len(ds) == 0 {
		return nil
	}
	var missing []ledger.Default
	for _, d := range ds {
		if !slices.ContainsFunc(bs, d.Covers) {
			missing = append(missing, d)
		}
	}
	return missing
}

// admitTx reserves one request in every balance it names.
type admitTx struct {
	req  request
	now  time.Time
	id   string
	refs []events.BalanceRef
	// locs are the time zones of refs' budgets.
	locs  []*time.Location
	reply events.AdmitReply
	// virtual are the budgets a check or shadow admit would create from
	// defaults, by balance key (see budgets).
	virtual map[string]ledger.Budget
	// alerts are the thresholds the decision crossed; blocked the
	// blocking alert of a limit_reached denial by a budget with alerts on.
	alerts  []events.ThresholdCrossed
	blocked *events.Alert
	// tenant is the tenant the request acts for; maxOpen its limit of
	// open reservations (negative: none).
	tenant  string
	maxOpen limit
}

func (t *admitTx) Balances() []events.BalanceRef { return t.refs }

// resetsAt is when refs[i]'s period instance ends, in UTC (nil for
// lifetime).
func (t *admitTx) resetsAt(i int) *time.Time {
	end, ok := events.CalendarOf(t.refs[i].Period, t.locs[i]).ResetAt(t.now)
	if !ok {
		return nil
	}
	end = end.UTC()
	return &end
}

// balance is ref's balance in v; for a check or shadow admit, a budget
// its default would create counts as defined (t.virtual).
func (t *admitTx) balance(v ledger.View, ref events.BalanceRef) ledger.Balance {
	b := v.Balance(streams.BalanceKey(ref))
	if vb, ok := t.virtual[streams.BalanceKey(ref)]; ok && !b.Defined {
		b.Defined, b.Unit, b.Limit, b.Disabled, b.FixedSlot, b.Thresholds = true, vb.Unit, vb.Limit, vb.Disabled, vb.FixedSlot, vb.Thresholds
		b.ExposureCap, b.Learn = vb.ExposureCap, vb.Learn
	}
	return b
}

// deny sets the reply's denial by ref's balance b.
func (t *admitTx) deny(ref events.BalanceRef, b ledger.Balance, reason events.Code, msg string) {
	t.reply.Denial = &events.Denial{
		Reason: reason, Message: msg, Scope: ref.Scope, Period: ref.Period, Instance: ref.Instance,
		Unit: b.Unit, Limit: b.Limit.String(), Spent: b.Spent.String(), Reserved: b.Reserved.String(),
		Requested: t.req.amount.String(),
	}
}

func (t *admitTx) Decide(v ledger.View) (events.Events, error) {
	t.reply = events.AdmitReply{RequestID: t.req.id, Mode: t.req.replyMode()}
	if v.Voided(t.req.id) {
		return nil, events.Errorf(events.CodeRequestVoided,
			"request_id %s was voided; nothing is reserved for it (use a new request id)", events.LocalRequestID(t.req.id))
	}
	if prior, ok := v.ByRequest(t.req.id); ok {
		if prior.RequestHash != t.req.hash {
			return nil, events.ReservationErrorf(events.CodeIdempotencyMismatch, prior.ID, prior.Status,
				"request_id %s was already used with a different body (reservation %s, %s)", events.LocalRequestID(t.req.id), prior.ID, prior.Status)
		}
		t.reply = admittedReply(t.req, prior.ID, prior.Balances, prior.ExpiresAt)
		t.reply.Status = prior.Status
		if prior.Pricing != nil {
			// The replay answers with what was reserved, at the price
			// version the admission used.
			t.reply.Amount, t.reply.Unit, t.reply.Pricing = prior.Pricing.MaxCost().String(), prior.Pricing.Unit, prior.Pricing
		}
		t.reply.Replayed = true
		return nil, nil
	}
	if err := t.checkOpen(v); err != nil {
		return nil, err
	}
	expires := t.now.Add(t.req.ttl)
	t.alerts, t.blocked = nil, nil
	evs := make(events.Events, 0, len(t.refs))
	uses := make([]events.BudgetUse, 0, len(t.refs))
	// A reason no reset lifts (no budget, disabled, another unit) is named
	// before a limit that one does, whatever the order of the scopes: a
	// caller told when a limit resets would be denied again then.
	for _, ref := range t.refs {
		b := t.balance(v, ref)
		var reason events.Code
		var msg string
		switch {
		case !b.Defined:
			reason, msg = events.ReasonUnknownBudget, fmt.Sprintf("no budget is defined for %s per %s", ref.Scope.Local(), ref.Period)
		case b.Retired:
			reason, msg = events.ReasonBudgetRetired, fmt.Sprintf("budget %s per %s was retired", ref.Scope.Local(), ref.Period)
		case b.Disabled:
			reason, msg = events.ReasonBudgetDisabled, fmt.Sprintf("budget %s per %s is disabled", ref.Scope.Local(), ref.Period)
		case !events.IsCount(b.Unit) && b.Unit != t.req.unit:
			reason, msg = events.ReasonUnitMismatch, fmt.Sprintf("budget %s per %s is in %s, the request in %s", ref.Scope.Local(), ref.Period, b.Unit, t.req.unit)
		default:
			continue
		}
		t.deny(ref, b, reason, msg)
		return nil, nil
	}
	for i, ref := range t.refs {
		b := t.balance(v, ref)
		deny := func(reason events.Code, msg string) { t.deny(ref, b, reason, msg) }
		amt := t.req.amount
		// ceiling is what the reservation may settle at in this budget,
		// when that is above amt (a learned reservation's priced maximum).
		var ceiling *events.Money
		switch {
		case events.IsCount(b.Unit):
			amt = events.MoneyFromInt(t.req.count)
		case b.FixedSlot != nil:
			amt = *b.FixedSlot
		case b.Learn != nil && t.req.quote != nil:
			// Reserve by observed cost, at most the priced maximum, which
			// is the ceiling (set even on a cold start, when it is the
			// amount: it marks the reservation as one the rule learns
			// from).
			d := learn.Reserve(*b.Learn, v.Learned(learn.Key{Scope: ref.Scope, Model: t.req.model}), t.req.amount)
			amt, ceiling = d.Amount, &d.Ceiling
		}
		if b.Spent.Add(b.Reserved).Add(amt).Cmp(b.Limit) > 0 {
			msg := fmt.Sprintf("%s per %s: spent %s + reserved %s + requested %s exceeds the limit %s %s",
				ref.Scope.Local(), ref.Period, b.Spent, b.Reserved, amt, b.Limit, b.Unit)
			if amt.Cmp(b.Limit) > 0 {
				// No wait makes it fit: say so, so that no caller retries.
				msg = fmt.Sprintf("%s per %s: requested %s exceeds the whole limit %s %s: it can never be admitted in this budget (ask less, or raise the limit)",
					ref.Scope.Local(), ref.Period, amt, b.Limit, b.Unit)
			}
			deny(events.ReasonLimitReached, msg)
			t.reply.Denial.Requested = amt.String()
			if amt.Cmp(b.Limit) <= 0 {
				t.reply.Denial.ResetsAt = t.resetsAt(i)
			}
			// The blocking alert says the budget is full: not for a
			// request that could never fit (the budget may be nearly
			// empty), which would spend the arm's one blocking alert and
			// leave the real blocking unannounced.
			if len(b.Thresholds) > 0 && (t.req.mode == events.ModeAdmit || t.req.alertBlocking) && amt.Cmp(b.Limit) <= 0 {
				a := events.BlockingAlert(ref, b.Unit, b.Limit, b.Spent.Add(b.Reserved), amt.String(),
					events.LocalRequestID(t.req.id), b.Arm, t.now)
				t.blocked = &a
			}
			return nil, nil
		}
		if b.ExposureCap != nil {
			// The most this admit may add above what it holds, on top of
			// what the open reservations may add already, must stay
			// within the cap: then spent <= limit + cap however every
			// reservation settles (settle charges at most the ceiling).
			part := ledger.Part{Amount: amt, Ceiling: ceiling}
			if add := part.Exposure(); add.Sign() > 0 && b.Exposure.Add(add).Cmp(*b.ExposureCap) > 0 {
				deny(events.ReasonExposureCap, fmt.Sprintf("%s per %s: exposure %s + this admit's %s (ceiling %s - reserved %s) exceeds the exposure cap %s %s",
					ref.Scope.Local(), ref.Period, b.Exposure, part.Exposure(), ceiling, amt, *b.ExposureCap, b.Unit))
				t.reply.Denial.Requested = amt.String()
				t.reply.Denial.ResetsAt = t.resetsAt(i)
				return nil, nil
			}
		}
		reserved := b.Reserved.Add(amt)
		uses = append(uses, events.BudgetUse{
			Scope: ref.Scope, Period: ref.Period, Instance: ref.Instance, Unit: b.Unit,
			Limit: b.Limit.String(), Amount: amt.String(), Spent: b.Spent.String(),
			Reserved: reserved.String(), Available: b.Limit.Sub(b.Spent).Sub(reserved).String(),
		})
		evs = append(evs, events.ReservationOpened{
			ReservationID: t.id, RequestID: t.req.id, RequestHash: t.req.hash,
			Balance: ref, Amount: amt, Unit: b.Unit, Balances: t.refs,
			ExpiresAt: expires, At: t.now, Metadata: t.req.metadata, Pricing: t.req.quote, Ceiling: ceiling,
		})
		// A threshold this admission reaches for the first time in the
		// period is crossed in the same revision: its compare-and-set
		// makes the crossing exactly once.
		used := b.Spent.Add(reserved)
		for _, th := range events.Crossed(b.Thresholds, b.Alerted, b.Limit, used) {
			a := events.ThresholdCrossed{Balance: ref, Threshold: th, Limit: b.Limit, Used: used, Unit: b.Unit,
				ReservationID: t.id, At: t.now, Arm: b.Arm}
			evs = append(evs, a)
			t.alerts = append(t.alerts, a)
		}
	}
	if t.req.mode != events.ModeAdmit {
		// A check or shadow request: the answer an admit would get, and
		// nothing written.
		t.reply = events.AdmitReply{
			Admitted: true, RequestID: t.req.id, Amount: t.req.amount.String(), Unit: t.req.unit,
			Balances: t.refs, Mode: t.req.mode, Budgets: uses, Pricing: t.req.quote,
		}
		return nil, nil
	}
	t.reply = admittedReply(t.req, t.id, t.refs, expires)
	t.reply.Status = events.StatusOpen
	t.reply.Budgets = uses
	return evs, nil
}

func admittedReply(r request, id string, refs []events.BalanceRef, expires time.Time) events.AdmitReply {
	exp := expires.UTC()
	return events.AdmitReply{
		Admitted: true, RequestID: r.id, ReservationID: id,
		Amount: r.amount.String(), Unit: r.unit, Balances: refs, ExpiresAt: &exp,
		Mode: r.replyMode(), Pricing: r.quote,
	}
}

// unprintable reports whether r may not stand in a metadata value: a
// control character (C0, DEL, C1), a bidirectional control (the marks,
// embeddings, overrides and isolates: U+061C, U+200E-F, U+202A-E,
// U+2066-9) or the replacement character a decoder puts for bytes that
// are not UTF-8. Reports, exports and the dashboard group and show values
// as text, so each must be one line of it, shown in the order it was
// sent: an override (U+202E) makes a cell of a finance export read
// otherwise than it sorts and sums.
func unprintable(r rune) bool {
	switch {
	case r < 0x20 || (r >= 0x7f && r < 0xa0) || r == utf8.RuneError:
		return true
	case r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
		return true
	}
	return false
}
