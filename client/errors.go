package client

import (
	"errors"
	"fmt"

	"github.com/spendgate/spendgate/events"
)

// ErrDenied matches every *DeniedError: the admit was not admitted, by a
// budget or because the ledger could not answer (fail closed).
var ErrDenied = errors.New("spendgate: denied")

// ErrLedgerUnavailable matches every failure that means the ledger did not
// answer usefully: no responders, no reply within the timeout on every
// attempt, an undecodable reply, or a ledger_busy, ledger_unavailable or
// internal error from the service. Admit turns it into a denial with reason
// ledger_unavailable (or a fail-open admission, with WithFailOpen); the
// other methods return it inside an *events.Error.
var ErrLedgerUnavailable = errors.New("spendgate: ledger unavailable")

// DeniedError is Admit's error when the request was not admitted: Denial
// says which budget blocked it and why. When the client denied because the
// ledger was unavailable, Denial.Reason is events.ReasonLedgerUnavailable
// and Err holds the cause (which matches ErrLedgerUnavailable).
type DeniedError struct {
	// RequestID is the admit's request id (generated when the caller left
	// it empty).
	RequestID string
	// Denial is the service's denial, or the client's fail-closed one.
	Denial events.Denial
	// Err is the cause of a fail-closed denial; nil for a budget's denial.
	Err error
}

// Error describes the denial.
func (e *DeniedError) Error() string {
	msg := fmt.Sprintf("spendgate: admit %s denied: %s", e.RequestID, e.Denial.Reason)
	if e.Denial.Scope != "" {
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

// unavailable is the error for a request the ledger did not answer:
// code ledger_unavailable, wrapping ErrLedgerUnavailable and the cause.
func unavailable(subject string, cause error) *events.Error {
	return &events.Error{
		Code:    events.CodeLedgerUnavailable,
		Message: fmt.Sprintf("no answer on %s: %v", subject, cause),
		Err:     fmt.Errorf("%w: %w", ErrLedgerUnavailable, cause),
	}
}

// unavailableCode reports whether a service error code means the ledger
// could not serve the request (as opposed to a bad request).
func unavailableCode(c events.Code) bool {
	switch c {
	case events.CodeLedgerBusy, events.CodeLedgerUnavailable, events.CodeInternal:
		return true
	}
	return false
}

// retryableCode reports whether a service error code invites a retry with
// the same request: nothing changed.
func retryableCode(c events.Code) bool {
	return c == events.CodeLedgerBusy || c == events.CodeLedgerUnavailable
}
