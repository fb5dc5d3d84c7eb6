package settle

import (
	"fmt"
	"time"

	"github.com/spendgate/spendgate/events"
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

// WithAlerts calls f with the thresholds a settle crossed (one above its
// reservation), after its revision was committed. f must not block.
func WithAlerts(f func([]events.ThresholdCrossed)) Option {
	return func(s *Settler) error {
		s.alerts = f
		return nil
	}
}
