package gateway

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

// A close (settle or release) the ledger did not acknowledge because it
// was unavailable is retried in the background, off the caller's path:
// settling is idempotent per reservation (a repeat is answered Replayed),
// and the ledger takes a settle of an expired reservation for
// lateSettleWindow after its expiry. Without the retry the call's spend
// would be lost: the sweeper releases the reservation at its expiry.
//
// Each pending close is one goroutine that waits out a jittered,
// doubling back-off (settleRetryFirst up to settleRetryMax) between
// attempts, until the close lands, the ledger refuses it (a refusal is
// final: already released, unknown reservation, ...), or its deadline
// passes: the reservation's expiry for a release (the sweeper releases it
// then anyway), its expiry plus lateSettleWindow for a settle. At most
// maxPendingCloses wait at once; a close past that bound is dropped,
// counted and logged with the amount it would have recorded. Wait makes
// every pending close attempt once more at once, then gives up on those
// that still fail.
const (
	// settleRetryFirst is the back-off before a close's first retry.
	settleRetryFirst = 500 * time.Millisecond
	// settleRetryMax bounds the back-off between two retries.
	settleRetryMax = time.Minute
	// maxPendingCloses bounds the closes waiting for a retry (one
	// goroutine and a few hundred bytes each).
	maxPendingCloses = 4096
	// lateSettleWindow is how long after a reservation's expiry the
	// ledger still takes its settle: a replica remembers an expired
	// reservation for 48 hours (ledger.DefaultExpiredRetention; see
	// docs/operator.md, "What a replica remembers"). A settle past it is
	// answered unknown_reservation, which ends the retries too.
	lateSettleWindow = 48 * time.Hour
)

// Results of a close's background retries (the result label of
// spendgate_gateway_settle_retries_total).
const (
	RetryLanded  = "landed"   // a retry was acknowledged
	RetryGivenUp = "given_up" // refused, past its deadline, or still failing at shutdown
	RetryDropped = "dropped"  // not retried: maxPendingCloses were already waiting
)

// pendingClose is a close of res waiting for a retry.
type pendingClose struct {
	res *client.Reservation
	o   outcome
	// how is the call log's "closed": usage, reservation or released.
	how string
	// note is the settle's note: why a settle at the reservation is that
	// (noteOf), NoteOtherModel for a usage served by another model.
	note string
	// deadline is when the retries stop.
	deadline time.Time
	// attempts counts the attempts made, the first (failed) one included.
	attempts int
}

// retrier holds the gateway's pending closes.
type retrier struct {
	// first and max are the back-off bounds (settleRetryFirst,
	// settleRetryMax; shorter in tests).
	first, max time.Duration
	// limit is the most closes pending at once (maxPendingCloses).
	limit int
}

// closeOnce makes one settle or release of p (the client retries within
// its own attempts).
func (g *Gateway) closeOnce(p *pendingClose) (events.CloseReply, error) {
	ctx := context.Background()
	switch p.how {
	case "released":
		return p.res.Release(ctx)
	case "usage":
		u := events.Usage{InputTokens: p.o.u.input, OutputTokens: p.o.u.output, CachedInputTokens: p.o.u.cached}
		reply, err := p.res.SettleUsageWithNote(ctx, u, p.note)
		if p.note != "" && events.CodeOf(err) == events.CodeInvalidRequest {
			return p.res.SettleUsage(ctx, u) // as below: a replica before notes
		}
		return reply, err
	default:
		// The settle says why it is the whole reservation: the call's
		// outcome (the answer broke off, the caller left, no usage).
		reply, err := p.res.SettleWithNote(ctx, p.res.Amount(), p.note)
		if events.CodeOf(err) == events.CodeInvalidRequest {
			// A replica of a version before notes refuses the field,
			// deciding nothing: the settle itself must still land.
			return p.res.Settle(ctx, p.res.Amount())
		}
		return reply, err
	}
}

