package settle

import (
	"fmt"
	"time"
)

// Option configures a Settler.
type Option func(*Settler) error

// WithClock sets the clock used for lateness and expiry.
func WithClock(now func() time.Time) Option {
	return func(s *Settler) error {
		if now == nil {
			return fmt.Errorf("settle: nil clock")
		}
		s.now = now
		return nil
	}
}
