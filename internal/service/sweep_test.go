package service_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/sweep"
)

// The sweeper tests drive every replica's clock by hand (h.clock.now) and
// call Sweeper.Pass directly (the harness starts replicas with the ticker
// disabled), so expiry is tested to the nanosecond without waiting for it.

// sweepAdmitN admits n reservations of amount with ttl, request ids
// prefix-0.., the i-th in scopes(i), concurrently, and returns their ids in
// request order. Every one must be admitted.
func sweepAdmitN(t *testing.T, h *harness, prefix string, n int, amount, ttl string, scopes func(i int) []string) []string {
	t.Helper()
	rs := burst(t, h, n, func(i int) events.AdmitRequest {
		return events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", prefix, i), Scopes: scopes(i), Amount: amount, TTL: ttl}
	})
	ids := make([]string, n)
	for i, r := range rs {
		require.True(t, r.Admitted, "admit %d: %+v", i, r.Denial)
		ids[i] = r.ReservationID
	}
	return ids
}

// sweepSyncAll makes every replica fold everything written so far, so that
// each one's Expired sees every reservation.
func sweepSyncAll(t *testing.T, h *harness) {
	t.Helper()
	for _, r := range h.replicas {
		require.NoError(t, r.Ledger.Sync(ctxT(t)))
	}
}

// sweepReplay folds the stream from its first message, as an auditor would.
func sweepReplay(t *testing.T, h *harness) *projector.State {
	t.Helper()
	st, err := projector.New(h.env.JS, h.env.Layout).CatchUp(ctxT(t))
	require.NoError(t, err)
	return st
}

func sweepPass(t *testing.T, r *replica.Replica) int {
	t.Helper()
	n, err := r.Sweeper.Pass(ctxT(t))
	require.NoError(t, err)
	return n
}

