package events

import (
	"errors"
	"time"
)

// MaxPayloadBytes caps every request body, checked before decoding.
const MaxPayloadBytes = 16 << 10

// TTL bounds and default.
const (
	MinTTL     = time.Second
	MaxTTL     = 24 * time.Hour
	DefaultTTL = 5 * time.Minute
)

// AdmitRequest asks to reserve Amount in every budget of every named scope,
// atomically: in all of them or in none.
type AdmitRequest struct {
	// RequestID is the caller's idempotency key. A retry with the same id
	// and body (same scopes, amount, unit, ttl and metadata, whatever the
	// JSON spelling) is answered with the same reservation, Replayed set and
	// its current Status, and reserves nothing more; the same id with
	// another body is refused with CodeIdempotencyMismatch. A replica
	// remembers the id while its reservation is open and for a retention
	// after it closed (15 minutes after a settle or release, 48 hours after
	// an expiry, on the JetStream server's clock); after that a retry
	// reserves again. Only admissions are remembered: a retried denial or
	// error is decided again.
	RequestID string `json:"request_id"`
	// Scopes are "kind:id" strings, at most MaxScopes.
	Scopes []string `json:"scopes"`
	// Amount is a positive decimal string, the maximum the call may cost.
	Amount string `json:"amount"`
	// Unit is the currency of Amount; default USD. Budgets counted in
	// "requests" reserve 1 whatever the unit.
	Unit string `json:"unit,omitempty"`
	// TTL is a Go duration ("30s", "5m"); default DefaultTTL, bounds
	// [MinTTL, MaxTTL]. The reservation expires TTL after admission.
	TTL string `json:"ttl,omitempty"`
	// Metadata is copied into the ReservationOpened events.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Mode is ModeAdmit (the default, also ""), ModeCheck or ModeShadow.
	Mode string `json:"mode,omitempty"`
	// Brief asks for a reply without Budgets (each budget's balance after
	// the admission): a smaller reply to encode, send and decode, for a
	// caller that does not show them. It is not part of the request's
	// identity: a retry may set it or not.
	Brief bool `json:"brief,omitempty"`
	// Model, instead of Amount, prices the request from the pricing
	// table: the amount reserved is the maximum the call can cost,
	// InputTokens (or InputChars, converted at CharsPerToken) at the input
	// price plus MaxOutputTokens at the output price. A model without a
	// price is denied (unpriced_model). Counts are integers in
	// [0, MaxTokens]; Unit, if given, must be the price's unit.
	Model           string `json:"model,omitempty"`
	InputTokens     int64  `json:"input_tokens,omitempty"`
	InputChars      int64  `json:"input_chars,omitempty"`
	MaxOutputTokens int64  `json:"max_output_tokens,omitempty"`
	// Count is what the request counts in budgets of unit "requests":
	// 1..MaxCount, default 1 (a batch of 5 calls counts 5). Money budgets
	// take the amount.
	Count int64 `json:"count,omitempty"`
	// Retry marks a retry: a request sent again, with the same request id
	// and body, after an earlier attempt got no definitive answer (no
	// reply in time, ledger_busy, ledger_unavailable). That attempt may
	// still be deciding or writing on a replica, and commit after this
	// one is answered, so a retry is never denied: if its request id is
	// not in the caught-up book, a denial is answered CodeLedgerUnavailable
	// instead (the outcome is unknown: retry again, or void the request
	// id). It is admitted, replayed, or refused for a bad request as any
	// admit is. It is not part of the request's identity. The Go client
	// sets it on every attempt after the first.
	Retry bool `json:"retry,omitempty"`
}

// MaxCount bounds an admit's count.
const MaxCount = 1_000_000

// Admit modes.
const (
	// ModeAdmit reserves: the default.
	ModeAdmit = "admit"
	// ModeCheck answers what an admit would do now, against the same
	// balances and with the same rules, and changes nothing: nothing is
	// written and the request id is not remembered.
	ModeCheck = "check"
	// ModeShadow marks shadow or evaluation traffic. It is answered as a
	// check (decided against the real budgets, never written) and counted
	// apart from real admits (metrics: spendgate_admit_checks_total).
	ModeShadow = "shadow"
)

