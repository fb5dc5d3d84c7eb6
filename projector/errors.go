package projector

import (
	"errors"
	"fmt"
)

// Categories of Apply errors, checked with errors.Is. Every error Apply
// returns is an *ApplyError wrapping exactly one of them.
var (
	// ErrMalformed: the message is not a revision the fold understands:
	// undecodable JSON, an unknown schema, a budget key that does not match
	// its revision's budget, a balance key (a stream of an older layout:
	// balances live in lanes), a lane revision that names no balance or
	// names its balances out of key order or twice, a balance named under
	// another lane than the one that first named it, an event of the wrong
	// family, an event whose balance or budget differs from its revision's,
	// an invalid unit, scope or period, or an empty value (a KV delete or
	// purge).
	ErrMalformed = errors.New("malformed revision")
	// ErrTransition: an event is not a valid step of its reservation's
	// lifecycle in that balance (a settle or release of a reservation not
	// open there, a second open of the same id, a settle after expiry of a
	// reservation that did not expire, a reserved or overrun that does not
	// match what was opened, a negative amount).
	ErrTransition = errors.New("invalid transition")
	// ErrMismatch: a number the revision states differs from the folded
	// total. The wrapped *MismatchError names the field.
	ErrMismatch = errors.New("stated number differs from the fold")
	// ErrInvariant: the fold breaks an invariant: reserved < 0, or
	// spent + reserved > limit right after an admission.
	ErrInvariant = errors.New("invariant broken")
	// ErrChain: a chained revision (lane.v2, budget.v2) does not follow
	// the last revision of its key that was applied: a gap (a revision
	// never seen) or a fork (another history). The wrapped
	// *events.ChainError names the sequence. A fold must stop there.
	ErrChain = errors.New("revision breaks its key's chain")
)

// ApplyError is the error of State.Apply: which message failed, and why.
type ApplyError struct {
	// Seq is the stream sequence of the message.
	Seq uint64
	// Key is the KV key of the message (a lane or budget key).
	Key string
	// Err is the cause; it wraps one of ErrMalformed, ErrTransition,
	// ErrMismatch or ErrInvariant.
	Err error
}

// Error names the key and the sequence, then the cause.
func (e *ApplyError) Error() string {
	return fmt.Sprintf("projector: key %s seq %d: %v", e.Key, e.Seq, e.Err)
}

// Unwrap returns the cause.
func (e *ApplyError) Unwrap() error { return e.Err }

// MismatchError is a stated number that differs from the folded one. It
// wraps ErrMismatch.
type MismatchError struct {
	// Field is "spent", "reserved", "overrun", "open", "limit" or "unit".
	Field string
	// Stated is the revision's value, Folded the fold's, both as written
	// (Money.String for amounts).
	Stated, Folded string
}

// Error names the field with both values.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s: stated %s, folded %s", e.Field, e.Stated, e.Folded)
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// errorf wraps a category with a formatted message.
func errorf(category error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", category, fmt.Sprintf(format, args...))
}