// TestSweep_ExactBoundary: a reservation admitted at T with ttl 30s is not
// due at T+30s-1ns and is due at exactly T+30s (ExpiresAt <= now), both for
// the ledger's listing and for settle.Expire's own check at commit time.
func TestSweep_ExactBoundary(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	T := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	h.clock.now.Store(T)
	h.putBudget("org:edge", "month", "10", "USD")
	r, e := h.admit(events.AdmitRequest{RequestID: "edge-1", Scopes: []string{"org:edge"}, Amount: "2.5", TTL: "30s"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	require.NotNil(t, r.ExpiresAt)
	require.True(t, r.ExpiresAt.Equal(T.Add(30*time.Second)), "expires_at %v keeps the nanoseconds", r.ExpiresAt)
	rep := h.replicas[0]

	// One nanosecond early: nothing is listed, a direct Expire (as a sweeper
	// with a faster clock would issue) changes nothing, and a pass expires
	// nothing.
	h.clock.now.Store(T.Add(30*time.Second - time.Nanosecond))
	require.Empty(t, rep.Ledger.Expired(h.clock.now.Load(), 10))
	seq, _ := h.streamState()
	c, err := rep.Settler.Expire(ctxT(t), r.ReservationID)
	require.NoError(t, err)
	require.Equal(t, events.StatusOpen, c.Status)
	require.False(t, c.Replayed)
	require.Zero(t, sweepPass(t, rep))
	seq2, _ := h.streamState()
	require.Equal(t, seq, seq2, "nothing written before the expiry")
	v := h.budget("org:edge", "month")
	require.Equal(t, "2.5", v.Reserved)
	require.EqualValues(t, 1, v.Open)

	// Exactly at the expiry: due.
	h.clock.now.Store(T.Add(30 * time.Second))
	require.Equal(t, []string{r.ReservationID}, rep.Ledger.Expired(h.clock.now.Load(), 10))
	require.Equal(t, 1, sweepPass(t, rep))
	v = h.budget("org:edge", "month")
	require.Equal(t, "0", v.Reserved)
	require.Equal(t, "0", v.Spent)
	require.Equal(t, "10", v.Available)
	require.EqualValues(t, 0, v.Open)
	require.Zero(t, sweepPass(t, rep), "a second pass finds nothing")
	require.Empty(t, rep.Ledger.Expired(h.clock.now.Load().Add(time.Hour), 10))

	// The caller gives it back afterwards: told it expired, nothing changes.
	seq, _ = h.streamState()
	c2, e := h.release(r.ReservationID)
	require.Nil(t, e)
	require.Equal(t, events.StatusExpired, c2.Status)
	require.True(t, c2.Replayed)
	seq2, _ = h.streamState()
	require.Equal(t, seq, seq2)
	// Expire again (a second sweeper): a replay.
	c, err = rep.Settler.Expire(ctxT(t), r.ReservationID)
	require.NoError(t, err)
	require.Equal(t, events.StatusExpired, c.Status)
	require.True(t, c.Replayed)

	st := sweepReplay(t, h)
	res, ok := st.Reservation(r.ReservationID)
	require.True(t, ok)
	require.Equal(t, events.StatusExpired, res.Status)
	require.True(t, res.Expired)
	require.True(t, res.ClosedAt.Equal(T.Add(30*time.Second)), "released at the pass's clock, %v", res.ClosedAt)
	b, ok := st.Balance(res.Balances[0])
	require.True(t, ok)
	require.EqualValues(t, 1, b.Expired)
	require.EqualValues(t, 0, b.Released)
}

// TestSweep_ManyExpired: 500 reservations over five budgets expire at once.
// A sweeper bounded to 100 per pass expires exactly 100, oldest expiry
// first; the replica's own sweeper (bound sweep.DefaultMaxPerPass) takes
// the rest in one pass; every budget is whole afterwards.
func TestSweep_ManyExpired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	const budgets, n = 5, 500
	for b := 0; b < budgets; b++ {
		h.putBudget(fmt.Sprintf("org:many%d", b), "month", "1000", "USD")
	}
	// 400 with the default ttl, then 100 with a shorter one: the bounded
	// pass must take those 100, whose expiry is the oldest.
	sweepAdmitN(t, h, "many", n-100, "0.5", "", func(i int) []string {
		return []string{fmt.Sprintf("org:many%d", i%budgets)}
	})
	short := sweepAdmitN(t, h, "short", 100, "0.5", "10s", func(i int) []string {
		return []string{fmt.Sprintf("org:many%d", i%budgets)}
	})
	for b := 0; b < budgets; b++ {
		v := h.budget(fmt.Sprintf("org:many%d", b), "month")
		require.EqualValues(t, n/budgets, v.Open)
	}
	rep := h.replicas[0]
	h.clock.now.Add(events.DefaultTTL) // everything is due
	bounded, err := sweep.New(rep.Ledger, rep.Settler, sweep.WithClock(h.clock.now.Load), sweep.WithMaxPerPass(100))
	require.NoError(t, err)
	got, err := bounded.Pass(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 100, got, "a pass expires at most its bound")
	for _, id := range short {
		r, ok := rep.Ledger.Reservation(id)
		require.True(t, ok)
		require.Equal(t, events.StatusExpired, r.Status, "oldest expiry first")
	}
	open := int64(0)
	for b := 0; b < budgets; b++ {
		open += h.budget(fmt.Sprintf("org:many%d", b), "month").Open
	}
	require.EqualValues(t, n-100, open)

	// The replica's own sweeper (bound 1000) takes the other 400 at once.
	require.Equal(t, n-100, sweepPass(t, rep))
	require.Zero(t, sweepPass(t, rep))
	for b := 0; b < budgets; b++ {
		v := h.budget(fmt.Sprintf("org:many%d", b), "month")
		require.Equal(t, "0", v.Reserved, v.Scope)
		require.Equal(t, "0", v.Spent, v.Scope)
		require.Equal(t, "1000", v.Available, v.Scope)
		require.EqualValues(t, 0, v.Open, v.Scope)
	}
	st := sweepReplay(t, h)
	expired := int64(0)
	for _, b := range st.Balances() {
		expired += b.Expired
		require.EqualValues(t, 0, b.Settled+b.Released)
	}
	require.EqualValues(t, n, expired, "one expiry event per reservation")
}

// TestSweep_SettleRace: reservations past their expiry are settled through
// one replica while the other replica's sweeper passes over them. Each ends
// either settled while still open (the sweeper skipped it) or expired and
// then settled late after expiry; never both counted. Spent is the sum of
// the actuals, reserved returns to 0, and the sweeper's count equals the
// expiries in the stream. Rounds repeat on fresh budgets (at most
// maxRounds) until both sides of the race happened: some reservation was
// settled while open and some was expired first; the test fails otherwise.
//
// How we know it can fail: TestSweep_RaceBlindControl runs sweepers and
// settles with the revision check removed and sees a reservation counted
// twice, a failing invariant check or a replica stopping on a fork.
func TestSweep_SettleRace(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2})
	for round := 0; round < maxRounds; round++ {
		afterExpiry, n := settleRaceRound(t, h, round)
		t.Logf("round %d: of %d reservations: %d settled while open, %d expired then settled late", round, n, n-afterExpiry, afterExpiry)
		if afterExpiry > 0 && afterExpiry < n {
			return
		}
	}
	t.Fatalf("in %d rounds the sweeper and the settles never both won a reservation", maxRounds)
}

