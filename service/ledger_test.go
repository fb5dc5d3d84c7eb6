package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/ledger"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// burst fires n admits at once (released together by a barrier) and returns
// the replies.
func burst(t *testing.T, h *harness, n int, mk func(i int) events.AdmitRequest) []events.AdmitReply {
	t.Helper()
	replies := make([]events.AdmitReply, n)
	errs := make([]*events.Error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			data, _ := json.Marshal(mk(i))
			msg, err := h.nc.Request(h.env.Layout.Endpoint(streams.EndpointAdmit), data, 30*time.Second)
			if err != nil {
				errs[i] = &events.Error{Code: events.CodeLedgerUnavailable, Message: err.Error()}
				return
			}
			var er events.ErrorReply
			if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
				errs[i] = er.Error
				return
			}
			if err := json.Unmarshal(msg.Data, &replies[i]); err != nil {
				errs[i] = &events.Error{Code: events.CodeInternal, Message: err.Error()}
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, e := range errs {
		require.Nil(t, e, "admit %d", i)
	}
	return replies
}

func countAdmitted(rs []events.AdmitReply) (admitted int, denied map[events.Code]int) {
	denied = map[events.Code]int{}
	for _, r := range rs {
		if r.Admitted {
			admitted++
		} else {
			denied[r.Denial.Reason]++
		}
	}
	return admitted, denied
}

// TestAdmit_ConcurrentHotBudget: 200 concurrent admits of 0.05 against 1.00
// admit exactly 20, on one replica and on two replicas sharing the server.
//
// How we know it can fail: with one replica, the in-process group commit
// alone serializes a key, so the two-replica case is the one that exercises
// compare-and-set. TestAdmit_BlindWritesOverAdmit runs the same burst on two
// replicas with the revision check removed (ledger.UnsafeBlindWritesForTesting)
// and shows over-admission and a failing invariant check.
func TestAdmit_ConcurrentHotBudget(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			h := newHarness(t, harnessOpts{replicas: replicas})
			h.putBudget("org:acme", "month", "1.00", "USD")
			rs := burst(t, h, 200, func(i int) events.AdmitRequest {
				return events.AdmitRequest{RequestID: fmt.Sprintf("req-%d", i), Scopes: []string{"org:acme"}, Amount: "0.05", TTL: "1m"}
			})
			admitted, denied := countAdmitted(rs)
			require.Equal(t, 20, admitted)
			require.Equal(t, map[events.Code]int{events.ReasonLimitReached: 180}, denied)
			v := h.budget("org:acme", "month")
			require.Equal(t, "1", v.Reserved)
			require.Equal(t, "0", v.Available)
			require.EqualValues(t, 20, v.Open)
			if replicas == 2 {
				// Both replicas took part (the queue group spreads requests).
				for i, r := range h.replicas {
					st := r.Service.Info()
					require.NotEmpty(t, st.Endpoints, "replica %d", i)
				}
			}
		})
	}
}

// TestAdmit_BlindWritesOverAdmit is the negative control of
// TestAdmit_ConcurrentHotBudget: two replicas whose writes skip the revision
// check. Within a few bursts one replica overwrites the other's revision and
// the ledger admits more than the limit or loses a reservation, which the
// invariant checker catches. If this test ever fails, the hot-budget test
// above no longer proves anything about compare-and-set.
func TestAdmit_BlindWritesOverAdmit(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, noCheck: true, ledgerOpts: []ledger.Option{ledger.UnsafeBlindWritesForTesting()}})
	broken := false
	for round := 0; round < 20 && !broken; round++ {
		scope := fmt.Sprintf("org:blind%d", round)
		h.putBudget(scope, "month", "1.00", "USD")
		rs := burst(t, h, 200, func(i int) events.AdmitRequest {
			return events.AdmitRequest{RequestID: fmt.Sprintf("b%d-%d", round, i), Scopes: []string{scope}, Amount: "0.05", TTL: "1m"}
		})
		admitted, _ := countAdmitted(rs)
		rep, err := projector.Check(context.Background(), h.env.JS, h.env.Layout)
		require.NoError(t, err)
		broken = admitted > 20 || !rep.OK()
		t.Logf("round %d: admitted %d, check ok %v", round, admitted, rep.OK())
	}
	require.True(t, broken, "without compare-and-set two replicas never broke the budget: the concurrency tests would not detect its removal")
}

