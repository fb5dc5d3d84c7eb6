package alerting

import "time"

// ShortenRetries sets p's attempts per round, its retry spacing and how
// many alerts may wait for another round (tests only).
func ShortenRetries(p *Publisher, attempts int, first, most time.Duration, waiting int) {
	p.attempts, p.retryFirst, p.retryMax, p.maxRetrying = attempts, first, most, waiting
}
