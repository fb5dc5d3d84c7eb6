package ledger

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults and bounds of the commit path.
const (
	// DefaultMaxGroup is the most Txs folded into one revision.
	DefaultMaxGroup = 256
	// DefaultMaxAttempts bounds compare-and-set retries of one commit.
	DefaultMaxAttempts = 64
	// DefaultCommitTimeout bounds one write to JetStream.
	DefaultCommitTimeout = 5 * time.Second
)

type options struct {
	maxGroup      int
	maxAttempts   int
	commitTimeout time.Duration
	log           *slog.Logger
	blindWrites   bool
}

func defaultOptions() options {
	return options{
		maxGroup:      DefaultMaxGroup,
		maxAttempts:   DefaultMaxAttempts,
		commitTimeout: DefaultCommitTimeout,
		log:           slog.New(slog.DiscardHandler),
	}
}

// Option configures a Ledger.
type Option func(*options) error

// WithMaxGroup sets the most Txs folded into one revision (1 disables group
// commit; 1..4096).
func WithMaxGroup(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 4096 {
			return fmt.Errorf("ledger: max group %d out of range 1..4096", n)
		}
		o.maxGroup = n
		return nil
	}
}

// WithMaxAttempts bounds compare-and-set retries of one commit (1..10000).
func WithMaxAttempts(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("ledger: max attempts %d out of range 1..10000", n)
		}
		o.maxAttempts = n
		return nil
	}
}

// WithCommitTimeout bounds one write (10ms..1m).
func WithCommitTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("ledger: commit timeout %v out of range 10ms..1m", d)
		}
		o.commitTimeout = d
		return nil
	}
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("ledger: nil logger")
		}
		o.log = l
		return nil
	}
}

// UnsafeBlindWritesForTesting makes every write skip its revision check: a
// replica then overwrites balances that another replica changed since it
// decided. It exists only so that tests can show their concurrency checks
// fail without compare-and-set; never use it elsewhere.
func UnsafeBlindWritesForTesting() Option {
	return func(o *options) error {
		o.blindWrites = true
		return nil
	}
}