// AdmitReply answers an admit. Exactly one of the admission fields or
// Denial is set.
type AdmitReply struct {
	Admitted      bool         `json:"admitted"`
	RequestID     string       `json:"request_id"`
	ReservationID string       `json:"reservation_id,omitempty"`
	Amount        string       `json:"amount,omitempty"`
	Unit          string       `json:"unit,omitempty"`
	Balances      []BalanceRef `json:"balances,omitempty"`
	ExpiresAt     *time.Time   `json:"expires_at,omitempty"`
	// Status is the reservation's state when the reply was made: StatusOpen
	// for a new admission; for a replay, whatever became of it since
	// (StatusOpen, StatusSettled, StatusReleased or StatusExpired). Empty
	// when not admitted.
	Status string `json:"status,omitempty"`
	// Replayed is true when this is the stored answer to an earlier
	// request with the same id.
	Replayed bool    `json:"replayed,omitempty"`
	Denial   *Denial `json:"denial,omitempty"`
	// Mode is ModeCheck or ModeShadow for an answer that reserved nothing
	// (then ReservationID, ExpiresAt and Status are empty); omitted for a
	// real admit.
	Mode string `json:"mode,omitempty"`
	// Budgets lists every budget the admission applied to (would apply
	// to, for a check), in balance order, with what remains after it. Set
	// on a new admission or an admitting check; omitted on a replay and a
	// denial.
	Budgets []BudgetUse `json:"budgets,omitempty"`
	// Pricing is the price quote of a request priced from a model: the
	// price version used and the token counts; Amount is its maximum cost.
	Pricing *PriceQuote `json:"pricing,omitempty"`
}

// BudgetUse is one budget an admission applied to, after the admission:
// Amount is what it reserved in this budget (the request's amount, 1 for
// a requests budget), Reserved includes it, and Available is Limit - Spent
// - Reserved.
type BudgetUse struct {
	Scope     Scope  `json:"scope"`
	Period    Period `json:"period"`
	Instance  string `json:"instance"`
	Unit      string `json:"unit"`
	Limit     string `json:"limit"`
	Amount    string `json:"amount"`
	Spent     string `json:"spent"`
	Reserved  string `json:"reserved"`
	Available string `json:"available"`
}

