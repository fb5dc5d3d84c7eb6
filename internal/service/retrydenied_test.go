package service_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// TestAdmit_RetryNeverDenied is an earlier build's wrong answer, made
// deterministic: an admit's first attempt is held up on replica a (its
// write waits, as behind a paused stream leader or a paused server that a
// replica is connected to), its caller gives up and retries on replica b,
// and the attempt on replica a commits later. Replica a decides the held
// attempt after b answered the retry: the budget was full when b decided,
// and had room when a did.
//
// Unmarked, the retry is a first attempt to replica b, which denies it
// limit_reached, and the ledger then holds the admission the caller was
// told was denied (the reservation holds budget until its TTL): what the
// cluster fault test saw on main, and what an earlier build answered every
// retry (this case asserts it, so the scenario stays real). Marked as a
// retry (events.AdmitRequest.Retry, as the Go client now sends every
// attempt after the first), it is answered ledger_unavailable, and the
// next retry, once the held attempt committed, replays its reservation.
func TestAdmit_RetryNeverDenied(t *testing.T) {
	t.Parallel()
	for _, marked := range []bool{false, true} {
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			env := testenv.New(t)
			var hold atomic.Pointer[chan struct{}]
			held := make(chan struct{}, 1)
			a := replicatest.Start(t, env, replica.Config{SweepInterval: -1, LedgerOptions: []ledger.Option{
				ledger.UnsafeWriteFaultForTesting(func(ctx context.Context, _ []string) error {
					if ch := hold.Swap(nil); ch != nil {
						held <- struct{}{}
						select {
						case <-*ch:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return nil
				})}})
			b := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
			ctx := ctxT(t)
			now := time.Now()
			_, err := b.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "team:t", Period: events.PeriodMonth}, events.MustMoney("1"), "USD", now)
			require.NoError(t, err)
			_, err = b.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:o", Period: events.PeriodMonth}, events.MustMoney("100"), "USD", now)
			require.NoError(t, err)
			// y holds team:t's only unit.
			y, err := b.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "y", Scopes: []string{"team:t"}, Amount: "1"})
			require.NoError(t, err)
			require.True(t, y.Admitted)
			testenv.WaitFor(t, 10*time.Second, "replica a folds y", func() bool { _, ok := a.Ledger.Reservation(y.ReservationID); return ok })

			// Replica a's next write (z, another scope of the same lane)
			// is held; x queues behind it on the lane.
			release := make(chan struct{})
			hold.Store(&release)
			go func() {
				_, _ = a.Admitter.Admit(context.Background(), events.AdmitRequest{RequestID: "z", Scopes: []string{"org:o"}, Amount: "1"})
			}()
			<-held
			x := events.AdmitRequest{RequestID: "x", Scopes: []string{"team:t"}, Amount: "1"}
			first := make(chan events.AdmitReply, 1)
			go func() {
				// The service's own deadline, not the caller's: the caller
				// below gives up on this attempt at once.
				actx, cancel := context.WithTimeout(context.Background(), service.RequestTimeout)
				defer cancel()
				rep, _ := a.Admitter.Admit(actx, x)
				first <- rep
			}()
			testenv.WaitFor(t, 10*time.Second, "x queued on replica a", func() bool { return a.Ledger.Stats().Queued > 0 })

			// The caller retries on replica b while the team is full.
			retry := x
			retry.Retry = marked
			rep, err := b.Admitter.Admit(ctx, retry)
			if marked {
				require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(err), "a retry is never denied: %+v", rep)
			} else {
				require.NoError(t, err)
				require.False(t, rep.Admitted)
				require.Equal(t, events.ReasonLimitReached, rep.Denial.Reason)
			}

			// y is released, then the held write goes on: a folds the
			// release (its write lost compare-and-set) and decides x again,
			// with room for it now.
			_, err = b.Settler.Release(ctx, events.ReleaseRequest{ReservationID: y.ReservationID})
			require.NoError(t, err)
			close(release)
			landed := <-first
			require.True(t, landed.Admitted, "x's first attempt commits after the retry was answered")
			testenv.WaitFor(t, 10*time.Second, "replica b folds x", func() bool { _, ok := b.Ledger.Reservation(landed.ReservationID); return ok })
			if !marked {
				t.Logf("unmarked: the retry was answered limit_reached, and the ledger holds %s for request x", landed.ReservationID)
				return
			}
			rep, err = b.Admitter.Admit(ctx, retry)
			require.NoError(t, err)
			require.True(t, rep.Admitted)
			require.True(t, rep.Replayed)
			require.Equal(t, landed.ReservationID, rep.ReservationID, "the next retry replays the committed admission")
			check, err := projector.Check(ctx, env.JS, env.Layout)
			require.NoError(t, err)
			require.True(t, check.OK(), "%s", check)
		})
	}
}

// An admit naming one scope twice is refused invalid_request, the message
// naming the scope, and reserves nothing. An earlier build admitted it
// (reserved once, its reply listing the budget twice).
func TestAdmit_DuplicateScope(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	ctx := ctxT(t)
	bud, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "user:x", Period: events.PeriodMonth}, events.MustMoney("10"), "USD", time.Now())
	require.NoError(t, err)
	for _, scopes := range [][]string{{"user:x", "user:x"}, {"user:x", "org:y", "user:x"}} {
		_, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "dup", Scopes: scopes, Amount: "1"})
		require.Equal(t, events.CodeInvalidRequest, events.CodeOf(err), "%v", scopes)
		require.ErrorContains(t, err, "user:x is named twice")
	}
	b := r.Ledger.Balance(bud.Balance(time.Now()))
	require.True(t, b.Reserved.IsZero(), "nothing reserved")
}
