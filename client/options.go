package client

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spendgate/spendgate/events"
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
	// DefaultLinger is how long a call may wait for others to share its
	// message when one of its kind is already in flight (WithBatching).
	DefaultLinger = 200 * time.Microsecond
	// MaxLinger is the longest linger WithBatching accepts.
	MaxLinger = 10 * time.Millisecond
	// DefaultBatchItems is the most calls one batch message carries.
	DefaultBatchItems = 64
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
	linger   time.Duration
	maxItems int
	brief    bool
}

func defaultOptions() options {
	return options{
		prefix:   streams.DefaultPrefix,
		timeout:  DefaultTimeout,
		attempts: DefaultAttempts,
		log:      slog.New(slog.DiscardHandler),
		linger:   DefaultLinger,
		maxItems: DefaultBatchItems,
	}
}

// WithBatching sets how concurrent admits, settles and releases of one
// client are gathered into batch messages (on by default, with
// DefaultLinger and DefaultBatchItems). A call made while no message of
// its kind is in flight is sent at once, alone; otherwise it waits at most
// linger for others to join it, or until maxItems have, and they travel in
// one message to the batch endpoint, each still answered, retried and
// deduplicated on its own. linger must be in (0, MaxLinger], maxItems in
// [2, events.MaxBatchItems].
func WithBatching(linger time.Duration, maxItems int) Option {
	return func(o *options) error {
		if linger <= 0 || linger > MaxLinger {
			return fmt.Errorf("client: linger %s out of range (0, %s]", linger, MaxLinger)
		}
		if maxItems < 2 || maxItems > events.MaxBatchItems {
			return fmt.Errorf("client: batch items %d out of range [2, %d]", maxItems, events.MaxBatchItems)
		}
		o.linger, o.maxItems = linger, maxItems
		return nil
	}
}

// WithoutBatching sends every call as its own message on the single
// endpoint, never waiting for others.
func WithoutBatching() Option {
	return func(o *options) error {
		o.maxItems = 0
		return nil
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
// retries included, takes at most timeout × attempts, with one exception:
// an admit that fails closed on an outcome it cannot know (its attempts
// timed out: it may have landed) first voids its request id, which takes
// up to another timeout × attempts, so it returns within 2 × timeout ×
// attempts (see Client.Admit). One that no attempt delivered (no
// responders every time) is not voided.
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
// responders, ledger_busy and ledger_unavailable. No responders, which
// comes back at once while no replica serves the subject (one restarting),
// is retried with growing pauses until timeout × attempts has passed,
// however many attempts that takes (with attempts > 1).
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

// WithBriefReplies sets Brief on every admit: its reply leaves out the
// per-budget balances after the admission (AdmitReply.Budgets, so
// Reservation.Reply().Budgets and Outcome.Admit.Budgets are empty), which
// makes every admit's reply smaller to encode, send and decode. Everything
// else of the reply is unchanged.
func WithBriefReplies() Option {
	return func(o *options) error {
		o.brief = true
		return nil
	}
}
