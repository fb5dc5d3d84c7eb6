// Package sweep releases expired reservations. A Sweeper runs inside every
// serve replica with no leader election: each pass asks the ledger for
// every open reservation whose expiry has passed and expires them through
// the ledger's commit path like any other change, many at once (see
// WithWorkers), so the ledger's committer folds them into group commits:
// one revision per lane carries up to ledger.DefaultMaxGroup expiries.
//
// Because every close is a compare-and-set on the reservation's balances,
// sweepers on several replicas, a late settle and a release may race and
// exactly one transition wins: an expiry is decided against the exact lane
// revision its write then requires, so a second sweeper that decided on
// the same open reservation loses its write, folds the winner's revision,
// decides again, finds the reservation closed and writes nothing (its
// Expire answers Replayed). No reservation is released twice.
package sweep

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/spendgate/spendgate/events"
)

// Defaults.
const (
	// DefaultInterval is the time between passes. A pass lists what is due
	// from an index ordered by expiry, so a pass with nothing due costs
	// next to nothing; a short interval keeps a reservation counted as
	// reserved for at most about this long after its expiry.
	DefaultInterval = time.Second
	// DefaultMaxPerPass bounds the reservations one pass lists (the memory
	// of one listing). It is far above what a pass expires in practice; a
	// larger backlog is taken by the next passes, one interval apart.
	DefaultMaxPerPass = 1_000_000
	// DefaultWorkers is how many expiries a pass has in flight at once.
	// It is twice ledger.DefaultMaxGroup so that while one group of
	// expiries is being written, the next group is already queued on the
	// lane and the committer folds it into one revision.
	DefaultWorkers = 512
)

// Lister finds expired reservations (ledger.Ledger implements it).
type Lister interface {
	// Expired returns up to max ids of open reservations whose expiry is
	// at or before now, oldest expiry first.
	Expired(now time.Time, max int) []string
}

// Expirer expires one reservation if it is still open and due
// (settle.Settler implements it). It must be safe for concurrent use.
type Expirer interface {
	Expire(ctx context.Context, id string) (events.CloseReply, error)
}

// Sweeper releases expired reservations.
type Sweeper struct {
	list     Lister
	exp      Expirer
	now      func() time.Time
	interval time.Duration
	max      int
	workers  int
	log      *slog.Logger
	// onExpired, if set, is told each pass's count.
	onExpired func(n int)
	// idle retires idle budgets under idleRules, every idleEvery (see
	// WithIdleRetire).
	idle      IdleRetirer
	idleRules map[string]time.Duration
	idleEvery time.Duration
}

// IdleRetirer retires the budgets created from defaults that have been
// idle for their scope kind's rule (ledger.Ledger implements it).
type IdleRetirer interface {
	RetireIdle(ctx context.Context, rules map[string]time.Duration, now time.Time, max int) (int, error)
}

// Defaults of idle retirement.
const (
	// DefaultIdleEvery is how often a sweeper with idle rules looks for
	// idle budgets: a look walks every budget, so not every pass.
	DefaultIdleEvery = time.Minute
	// MaxIdlePerPass bounds the budgets one look retires; the rest wait
	// for the next.
	MaxIdlePerPass = 10_000
)

// New returns a Sweeper.
func New(list Lister, exp Expirer, opts ...Option) (*Sweeper, error) {
	s := &Sweeper{list: list, exp: exp, now: time.Now, interval: DefaultInterval, max: DefaultMaxPerPass,
		workers: DefaultWorkers, log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Pass expires up to the per-pass bound of due reservations, oldest expiry
// first, with up to the worker bound in flight at once, and returns how
// many it expired. A reservation closed by someone else first is skipped.
// It stops handing out reservations at the first error that says the
// ledger is unavailable (or when ctx ends), waits for those in flight, and
// returns that error; any other failure of one reservation is logged and
// skipped, so one bad reservation cannot stop every later expiry. With one
// worker, nothing after the failing reservation is tried.
func (s *Sweeper) Pass(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ids := s.list.Expired(s.now(), s.max)
	if len(ids) == 0 {
		return 0, nil
	}
	var (
		mu       sync.Mutex
		n        int
		firstErr error
		next     int
	)
	// take hands out the next id, or "" once the pass must stop.
	take := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr != nil || next == len(ids) {
			return "", false
		}
		if err := ctx.Err(); err != nil {
			firstErr = err
			return "", false
		}
		id := ids[next]
		next++
		return id, true
	}
	work := func() {
		for {
			id, ok := take()
			if !ok {
				return
			}
			reply, err := s.exp.Expire(ctx, id)
			mu.Lock()
			switch {
			case err != nil && (events.CodeOf(err) == events.CodeLedgerUnavailable || ctx.Err() != nil):
				if firstErr == nil {
					firstErr = err
				}
			case err != nil:
				s.log.Warn("sweep: expiring a reservation failed; skipping it this pass", "reservation", id, "err", err)
			case reply.Status == events.StatusExpired && !reply.Replayed:
				n++
			}
			mu.Unlock()
		}
	}
	workers := min(s.workers, len(ids))
	var wg sync.WaitGroup
	for i := 1; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	return n, firstErr
}

// IdlePass retires the budgets idle under the sweeper's rules (see
// WithIdleRetire) and returns how many; Run calls it every idle period.
func (s *Sweeper) IdlePass(ctx context.Context) int {
	if s.idle == nil {
		return 0
	}
	start := time.Now()
	n, err := s.idle.RetireIdle(ctx, s.idleRules, s.now(), MaxIdlePerPass)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("sweep: retiring idle budgets stopped", "retired", n, "err", err)
	} else if n > 0 {
		s.log.Info("sweep: retired idle budgets", "retired", n, "took", time.Since(start))
	}
	return n
}

// Run sweeps every interval until ctx ends, and returns ctx's error. With
// idle rules it also runs an idle pass an interval after it starts and
// then every idle period, on a goroutine of its own: retiring thousands
// of idle budgets takes seconds, and expiry must not wait for it.
func (s *Sweeper) Run(ctx context.Context) error {
	if s.idle != nil {
		idleDone := make(chan struct{})
		go func() {
			defer close(idleDone)
			s.runIdle(ctx)
		}()
		defer func() { <-idleDone }()
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			start := time.Now()
			n, err := s.Pass(ctx)
			if s.onExpired != nil {
				s.onExpired(n)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("sweep pass stopped", "expired", n, "err", err)
			} else if n > 0 {
				// Debug: a replica whose callers let reservations expire
				// would log a line a second at info;
				// spendgate_sweeper_released_total counts them.
				s.log.Debug("sweep pass", "expired", n, "took", time.Since(start))
			}
		}
	}
}

// runIdle runs IdlePass an interval after it starts, then every idle
// period, until ctx ends.
func (s *Sweeper) runIdle(ctx context.Context) {
	t := time.NewTimer(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.IdlePass(ctx)
			t.Reset(s.idleEvery)
		}
	}
}
