package gateway

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A caller that leaves before its answer's end (the chat user's "stop", a
// client timeout) does not end its call upstream at once: the upstream
// request runs on a context of its own (forward), and the gateway keeps
// reading the answer, passing nothing on, for at most
// Config.DrainAbandoned, so that the provider's usage (a plain answer's
// body, a stream's last chunk, response.completed, message_delta) still
// arrives and the call is settled from it, note NoteCallerGone. Cut at
// once, the call has no usage and is charged its whole reservation, more
// than the provider billed either way. The upstream timeout, --max-stream
// and the gateway's shutdown still bound the call as they bound any: the
// drain ends before the reservation's TTL.

// NoteCallerGone is the settle note of a call settled from the provider's
// usage whose caller left before the answer's end (the gateway read the
// rest of the answer for it: Config.DrainAbandoned). A call whose caller
// left and that has no usage is charged its reservation, note
// reservation_caller_gone.
const NoteCallerGone = OutcomeCallerGone

// NoteCallerGoneOtherModel is the settle note of a call that is both
// NoteCallerGone and NoteOtherModel.
const NoteCallerGoneOtherModel = NoteCallerGone + "_" + NoteOtherModel

// errAbandonBound ends the upstream call of a caller gone once
// Config.DrainAbandoned has passed (at once when it is none).
var errAbandonBound = errors.New("the caller left and the answer did not end within the gateway's --drain-abandoned")

// abandon follows whether a call's caller left, and bounds how long the
// call's upstream request outlives it.
type abandon struct {
	mu sync.Mutex
	// at is when the caller left (zero while it is there); over: the
	// call has ended, nothing more to bound.
	at   time.Time
	over bool
	// bound is Config.DrainAbandoned (negative: none, cut at once);
	// cancel ends the upstream request.
	bound  time.Duration
	cancel context.CancelCauseFunc
	timer  *time.Timer
	// unwatch stops the watch of the caller's context.
	unwatch func() bool
	// hook, when set, is called once the caller is found gone (a
	// test's: Gateway.callerLeft).
	hook func()
}

// watchCaller returns the abandon of a call whose caller's request has
// context caller and whose upstream request cancel ends: the caller's
// context ending (its connection closed) counts as its leaving, as does a
// write to it that failed (left). Call end when the call has ended.
func watchCaller(caller context.Context, bound time.Duration, cancel context.CancelCauseFunc, hook func()) *abandon {
	a := &abandon{bound: bound, cancel: cancel, hook: hook}
	a.unwatch = context.AfterFunc(caller, a.left)
	return a
}

// left records that the caller left, and starts the bound of the drain.
func (a *abandon) left() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.at.IsZero() || a.over {
		return
	}
	a.at = time.Now()
	if a.hook != nil {
		a.hook()
	}
	if a.bound <= 0 {
		a.cancel(errAbandonBound)
		return
	}
	a.timer = time.AfterFunc(a.bound, func() { a.cancel(errAbandonBound) })
}

// gone reports whether the caller left.
func (a *abandon) gone() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.at.IsZero()
}

// since is how long ago the caller left (0 while it is there).
func (a *abandon) since() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at.IsZero() {
		return 0
	}
	return time.Since(a.at)
}

// end stops the watch and the bound: the call has ended.
func (a *abandon) end() {
	a.unwatch()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.over = true
	if a.timer != nil {
		a.timer.Stop()
	}
}

// callerWriter writes to a call's caller until a write fails, which
// counts as the caller's leaving; from then on it takes what it is given
// and writes nothing, so that the answer is still read to its end.
type callerWriter struct {
	w  interface{ Write([]byte) (int, error) }
	ab *abandon
}

func (c *callerWriter) Write(p []byte) (int, error) {
	if c.ab.gone() {
		return len(p), nil
	}
	if _, err := c.w.Write(p); err != nil {
		c.ab.left()
	}
	return len(p), nil
}