func settleRaceRound(t *testing.T, h *harness, round int) (afterExpiry, total int64) {
	t.Helper()
	const n, budgets = 60, 4
	scope := func(i int) string { return fmt.Sprintf("org:srace%dx%d", round, i%budgets) }
	for b := 0; b < budgets; b++ {
		h.putBudget(scope(b), "month", "1000", "USD")
	}
	// Reservation i expires i milliseconds after reservation 0, so the
	// sweeper (oldest expiry first) walks up from 0 while the settles are
	// sent from n-1 down: they meet somewhere in the middle.
	ids := make([]string, n)
	rs := burst(t, h, n, func(i int) events.AdmitRequest {
		return events.AdmitRequest{RequestID: fmt.Sprintf("srace%d-%d", round, i), Scopes: []string{scope(i)}, Amount: "2",
			TTL: (30*time.Second + time.Duration(i)*time.Millisecond).String()}
	})
	for i, r := range rs {
		require.True(t, r.Admitted)
		ids[i] = r.ReservationID
	}
	sweepSyncAll(t, h)
	h.clock.now.Add(31 * time.Second)
	// 1.00 .. 1.59, canonical ("1", "1.1", "1.01"): below the 2 reserved.
	actual := func(i int) string { return events.MustMoney(fmt.Sprintf("1.%02d", i)).String() }

	sweeper, settler := h.replicas[0], h.replicas[1]
	// The sweeper of replica 0's ledger, with one expiry in flight (as in
	// twoSweepersRound): with the default 512 its whole pass folds into
	// one or two group commits that land before the settles, and it took
	// all 60 in four rounds of five on an idle machine, all 600 of ten on
	// a loaded one; one at a time, it walks up from the oldest while the
	// settles come down from the newest, and both sides happen in the
	// first round.
	sw, err := sweep.New(sweeper.Ledger, sweeper.Settler, sweep.WithClock(h.clock.now.Load), sweep.WithWorkers(1))
	require.NoError(t, err)
	var swept atomic.Int64
	var settlesDone atomic.Bool
	replies := make([]events.CloseReply, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		// Give the sweeper its side of the race: the settles start once
		// it has expired the oldest reservation (or after a bounded wait),
		// from the newest down, so they meet it in the middle.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if r, ok := sweeper.Ledger.Reservation(ids[0]); ok && r.Status != events.StatusOpen {
				break
			}
			runtime.Gosched()
		}
		var inner sync.WaitGroup
		for i := n - 1; i >= 0; i-- {
			inner.Add(1)
			go func() {
				defer inner.Done()
				replies[i], errs[i] = settler.Settler.Settle(ctxT(t), events.SettleRequest{ReservationID: ids[i], Actual: actual(i)})
			}()
			if i%4 == 0 {
				runtime.Gosched()
			}
		}
		inner.Wait()
	}()
	sweepDone := make(chan error, 1)
	go func() {
		<-start
		for {
			last := settlesDone.Load()
			k, err := sw.Pass(ctxT(t))
			if err != nil {
				sweepDone <- err
				return
			}
			swept.Add(int64(k))
			if last && k == 0 {
				sweepDone <- nil
				return
			}
			runtime.Gosched()
		}
	}()
	close(start)
	wg.Wait()
	settlesDone.Store(true)
	select {
	case err := <-sweepDone:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("sweeper did not finish")
	}

	want := events.Zero
	for i := range ids {
		require.NoError(t, errs[i], "settle %d", i)
		require.Equal(t, events.StatusSettled, replies[i].Status)
		require.True(t, replies[i].Late, "settled after its expiry")
		require.False(t, replies[i].Replayed)
		require.Equal(t, actual(i), replies[i].Actual)
		want = want.Add(events.MustMoney(actual(i)))
	}
	spent := events.Zero
	for b := 0; b < budgets; b++ {
		v := h.budget(scope(b), "month")
		spent = spent.Add(events.MustMoney(v.Spent))
		require.Equal(t, "0", v.Reserved)
		require.EqualValues(t, 0, v.Open)
	}
	require.Equal(t, want.String(), spent.String())

	st := sweepReplay(t, h)
	for i, id := range ids {
		r, ok := st.Reservation(id)
		require.True(t, ok)
		require.Equal(t, events.StatusSettled, r.Status)
		require.Len(t, r.Parts, 1)
		for _, p := range r.Parts {
			require.Equal(t, actual(i), p.Actual.String())
			require.True(t, p.Late)
			// Expired by the sweeper first <=> the settle came after expiry.
			require.Equal(t, r.Expired, p.AfterExpiry, "reservation %s", id)
			if p.AfterExpiry {
				afterExpiry++
				require.Len(t, p.Seqs, 3, "opened, expired, settled")
			} else {
				require.Len(t, p.Seqs, 2, "opened, settled")
			}
		}
	}
	var opened, settledN, late, expired int64
	for b := 0; b < budgets; b++ {
		bal, ok := st.Balance(events.BalanceRef{Scope: events.Scope(scope(b)), Period: events.PeriodMonth, Instance: "2026-11"})
		require.True(t, ok)
		opened, settledN, late, expired = opened+bal.Opened, settledN+bal.Settled, late+bal.Late, expired+bal.Expired
	}
	require.EqualValues(t, n, opened)
	require.EqualValues(t, n, settledN, "one settle per reservation")
	require.EqualValues(t, n, late)
	require.Equal(t, swept.Load(), expired, "the sweeper counted exactly the expiries in the stream")
	require.Equal(t, afterExpiry, expired)
	return afterExpiry, n
}

