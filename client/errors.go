package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spendgate/spendgate/events"
)

// The sentinel errors. Every error of this package matches at most one of
// ErrInvalid, ErrNotFound, ErrConflict, ErrLimited and ErrUnavailable; ErrDenied
// matches every denied admit, and a fail-closed denial matches both
// ErrDenied and ErrUnavailable. Test them with errors.Is.
var (
	// ErrDenied matches every *DeniedError: the admit was not admitted, by
	// a budget or, together with ErrUnavailable, because the ledger could
	// not answer (fail closed).
	ErrDenied = errors.New("spendgate: denied")

	// ErrUnavailable matches every failure that means the ledger did not
	// answer usefully: no responders, no reply within the timeout on every
	// attempt, an undecodable reply, or a ledger_busy, ledger_unavailable
	// or internal error from the service. The error is an
	// *UnavailableError, never an *events.Error: an outage is not a
	// refusal of the request. Admit turns it into a denial (fail closed)
	// or, with WithFailOpen, a fail-open admission.
	ErrUnavailable = errors.New("spendgate: ledger unavailable")

	// ErrLedgerUnavailable is ErrUnavailable under its first name.
	//
	// Deprecated: use ErrUnavailable; both are the same value.
	ErrLedgerUnavailable = ErrUnavailable

	// ErrInvalid matches the service's refusal of a request that is wrong
	// in itself, a bug of the caller's: the codes invalid_request,
	// payload_too_large, invalid_amount, invalid_identifier, invalid_ttl,
	// invalid_period, invalid_unit, invalid_metadata and invalid_time. Retrying it
	// cannot succeed. The error is also the service's *events.Error.
	ErrInvalid = errors.New("spendgate: invalid request")

	// ErrNotFound matches the service's refusal of a request about
	// something it does not know: unknown_reservation (never opened, or
	// closed longer ago than the ledger remembers), unknown_budget, and
	// report_unavailable (a report the replica does not keep). The error
	// is also the service's *events.Error.
	ErrNotFound = errors.New("spendgate: not found")

	// ErrConflict matches the service's refusal of a request that
	// contradicts what already happened: already_settled, already_released,
	// idempotency_mismatch and budget_retired (a put of a retired budget). The error is also the service's
	// *events.Error, whose ReservationID and Status name the reservation
	// and its state.
	ErrConflict = errors.New("spendgate: conflict")

	// ErrLimited matches the service's refusal of a request past one of
	// its tenant's limits (tenant_limit: open reservations, request rate,
	// budgets created from defaults; the message names the limit).
	// Nothing changed; the same request may succeed later (after a
	// back-off, or once reservations close). The error is also the
	// service's *events.Error.
	ErrLimited = errors.New("spendgate: tenant limit")
)

// DeniedError is Admit's error when the request was not admitted: Denial
// says which budget blocked it and why. When the client denied because the
// ledger was unavailable, Denial.Reason is events.ReasonLedgerUnavailable
// and Err holds the cause, an *UnavailableError (so the DeniedError
// matches ErrUnavailable too).
type DeniedError struct {
	// RequestID is the admit's request id (generated when the caller left
	// it empty).
	RequestID string
	// Denial is the service's denial, or the client's fail-closed one.
	Denial events.Denial
	// Err is the cause of a fail-closed denial; nil for a budget's denial.
	Err error
	// Void is, for a fail-closed denial, the reply of the void the client
	// sent for the request id (see Client.Void): nothing is or will be
	// reserved for it. Nil when the void failed too, when no void was
	// needed (every attempt was answered no responders: none was
	// delivered), or for a budget's denial.
	Void *events.VoidReply
}

// Error describes the denial: its reason and message, and the scope and
// period that denied it unless the message names them already (the
// service's messages do: "user:u-17 per day: spent 0 + ...").
func (e *DeniedError) Error() string {
	msg := fmt.Sprintf("spendgate: admit %s denied: %s", e.RequestID, e.Denial.Reason)
	if s := e.Denial.Scope.Local(); s != "" && !strings.Contains(e.Denial.Message, string(s)) {
		msg += " in " + string(e.Denial.Scope)
		if e.Denial.Period != "" {
			msg += " per " + string(e.Denial.Period)
		}
	}
	if e.Denial.Message != "" {
		msg += ": " + e.Denial.Message
	}
	return msg
}

