package ledger

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Expiry and period boundaries are read from the clock (a reservation's
// expires_at is the admitting replica's now plus its TTL, and every
// replica's sweeper compares it with its own now), so replicas' clocks
// must agree: one running minutes ahead releases other replicas'
// reservations before their TTL. ClockSkew measures how far this
// machine's clock is from the NATS server's, from the messages the
// follower folds once it has caught up and from a stream info the ledger
// asks for every skewProbe: each is stamped by the server (whoever wrote
// a message, a forger too: the stamp is the server's) and seen here
// milliseconds later, so the machine's time then less the stamp is the
// skew plus that delay. The least of the recent ones is the estimate: an
// upper bound of the skew. Now corrects the machine's clock by it when it
// is past skewCorrect, so a replica whose clock is off admits, settles
// and sweeps on the server's time.

// skewWindow is how recent a sample must be to count (short, so that a
// clock stepped by NTP is followed within it), skewSamples how many are
// kept, and skewProbe how often Run asks the server for a sample of its
// own (traffic or none).
const (
	skewWindow  = 30 * time.Second
	skewSamples = 64
	skewProbe   = 10 * time.Second
	// skewCorrect is the estimate past which Now corrects the machine's
	// clock: below it the estimate is mostly the few milliseconds a
	// message waits, and TTLs are minutes.
	skewCorrect = time.Second
	// skewWarn is the skew past which the follower logs a warning, at
	// most once per skewWarnEvery.
	skewWarn      = time.Second
	skewWarnEvery = 10 * time.Minute
)

// clockSkew keeps the recent samples. The zero value is ready; safe for
// concurrent use.
type clockSkew struct {
	mu      sync.Mutex
	samples [skewSamples]skewSample
	n, next int
	warned  time.Time
	// corr is the correction Now subtracts (nanoseconds; 0 below
	// skewCorrect), refreshed by refresh: Now, at every admit, reads it
	// without the lock.
	corr atomic.Int64
}

// skewSample bounds the skew from one server stamp: at most hi (the
// stamp was made before it arrived here), at least lo when the moment
// before the stamp is known too (a request's sending; a message folded
// says nothing of when it was sent: hasLo false).
type skewSample struct {
	at     time.Time
	hi, lo time.Duration
	hasLo  bool
}

// add records one message folded at at, stamped stamp by the server.
func (c *clockSkew) add(at, stamp time.Time) {
	c.put(skewSample{at: at, hi: at.Sub(stamp)})
}

// addRound records a server's answer stamped stamp to a request sent at
// sent and answered at at: the stamp was made between the two.
func (c *clockSkew) addRound(sent, at, stamp time.Time) {
	c.put(skewSample{at: at, hi: at.Sub(stamp), lo: sent.Sub(stamp), hasLo: true})
}

func (c *clockSkew) put(s skewSample) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples[c.next] = s
	c.next = (c.next + 1) % skewSamples
	c.n = min(c.n+1, skewSamples)
}

// estimate returns the least upper bound of the skew among the samples
// taken within skewWindow of now, and false when there is none.
func (c *clockSkew) estimate(now time.Time) (time.Duration, bool) {
	hi, _, ok, _ := c.bounds(now)
	return hi, ok
}

// bounds returns the least upper bound and the greatest lower bound of the
// skew among the samples within skewWindow of now, each with whether any
// sample gave one.
func (c *clockSkew) bounds(now time.Time) (hi, lo time.Duration, okHi, okLo bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.n {
		s := c.samples[i]
		if now.Sub(s.at) > skewWindow {
			continue
		}
		if !okHi || s.hi < hi {
			hi, okHi = s.hi, true
		}
		if s.hasLo && (!okLo || s.lo > lo) {
			lo, okLo = s.lo, true
		}
	}
	return hi, lo, okHi, okLo
}