// TestSweep_TwoSweepersRace: the sweepers of two replicas pass over the same
// 200 expired reservations at the same moment: together they expire each
// exactly once. Rounds repeat on fresh budgets (at most maxRounds) until
// each sweeper expired some: a round in which one sweeper found nothing left
// raced nothing, and the test fails if every round is like that.
//
// How we know it can fail: TestSweep_RaceBlindControl runs the same two
// sweepers with the revision check removed and sees a reservation expired
// twice, a failing invariant check or a replica stopping on a fork.
func TestSweep_TwoSweepersRace(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2})
	for round := 0; round < maxRounds; round++ {
		counts, errs, expired := twoSweepersRound(t, h, round, false)
		for i := range errs {
			require.NoError(t, errs[i], "replica %d", i)
		}
		const n = twinN
		require.Equal(t, n, counts[0]+counts[1], "expired exactly once in total (%v)", counts)
		for _, r := range h.replicas {
			require.Zero(t, sweepPass(t, r))
		}
		for _, b := range []struct{ scope, period string }{{fmt.Sprintf("org:twin%d", round), "month"}, {fmt.Sprintf("user:twin%d", round), "day"}} {
			v := h.budget(b.scope, b.period)
			require.Equal(t, "0", v.Reserved, b.scope)
			require.EqualValues(t, 0, v.Open, b.scope)
		}
		require.EqualValues(t, n+n/2, expired, "one expiry event per reservation and balance")
		t.Logf("round %d: replica 0 expired %d, replica 1 expired %d", round, counts[0], counts[1])
		if counts[0] > 0 && counts[1] > 0 {
			return
		}
	}
	t.Fatalf("in %d rounds one sweeper always found nothing left to expire", maxRounds)
}

