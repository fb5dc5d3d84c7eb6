package gateway

import "time"

// SetRetry sets g's back-off bounds and its cap on pending closes, for
// tests that must not wait out the real ones (or must see them waited).
func SetRetry(g *Gateway, first, maxWait time.Duration, limit int) {
	g.retry = retrier{first: first, max: maxWait, limit: limit}
}

// SetWriteGrace sets how long after its upstream timeout a call of g may
// still write to its caller.
func SetWriteGrace(g *Gateway, d time.Duration) { g.writeGrace = d }

// SetAuthClock sets the clock of g's limiter of unknown keys (a frozen one:
// no token comes back while a test runs).
func SetAuthClock(g *Gateway, now func() time.Time) { g.keys.failures.now = now }

// SetCallerLeft makes g call f each time it finds a call's caller gone,
// before it bounds the call's drain (DrainAbandoned).
func SetCallerLeft(g *Gateway, f func()) { g.callerLeft = f }
