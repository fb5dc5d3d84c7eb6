package alerting

import "time"

// ShortenRetries sets p's attempts per round, its retry spacing and how
// many alerts may wait for another round (tests only).
func ShortenRetries(p *Publisher, attempts int, first, most time.Duration, waiting int) {
	p.attempts, p.retryFirst, p.retryMax, p.maxRetrying = attempts, first, most, waiting
}

// ShortenKeyWait sets the spacing of the attempts of an alert s holds for
// a key reload (tests only; before Run).
func ShortenKeyWait(s *Sink, first, most time.Duration) {
	s.keyWaitFirst, s.keyWaitMax = first, most
}