// twinN is how many reservations a two-sweeper round expires.
const twinN = 200

// twoSweepersRound admits twinN reservations in round's budgets (one in two
// over two balances), lets them expire, runs both replicas' sweepers at
// once, and returns each one's count and error, and the expiry events of
// the round's balances in the replayed stream.
//
// With oneWriter, the admits go one at a time through replica 0 (a blind
// control must not fork the book before its race).
func twoSweepersRound(t *testing.T, h *harness, round int, oneWriter bool) (counts []int, errs []error, expired int64) {
	t.Helper()
	org, user := fmt.Sprintf("org:twin%d", round), fmt.Sprintf("user:twin%d", round)
	scopes := func(i int) []string {
		if i%2 == 0 {
			return []string{org, user} // multi-balance: one atomic batch per expiry
		}
		return []string{org}
	}
	if oneWriter {
		r0 := h.replicas[0]
		for _, b := range []events.BudgetRef{{Scope: events.Scope(org), Period: events.PeriodMonth}, {Scope: events.Scope(user), Period: events.PeriodDay}} {
			_, err := r0.Ledger.PutBudget(ctxT(t), b, events.MustMoney("1000"), "USD", h.clock.now.Load())
			require.NoError(t, err)
		}
		for i := 0; i < twinN; i++ {
			r, err := r0.Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: fmt.Sprintf("twin%d-%d", round, i), Scopes: scopes(i), Amount: "1", TTL: "1m"})
			require.NoError(t, err)
			require.True(t, r.Admitted)
		}
	} else {
		h.putBudget(org, "month", "1000", "USD")
		h.putBudget(user, "day", "1000", "USD")
		sweepAdmitN(t, h, fmt.Sprintf("twin%d", round), twinN, "1", "1m", scopes)
	}
	sweepSyncAll(t, h)
	for _, r := range h.replicas {
		require.Len(t, r.Ledger.Expired(h.clock.now.Load().Add(time.Minute), 1000), twinN, "each replica sees all of them")
	}
	h.clock.now.Add(time.Minute)

	counts = make([]int, len(h.replicas))
	errs = make([]error, len(h.replicas))
	// Both sweepers pass over all of them, one expiry in flight each, from
	// opposite ends (replica 1's list reversed): they meet somewhere in the
	// middle and race there. With the defaults (512 in flight, the same
	// order) a sweeper's whole pass folds into one or two group commits and
	// whichever lands first takes every reservation, round after round.
	sweepers := make([]*sweep.Sweeper, len(h.replicas))
	for i, r := range h.replicas {
		var list sweep.Lister = r.Ledger
		if i%2 == 1 {
			list = reversedLister{r.Ledger}
		}
		var err error
		sweepers[i], err = sweep.New(list, r.Settler, sweep.WithClock(h.clock.now.Load), sweep.WithWorkers(1))
		require.NoError(t, err)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range h.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			counts[i], errs[i] = sweepers[i].Pass(ctxT(t))
		}()
	}
	close(start)
	wg.Wait()
	st, err := projector.New(h.env.JS, h.env.Layout).CatchUp(ctxT(t))
	if err != nil {
		// The replay stopped (a blind control's fork): report it as a
		// sweeper error.
		errs = append(errs, err)
		return counts, errs, 0
	}
	for _, b := range st.Balances() {
		if b.Ref.Scope == events.Scope(org) || b.Ref.Scope == events.Scope(user) {
			expired += b.Expired
		}
	}
	return counts, errs, expired
}

