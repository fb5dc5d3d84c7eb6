package service

import (
	"sync"

	"github.com/spendgate/spendgate/events"
)

// DenialRingSize bounds the recent denials a replica keeps in memory.
const DenialRingSize = 256

// denialRing keeps the last DenialRingSize denials; the zero value is
// ready.
type denialRing struct {
	mu   sync.Mutex
	buf  [DenialRingSize]events.AdmitDenied
	next int
	n    int
}

func (r *denialRing) add(d events.AdmitDenied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = d
	r.next = (r.next + 1) % DenialRingSize
	r.n = min(r.n+1, DenialRingSize)
}

// RecentDenials returns up to DenialRingSize admits this replica denied,
// newest first: the records it appends to the denial stream. Denials are
// not in the ledger (nothing was written), so other replicas' are not
// included.
func (s *Service) RecentDenials() []events.AdmitDenied {
	r := &s.denials
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]events.AdmitDenied, 0, r.n)
	for i := 1; i <= r.n; i++ {
		out = append(out, r.buf[(r.next-i+DenialRingSize)%DenialRingSize])
	}
	return out
}
