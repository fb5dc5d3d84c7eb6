package gateway

import "time"

// SetRetry sets g's back-off bounds and its cap on pending closes, for
// tests that must not wait out the real ones (or must see them waited).
func SetRetry(g *Gateway, first, maxWait time.Duration, limit int) {
	g.retry = retrier{first: first, max: maxWait, limit: limit}
}
