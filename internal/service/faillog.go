package service

import "github.com/spendgate/spendgate/internal/logbound"

// failLog bounds the "request failed" lines (logbound): every request
// answered ledger_unavailable or internal was an error line of its own.
// spendgate_requests_total counts each by endpoint and code.
type failLog = logbound.Bound

// logFailure logs a failed request, bounded by s.failures.
func (s *Service) logFailure(subject string, err error) {
	log, held := s.failures.Note(s.now())
	if held > 0 {
		s.log.Error("more requests failed; not logged one by one (past the first 20 a minute, summed up once a minute; spendgate_requests_total counts each by endpoint and code)",
			"failed", held)
	}
	if log {
		s.log.Error("request failed", "subject", subject, "err", err)
	}
}
