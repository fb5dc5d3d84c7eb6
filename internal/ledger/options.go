package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/internal/signing"
)

// Defaults and bounds of the commit path.
const (
	// DefaultMaxGroup is the most Txs folded into one revision.
	DefaultMaxGroup = 256
	// DefaultMaxAttempts bounds compare-and-set retries of one commit.
	DefaultMaxAttempts = 64
	// DefaultCommitTimeout bounds one attempt of a call to JetStream (a
	// write, a leader read). It is short on purpose: while a stream leader
	// is being elected a request goes unanswered, and a write that timed
	// out is sent again, byte for byte with the same expected revision,
	// every DefaultCommitTimeout until the commit's deadline; if the first
	// landed, the repeat loses its compare-and-set and the catch-up finds
	// the write, and no other write can land at that revision. So admits
	// resume about one attempt after the new leader is elected, not after a
	// fixed 5 s.
	DefaultCommitTimeout = 500 * time.Millisecond
	// retryPause is the pause before a write or a leader read is tried
	// again after a timeout (an election in progress).
	retryPause = 50 * time.Millisecond
	// DefaultSubmitTimeout bounds all attempts of one Submit or PutBudget
	// whose ctx has no deadline.
	DefaultSubmitTimeout = 30 * time.Second
	// DefaultRetention is how long a replica remembers a settled or
	// released reservation (and its request id) after it closed: the window
	// in which a retried admit, settle or release gets its original answer.
	DefaultRetention = 15 * time.Minute
	// DefaultExpiredRetention is how long an expired reservation is
	// remembered, so that a late settle can still record its spend; it
	// covers the longest TTL.
	DefaultExpiredRetention = 48 * time.Hour
)

type options struct {
	maxGroup      int
	maxAttempts   int
	commitTimeout time.Duration
	log           *slog.Logger
	blindWrites   bool
	retention     time.Duration
	expiredKeep   time.Duration
	submitTimeout time.Duration
	writeFault    func(ctx context.Context, lanes []string) error
	// publishHook, set only by tests (export_test.go), stands between a
	// single lane write and the server: send is the real request.
	publishHook func(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error)
	observer    Observer
	unverified  bool
	// snapLoad: Run starts from the newest valid snapshot.
	snapLoad bool
	// snapRevisions, snapInterval: when Run writes a snapshot (0: never).
	snapRevisions uint64
	snapEvents    uint64
	snapInterval  time.Duration
	// orphanAge: how old chunks without a meta must be before pruning
	// purges them (orphanChunkAge).
	orphanAge time.Duration
	// signer and trust: see WithSigner and WithTrust.
	signer *signing.Signer
	trust  *signing.KeySet
	// ownWriter: Run dials a connection of its own for the writes (see
	// WithWriteConn).
	ownWriter bool
	// clock is the machine's clock, which Now corrects (see
	// WithMachineClock).
	clock func() time.Time
}

func defaultOptions() options {
	return options{
		maxGroup:      DefaultMaxGroup,
		maxAttempts:   DefaultMaxAttempts,
		commitTimeout: DefaultCommitTimeout,
		retention:     DefaultRetention,
		expiredKeep:   DefaultExpiredRetention,
		submitTimeout: DefaultSubmitTimeout,
		log:           slog.New(slog.DiscardHandler),
		snapLoad:      true,
		snapRevisions: DefaultSnapshotRevisions,
		snapEvents:    DefaultSnapshotEvents,
		snapInterval:  DefaultSnapshotInterval,
		orphanAge:     orphanChunkAge,
		ownWriter:     true,
		clock:         time.Now,
	}
}

// WithMachineClock sets the clock the ledger takes for this machine's
// (default time.Now): the one it measures against the NATS server's
// stamps (ClockSkew) and corrects (Now). Tests set one off the server's
// to stand for a machine whose clock is wrong.
func WithMachineClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("ledger: nil machine clock")
		}
		o.clock = now
		return nil
	}
}

// WithWriteConn sets whether Run dials a NATS connection of its own for
// the ledger's writes (default true: a write and its ack then do not queue
// behind the replica's requests, replies and the follower's deliveries;
// see writer.go). false writes on the connection given to New.
func WithWriteConn(own bool) Option {
	return func(o *options) error {
		o.ownWriter = own
		return nil
	}
}