// laneCounts are the lane counts the multi-scope tests run with: with one
// lane a multi-scope admit is one lane revision; with 8, org:a (lane 0) and
// user:b, user:u0..u3 (lanes 6, 5, 2, 7, 4) are in different lanes, so the
// same admits are atomic batches over several lane keys.
var laneCounts = []int{1, 8}

// TestAdmit_MultiScopeAllOrNothing: an admit against org:a and user:b where
// only user:b is full reserves in neither, and the ledger is unchanged.
func TestAdmit_MultiScopeAllOrNothing(t *testing.T) {
	for _, lanes := range laneCounts {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) { testMultiScopeAllOrNothing(t, lanes) })
	}
}

func testMultiScopeAllOrNothing(t *testing.T, lanes int) {
	h := newHarness(t, harnessOpts{lanes: lanes})
	if lanes > 1 {
		require.NotEqual(t, h.env.Layout.LaneKey(events.BalanceRef{Scope: "org:a"}), h.env.Layout.LaneKey(events.BalanceRef{Scope: "user:b"}))
	}
	h.putBudget("org:a", "month", "10", "USD")
	h.putBudget("user:b", "day", "1", "USD")
	r, e := h.admit(events.AdmitRequest{RequestID: "fill", Scopes: []string{"user:b"}, Amount: "1"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	seq, msgs := h.streamState()

	r, e = h.admit(events.AdmitRequest{RequestID: "both", Scopes: []string{"org:a", "user:b"}, Amount: "0.5"})
	require.Nil(t, e)
	require.False(t, r.Admitted)
	require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
	require.Equal(t, events.Scope("user:b"), r.Denial.Scope)
	require.Equal(t, events.PeriodDay, r.Denial.Period)
	require.Equal(t, "1", r.Denial.Limit)
	require.Equal(t, "0", r.Denial.Spent)
	require.Equal(t, "1", r.Denial.Reserved)
	require.Equal(t, "0.5", r.Denial.Requested)
	require.Equal(t, "0", h.budget("org:a", "month").Reserved)
	seq2, msgs2 := h.streamState()
	require.Equal(t, seq, seq2)
	require.Equal(t, msgs, msgs2)

	// Unknown scope in a multi-scope admit: denied, nothing reserved.
	r, e = h.admit(events.AdmitRequest{RequestID: "ghost", Scopes: []string{"org:a", "user:ghost"}, Amount: "0.5"})
	require.Nil(t, e)
	require.False(t, r.Admitted)
	require.Equal(t, events.ReasonUnknownBudget, r.Denial.Reason)
	require.Equal(t, events.Scope("user:ghost"), r.Denial.Scope)
	require.Equal(t, "0", h.budget("org:a", "month").Reserved)
}

// TestAdmit_MultiScopeConcurrent: 120 concurrent two-scope admits of 0.05
// (org:a, limit 1.00, plus one of four users, limit 0.30 each) on two
// replicas: each user admits at most 6, the org at most 20, so exactly 20
// are admitted and no budget is ever above its limit.
func TestAdmit_MultiScopeConcurrent(t *testing.T) {
	for _, lanes := range laneCounts {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) { testMultiScopeConcurrent(t, lanes) })
	}
}

func testMultiScopeConcurrent(t *testing.T, lanes int) {
	h := newHarness(t, harnessOpts{replicas: 2, lanes: lanes})
	h.putBudget("org:a", "month", "1.00", "USD")
	for u := 0; u < 4; u++ {
		h.putBudget(fmt.Sprintf("user:u%d", u), "month", "0.30", "USD")
	}
	rs := burst(t, h, 120, func(i int) events.AdmitRequest {
		return events.AdmitRequest{RequestID: fmt.Sprintf("m-%d", i), Scopes: []string{"org:a", fmt.Sprintf("user:u%d", i%4)}, Amount: "0.05"}
	})
	admitted, _ := countAdmitted(rs)
	require.Equal(t, 20, admitted)
	require.Equal(t, "1", h.budget("org:a", "month").Reserved)
	total := 0
	for u := 0; u < 4; u++ {
		v := h.budget(fmt.Sprintf("user:u%d", u), "month")
		require.LessOrEqual(t, v.Open, int64(6))
		total += int(v.Open)
	}
	require.Equal(t, 20, total)
	// The path the admits took: one lane revision each with one lane,
	// atomic batches over lane keys with eight.
	var batches int64
	for _, r := range h.replicas {
		batches += r.Ledger.Stats().Batches
	}
	if lanes == 1 {
		require.Zero(t, batches)
	} else {
		require.Positive(t, batches)
	}
}

