// Package sweep releases expired reservations. A Sweeper runs inside every
// serve replica with no leader election: each pass asks the ledger for open
// reservations whose expiry has passed and expires them one transaction at a
// time. Because every close is a compare-and-set on the reservation's
// balances, sweepers on several replicas, a late settle and a release may
// race and exactly one transition wins.
package sweep

import (
	"context"
	"log/slog"
	"time"

	"github.com/spendgate/spendgate/events"
)

// Defaults.
const (
	DefaultInterval = time.Minute
	// DefaultMaxPerPass bounds the reservations one pass expires, so a
	// backlog cannot monopolize a hot budget's commit path.
	DefaultMaxPerPass = 1000
)

// Lister finds expired reservations (ledger.Ledger implements it).
type Lister interface {
	Expired(now time.Time, max int) []string
}

// Expirer expires one reservation if it is still open and due
// (settle.Settler implements it).
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
	log      *slog.Logger
	// onExpired, if set, is told each pass's count.
	onExpired func(n int)
}

// New returns a Sweeper.
func New(list Lister, exp Expirer, opts ...Option) (*Sweeper, error) {
	s := &Sweeper{list: list, exp: exp, now: time.Now, interval: DefaultInterval, max: DefaultMaxPerPass, log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Pass expires up to the per-pass bound of due reservations and returns how
// many it expired. A reservation closed by someone else first is skipped.
// It stops at the first error that says the ledger is unavailable and
// returns it; any other failure of one reservation is logged and skipped,
// so one bad reservation cannot stop every later expiry.
func (s *Sweeper) Pass(ctx context.Context) (int, error) {
	n := 0
	for _, id := range s.list.Expired(s.now(), s.max) {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		reply, err := s.exp.Expire(ctx, id)
		if err != nil {
			if code := events.CodeOf(err); code == events.CodeLedgerUnavailable || ctx.Err() != nil {
				return n, err
			}
			s.log.Warn("sweep: expiring a reservation failed; skipping it this pass", "reservation", id, "err", err)
			continue
		}
		if reply.Status == events.StatusExpired && !reply.Replayed {
			n++
		}
	}
	return n, nil
}

// Run sweeps every interval until ctx ends, and returns ctx's error.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			n, err := s.Pass(ctx)
			if s.onExpired != nil {
				s.onExpired(n)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("sweep pass stopped", "expired", n, "err", err)
			} else if n > 0 {
				s.log.Info("sweep pass", "expired", n)
			}
		}
	}
}
