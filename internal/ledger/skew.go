package ledger

import (
	"sync"
	"time"
)

// Expiry and period boundaries are read from the machine's clock (a
// reservation's expires_at is the admitting replica's now plus its TTL,
// and every replica's sweeper compares it with its own now), so replicas'
// clocks must agree: one running minutes ahead releases other replicas'
// reservations before their TTL. ClockSkew measures how far this
// machine's clock is from the NATS server's, from the messages the
// follower folds once it has caught up: each is stamped by the server when
// stored (whoever wrote it, a forger too: the stamp is the server's) and
// folded milliseconds later, so the machine's time at the fold less the
// stamp is the skew plus that delay. The least of the recent ones is the
// estimate.

// skewWindow is how recent a sample must be to count, and skewSamples how
// many are kept.
const (
	skewWindow  = 10 * time.Minute
	skewSamples = 64
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
}

type skewSample struct {
	at  time.Time
	lag time.Duration
}

// add records one message folded at at, stamped stamp by the server.
func (c *clockSkew) add(at, stamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples[c.next] = skewSample{at: at, lag: at.Sub(stamp)}
	c.next = (c.next + 1) % skewSamples
	c.n = min(c.n+1, skewSamples)
}

// estimate returns the least lag among the samples taken within skewWindow
// of now, and false when there is none.
func (c *clockSkew) estimate(now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best time.Duration
	ok := false
	for i := range c.n {
		s := c.samples[i]
		if now.Sub(s.at) > skewWindow {
			continue
		}
		if !ok || s.lag < best {
			best, ok = s.lag, true
		}
	}
	return best, ok
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
// server's (negative: behind), measured from the messages folded in the
// last ten minutes (see above), and false when none was. It is the skew
// plus the few milliseconds a message waits to be folded, so it is an
// upper bound of a clock ahead.
func (l *Ledger) ClockSkew() (time.Duration, bool) { return l.skew.estimate(time.Now()) }

// noteStamp samples the skew from a message stamped stamp, folded now,
// and logs a skew past skewWarn.
func (l *Ledger) noteStamp(stamp time.Time) {
	now := time.Now()
	l.skew.add(now, stamp)
	if lag := now.Sub(stamp); lag.Abs() <= skewWarn {
		return // the estimate is at most this: nothing to warn of (the cheap path, every message)
	}
	if d, ok := l.skew.estimate(now); ok && d.Abs() > skewWarn && l.skew.shouldWarn(now) {
		l.opts.log.Warn("ledger: this machine's clock is off the NATS server's; expiry and period boundaries follow the machine clock, so keep the replicas' clocks in sync (NTP): a replica ahead releases other replicas' reservations early",
			"skew", d.Round(time.Millisecond))
	}
}