// Denial says which budget blocked an admit, and why.
type Denial struct {
	Reason    Code   `json:"reason"`
	Message   string `json:"message"`
	Scope     Scope  `json:"scope"`
	Period    Period `json:"period,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Unit      string `json:"unit,omitempty"`
	Limit     string `json:"limit,omitempty"`
	Spent     string `json:"spent,omitempty"`
	Reserved  string `json:"reserved,omitempty"`
	Requested string `json:"requested,omitempty"`
	// Model is the model of an unpriced_model denial.
	Model string `json:"model,omitempty"`
	// ResetsAt is when the denying budget's period instance ends (UTC),
	// set for limit_reached and exposure_cap by a budget of a period (not
	// lifetime) when the request fits its limit: the denial lifts then at
	// the latest (sooner when open reservations close, which spent +
	// requested <= limit says). Not kept in denial records.
	ResetsAt *time.Time `json:"resets_at,omitempty"`
}

// SettleRequest closes a reservation with its actual cost.
type SettleRequest struct {
	ReservationID string `json:"reservation_id"`
	// Actual is a decimal string >= 0, in the reservation's unit. A
	// reservation priced from a model may instead be settled from usage:
	// Actual empty (left out) and the token counts below, priced at the
	// reservation's price version.
	Actual            string `json:"actual,omitempty"`
	InputTokens       int64  `json:"input_tokens,omitempty"`
	OutputTokens      int64  `json:"output_tokens,omitempty"`
	CachedInputTokens int64  `json:"cached_input_tokens,omitempty"`
	// Note, when set, says in one word how the actual was known, for
	// finance: "estimate", "upstream_cut", ... (a token of letters,
	// digits, '_' and '-', at most MaxNoteLen). It is recorded in the
	// settle's events and exported; it changes nothing else.
	Note string `json:"note,omitempty"`
}

// MaxNoteLen bounds a settle's note.
const MaxNoteLen = 32

// ValidateNote checks a settle's note: "" or a token of at most
// MaxNoteLen. Errors: CodeInvalidRequest.
func ValidateNote(note string) error {
	if note == "" {
		return nil
	}
	if err := ValidateToken("note", note, MaxNoteLen); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return Errorf(CodeInvalidRequest, "%s", e.Message)
		}
		return err
	}
	return nil
}

// ReleaseRequest gives a whole reservation back.
type ReleaseRequest struct {
	ReservationID string `json:"reservation_id"`
}

// VoidRequest voids an admit by its request id, whether or not the admit
// has landed: a reservation it opened is released (reason voided), and an
// admit with that request id that arrives later reserves nothing (it is
// answered request_voided). Scopes must name the admit's scopes (at least
// one of them; the same list is simplest): the void is recorded in the
// commit lanes of those scopes, which is where the admit's compare-and-set
// meets it.
type VoidRequest struct {
	RequestID string   `json:"request_id"`
	Scopes    []string `json:"scopes"`
}

// VoidReply answers a void.
type VoidReply struct {
	RequestID string `json:"request_id"`
	// Status is "voided".
	Status string `json:"status"`
	// ReservationID is the admit's reservation, when it had landed;
	// ReservationStatus is that reservation's status after the void
	// (released, or expired when the sweeper had already given it back).
	ReservationID     string `json:"reservation_id,omitempty"`
	ReservationStatus string `json:"reservation_status,omitempty"`
	// Reserved is what the void gave back ("" when nothing).
	Reserved string       `json:"reserved,omitempty"`
	Balances []BalanceRef `json:"balances,omitempty"`
	// Replayed is true when the request id was already voided and
	// nothing changed now.
	Replayed bool `json:"replayed,omitempty"`
}

// StatusVoided is the status of a void.
const StatusVoided = "voided"

// Reservation statuses.
const (
	StatusOpen     = "open"
	StatusSettled  = "settled"
	StatusReleased = "released"
	StatusExpired  = "expired"
)

// CloseReply answers settle and release.
type CloseReply struct {
	ReservationID string `json:"reservation_id"`
	// Status is settled, released or expired.
	Status string `json:"status"`
	// Reserved and Overrun are the reservation's in its first money
	// budget (in balance order; its first budget when it holds only
	// counts); Budgets has each budget's own when it holds several (a
	// fixed slot reserves its slot, another budget the request's amount).
	Reserved string `json:"reserved"`
	Actual   string `json:"actual,omitempty"`
	// Overrun is actual - reserved when positive (money spent beyond the
	// reservation, recorded in full).
	Overrun string `json:"overrun,omitempty"`
	// Excess, in a budget with an exposure cap, is the part of Actual
	// above what the budget may be charged (the reservation's ceiling):
	// recorded, not spent. Overrun is then counted up to the ceiling.
	Excess   string       `json:"excess,omitempty"`
	Late     bool         `json:"late,omitempty"`
	Balances []BalanceRef `json:"balances"`
	// Replayed is true when the reservation was already in this state and
	// nothing changed now.
	Replayed bool `json:"replayed,omitempty"`
	// Usage is set on a settle from usage: the counts and the price
	// version Actual was computed at.
	Usage *Usage `json:"usage,omitempty"`
	// Budgets, on a settle of a reservation held in more than one budget,
	// is what each budget reserved and recorded, in balance order.
	Budgets []BudgetClose `json:"budgets,omitempty"`
}

// BudgetClose is a settled reservation in one of its budgets: what the
// budget reserved, the actual recorded in it (a count budget records what
// it reserved), the overrun, when positive, and the excess, when the
// budget's exposure cap left part of the actual out (ReservationSettled.Excess).
type BudgetClose struct {
	Scope    Scope  `json:"scope"`
	Period   Period `json:"period"`
	Instance string `json:"instance"`
	Unit     string `json:"unit"`
	Reserved string `json:"reserved"`
	Actual   string `json:"actual"`
	Overrun  string `json:"overrun,omitempty"`
	Excess   string `json:"excess,omitempty"`
}

// BudgetPutRequest defines a budget, or changes the fields it names of an
// existing one: a field left out (nil, or "" for Limit and Unit) keeps its
// value, so a put with only a limit changes the limit and nothing else.
// Creating a budget needs Limit and Unit; the fields left out then take
// their defaults (UTC, enabled, no fixed slot, no alerts). Replace puts
// the whole definition instead: every field left out is reset to its
// default, as a create would set it.
type BudgetPutRequest struct {
	Scope  string `json:"scope"`
	Period string `json:"period"`
	// Limit is a decimal string >= 0; 0 ("deny everything") only with
	// AllowZero.
	Limit string `json:"limit,omitempty"`
	// Unit is the budget's unit: a currency or a count ("requests").
	// Required to create a budget; it never changes afterwards. On a put
	// to an existing budget it also picks, when the scope has a money and
	// a count budget in the period, which one; "" picks the one defined
	// first.
	Unit string `json:"unit,omitempty"`
	// TZ is the IANA time zone of the period's calendar; "" or "UTC" is
	// UTC.
	TZ *string `json:"tz,omitempty"`
	// Disabled true denies every admit naming the budget
	// (budget_disabled); false enables it again.
	Disabled *bool `json:"disabled,omitempty"`
	// AllowZero must be set to put a limit of 0.
	AllowZero bool `json:"allow_zero,omitempty"`
	// FixedSlot, a decimal string > 0, makes every admit reserve this
	// amount in the budget instead of the requested one (money budgets
	// only); "" removes the slot.
	FixedSlot *string `json:"fixed_slot,omitempty"`
	// Alerts true turns threshold alerts on, at Thresholds, or at the
	// budget's thresholds, or else at DefaultThresholds (50 %, 80 %,
	// 100 % of the limit); false turns them off.
	Alerts *bool `json:"alerts,omitempty"`
	// Thresholds are alert thresholds, fractions of the limit in (0, 1]
	// as decimal strings ("0.8"); giving them turns alerts on.
	Thresholds []string `json:"thresholds,omitempty"`
	// ExposureCap, a decimal string >= 0, caps the budget's exposure: what
	// settles above their reservations may add in a period instance (an
	// admit that could break it is denied exposure_cap, and a settle is
	// charged at most its reservation's ceiling); "" removes the cap.
	ExposureCap *string `json:"exposure_cap,omitempty"`
	// Learn, "p1" to "p100" ("p95"), makes requests priced from a model
	// reserve that percentile of the actual cost of recent calls of the
	// model in the scope (events.LearnRule), with LearnWindow (default
	// 100), LearnMinSamples (cold start, default 20) and LearnFloor
	// (default "0"); "" removes the rule.
	Learn           *string `json:"learn,omitempty"`
	LearnWindow     int     `json:"learn_window,omitempty"`
	LearnMinSamples int     `json:"learn_min_samples,omitempty"`
	LearnFloor      string  `json:"learn_floor,omitempty"`
	// Replace puts the whole definition: fields left out are reset to
	// their defaults instead of kept. Limit and Unit are then required.
	Replace bool `json:"replace,omitempty"`
}

// BudgetPutReply is the budget after a put, and what the put changed.
type BudgetPutReply struct {
	BudgetView
	// Created is true when the budget did not exist.
	Created bool `json:"created,omitempty"`
	// Changed names the fields the put changed, in the order limit, unit,
	// tz, disabled, fixed_slot, thresholds, exposure_cap, learn; empty
	// when the put changed nothing (or created the budget).
	Changed []string `json:"changed"`
	// Previous is the definition before the put, when it changed one.
	Previous *BudgetDefinition `json:"previous,omitempty"`
}

// BudgetDefinition is a budget's definition without its balance.
type BudgetDefinition struct {
	Limit     string `json:"limit"`
	Unit      string `json:"unit"`
	TZ        string `json:"tz,omitempty"`
	Disabled  bool   `json:"disabled,omitempty"`
	FixedSlot string `json:"fixed_slot,omitempty"`
	// Thresholds are the alert thresholds, when alerts were on.
	Thresholds []string `json:"thresholds,omitempty"`
	// ExposureCap and Learn are the exposure cap and the learned-
	// reservation rule ("p95 of 100, cold 20, floor 0"), when set.
	ExposureCap string `json:"exposure_cap,omitempty"`
	Learn       string `json:"learn,omitempty"`
}

// BudgetGetRequest reads one budget and its current balance. With Period
// empty it reads every budget of Scope instead: the reply is then a
// BudgetListReply, not a BudgetView.
type BudgetGetRequest struct {
	Scope  string `json:"scope"`
	Period string `json:"period,omitempty"`
	// Unit picks, with Period, the budget of that unit when the scope
	// holds a money and a count budget in the period; default the one
	// defined first.
	Unit string `json:"unit,omitempty"`
}

// BudgetListRequest lists budgets, optionally of one scope kind, one page
// at a time. An empty request (no fields, or no body) is valid: the first
// page of DefaultBudgetPage budgets of every kind, sorted by scope.
type BudgetListRequest struct {
	Kind string `json:"kind,omitempty"`
	// Retired lists the retired budgets too (see BudgetRetired); a list
	// leaves them out by default.
	Retired bool `json:"retired,omitempty"`
	// Limit is the page size, 1..MaxBudgetPage; 0 means DefaultBudgetPage.
	// A page may hold fewer (the reply is kept under the connection's max
	// payload); only an empty NextCursor means the list is done.
	Limit int `json:"limit,omitempty"`
	// Cursor is the NextCursor of the previous page, opaque; it is only
	// valid with the same Kind and Sort.
	Cursor string `json:"cursor,omitempty"`
	// Sort is SortScope (default: by scope, then period) or
	// SortUtilization (most used first: (spent + reserved) / limit in the
	// current period, exactly, then by scope and period).
	Sort string `json:"sort,omitempty"`
}

// Sort orders of budget.list.
const (
	// SortScope lists budgets by scope, then period (the default).
	SortScope = "scope"
	// SortUtilization lists the budgets nearest their limit first.
	SortUtilization = "utilization"
)

// Page sizes of budget.list.
const (
	// DefaultBudgetPage is the page size of a request without a limit.
	DefaultBudgetPage = 1000
	// MaxBudgetPage is the largest page a request may ask for.
	MaxBudgetPage = 1000
)

// BudgetView is a budget and its balance in the current period instance.
type BudgetView struct {
	Scope     Scope  `json:"scope"`
	Period    Period `json:"period"`
	Limit     string `json:"limit"`
	Unit      string `json:"unit"`
	Instance  string `json:"instance"`
	Spent     string `json:"spent"`
	Reserved  string `json:"reserved"`
	Overrun   string `json:"overrun"`
	Available string `json:"available"`
	Open      int64  `json:"open"`
	// TZ is the budget's time zone ("" for UTC) and Disabled whether it
	// denies every admit; both omitted when unset.
	TZ       string `json:"tz,omitempty"`
	Disabled bool   `json:"disabled,omitempty"`
	// Retired: the budget was retired (see BudgetRetired) and denies
	// every admit; RetiredAt (RFC 3339) and RetiredReason are the
	// retirement's. A retired budget's balance keeps its final numbers
	// once it has left the replicas' memory.
	Retired       bool   `json:"retired,omitempty"`
	RetiredAt     string `json:"retired_at,omitempty"`
	RetiredReason string `json:"retired_reason,omitempty"`
	// FixedSlot is what each admit reserves, when set. MaxInFlight is then
	// floor(limit / fixed_slot), the most reservations a period can hold
	// open at once, and OvershootBound the worst case it implies: every one
	// of them settling at the most one call can cost, each overshooting by
	// that cost minus the slot ("10 x (cost of one call - 1)").
	FixedSlot      string `json:"fixed_slot,omitempty"`
	MaxInFlight    string `json:"max_in_flight,omitempty"`
	OvershootBound string `json:"overshoot_bound,omitempty"`
	// Thresholds are the alert thresholds, when alerts are on.
	Thresholds []string `json:"thresholds,omitempty"`
	// Exposure is the most the open reservations may still add above
	// what they hold (each may settle up to its ceiling), and
	// ExposureCap the budget's cap on it; both omitted when the budget
	// has no cap and nothing is exposed. Learn is the learned-reservation
	// rule ("p95 of 100, cold 20, floor 0"), when set.
	Exposure    string `json:"exposure,omitempty"`
	ExposureCap string `json:"exposure_cap,omitempty"`
	Learn       string `json:"learn,omitempty"`
}

// BudgetRetireRequest retires a budget for good (budget.retire; see
// BudgetRetired): every admit naming its scope is denied from then on, no
// default creates it again, a put of it is refused, and its balances
// leave the replicas' memory once nothing can change them.
type BudgetRetireRequest struct {
	Scope  string `json:"scope"`
	Period string `json:"period"`
	// Unit picks, when the scope has a money and a count budget in the
	// period, which one; "" picks the one defined first.
	Unit string `json:"unit,omitempty"`
	// Reason is a note kept in the event, at most MaxRetireReasonLen
	// bytes ("run finished").
	Reason string `json:"reason,omitempty"`
}

// BudgetRetireReply is the budget as retired; Already is set when it was
// retired before this request (nothing was written).
type BudgetRetireReply struct {
	BudgetView
	Already bool `json:"already,omitempty"`
}

// BudgetListReply lists budgets sorted by scope and period (or as the
// request's Sort asks).
type BudgetListReply struct {
	Budgets []BudgetView `json:"budgets"`
	// NextCursor, when set, fetches the next page (BudgetListRequest.Cursor);
	// empty on the last page. budget.get never sets it.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ReportRequest asks for spend grouped by scope or by a metadata key, over
// the reservations opened in [From, To).
type ReportRequest struct {
	// By is "scope", a metadata key ("model"), or "metadata.KEY" for a key
	// called "scope". Required.
	By string `json:"by"`
	// From and To are RFC 3339 times on whole UTC hours (the report's
	// bucket, ReportBucket); either may be empty for an open bound.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Shadow asks for the check and shadow decisions too
	// (ReportReply.Shadow), apart from the spend.
	Shadow bool `json:"shadow,omitempty"`
}

// ReportBucket is the width of a report's time buckets: From and To of a
// ReportRequest fall on its multiples.
const ReportBucket = time.Hour

// ReportGroup is one line of a report: the reservations of one group value
// in one unit. Amounts are decimal strings.
type ReportGroup struct {
	// Value is the scope or the metadata value ("" when the key is not
	// set). Other is set on a group that sums the values a replica does
	// not track: a metadata key's past the number it tracks per key, and
	// scopes of kinds past the number of kinds it tracks (Value is then
	// ""); or the scopes of one kind past the number it tracks per kind
	// (Value is then the kind's default, "run:*").
	Value string `json:"value"`
	Other bool   `json:"other,omitempty"`
	Unit  string `json:"unit"`
	// Reservations counts the group's reservations, the others by status
	// (Late: settled after they expired).
	Reservations int64 `json:"reservations"`
	Open         int64 `json:"open"`
	Settled      int64 `json:"settled"`
	Released     int64 `json:"released"`
	Expired      int64 `json:"expired"`
	Late         int64 `json:"late"`
	// Spend sums the settled actual costs, Overrun the overruns, Reserved
	// what the group's open reservations still hold.
	Spend    string `json:"spend"`
	Overrun  string `json:"overrun"`
	Reserved string `json:"reserved"`
	// Denials counts the admits denied in the group (from the replicas'
	// denial records, not the ledger): by scope, once in every scope the
	// admit named; by metadata key, under the admit's value of the key.
	Denials int64 `json:"denials"`
}

// ReportReply is a spend report, groups sorted by unit, then spend
// (largest first), then value.
type ReportReply struct {
	By   string `json:"by"`
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Position is the ledger stream sequence the report is exact at.
	Position uint64        `json:"position"`
	Groups   []ReportGroup `json:"groups"`
	// Shadow are the check and shadow decisions (admits in mode check or
	// shadow, which reserve nothing) in the same range and grouping, apart
	// from the spend in Groups, when the request asked for them
	// (ReportRequest.Shadow); omitted when there were none.
	Shadow []ShadowGroup `json:"shadow,omitempty"`
	// Folded counts the groups with the least spend that a live report
	// summed into the Other group of their unit (Value "", Other) so
	// that its reply fits one message (omitted: none). The totals are
	// unchanged; spendgate report --replay lists every group.
	Folded int `json:"folded,omitempty"`
}

// ShadowGroup is one group of a report's check and shadow decisions: those
// of one group value (Value, Other as in ReportGroup), Mode ("check" or
// "shadow") and Unit. Admitted and Denied count the answers; Amount sums
// what the admitted would have reserved, Asked what the denied asked;
// Reasons counts the denied by reason.
type ShadowGroup struct {
	Value    string         `json:"value"`
	Other    bool           `json:"other,omitempty"`
	Mode     string         `json:"mode"`
	Unit     string         `json:"unit"`
	Admitted int64          `json:"admitted"`
	Denied   int64          `json:"denied"`
	Amount   string         `json:"amount"`
	Asked    string         `json:"asked"`
	Reasons  map[Code]int64 `json:"reasons,omitempty"`
}

// ErrorReply is the body of every failed request.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// PricingPutRequest sets a model's prices, per million tokens: the whole
// definition (a price left out is not kept from before).
type PricingPutRequest struct {
	Model string `json:"model"`
	// Unit is the currency of the prices; default USD.
	Unit string `json:"unit,omitempty"`
	// Input and Output are decimal strings >= 0 with at most
	// MaxPriceFractionDigits fractional digits.
	Input  string `json:"input"`
	Output string `json:"output"`
	// CachedInput is the price of cached input tokens; "" for none (they
	// then cost Input).
	CachedInput string `json:"cached_input,omitempty"`
}

// PricingGetRequest reads one model's current prices.
type PricingGetRequest struct {
	Model string `json:"model"`
}

// PricingListRequest lists every priced model; it has no fields.
type PricingListRequest struct{}

// PriceView is a model's prices at one version.
type PriceView struct {
	Model       string `json:"model"`
	Unit        string `json:"unit"`
	Input       string `json:"input"`
	Output      string `json:"output"`
	CachedInput string `json:"cached_input,omitempty"`
	// Version is the stream sequence of the definition: what a priced
	// reservation records.
	Version uint64 `json:"version"`
	// DefinedAt is when the definition was put (its event's time).
	DefinedAt time.Time `json:"defined_at,omitzero"`
}

// PricingPutReply is the model's prices after a put and what it changed.
type PricingPutReply struct {
	PriceView
	Created bool `json:"created,omitempty"`
	// Changed names the changed fields, in the order unit, input, output,
	// cached_input; empty when nothing changed (or on creation).
	Changed []string `json:"changed"`
	// Previous is the definition before the put, when it changed one.
	Previous *PriceView `json:"previous,omitempty"`
}

// PricingListReply lists every priced model, sorted by model.
type PricingListReply struct {
	Prices []PriceView `json:"prices"`
}