// TestClose_Races: settles and releases of the same reservations race from
// many goroutines through two replicas; exactly one transition wins each
// reservation, the counters move once, and every loser is told what
// happened.
func TestClose_Races(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("org:race", "month", "100", "USD")
	const n = 30
	ids := make([]string, n)
	for i := range ids {
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("r%d", i), Scopes: []string{"org:race"}, Amount: "1"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		ids[i] = r.ReservationID
	}
	type outcome struct {
		settleWins, releaseWins, replays atomic.Int64
	}
	var out outcome
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, id := range ids {
		for k := 0; k < 8; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if k%2 == 0 {
					r, e := h.settle(id, "0.75")
					switch {
					case e == nil && !r.Replayed:
						out.settleWins.Add(1)
					case e == nil:
						out.replays.Add(1)
					default:
						require.Equal(t, events.CodeAlreadyReleased, e.Code)
					}
				} else {
					r, e := h.release(id)
					switch {
					case e == nil && !r.Replayed:
						out.releaseWins.Add(1)
					case e == nil:
						out.replays.Add(1)
					default:
						require.Equal(t, events.CodeAlreadySettled, e.Code)
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	wins := out.settleWins.Load() + out.releaseWins.Load()
	require.EqualValues(t, n, wins, "exactly one winner per reservation")
	v := h.budget("org:race", "month")
	require.Equal(t, "0", v.Reserved)
	require.EqualValues(t, 0, v.Open)
	spent := events.Zero
	for i := int64(0); i < out.settleWins.Load(); i++ {
		spent = spent.Add(events.MustMoney("0.75"))
	}
	require.Equal(t, spent.String(), v.Spent)
}

// TestAdmit_IdempotentRace: the same request id sent 40 times at once to two
// replicas reserves once and every reply names the same reservation; the
// same id with another body is refused.
func TestAdmit_IdempotentRace(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("org:idem", "month", "10", "USD")
	rs := burst(t, h, 40, func(int) events.AdmitRequest {
		return events.AdmitRequest{RequestID: "same", Scopes: []string{"org:idem"}, Amount: "0.5", Metadata: map[string]string{"model": "m1"}}
	})
	fresh := 0
	for _, r := range rs {
		require.True(t, r.Admitted)
		require.Equal(t, rs[0].ReservationID, r.ReservationID)
		if !r.Replayed {
			fresh++
		}
	}
	require.Equal(t, 1, fresh)
	require.Equal(t, "0.5", h.budget("org:idem", "month").Reserved)

	// Same body spelled differently is the same request.
	r, e := h.admit(events.AdmitRequest{RequestID: "same", Scopes: []string{"org:idem", "org:idem"}, Amount: "0.500", Metadata: map[string]string{"model": "m1"}})
	require.Nil(t, e)
	require.True(t, r.Replayed)
	// A different body is refused and changes nothing.
	seq, _ := h.streamState()
	_, e = h.admit(events.AdmitRequest{RequestID: "same", Scopes: []string{"org:idem"}, Amount: "0.6"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeIdempotencyMismatch, e.Code)
	seq2, _ := h.streamState()
	require.Equal(t, seq, seq2)
}

// TestAdmit_Exactness: twenty 0.05 fit 1.00 exactly (the float bug of seed
// 003 admits 19), and 1e-9 granularity works.
func TestAdmit_Exactness(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:exact", "month", "1.00", "USD")
	for i := 0; i < 20; i++ {
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("x%d", i), Scopes: []string{"org:exact"}, Amount: "0.05"})
		require.Nil(t, e)
		require.True(t, r.Admitted, "admit %d of 0.05 must fit 1.00", i+1)
	}
	r, e := h.admit(events.AdmitRequest{RequestID: "x20", Scopes: []string{"org:exact"}, Amount: "0.000000001"})
	require.Nil(t, e)
	require.False(t, r.Admitted)

	h.putBudget("org:nano", "month", "0.000000003", "USD")
	var ids []string
	for i := 0; i < 3; i++ {
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("n%d", i), Scopes: []string{"org:nano"}, Amount: "0.000000001"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		ids = append(ids, r.ReservationID)
	}
	r, e = h.admit(events.AdmitRequest{RequestID: "n3", Scopes: []string{"org:nano"}, Amount: "0.000000001"})
	require.Nil(t, e)
	require.False(t, r.Admitted)
	c, e := h.settle(ids[0], "0.000000002")
	require.Nil(t, e)
	require.Equal(t, "0.000000001", c.Overrun)
	v := h.budget("org:nano", "month")
	require.Equal(t, "0.000000002", v.Spent)
	require.Equal(t, "0.000000002", v.Reserved)
	require.Equal(t, "0.000000001", v.Overrun)
	require.Equal(t, "-0.000000001", v.Available)
}

// TestSettle_Overrun: an actual above the reservation is recorded in full,
// marked as overrun, and blocks further admits until the budget has room.
func TestSettle_Overrun(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:o", "month", "1", "USD")
	r, _ := h.admit(events.AdmitRequest{RequestID: "o1", Scopes: []string{"org:o"}, Amount: "0.10"})
	require.True(t, r.Admitted)
	c, e := h.settle(r.ReservationID, "1.25")
	require.Nil(t, e)
	require.Equal(t, events.StatusSettled, c.Status)
	require.Equal(t, "1.15", c.Overrun)
	v := h.budget("org:o", "month")
	require.Equal(t, "1.25", v.Spent)
	require.Equal(t, "1.15", v.Overrun)
	r, _ = h.admit(events.AdmitRequest{RequestID: "o2", Scopes: []string{"org:o"}, Amount: "0.01"})
	require.False(t, r.Admitted)
	// Settling again with another actual is refused; with the same, replayed.
	_, e = h.settle(c.ReservationID, "1.00")
	require.Equal(t, events.CodeAlreadySettled, e.Code)
	c2, e := h.settle(c.ReservationID, "1.250")
	require.Nil(t, e)
	require.True(t, c2.Replayed)
}

// TestAdmit_OnePeriodPerRequest: the period instance is fixed at admission;
// a settle after midnight lands in the reservation's own day.
func TestAdmit_OnePeriodPerRequest(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.clock.now.Store(time.Date(2026, 11, 30, 23, 59, 59, 999_000_000, time.UTC))
	h.putBudget("user:late", "day", "1", "USD")
	r, _ := h.admit(events.AdmitRequest{RequestID: "p1", Scopes: []string{"user:late"}, Amount: "0.6"})
	require.True(t, r.Admitted)
	require.Equal(t, "2026-11-30", r.Balances[0].Instance)
	h.clock.now.Add(time.Second) // 2026-12-01
	_, e := h.settle(r.ReservationID, "0.5")
	require.Nil(t, e)
	v := h.budget("user:late", "day")
	require.Equal(t, "2026-12-01", v.Instance)
	require.Equal(t, "0", v.Spent, "the new day starts empty")
	r2, _ := h.admit(events.AdmitRequest{RequestID: "p2", Scopes: []string{"user:late"}, Amount: "1"})
	require.True(t, r2.Admitted, "the new day has its whole limit")
	st, err := projector.New(h.env.JS, h.env.Layout).CatchUp(ctxT(t))
	require.NoError(t, err)
	old, ok := st.Balance(events.BalanceRef{Scope: "user:late", Period: events.PeriodDay, Instance: "2026-11-30"})
	require.True(t, ok)
	require.Equal(t, "0.5", old.Spent.String())
	require.Equal(t, "0", old.Reserved.String())
}

// TestAdmit_CountBudget: a budget in "requests" counts admissions next to a
// money budget of the same scope.
func TestAdmit_CountBudget(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.putBudget("key:k_9", "day", "3", "requests")
	h.putBudget("key:k_9", "lifetime", "100", "USD")
	var last events.AdmitReply
	for i := 0; i < 3; i++ {
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("c%d", i), Scopes: []string{"key:k_9"}, Amount: "2"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		last = r
	}
	r, _ := h.admit(events.AdmitRequest{RequestID: "c3", Scopes: []string{"key:k_9"}, Amount: "2"})
	require.False(t, r.Admitted)
	require.Equal(t, events.PeriodDay, r.Denial.Period)
	require.Equal(t, "requests", r.Denial.Unit)
	require.Equal(t, "6", h.budget("key:k_9", "lifetime").Reserved)
	c, e := h.settle(last.ReservationID, "2.5")
	require.Nil(t, e)
	require.Equal(t, "0.5", c.Overrun)
	require.Equal(t, "1", h.budget("key:k_9", "day").Spent)
	require.Equal(t, "2.5", h.budget("key:k_9", "lifetime").Spent)
	// A request in another currency is denied by the USD budget.
	r, _ = h.admit(events.AdmitRequest{RequestID: "eur", Scopes: []string{"key:k_9"}, Amount: "1", Unit: "EUR"})
	require.False(t, r.Admitted)
}

// TestRetention_ForgetsClosedReservations: a replica remembers a closed
// reservation (and its request id) for the retention after it closed, so
// retries get their original answer; after that the book forgets it, which
// bounds memory. An expired reservation is kept far longer, so a late settle
// still records its spend. Retention runs on the JetStream server's clock
// (message timestamps), not on the replicas' clocks: this test shortens it
// to one second and waits, bounded, on the real clock.
func TestRetention_ForgetsClosedReservations(t *testing.T) {
	h := newHarness(t, harnessOpts{ledgerOpts: []ledger.Option{ledger.WithRetention(time.Second, time.Hour)}})
	h.putBudget("org:ret", "month", "100", "USD")
	r1, _ := h.admit(events.AdmitRequest{RequestID: "ret-1", Scopes: []string{"org:ret"}, Amount: "1", TTL: "1m"})
	r2, _ := h.admit(events.AdmitRequest{RequestID: "ret-2", Scopes: []string{"org:ret"}, Amount: "2", TTL: "1m"})
	require.True(t, r1.Admitted && r2.Admitted)
	_, e := h.settle(r1.ReservationID, "1")
	require.Nil(t, e)
	// r2 expires (by the replicas' clock) and the sweeper releases it.
	h.clock.now.Add(2 * time.Minute)
	n, err := h.replicas[0].Sweeper.Pass(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Within the retention: a retried admit is a replay.
	r, e := h.admit(events.AdmitRequest{RequestID: "ret-1", Scopes: []string{"org:ret"}, Amount: "1", TTL: "1m"})
	require.Nil(t, e)
	require.True(t, r.Replayed)

	// Forgetting happens as the follower folds newer messages: keep the
	// ledger moving until r1 is forgotten.
	i := 0
	testenv.WaitFor(t, 20*time.Second, "r1 forgotten", func() bool {
		i++
		a, _ := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("tick-%d", i), Scopes: []string{"org:ret"}, Amount: "0.01", TTL: "1m"})
		require.True(t, a.Admitted)
		_, known := h.replicas[0].Ledger.Reservation(r1.ReservationID)
		return !known
	})
	_, e = h.settle(r1.ReservationID, "1")
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnknownReservation, e.Code)
	// r2 (expired) is still known and takes a late settle.
	c, e := h.settle(r2.ReservationID, "1.5")
	require.Nil(t, e)
	require.True(t, c.Late)
}

