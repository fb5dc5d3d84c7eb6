package client

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spendgate/spendgate/streams"
)

// Named bounds and defaults.
const (
	// DefaultTimeout bounds one attempt of a request.
	DefaultTimeout = 2 * time.Second
	// MaxTimeout is the largest per-attempt timeout WithTimeout accepts.
	MaxTimeout = time.Minute
	// DefaultAttempts is how many times a request is sent, in all, before
	// the ledger counts as unavailable.
	DefaultAttempts = 3
	// MaxAttempts is the largest attempt count WithRetries accepts.
	MaxAttempts = 10
	// retryPause is the first pause before retrying a request that failed
	// at once (no responders, ledger busy); it doubles on every retry and
	// never exceeds the per-attempt timeout. A request that timed out is
	// retried without a pause: it has already waited.
	retryPause = 20 * time.Millisecond
)

// Option configures New. Every option validates its argument; New returns
// the first option error.
type Option func(*options) error

type options struct {
	prefix   string
	timeout  time.Duration
	attempts int
	log      *slog.Logger
	logSet   bool
	failOpen *slog.Logger
}

func defaultOptions() options {
	return options{
		prefix:   streams.DefaultPrefix,
		timeout:  DefaultTimeout,
		attempts: DefaultAttempts,
		log:      slog.New(slog.DiscardHandler),
	}
}

// WithPrefix sets the service subject prefix, which must match the
// service's (default streams.DefaultPrefix, "spendgate."): dot-separated
// tokens ending in '.', without spaces or wildcards.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if _, err := streams.New(streams.Config{Prefix: prefix}); err != nil || prefix == "" {
			return fmt.Errorf("client: invalid prefix %q: must be dot-separated tokens ending in '.'", prefix)
		}
		o.prefix = prefix
		return nil
	}
}

// WithTimeout sets how long one attempt of a request waits for its reply
// (default DefaultTimeout); it must be in (0, MaxTimeout]. A whole request,
// retries included, takes at most timeout × attempts.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > MaxTimeout {
			return fmt.Errorf("client: timeout %s out of range (0, %s]", d, MaxTimeout)
		}
		o.timeout = d
		return nil
	}
}

// WithRetries sets the total number of attempts of a request, the first
// included (default DefaultAttempts); it must be in [1, MaxAttempts].
// Only failures that leave the request unanswered are retried: timeouts, no
// responders, ledger_busy and ledger_unavailable.
//
// Sizing: a request rides through a leader change of the ledger stream
// when timeout × attempts exceeds it. The defaults (6 s) cover a graceful
// change (a step-down, a node shut down: under a second). A hard loss of
// the stream leader (its process killed or paused, its machine gone) lasts
// nats-server's raft election timeout, 4-9 s, plus one commit attempt; for
// it use about 10 s or more, e.g. WithTimeout(2*time.Second) with
// WithRetries(6). A shorter budget fails closed during the election (and
// voids the admit, see Client.Admit).
func WithRetries(attempts int) Option {
	return func(o *options) error {
		if attempts < 1 || attempts > MaxAttempts {
			return fmt.Errorf("client: attempts %d out of range [1, %d]", attempts, MaxAttempts)
		}
		o.attempts = attempts
		return nil
	}
}

// WithFailOpen makes Admit admit when the ledger is unavailable, instead of
// denying: it returns a Reservation whose FailedOpen reports true and whose
// Settle and Release do nothing but log. Every such admission, settle and
// release is logged on logger at WARN, since its spend is not recorded and
// no budget enforces it. logger is required.
//
// Denials by a budget and invalid requests are never turned into
// admissions.
func WithFailOpen(logger *slog.Logger) Option {
	return func(o *options) error {
		if logger == nil {
			return errors.New("client: WithFailOpen needs a logger: fail-open admissions must be logged")
		}
		o.failOpen = logger
		return nil
	}
}

// WithLogger sets the logger of the client's own diagnostics: retries at
// DEBUG, and at ERROR a release that failed after a panicking call (see
// Call). Without it, DEBUG lines are discarded and ERROR lines go to
// slog.Default(). It must not be nil.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) error {
		if logger == nil {
			return errors.New("client: nil logger")
		}
		o.log, o.logSet = logger, true
		return nil
	}
}