// NoteOtherModel is the settle note of a call whose answer named another
// model than the one it was priced at (otherModel): its usage is priced at
// the model asked for, which the upstream may have billed differently.
const NoteOtherModel = "served_other_model"

// noteOf is the settle note of a call closed at its whole reservation
// with outcome label: "reservation_<label>" ("reservation_cut",
// "reservation_caller_gone", "reservation_ok" for an answer without
// usage), "reservation" without one.
func noteOf(label string) string {
	if label == "" {
		return "reservation"
	}
	return "reservation_" + label
}

// closeCode is the stable code of a close's failure: the ledger's (or the
// client's) code of an outage, the service's code of a refusal.
func closeCode(err error) events.Code {
	var u *client.UnavailableError
	if errors.As(err, &u) {
		return u.Code
	}
	return events.CodeOf(err)
}

// due is what a close of p records, for the log of one that did not land:
// the usage priced at the admit's price quote, the reservation, or 0 for a
// release.
func due(p *pendingClose) string {
	switch p.how {
	case "released":
		return "0"
	case "usage":
		if q := p.res.Reply().Pricing; q != nil {
			return q.Cost(events.Usage{InputTokens: p.o.u.input, OutputTokens: p.o.u.output, CachedInputTokens: p.o.u.cached}).String()
		}
	}
	return p.res.Amount()
}

// retryClose schedules p's retries and reports whether it did: it does
// not after Wait began (the caller's close was the last attempt) or when
// maxPendingCloses are already waiting (counted as dropped).
func (g *Gateway) retryClose(p *pendingClose) bool {
	g.mu.Lock()
	if g.quitting {
		g.mu.Unlock()
		return false
	}
	if g.pending >= g.retry.limit {
		g.mu.Unlock()
		g.m.SettleRetries.WithLabelValues(RetryDropped).Inc()
		g.log.Error("gateway: a reservation's close failed and too many are waiting for a retry; it is not retried",
			"reservation", p.res.ID(), "closed", p.how, "due", due(p), "unit", p.res.Unit(), "pending", g.retry.limit)
		return false
	}
	g.pending++
	g.retries.Add(1)
	g.mu.Unlock()
	g.m.SettlesPending.Inc()
	go func() {
		defer func() {
			g.m.SettlesPending.Dec()
			g.mu.Lock()
			g.pending--
			g.mu.Unlock()
			g.retries.Done()
		}()
		g.retryLoop(p)
	}()
	return true
}

// retryLoop retries p until it lands, is refused, passes its deadline, or
// Wait makes its last attempt; it logs the outcome with the amount.
func (g *Gateway) retryLoop(p *pendingClose) {
	wait := g.retry.first
	for {
		last := false
		if left := p.deadline.Sub(g.now()); left < wait {
			wait, last = max(left, 0), true
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-t.C:
		case <-g.quit:
			t.Stop()
			last = true
		}
		p.attempts++
		reply, err := g.closeOnce(p)
		if err == nil {
			g.journalClosed(p.res)
			g.m.SettleRetries.WithLabelValues(RetryLanded).Inc()
			g.log.Info("gateway: a reservation's close landed on a retry", "reservation", p.res.ID(), "closed", p.how,
				"actual", reply.Actual, "unit", p.res.Unit(), "late", reply.Late, "replayed", reply.Replayed, "attempts", p.attempts)
			return
		}
		if !errors.Is(err, client.ErrUnavailable) || last || !g.now().Before(p.deadline) {
			if !errors.Is(err, client.ErrUnavailable) || !g.now().Before(p.deadline) {
				g.journalClosed(p.res) // refused, or too late: a next start could do no better
			}
			g.m.SettleRetries.WithLabelValues(RetryGivenUp).Inc()
			g.log.Error("gateway: a reservation's close never landed; its spend is not recorded and the sweeper releases it at its expiry",
				"reservation", p.res.ID(), "closed", p.how, "due", due(p), "unit", p.res.Unit(), "attempts", p.attempts,
				"code", closeCode(err), "err", err)
			return
		}
		wait = min(2*wait, g.retry.max)
	}
}
