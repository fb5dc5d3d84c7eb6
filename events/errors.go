package events

import (
	"errors"
	"fmt"
)

// Code is a stable, documented error or denial code. Codes are part of the
// wire API: they never change meaning once released.
type Code string

// Error codes returned in {"error":{"code","message"}} replies.
const (
	// CodeInvalidRequest: the body is not a JSON object of the expected shape
	// (malformed JSON, unknown field, wrong type, trailing data).
	CodeInvalidRequest Code = "invalid_request"
	// CodePayloadTooLarge: the body exceeds MaxPayloadBytes.
	CodePayloadTooLarge Code = "payload_too_large"
	// CodeInvalidAmount: an amount is missing, negative, zero where not
	// allowed, not a plain decimal, or beyond the digit limits.
	CodeInvalidAmount Code = "invalid_amount"
	// CodeInvalidIdentifier: a scope, request id or reservation id is not a
	// safe token (see ValidateToken).
	CodeInvalidIdentifier Code = "invalid_identifier"
	// CodeInvalidTTL: ttl is not a Go duration or is outside the bounds.
	CodeInvalidTTL Code = "invalid_ttl"
	// CodeInvalidPeriod: period is not month, day or lifetime.
	CodeInvalidPeriod Code = "invalid_period"
	// CodeInvalidUnit: unit is not a known currency or count unit.
	CodeInvalidUnit Code = "invalid_unit"
	// CodeInvalidTZ: tz is not an IANA time zone name.
	CodeInvalidTZ Code = "invalid_tz"
	// CodeInvalidMode: an admit's mode is not "", "admit", "check" or
	// "shadow".
	CodeInvalidMode Code = "invalid_mode"
	// CodeUnitChangeRefused: a budget put would change the unit of a
	// budget that has spend or reservations in some period instance.
	CodeUnitChangeRefused Code = "unit_change_refused"
	// CodeInvalidMetadata: metadata has too many entries or oversized values.
	CodeInvalidMetadata Code = "invalid_metadata"
	// CodeUnknownBudget: no budget is defined for the scope (budget get).
	CodeUnknownBudget Code = "unknown_budget"
	// CodeBudgetRetired: a put of a budget that was retired (see
	// BudgetRetired); nothing changed. A retired budget is never defined
	// again: define one of another scope.
	CodeBudgetRetired Code = "budget_retired"
	// CodeUnknownReservation: settle or release of a reservation the ledger
	// has never opened.
	CodeUnknownReservation Code = "unknown_reservation"
	// CodeIdempotencyMismatch: a request id was reused with a different body.
	CodeIdempotencyMismatch Code = "idempotency_mismatch"
	// CodeAlreadySettled: release of a settled reservation, or a settle
	// with a different actual than the one recorded.
	CodeAlreadySettled Code = "already_settled"
	// CodeAlreadyReleased: settle or release of a reservation that was
	// already released (by a caller, or expired by the sweeper).
	CodeAlreadyReleased Code = "already_released"
	// CodeRequestVoided: an admit whose request id was voided (see
	// RequestVoided); nothing was reserved.
	CodeRequestVoided Code = "request_voided"
	// CodeLedgerBusy: the commit lost compare-and-set too many times in a
	// row; nothing changed and the caller may retry with the same id.
	CodeLedgerBusy Code = "ledger_busy"
	// CodeLedgerUnavailable: the ledger could not be reached or did not
	// answer in time (set by clients, which then fail closed).
	CodeLedgerUnavailable Code = "ledger_unavailable"
	// CodeInternal: an unexpected failure; nothing was acknowledged.
	CodeInternal Code = "internal"
	// CodeInvalidModel: a model name is empty, too long or holds a
	// character outside [A-Za-z0-9_-./].
	CodeInvalidModel Code = "invalid_model"
	// CodeInvalidTokens: a token or character count is negative, above
	// events.MaxTokens, or inconsistent (cached above input, nothing to
	// price, input_tokens and input_chars both given).
	CodeInvalidTokens Code = "invalid_tokens"
	// CodeUnpricedModel: the model has no price in the pricing table
	// (pricing.get); an admit of it is denied with ReasonUnpricedModel.
	CodeUnpricedModel Code = "unpriced_model"
	// CodeNotPriced: a settle from usage of a reservation that was not
	// priced from a model (settle it with actual).
	CodeNotPriced Code = "not_priced"
	// CodeInvalidTime: a report's from or to is not an RFC 3339 time on a
	// whole UTC hour (the report's bucket), or from is not before to.
	CodeInvalidTime Code = "invalid_time"
	// CodeReportUnavailable: the replica keeps no spend report, or not for
	// the metadata key asked (past the number of keys it tracks); the
	// replay (spendgate report --replay) still answers.
	CodeReportUnavailable Code = "report_unavailable"
	// CodeTenantLimit: the request's tenant is at one of its limits (open
	// reservations, request rate, budgets created from defaults; see
	// TenantLimited, which the error's Err holds); the message names the
	// limit and its value. Nothing changed.
	CodeTenantLimit Code = "tenant_limit"
	// CodeReservationHeld: a settle, release or void of a held reservation
	// (a gateway's: HeldRequestPrefix), or an admit with such a request
	// id, through an endpoint other than the held ones. Nothing changed.
	CodeReservationHeld Code = "reservation_held"
	// CodeReplyTooLarge: the answer would not fit in one message on the
	// replica's connection (its max payload); nothing changed. Ask for
	// less (a report's range; spendgate report --replay has no bound).
	CodeReplyTooLarge Code = "reply_too_large"
)