// TestSweep_RaceBlindControl is the negative control of the sweeper races:
// two sweepers with the revision check removed expire some reservation
// twice (more expiry events than balances held), or the damage shows in the
// invariant check or as a replica stopping on the fork it wrote.
func TestSweep_RaceBlindControl(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, noCheck: true, stopMayFail: true, ledgerOpts: []ledger.Option{ledger.UnsafeBlindWritesForTesting()}})
	broken := false
	for round := 0; round < 10 && !broken && !h.failed(); round++ {
		counts, errs, expired := twoSweepersRound(t, h, round, true)
		rep, err := projector.Check(context.Background(), h.env.JS, h.env.Layout)
		require.NoError(t, err)
		t.Logf("round %d: counts %v, errors %v, expiry events %d (want %d), check ok %v, replica stopped %v",
			round, counts, errs, expired, twinN+twinN/2, rep.OK(), h.failed())
		broken = expired > twinN+twinN/2 || counts[0]+counts[1] > twinN || !rep.OK() || h.failed()
		for _, err := range errs {
			broken = broken || err != nil
		}
	}
	require.True(t, broken, "without compare-and-set two sweepers never broke the book: the sweeper race tests would not detect its removal")
}

// TestSettle_LateAfterExpiry: a settle that arrives after its reservation
// expired and was swept, and after midnight, records the true spend in the
// reservation's own day, flagged late; repeating it is a replay that counts
// nothing twice.
func TestSettle_LateAfterExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.clock.now.Store(time.Date(2026, 11, 30, 23, 59, 50, 0, time.UTC))
	h.putBudget("user:night", "day", "5", "USD")
	r, e := h.admit(events.AdmitRequest{RequestID: "night-1", Scopes: []string{"user:night"}, Amount: "1.5", TTL: "5s"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	day1 := r.Balances[0]
	require.Equal(t, "2026-11-30", day1.Instance)
	rep := h.replicas[0]

	// Past expiry and past midnight; the sweeper returns the reservation.
	h.clock.now.Store(time.Date(2026, 12, 1, 0, 0, 10, 0, time.UTC))
	require.Equal(t, 1, sweepPass(t, rep))
	old := rep.Ledger.Balance(day1)
	require.Equal(t, "0", old.Reserved.String())
	require.Equal(t, "0", old.Spent.String())

	// The upstream call did happen: its cost arrives late.
	c, e := h.settle(r.ReservationID, "1.75")
	require.Nil(t, e)
	require.Equal(t, events.StatusSettled, c.Status)
	require.True(t, c.Late)
	require.False(t, c.Replayed)
	require.Equal(t, "1.75", c.Actual)
	require.Equal(t, "1.75", c.Overrun, "the sweeper had returned the reservation: all of the late spend is overrun")
	require.Equal(t, []events.BalanceRef{day1}, c.Balances)
	old = rep.Ledger.Balance(day1)
	require.Equal(t, "1.75", old.Spent.String(), "the spend lands in the reservation's own day")
	require.Equal(t, "0", old.Reserved.String(), "the sweeper already returned the reservation")
	require.Equal(t, "1.75", old.Overrun.String())
	require.Zero(t, old.Open)
	today := h.budget("user:night", "day")
	require.Equal(t, "2026-12-01", today.Instance)
	require.Equal(t, "0", today.Spent, "the new day is untouched")
	require.Equal(t, "5", today.Available)

	// Retried with the same actual: a replay; the stream does not move.
	seq, _ := h.streamState()
	c2, e := h.settle(r.ReservationID, "1.750")
	require.Nil(t, e)
	require.True(t, c2.Replayed)
	require.True(t, c2.Late)
	require.Equal(t, events.StatusSettled, c2.Status)
	require.Equal(t, "1.75", c2.Actual)
	// Another actual, a release, a sweep: refused or no-ops.
	_, e = h.settle(r.ReservationID, "2")
	require.NotNil(t, e)
	require.Equal(t, events.CodeAlreadySettled, e.Code)
	_, e = h.release(r.ReservationID)
	require.NotNil(t, e)
	require.Equal(t, events.CodeAlreadySettled, e.Code)
	require.Zero(t, sweepPass(t, rep))
	seq2, _ := h.streamState()
	require.Equal(t, seq, seq2, "nothing written after the late settle")
	require.Equal(t, "1.75", rep.Ledger.Balance(day1).Spent.String())

	st := sweepReplay(t, h)
	res, ok := st.Reservation(r.ReservationID)
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, res.Status)
	require.True(t, res.Late)
	require.True(t, res.Expired)
	p := res.Parts[day1]
	require.True(t, p.Late)
	require.True(t, p.AfterExpiry)
	require.Equal(t, "1.75", p.Actual.String())
	require.Len(t, p.Seqs, 3, "opened, expired, settled: three events")
	b, ok := st.Balance(day1)
	require.True(t, ok)
	require.Equal(t, "1.75", b.Spent.String())
	require.Equal(t, "0", b.Reserved.String())
	require.EqualValues(t, 1, b.Settled)
	require.EqualValues(t, 1, b.Expired)
	require.EqualValues(t, 1, b.Late)
	_, ok = st.Balance(events.BalanceRef{Scope: "user:night", Period: events.PeriodDay, Instance: "2026-12-01"})
	require.False(t, ok, "no balance was opened in the new day")
}

