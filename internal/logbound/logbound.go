// Package logbound bounds a log line that a failure repeats: the first
// few a minute are logged one by one, the rest counted and summed up in one
// line once a minute. With the ledger stream out of disk, a replica under
// load wrote 22,000 "request failed" lines and 9,000 "ledger write failed"
// warnings in 45 s (6 MB, most often to the disk that was full); the
// metrics count each failure, so the log needs only a sample and a sum.
package logbound

import (
	"sync"
	"time"
)

// Defaults of a Bound's zero value.
const (
	// DefaultBurst is how many lines a minute are logged one by one.
	DefaultBurst = 20
	// Every is the period after which the lines not logged are summed up.
	Every = time.Minute
)

// Bound is one repeated line's bound. The zero value logs DefaultBurst a
// minute; safe for concurrent use.
type Bound struct {
	// Burst, when set, replaces DefaultBurst.
	Burst int

	mu     sync.Mutex
	since  time.Time
	logged int
	held   int64
}

// Note says whether an occurrence at now is logged one by one, and how
// many occurrences of the period before were not (to sum up first, in a
// line of their own, when held > 0).
func (b *Bound) Note(now time.Time) (log bool, held int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.since) >= Every {
		held = b.held
		b.since, b.logged, b.held = now, 0, 0
	}
	burst := b.Burst
	if burst <= 0 {
		burst = DefaultBurst
	}
	if b.logged < burst {
		b.logged++
		return true, held
	}
	b.held++
	return false, held
}
