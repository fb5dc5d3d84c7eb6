package report

import (
	"sync"

	"github.com/spendgate/spendgate/events"
)

// RecentDenialsSize bounds the recent denials a DenialRing keeps.
const RecentDenialsSize = 256

// DenialRing keeps the last RecentDenialsSize denials; the zero value is
// ready. Safe for concurrent use.
type DenialRing struct {
	mu   sync.Mutex
	buf  [RecentDenialsSize]events.AdmitDenied
	next int
	n    int
}

// Add keeps d, forgetting the oldest past RecentDenialsSize.
func (r *DenialRing) Add(d events.AdmitDenied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = d
	r.next = (r.next + 1) % RecentDenialsSize
	r.n = min(r.n+1, RecentDenialsSize)
}

// Newest returns the denials kept, newest first.
func (r *DenialRing) Newest() []events.AdmitDenied {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]events.AdmitDenied, 0, r.n)
	for i := 1; i <= r.n; i++ {
		out = append(out, r.buf[(r.next-i+RecentDenialsSize)%RecentDenialsSize])
	}
	return out
}