// Is reports whether target is ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Unwrap returns the cause of a fail-closed denial, or nil.
func (e *DeniedError) Unwrap() error { return e.Err }

// UnavailableError is the error of a request the ledger did not answer
// usefully (see ErrUnavailable, which it matches). It is not an
// *events.Error, so errors.As(err, &*events.Error) never mistakes an outage
// for a refusal of the request.
type UnavailableError struct {
	// Subject is the request's NATS subject.
	Subject string
	// Code is events.CodeLedgerUnavailable when no useful reply came (no
	// responders, timeouts, an undecodable reply), or the service's own
	// code: events.CodeLedgerBusy, events.CodeLedgerUnavailable or
	// events.CodeInternal.
	Code events.Code
	// Message describes the failure.
	Message string
	// Err is the cause (a NATS or context error), if any.
	Err error
}

// Error describes the failure.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("spendgate: %s: %s: %s", e.Subject, e.Code, e.Message)
}

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// refusal is the service's refusal of a request: its *events.Error, which
// errors.As finds, and the sentinel of its class (ErrInvalid, ErrNotFound
// or ErrConflict), which errors.Is finds. Its text is the events.Error's.
type refusal struct {
	err   *events.Error
	class error
}

func (r *refusal) Error() string   { return r.err.Error() }
func (r *refusal) Unwrap() []error { return []error{r.err, r.class} }

// isRefusal reports whether err is the service's (or the client's) refusal
// of the request: an answer, so nothing was reserved.
func isRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// unavailable is the error for a request the ledger did not answer.
func unavailable(subject string, cause error) *UnavailableError {
	return &UnavailableError{Subject: subject, Code: events.CodeLedgerUnavailable,
		Message: fmt.Sprintf("no answer: %v", cause), Err: cause}
}

// classify turns the service's error reply into this package's error: an
// *UnavailableError for the codes that mean the ledger could not serve the
// request, a refusal otherwise. status is the reply's micro status header
// ("400", "404", ...), which classifies a code this client does not know.
func classify(subject string, e *events.Error, status string) error {
	switch e.Code {
	case events.CodeLedgerBusy, events.CodeLedgerUnavailable, events.CodeInternal:
		return &UnavailableError{Subject: subject, Code: e.Code, Message: e.Message}
	case events.CodeUnknownReservation, events.CodeUnknownBudget, events.CodeReportUnavailable:
		return &refusal{err: e, class: ErrNotFound}
	case events.CodeIdempotencyMismatch, events.CodeAlreadySettled, events.CodeAlreadyReleased, events.CodeRequestVoided,
		events.CodeReservationHeld, events.CodeBudgetRetired:
		return &refusal{err: e, class: ErrConflict}
	case events.CodeTenantLimit:
		return &refusal{err: e, class: ErrLimited}
	case events.CodeInvalidRequest, events.CodePayloadTooLarge, events.CodeReplyTooLarge, events.CodeInvalidAmount,
		events.CodeInvalidIdentifier, events.CodeInvalidTTL, events.CodeInvalidPeriod,
		events.CodeInvalidUnit, events.CodeInvalidMetadata, events.CodeInvalidTime:
		return &refusal{err: e, class: ErrInvalid}
	}
	// A code from a newer service: its status says which class it is in.
	n, _ := strconv.Atoi(status)
	switch {
	case n >= 500:
		return &UnavailableError{Subject: subject, Code: e.Code, Message: e.Message}
	case n == 404:
		return &refusal{err: e, class: ErrNotFound}
	case n == 409:
		return &refusal{err: e, class: ErrConflict}
	case n == 429:
		return &refusal{err: e, class: ErrLimited}
	}
	return &refusal{err: e, class: ErrInvalid}
}

// invalid is a refusal made by the client itself, before sending.
func invalid(code events.Code, format string, args ...any) error {
	return &refusal{err: events.Errorf(code, format, args...), class: ErrInvalid}
}

// retryable reports whether an error invites a retry of the same request:
// nothing changed (ledger_busy, ledger_unavailable from the service).
func retryable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u) && (u.Code == events.CodeLedgerBusy || u.Code == events.CodeLedgerUnavailable)
}
