package service

import (
	"sync"
	"time"

	"github.com/spendgate/spendgate/events"
)

// DenialRingSize bounds the recent denials a replica keeps in memory.
const DenialRingSize = 256

// DeniedAdmit is one admit this replica denied. Denials are not in the
// ledger stream (nothing was written), so each replica only knows its own.
type DeniedAdmit struct {
	At time.Time `json:"at"`
	// Tenant is the tenant the admit acted for ("" for the untenanted
	// deployment); Scopes and RequestID are as that tenant sent them.
	Tenant    string            `json:"tenant,omitempty"`
	RequestID string            `json:"request_id"`
	Scopes    []string          `json:"scopes"`
	Amount    string            `json:"amount"`
	Unit      string            `json:"unit,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Denial    events.Denial     `json:"denial"`
}

// denialRing keeps the last DenialRingSize denials; the zero value is
// ready.
type denialRing struct {
	mu   sync.Mutex
	buf  [DenialRingSize]DeniedAdmit
	next int
	n    int
}

func (r *denialRing) add(d DeniedAdmit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = d
	r.next = (r.next + 1) % DenialRingSize
	r.n = min(r.n+1, DenialRingSize)
}

// RecentDenials returns up to DenialRingSize admits this replica denied,
// newest first. Other replicas' denials are not included.
func (s *Service) RecentDenials() []DeniedAdmit {
	r := &s.denials
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]DeniedAdmit, 0, r.n)
	for i := 1; i <= r.n; i++ {
		out = append(out, r.buf[(r.next-i+DenialRingSize)%DenialRingSize])
	}
	return out
}