// refresh recomputes the correction from the samples within skewWindow
// of now and returns the estimate (the least upper bound). It corrects
// only a skew the samples prove past skewCorrect, so that a machine too
// busy to take a stamp's time at once (a fold or an answer waiting for a
// core) is never corrected for a skew it does not have: a clock behind
// when even the upper bound is below -skewCorrect (and then by that
// bound, which under-corrects by the delay), a clock ahead when the lower
// bound, which only an answer to a request gives, is past skewCorrect
// (and then by the upper bound: towards a later clock, a reservation held
// a little longer rather than released early).
//
// A correction of a clock behind also needs the newest sample to say
// behind: one stepped forward by NTP would otherwise be corrected by the
// old samples' bound for as long as they stay in the window, and run
// ahead, releasing reservations early. (A clock ahead stepped back keeps
// its old correction, which then runs behind, until a request's answer
// proves the samples disagree.)
func (c *clockSkew) refresh(now time.Time) (time.Duration, bool) {
	hi, lo, okHi, okLo := c.bounds(now)
	c.mu.Lock()
	newest := c.samples[(c.next+skewSamples-1)%skewSamples]
	c.mu.Unlock()
	var corr time.Duration
	switch {
	case okLo && lo > hi:
		// The samples disagree: the clock was stepped.
	case okHi && hi < -skewCorrect && newest.hi < -skewCorrect:
		corr = hi
	case okHi && okLo && lo > skewCorrect:
		corr = hi
	}
	c.corr.Store(int64(corr))
	return hi, okHi
}

// shouldWarn reports whether a skew past skewWarn is to be logged now.
func (c *clockSkew) shouldWarn(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.warned) < skewWarnEvery {
		return false
	}
	c.warned = now
	return true
}

// ClockSkew returns how far this machine's clock is ahead of the NATS
// server's (negative: behind), measured in the last skewWindow (see
// above), and false when it was not. It is the skew plus the few
// milliseconds a stamp takes to arrive, so it is an upper bound of a clock
// ahead.
func (l *Ledger) ClockSkew() (time.Duration, bool) { return l.skew.estimate(l.opts.clock()) }

// Now is this machine's clock corrected by the measured skew when that is
// past a second (ClockSkew): the NATS server's time, give or take the
// milliseconds a stamp takes to arrive, so that replicas whose clocks
// disagree still agree on when a reservation expires and which period an
// admit falls in. It is the replicas' clock of admissions, settles and
// the sweeper. Before the first sample, and unless the samples prove the
// skew past a second (see clockSkew.refresh), it is the machine's clock.
// A correction is by the least upper bound of the skew, so it errs
// towards a clock behind the server's by the milliseconds a stamp takes to
// arrive: a reservation held that much longer, never released early.
func (l *Ledger) Now() time.Time {
	return l.opts.clock().Add(-time.Duration(l.skew.corr.Load()))
}

// noteStamp samples the skew from a message stamped stamp, folded now,
// and logs a skew past skewWarn.
func (l *Ledger) noteStamp(stamp time.Time) {
	now := l.opts.clock()
	l.skew.add(now, stamp)
	if lag := now.Sub(stamp); lag.Abs() <= skewWarn && l.skew.corr.Load() == 0 {
		return // the estimate is at most this and nothing is corrected: the cheap path, every message
	}
	l.checkSkew(now)
}

// checkSkew refreshes the correction and logs a skew past skewWarn.
func (l *Ledger) checkSkew(now time.Time) {
	if d, ok := l.skew.refresh(now); ok && d.Abs() > skewWarn && l.skew.shouldWarn(now) {
		l.opts.log.Warn("ledger: this machine's clock is off the NATS server's; this replica admits, settles and sweeps on the server's time (corrected by the skew), but keep the replicas' clocks in sync (NTP): a replica that cannot measure it yet (one just started) or an older one releases other replicas' reservations early",
			"skew", d.Round(time.Millisecond))
	}
}

// probeClock samples the skew from the server's time in a stream info,
// every skewProbe until ctx ends, so that the estimate stays fresh
// whether or not anything is written.
func (l *Ledger) probeClock(ctx context.Context) {
	t := time.NewTicker(skewProbe)
	defer t.Stop()
	for {
		l.sampleClock(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleClock takes one sample from a stream info: the server stamps its
// answer (ts) when it makes it.
func (l *Ledger) sampleClock(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
	defer cancel()
	sent := l.opts.clock()
	info, err := l.stream.Info(ctx)
	if err != nil {
		// The next probe tries again; meanwhile the samples older than
		// skewWindow age out, and with none left Now is the machine's.
		l.skew.refresh(l.opts.clock())
		return
	}
	l.sampleInfo(sent, info)
}

// sampleInfo takes one sample from a stream info asked for at sent and
// just received.
func (l *Ledger) sampleInfo(sent time.Time, info *jetstream.StreamInfo) {
	now := l.opts.clock()
	if !info.TimeStamp.IsZero() {
		l.skew.addRound(sent, now, info.TimeStamp)
	}
	l.checkSkew(now)
}
