package sweep

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Option configures a Sweeper.
type Option func(*Sweeper) error

// WithClock sets the clock deciding what is due.
func WithClock(now func() time.Time) Option {
	return func(s *Sweeper) error {
		if now == nil {
			return errors.New("sweep: nil clock")
		}
		s.now = now
		return nil
	}
}

// WithInterval sets the time between passes (100ms..24h).
func WithInterval(d time.Duration) Option {
	return func(s *Sweeper) error {
		if d < 100*time.Millisecond || d > 24*time.Hour {
			return fmt.Errorf("sweep: interval %v out of range 100ms..24h", d)
		}
		s.interval = d
		return nil
	}
}

// WithMaxPerPass bounds the reservations expired per pass
// (1..10,000,000; default DefaultMaxPerPass).
func WithMaxPerPass(n int) Option {
	return func(s *Sweeper) error {
		if n < 1 || n > 10_000_000 {
			return fmt.Errorf("sweep: max per pass %d out of range 1..10000000", n)
		}
		s.max = n
		return nil
	}
}

// WithWorkers bounds the expiries a pass has in flight at once (1..4096;
// default DefaultWorkers). With one worker a pass expires one reservation
// at a time, in order.
func WithWorkers(n int) Option {
	return func(s *Sweeper) error {
		if n < 1 || n > 4096 {
			return fmt.Errorf("sweep: workers %d out of range 1..4096", n)
		}
		s.workers = n
		return nil
	}
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(s *Sweeper) error {
		if l == nil {
			return errors.New("sweep: nil logger")
		}
		s.log = l
		return nil
	}
}

// WithOnExpired has f told how many reservations each pass expired (for
// metrics; f must not block).
func WithOnExpired(f func(n int)) Option {
	return func(s *Sweeper) error {
		s.onExpired = f
		return nil
	}
}

// WithIdleRetire has the sweeper retire, every every (default
// DefaultIdleEvery; 100ms..24h), the budgets created from defaults that
// have been idle for their scope kind's rule: rules maps a scope kind
// ("run") to how long (at least a minute), and r retires them
// (ledger.Ledger). Sweepers on several replicas may retire the same
// budget: the second finds it retired and writes nothing.
func WithIdleRetire(r IdleRetirer, rules map[string]time.Duration, every time.Duration) Option {
	return func(s *Sweeper) error {
		if r == nil {
			return errors.New("sweep: nil idle retirer")
		}
		for kind, d := range rules {
			if d < time.Minute {
				return fmt.Errorf("sweep: idle rule %s=%v under a minute", kind, d)
			}
		}
		if every == 0 {
			every = DefaultIdleEvery
		}
		if every < 100*time.Millisecond || every > 24*time.Hour {
			return fmt.Errorf("sweep: idle period %v out of range 100ms..24h", every)
		}
		if len(rules) > 0 {
			s.idle, s.idleRules, s.idleEvery = r, rules, every
		}
		return nil
	}
}
