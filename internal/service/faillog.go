package service

import (
	"sync"
	"time"
)

const (
	// failLogBurst is how many failed requests a minute are logged one by
	// one (failLog); the rest are summed up once a minute.
	failLogBurst = 20
	failLogEvery = time.Minute
)

// failLog bounds the "request failed" lines, as the ledger's log of
// skipped revisions and the gateway's of refused keys do. Every request
// answered ledger_unavailable or internal was an error line of its own:
// with the ledger stream out of disk, a replica under load wrote 22,000
// of them (and 9,000 write warnings) in 45 s, 6 MB, most often to the
// disk that was full. spendgate_requests_total counts each by endpoint
// and code.
type failLog struct {
	mu     sync.Mutex
	since  time.Time
	logged int
	held   int64
}

// note says whether a failure at now is logged one by one, and how many
// failures of the minute before, not logged, to sum up first.
func (f *failLog) note(now time.Time) (log bool, held int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.since) >= failLogEvery {
		held = f.held
		f.since, f.logged, f.held = now, 0, 0
	}
	if f.logged < failLogBurst {
		f.logged++
		return true, held
	}
	f.held++
	return false, held
}

// logFailure logs a failed request, bounded by s.failures.
func (s *Service) logFailure(subject string, err error) {
	log, held := s.failures.note(s.now())
	if held > 0 {
		s.log.Error("more requests failed; not logged one by one (past the first 20 a minute, summed up once a minute; spendgate_requests_total counts each by endpoint and code)",
			"failed", held)
	}
	if log {
		s.log.Error("request failed", "subject", subject, "err", err)
	}
}