// WithSigner makes the replica sign every revision it writes with s (see
// package signing). Without it revisions are written unsigned. SetSigner
// changes the key while the ledger runs.
func WithSigner(s *signing.Signer) Option {
	return func(o *options) error {
		o.signer = s
		return nil
	}
}

// WithSnapshotEvents sets how many folded events (1..10^10) make the
// periodic writer write a snapshot, whatever the revisions (default
// DefaultSnapshotEvents).
func WithSnapshotEvents(n uint64) Option {
	return func(o *options) error {
		if n == 0 || n > 10_000_000_000 {
			return fmt.Errorf("ledger: snapshot events %d out of range 1..1e10", n)
		}
		o.snapEvents = n
		return nil
	}
}

// WithUnverified makes the ledger's gate check no signature (decoding and
// chains still): what a tool told --unverified in so many words folds.
// Never for a replica that serves.
func WithUnverified() Option {
	return func(o *options) error {
		o.unverified = true
		return nil
	}
}

// WithTrust makes the replica fold only revisions that ks accepts (see
// signing.KeySet.Verify); any other is skipped, logged and counted
// (Stats.Rejected), and the replica keeps serving. Without it (a nil ks)
// signatures are not checked; the chain always is. SetTrust changes the
// set while the ledger runs.
func WithTrust(ks *signing.KeySet) Option {
	return func(o *options) error {
		o.trust = ks
		return nil
	}
}

// WithSnapshotLoad sets whether Run starts from the newest valid snapshot
// in the snapshot bucket (default true) or folds the whole stream.
func WithSnapshotLoad(load bool) Option {
	return func(o *options) error {
		o.snapLoad = load
		return nil
	}
}

// WithSnapshotEvery sets when Run writes a snapshot: once the stream has
// moved revisions (1..10^9) past the newest snapshot (or the fold has
// folded DefaultSnapshotEvents events since, WithSnapshotEvents), or every
// (1s..24h) after it if the stream moved at all. revisions 0 turns
// periodic snapshots off, and the snapshot on a graceful stop
// (Snapshot still writes one on demand).
func WithSnapshotEvery(revisions uint64, every time.Duration) Option {
	return func(o *options) error {
		if revisions == 0 {
			o.snapRevisions = 0
			return nil
		}
		if revisions > 1_000_000_000 || every < time.Second || every > 24*time.Hour {
			return fmt.Errorf("ledger: snapshot every %d revisions or %v out of range 1..1e9, 1s..24h", revisions, every)
		}
		o.snapRevisions, o.snapInterval = revisions, every
		return nil
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

// WithSubmitTimeout bounds all attempts of a Submit or PutBudget whose ctx
// has no deadline (100ms..10m).
func WithSubmitTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond || d > 10*time.Minute {
			return fmt.Errorf("ledger: submit timeout %v out of range 100ms..10m", d)
		}
		o.submitTimeout = d
		return nil
	}
}

// WithRetention sets how long closed reservations are remembered after they
// close: settled or released ones, and expired ones (keep those at least as
// long as the longest TTL, so a late settle still finds its reservation).
// Both 1s..30d.
func WithRetention(closed, expired time.Duration) Option {
	return func(o *options) error {
		if closed < time.Second || closed > 30*24*time.Hour || expired < time.Second || expired > 30*24*time.Hour {
			return fmt.Errorf("ledger: retention %v/%v out of range 1s..30d", closed, expired)
		}
		o.retention, o.expiredKeep = closed, expired
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

// UnsafeWriteFaultForTesting calls f before every write of a lane revision
// or batch, with the write's context and the lane keys it writes; a non-nil
// error from f is the write's error and nothing is published. Tests use it
// to inject a failed, hung or slow write at an exact point. Never use it
// elsewhere.
func UnsafeWriteFaultForTesting(f func(ctx context.Context, lanes []string) error) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("ledger: nil write fault")
		}
		o.writeFault = f
		return nil
	}
}

// Observer is told what the commit path does, for metrics. Its methods are
// called on the commit path: they must be cheap and must not block.
type Observer interface {
	// Committed: one write landed (a lane revision or an atomic batch),
	// carrying txs transactions.
	Committed(txs int)
	// Conflicted: a write lost compare-and-set to another writer.
	Conflicted()
}

// WithObserver has o told of every commit and every lost compare-and-set
// (nil: nobody is told).
func WithObserver(o Observer) Option {
	return func(opts *options) error {
		opts.observer = o
		return nil
	}
}