// Denial reasons in an admit reply whose admitted field is false.
const (
	// ReasonLimitReached: spent + reserved + amount would exceed the limit.
	ReasonLimitReached Code = "limit_reached"
	// ReasonUnknownBudget: a named scope has no budget defined.
	ReasonUnknownBudget Code = "unknown_budget"
	// ReasonUnitMismatch: a budget's currency differs from the request's.
	ReasonUnitMismatch Code = "unit_mismatch"
	// ReasonBudgetDisabled: a budget of a named scope is disabled.
	ReasonBudgetDisabled Code = "budget_disabled"
	// ReasonBudgetRetired: a budget of a named scope was retired.
	ReasonBudgetRetired Code = "budget_retired"
	// ReasonUnpricedModel: the admit named a model that the pricing
	// table has no price for; it is never costed at zero.
	ReasonUnpricedModel Code = "unpriced_model"
	// ReasonExposureCap: the admit's ceiling would take the budget's
	// exposure (what open reservations may add above what they hold)
	// past its exposure cap.
	ReasonExposureCap Code = "exposure_cap"
	// ReasonLedgerUnavailable: set by clients that fail closed.
	ReasonLedgerUnavailable Code = "ledger_unavailable"
)

// DenialReasons are the reasons a replica denies an admit with (every
// denial reason but ReasonLedgerUnavailable, which only clients set).
var DenialReasons = []Code{ReasonLimitReached, ReasonUnknownBudget, ReasonUnitMismatch, ReasonBudgetDisabled,
	ReasonUnpricedModel, ReasonExposureCap, ReasonBudgetRetired}

// Error is a structured error with a stable code. It is what every
// spendgate package returns for a failure that a caller can act on.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// ReservationID names the reservation a refusal concerns: set with
	// CodeAlreadySettled, CodeAlreadyReleased and CodeIdempotencyMismatch
	// (the reservation the request id already opened); empty otherwise.
	ReservationID string `json:"reservation_id,omitempty"`
	// Status is that reservation's state when the request was refused
	// (StatusOpen, StatusSettled, StatusReleased or StatusExpired); set
	// exactly when ReservationID is.
	Status string `json:"status,omitempty"`
	// Err is the underlying cause, if any; never sent on the wire.
	Err error `json:"-"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &Error{Code: CodeInvalidAmount}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code && t.Message == ""
	}
	return false
}

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ReservationErrorf builds an *Error about reservation id, which is in
// state status: the refusal carries both as fields, so a caller need not
// parse the message to learn what happened to the reservation.
func ReservationErrorf(code Code, id, status, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), ReservationID: id, Status: status}
}

// CodeOf returns the code of the first *Error in err's chain, or
// CodeInternal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
