// Package health tells whether a replica's ledger is fit to answer: the
// ledger stream has a leader, and this replica's follower keeps up with the
// stream's last sequence as that leader has it. A replica's /readyz and its
// follower metrics read a Probe.
//
// Why against the leader: on an R3 stream the follower reads from a
// consumer that the server places on any replica's copy, and a stream info
// request is answered by any replica while the stream has no leader; a
// follower that sits on a lagging or unreadable copy sees nothing pending
// and reports no lag (a replica of an earlier build answered ready, lag 0,
// while its follower was 5,000 revisions behind on a broken copy, and
// while the stream had no leader).
package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults of a Probe.
const (
	// DefaultInterval is how often a Probe reads the stream's end.
	DefaultInterval = time.Second
	// DefaultMaxDelay is how long a revision the leader reported may stay
	// unfolded before the replica is not ready: a follower that keeps up
	// folds within milliseconds.
	DefaultMaxDelay = 10 * time.Second
	// DefaultReadTimeout bounds one read of the stream's end (a read
	// waits through an election within it).
	DefaultReadTimeout = 2 * time.Second
	// maxPending bounds the stream ends a Probe remembers while the
	// follower does not fold them (the oldest is the one that matters).
	maxPending = 64
)

// Source is what a Probe watches: a replica's ledger (ledger.Ledger).
type Source interface {
	// StreamEnd returns the stream's last sequence as its leader has it,
	// or an error when no leader answered within ctx.
	StreamEnd(ctx context.Context) (uint64, error)
	// Applied returns the last sequence the follower folded.
	Applied() uint64
}

// Option changes a Probe.
type Option func(*options) error

type options struct {
	interval, maxDelay, readTimeout time.Duration
	now                             func() time.Time
}

// WithInterval sets how often Run reads the stream's end (default
// DefaultInterval).
func WithInterval(d time.Duration) Option {
	return positive("interval", d, func(o *options) *time.Duration { return &o.interval })
}

// WithMaxDelay sets how long a revision the leader reported may stay
// unfolded (default DefaultMaxDelay).
func WithMaxDelay(d time.Duration) Option {
	return positive("max delay", d, func(o *options) *time.Duration { return &o.maxDelay })
}

// WithReadTimeout bounds one read of the stream's end (default
// DefaultReadTimeout).
func WithReadTimeout(d time.Duration) Option {
	return positive("read timeout", d, func(o *options) *time.Duration { return &o.readTimeout })
}

// positive is an Option setting the duration field of options to d, which
// must be positive.
func positive(name string, d time.Duration, field func(*options) *time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("health: %s must be positive, got %s", name, d)
		}
		*field(o) = d
		return nil
	}
}

// WithClock sets the clock (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return errors.New("health: nil clock")
		}
		o.now = now
		return nil
	}
}

// Probe reads the stream's end through its leader every interval and
// compares it with what the follower folded. Make one with New, run it with
// Run; Check, Status and Lag may be called at any time.
type Probe struct {
	src  Source
	opts options

	mu      sync.Mutex
	probed  bool
	end     uint64    // the last end read
	readAt  time.Time // when end was read
	err     error     // the last read's error; nil if it answered
	errFrom time.Time // since when reads have failed
	pending []sample  // ends read, in order, not yet folded
}

// sample is a stream end and when it was read.
type sample struct {
	seq uint64
	at  time.Time
}

// New returns a Probe of src.
func New(src Source, opts ...Option) (*Probe, error) {
	o := options{interval: DefaultInterval, maxDelay: DefaultMaxDelay, readTimeout: DefaultReadTimeout, now: time.Now}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Probe{src: src, opts: o}, nil
}

// Run probes at once and then every interval until ctx ends; it returns
// ctx's error.
func (p *Probe) Run(ctx context.Context) error {
	t := time.NewTicker(p.opts.interval)
	defer t.Stop()
	for {
		p.Probe(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Probe reads the stream's end once (bounded by the read timeout) and
// records it.
func (p *Probe) Probe(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, p.opts.readTimeout)
	end, err := p.src.StreamEnd(rctx)
	cancel()
	if ctx.Err() != nil {
		return // stopping: not a verdict on the stream
	}
	now := p.opts.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.probed || p.err == nil {
		p.errFrom = now
	}
	p.probed, p.err = true, err
	if err != nil {
		return
	}
	p.end, p.readAt = end, now
	if n := len(p.pending); n == 0 || p.pending[n-1].seq < end {
		if n == maxPending {
			// Keep the oldest (what the delay is measured by) and the
			// newest.
			copy(p.pending[1:], p.pending[2:])
			p.pending = p.pending[:n-1]
		}
		p.pending = append(p.pending, sample{end, now})
	}
}

// Status is what a Probe found.
type Status struct {
	// Probed: at least one read was made.
	Probed bool
	// Leader: the last read of the stream's end was answered (the stream
	// has a leader and JetStream is reachable); Err is why not, and ErrFor
	// how long reads have failed.
	Leader bool
	Err    error
	ErrFor time.Duration
	// End is the stream's last sequence at the last answered read, ReadAt
	// when; Applied what the follower has folded now; Lag is End -
	// Applied (0 once folded).
	End, Applied, Lag uint64
	ReadAt            time.Time
	// Delay is how long the oldest stream end read and not yet folded has
	// waited (0 when the follower has folded everything read).
	Delay time.Duration
	// Behind: Delay is over the probe's max delay.
	Behind bool
}

// Status returns what the Probe found, with the follower's position now.
func (p *Probe) Status() Status {
	applied := p.src.Applied()
	now := p.opts.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.pending) > 0 && p.pending[0].seq <= applied {
		p.pending = p.pending[1:]
	}
	st := Status{Probed: p.probed, Leader: p.probed && p.err == nil, Err: p.err, End: p.end, Applied: applied, ReadAt: p.readAt}
	if p.err != nil {
		st.ErrFor = now.Sub(p.errFrom)
	}
	if applied < p.end {
		st.Lag = p.end - applied
	}
	if len(p.pending) > 0 {
		st.Delay = now.Sub(p.pending[0].at)
		st.Behind = st.Delay > p.opts.maxDelay
	}
	return st
}

// Lag returns how many revisions the follower has still to fold to reach
// the stream's last sequence as its leader last reported it.
func (p *Probe) Lag() uint64 { return p.Status().Lag }

// Check returns nil if the replica is fit to answer, else why not: not
// probed yet; the stream's leader did not answer at the last read; or a
// revision the leader reported more than the max delay ago is still not
// folded (the follower is behind, or cannot read its copy).
func (p *Probe) Check() error { return p.Status().Problem(p.opts.maxDelay) }

// Problem says what is wrong with st, or nil; maxDelay is the bound Behind
// was measured by.
func (st Status) Problem(maxDelay time.Duration) error {
	switch {
	case !st.Probed:
		return errors.New("the ledger stream's end has not been read yet")
	case !st.Leader:
		return fmt.Errorf("no answer from the ledger stream's leader (for %s): %w", st.ErrFor.Round(time.Millisecond), st.Err)
	case st.Behind:
		return fmt.Errorf("the follower is behind: the stream's leader reported revisions up to %d, this replica has folded %d, and one of them has waited %s (more than %s): the follower is slow or cannot read its copy",
			st.End, st.Applied, st.Delay.Round(time.Millisecond), maxDelay)
	}
	return nil
}