// TestSettle_AfterExpiryIsAllOverrun: once the sweeper has returned a
// reservation, its budget may be reserved again; a late settle then lands
// on top of that, so all of its actual is overrun (recorded, never clamped)
// and spent + reserved <= limit + overrun still holds (checked at cleanup).
func TestSettle_AfterExpiryIsAllOverrun(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:late", "month", "1", "USD")
	a, _ := h.admit(events.AdmitRequest{RequestID: "late-a", Scopes: []string{"org:late"}, Amount: "1", TTL: "1s"})
	require.True(t, a.Admitted)
	h.clock.now.Add(2 * time.Second)
	n, err := h.replicas[0].Sweeper.Pass(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	b, _ := h.admit(events.AdmitRequest{RequestID: "late-b", Scopes: []string{"org:late"}, Amount: "1"})
	require.True(t, b.Admitted, "the expired reservation's budget is free again")
	c, e := h.settle(a.ReservationID, "1")
	require.Nil(t, e)
	require.True(t, c.Late)
	require.Equal(t, "1", c.Overrun)
	v := h.budget("org:late", "month")
	require.Equal(t, "1", v.Spent)
	require.Equal(t, "1", v.Reserved)
	require.Equal(t, "1", v.Overrun)
}

// TestSettle_CountOnlyRetryIsReplay: a reservation held only in a count
// budget records 1, not the caller's actual; a retried settle with the same
// actual is a replay, not already_settled.
func TestSettle_CountOnlyRetryIsReplay(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.putBudget("key:cnt", "day", "10", "requests")
	r, _ := h.admit(events.AdmitRequest{RequestID: "cnt-1", Scopes: []string{"key:cnt"}, Amount: "0.04"})
	require.True(t, r.Admitted)
	c, e := h.settle(r.ReservationID, "0.04")
	require.Nil(t, e)
	require.Empty(t, c.Overrun)
	c, e = h.settle(r.ReservationID, "0.04")
	require.Nil(t, e)
	require.True(t, c.Replayed)
	require.Equal(t, "1", h.budget("key:cnt", "day").Spent)
}

// TestAdmit_GroupOverMaxPayload: a burst of admits each carrying the most
// metadata allowed folds into revisions larger than the server's max payload
// (1 MiB); the ledger commits such a group in parts instead of failing it.
// Without the split (ledger.tooLarge) this burst fails with
// ledger_unavailable: checked by disabling it.
func TestAdmit_GroupOverMaxPayload(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:big", "month", "1000000", "USD")
	meta := map[string]string{}
	for i := 0; i < events.MaxMetadata; i++ {
		key := fmt.Sprintf("k%02d_%s", i, strings.Repeat("x", 60))
		meta[key] = strings.Repeat("v", events.MaxMetaLen)
	}
	rs := burst(t, h, 256, func(i int) events.AdmitRequest {
		return events.AdmitRequest{RequestID: fmt.Sprintf("big-%d", i), Scopes: []string{"org:big"}, Amount: "1", Metadata: meta}
	})
	admitted, _ := countAdmitted(rs)
	require.Equal(t, 256, admitted)
	require.Equal(t, "256", h.budget("org:big", "month").Reserved)
}

// TestAdmit_RequestIDAcrossScopesTwoReplicas: one request id sent at the
// same moment to two replicas, once naming org:a and once org:b. With one
// lane (the default) both decisions go through the same compare-and-set
// chain, so exactly one reserves and the other is refused
// (idempotency_mismatch) or replayed, in every round. With 8 lanes, org:a
// and org:b are in different lanes and only the answering replica's book
// (milliseconds behind) catches the reuse, and two simultaneous requests
// both reserve: the documented limitation, asserted here as the negative
// control that shows the one-lane assertion can fail (it happened in 40 of
// 40 rounds when this test was written). A retry across a period boundary
// names the same scope, hence the same lane, so it is arbitrated with any
// number of lanes.
func TestAdmit_RequestIDAcrossScopesTwoReplicas(t *testing.T) {
	for _, lanes := range laneCounts {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			h := newHarness(t, harnessOpts{replicas: 2, lanes: lanes})
			h.putBudget("org:a", "month", "1000", "USD")
			h.putBudget("org:b", "month", "1000", "USD")
			const rounds = 40
			doubles := 0
			for round := 0; round < rounds; round++ {
				id := fmt.Sprintf("same-%d", round)
				var wg sync.WaitGroup
				var reserved atomic.Int64
				errs := make([]error, 2)
				start := make(chan struct{})
				for i, scope := range []string{"org:a", "org:b"} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						r, err := h.replicas[i].Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: id, Scopes: []string{scope}, Amount: "1"})
						if err != nil {
							errs[i] = err
							return
						}
						if r.Admitted && !r.Replayed {
							reserved.Add(1)
						}
					}()
				}
				close(start)
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						var e *events.Error
						require.ErrorAs(t, err, &e)
						require.Equal(t, events.CodeIdempotencyMismatch, e.Code)
					}
				}
				require.Positive(t, reserved.Load(), "round %d: neither reserved", round)
				if reserved.Load() > 1 {
					doubles++
				}
			}
			if lanes == 1 {
				require.Zero(t, doubles, "one lane: the compare-and-set arbitrates request ids across scopes")
			} else {
				t.Logf("lanes=%d: %d of %d rounds reserved twice under one request id", lanes, doubles, rounds)
				require.Positive(t, doubles, "negative control: scopes in different lanes are not arbitrated by one compare-and-set")
			}
			h.check()
		})
	}
}