// TestSettle_LateBeforeSweep: a settle after the expiry but before any sweep
// closes the open reservation itself (late, not after expiry); the sweeper
// then has nothing to do.
func TestSettle_LateBeforeSweep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:tardy", "month", "10", "USD")
	r, e := h.admit(events.AdmitRequest{RequestID: "tardy-1", Scopes: []string{"org:tardy"}, Amount: "1", TTL: "30s"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	h.clock.now.Add(31 * time.Second)
	c, e := h.settle(r.ReservationID, "0.4")
	require.Nil(t, e)
	require.True(t, c.Late)
	require.Equal(t, events.StatusSettled, c.Status)
	require.Zero(t, sweepPass(t, h.replicas[0]))
	v := h.budget("org:tardy", "month")
	require.Equal(t, "0.4", v.Spent)
	require.Equal(t, "0", v.Reserved)
	res, ok := sweepReplay(t, h).Reservation(r.ReservationID)
	require.True(t, ok)
	require.False(t, res.Expired)
	require.True(t, res.Late)
	for _, p := range res.Parts {
		require.False(t, p.AfterExpiry)
	}
}

// TestSweep_ClosedBeforeExpiryUntouched: reservations settled or released
// before their expiry are never touched by the sweeper, however far the
// clock moves, while an open neighbour with the same expiry is expired.
func TestSweep_ClosedBeforeExpiryUntouched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("org:done", "month", "10", "USD")
	admit := func(rid string) string {
		r, e := h.admit(events.AdmitRequest{RequestID: rid, Scopes: []string{"org:done"}, Amount: "1", TTL: "30s"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		return r.ReservationID
	}
	settled, released, open := admit("done-s"), admit("done-r"), admit("done-o")
	h.clock.now.Add(29 * time.Second)
	c, e := h.settle(settled, "0.9")
	require.Nil(t, e)
	require.False(t, c.Late)
	_, e = h.release(released)
	require.Nil(t, e)
	sweepSyncAll(t, h)

	// Well past the expiry, within the ledger's retention of closed
	// reservations (ledger.DefaultRetention).
	h.clock.now.Add(10 * time.Minute)
	for _, r := range h.replicas {
		require.Equal(t, []string{open}, r.Ledger.Expired(h.clock.now.Load(), 100))
	}
	total := 0
	for _, r := range h.replicas {
		total += sweepPass(t, r)
	}
	require.Equal(t, 1, total)
	// A direct expiry of the closed ones (a sweeper acting on a stale list)
	// is a replay that changes nothing.
	seq, _ := h.streamState()
	for _, id := range []string{settled, released} {
		c, err := h.replicas[1].Settler.Expire(ctxT(t), id)
		require.NoError(t, err)
		require.True(t, c.Replayed)
		require.NotEqual(t, events.StatusExpired, c.Status)
	}
	seq2, _ := h.streamState()
	require.Equal(t, seq, seq2)

	st := sweepReplay(t, h)
	statuses := map[string]string{}
	for _, id := range []string{settled, released, open} {
		r, ok := st.Reservation(id)
		require.True(t, ok)
		statuses[id] = r.Status
		if id != open {
			require.False(t, r.Expired, id)
			require.False(t, r.Late, id)
			for _, p := range r.Parts {
				require.Len(t, p.Seqs, 2, "opened and closed, nothing after")
			}
		}
	}
	require.Equal(t, map[string]string{settled: events.StatusSettled, released: events.StatusReleased, open: events.StatusExpired}, statuses)
	v := h.budget("org:done", "month")
	require.Equal(t, "0.9", v.Spent)
	require.Equal(t, "0", v.Reserved)
	require.EqualValues(t, 0, v.Open)
}

// reversedLister lists what is due newest first.
type reversedLister struct{ sweep.Lister }

func (r reversedLister) Expired(now time.Time, max int) []string {
	ids := r.Lister.Expired(now, max)
	slices.Reverse(ids)
	return ids
}

// TestSettle_RetryAfterExpiryAnswersTheSameOverrun: a settle that came
// after the sweeper released its reservation charged its whole actual as
// overrun (nothing was reserved for it any more); a retry of it, the
// client's answer to a lost reply, must say the same, in the reply's
// overrun and in each budget's, on the replica that wrote it and on one
// that folded it. How it can fail: the retry answered actual - reserved
// (0.1 of 0.3 where the ledger holds 0.3), as it did before the book kept
// that the settle came after the release.
func TestSettle_RetryAfterExpiryAnswersTheSameOverrun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("team:ls1", "month", "1", "USD")
	h.putBudget("team:ls2", "day", "1", "USD")
	r, e := h.admit(events.AdmitRequest{RequestID: "ls-1", Scopes: []string{"team:ls1", "team:ls2"}, Amount: "0.20", TTL: "5s"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	h.clock.now.Store(h.clock.now.Load().Add(10 * time.Second))
	require.Equal(t, 1, sweepPass(t, h.replicas[0]))

	first, e := h.settle(r.ReservationID, "0.30")
	require.Nil(t, e)
	require.False(t, first.Replayed)
	require.Equal(t, "0.3", first.Overrun, "the sweeper had returned the reservation: all of it is overrun")
	require.Len(t, first.Budgets, 2)
	for _, b := range first.Budgets {
		require.Equal(t, "0.3", b.Overrun, b.Scope)
	}
	for i, rep := range h.replicas {
		require.NoError(t, rep.Ledger.Sync(ctxT(t)))
		again, err := rep.Settler.Settle(ctxT(t), events.SettleRequest{ReservationID: r.ReservationID, Actual: "0.3"})
		require.NoError(t, err, "replica %d", i)
		require.True(t, again.Replayed, "replica %d", i)
		require.Equal(t, first.Overrun, again.Overrun, "replica %d", i)
		require.Equal(t, first.Budgets, again.Budgets, "replica %d", i)
		for _, ref := range r.Balances {
			require.Equal(t, "0.3", rep.Ledger.Balance(ref).Overrun.String(), "replica %d: %s", i, ref.Scope)
		}
	}
}
