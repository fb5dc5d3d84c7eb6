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
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// burst fires n admits at once (released together by a barrier) and returns
// the replies.
func burst(t *testing.T, h *harness, n int, mk func(i int) events.AdmitRequest) []events.AdmitReply {
	t.Helper()
	replies, errs := burstE(h, n, mk)
	for i, e := range errs {
		require.Nil(t, e, "admit %d", i)
	}
	return replies
}

// burstE is burst that returns the error replies (or transport failures,
// as ledger_unavailable) instead of failing on them.
func burstE(h *harness, n int, mk func(i int) events.AdmitRequest) ([]events.AdmitReply, []*events.Error) {
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
	return replies, errs
}

func countAdmitted(rs []events.AdmitReply) (admitted int, denied map[events.Code]int) {
	denied = map[events.Code]int{}
	for _, r := range rs {
		if r.Admitted {
			admitted++
		} else if r.Denial != nil {
			denied[r.Denial.Reason]++
		}
	}
	return admitted, denied
}

// maxRounds bounds the re-rounds of a race test that must observe both
// sides of its race: a round that does not is repeated on fresh budgets,
// and the test fails if none does.
const maxRounds = 10

// TestAdmit_ConcurrentHotBudget: 200 concurrent admits of 0.05 against 1.00
// admit exactly 20, on one replica and on two replicas sharing the server.
// With two replicas the burst is repeated on fresh budgets (at most
// maxRounds) until both replicas have decided admits and at least one
// compare-and-set was lost, and the test asserts both: a run where one
// replica did all the work, or where they never collided, proves nothing
// about compare-and-set and fails.
//
// How we know it can fail: TestAdmit_BlindWritesOverAdmit runs the same
// burst on two replicas with the revision check removed
// (ledger.UnsafeBlindWritesForTesting) and shows over-admission, a failing
// invariant check or a replica stopping on the fork it wrote.
func TestAdmit_ConcurrentHotBudget(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			h := newHarness(t, harnessOpts{replicas: replicas})
			for round := 0; round < maxRounds; round++ {
				scope := fmt.Sprintf("org:acme%d", round)
				h.putBudget(scope, "month", "1.00", "USD")
				rs := burst(t, h, 200, func(i int) events.AdmitRequest {
					return events.AdmitRequest{RequestID: fmt.Sprintf("req-%d-%d", round, i), Scopes: []string{scope}, Amount: "0.05", TTL: "1m"}
				})
				admitted, denied := countAdmitted(rs)
				require.Equal(t, 20, admitted)
				require.Equal(t, map[events.Code]int{events.ReasonLimitReached: 180}, denied)
				v := h.budget(scope, "month")
				require.Equal(t, "1", v.Reserved)
				require.Equal(t, "0", v.Available)
				require.EqualValues(t, 20, v.Open)
				if replicas == 1 {
					return
				}
				var conflicts int64
				both := true
				for _, r := range h.replicas {
					st := r.Ledger.Stats()
					conflicts += st.Conflicts
					both = both && st.Txs > 0
				}
				t.Logf("round %d: both replicas decided: %v, conflicts: %d", round, both, conflicts)
				if both && conflicts > 0 {
					return
				}
			}
			t.Fatalf("in %d rounds the two replicas never both decided and conflicted", maxRounds)
		})
	}
}

// TestAdmit_BlindWritesOverAdmit is the negative control of
// TestAdmit_ConcurrentHotBudget: two replicas whose writes skip the revision
// check. Within a few bursts one replica overwrites the other's revision:
// the ledger admits more than the limit or loses a reservation (the
// invariant checker catches it), or a replica's follower stops on the fork
// in the lane's chain and its requests answer ledger_unavailable. If this
// test ever fails, the hot-budget test above no longer proves anything
// about compare-and-set.
func TestAdmit_BlindWritesOverAdmit(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, noCheck: true, stopMayFail: true, ledgerOpts: []ledger.Option{ledger.UnsafeBlindWritesForTesting()}})
	broken := false
	for round := 0; round < 20 && !broken; round++ {
		scope := fmt.Sprintf("org:blind%d", round)
		if e, err := h.callE(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: scope, Period: "month", Limit: "1.00", Unit: "USD"}, nil); e != nil || err != nil {
			broken = true // a replica already stopped on a fork
			break
		}
		rs, errs := burstE(h, 200, func(i int) events.AdmitRequest {
			return events.AdmitRequest{RequestID: fmt.Sprintf("b%d-%d", round, i), Scopes: []string{scope}, Amount: "0.05", TTL: "1m"}
		})
		broken = blindBroken(t, h, round, rs, errs, 20)
	}
	require.True(t, broken, "without compare-and-set two replicas never broke the budget: the concurrency tests would not detect its removal")
}

// blindBroken reports whether a blind-write round was caught: more admitted
// than want, an invariant check that fails, a replica whose follower
// stopped, or requests that answered errors.
func blindBroken(t *testing.T, h *harness, round int, rs []events.AdmitReply, errs []*events.Error, want int) bool {
	t.Helper()
	admitted, _ := countAdmitted(rs)
	failed := 0
	for _, e := range errs {
		if e != nil {
			failed++
		}
	}
	rep, err := projector.Check(context.Background(), h.env.JS, h.env.Layout)
	require.NoError(t, err)
	t.Logf("round %d: admitted %d, errors %d, check ok %v, replica stopped %v", round, admitted, failed, rep.OK(), h.failed())
	return admitted > want || !rep.OK() || h.failed() || failed > 0
}

// TestAdmit_BlindWritesMultiScopeBatch is the negative control of the
// atomic batch path: on 8 lanes, two-scope admits (org:a in lane 0 and
// user:b in lane 6) are atomic batches over two lane keys. With the
// revision check removed from every key of the batch, two replicas
// overwrite each other within a few bursts and the damage is caught. If
// this ever fails, TestAdmit_MultiScopeConcurrent and the lane tests no
// longer prove anything about the batch's compare-and-set.
func TestAdmit_BlindWritesMultiScopeBatch(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, lanes: 8, noCheck: true, stopMayFail: true, ledgerOpts: []ledger.Option{ledger.UnsafeBlindWritesForTesting()}})
	broken := false
	for round := 0; round < 20 && !broken; round++ {
		org, user := fmt.Sprintf("org:a%d", round), fmt.Sprintf("user:b%d", round)
		lanes := map[string]bool{}
		for _, sc := range []string{org, user} {
			lanes[h.env.Layout.LaneKey(events.BalanceRef{Scope: events.Scope(sc), Period: events.PeriodMonth, Instance: "2026-11"})] = true
		}
		if len(lanes) < 2 {
			continue // both scopes in one lane: not the batch path
		}
		ok := true
		for _, sc := range []string{org, user} {
			if e, err := h.callE(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: sc, Period: "month", Limit: "1.00", Unit: "USD"}, nil); e != nil || err != nil {
				ok = false
			}
		}
		if !ok {
			broken = true // a replica already stopped on a fork
			break
		}
		rs, errs := burstE(h, 200, func(i int) events.AdmitRequest {
			return events.AdmitRequest{RequestID: fmt.Sprintf("mb%d-%d", round, i), Scopes: []string{org, user}, Amount: "0.05", TTL: "1m"}
		})
		broken = blindBroken(t, h, round, rs, errs, 20)
	}
	require.True(t, broken, "without compare-and-set on the batch's keys two replicas never broke a budget: the batch path's tests would not detect its removal")
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

// closeRace is one round of settles and releases of the same n
// reservations racing from 8 goroutines each through two replicas. It
// returns, per reservation, how many transitions won, how many wins each
// kind had, and any unexpected answer (a loser must be told what happened:
// already_released or already_settled, or a replay).
type closeRaceResult struct {
	wins                    map[string]int
	settleWins, releaseWins int
	unexpected              []string
	ids                     []string
}

func closeRace(t *testing.T, h *harness, scope string, n int) closeRaceResult {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("%s-r%d", strings.ReplaceAll(scope, ":", "-"), i), Scopes: []string{scope}, Amount: "1"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		ids[i] = r.ReservationID
	}
	return closeRaceIDs(h, ids)
}

// closeRaceIDs races the closes of ids (see closeRace); it calls no
// require.
func closeRaceIDs(h *harness, ids []string) closeRaceResult {
	var mu sync.Mutex
	res := closeRaceResult{wins: map[string]int{}, ids: ids}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, id := range ids {
		for k := 0; k < 8; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var r events.CloseReply
				var e *events.Error
				var err error
				settle := k%2 == 0
				if settle {
					e, err = h.callE(streams.EndpointSettle, events.SettleRequest{ReservationID: id, Actual: "0.75"}, &r)
				} else {
					e, err = h.callE(streams.EndpointRelease, events.ReleaseRequest{ReservationID: id}, &r)
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					res.unexpected = append(res.unexpected, fmt.Sprintf("%s: %v", id, err))
				case e == nil && !r.Replayed:
					res.wins[id]++
					if settle {
						res.settleWins++
					} else {
						res.releaseWins++
					}
				case e == nil:
				case settle && e.Code == events.CodeAlreadyReleased, !settle && e.Code == events.CodeAlreadySettled:
				default:
					res.unexpected = append(res.unexpected, fmt.Sprintf("%s: %s: %s", id, e.Code, e.Message))
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	return res
}

// TestClose_Races: settles and releases of the same reservations race from
// many goroutines through two replicas; exactly one transition wins each
// reservation (checked per reservation, not in total), the counters move
// once, and every loser is told what happened. Rounds are repeated on
// fresh reservations (at most maxRounds) until both kinds of transition
// have won somewhere, so each side of the race happened.
//
// How we know it can fail: TestClose_RacesBlindControl runs the same race
// with the revision check removed, and sees two winners for a reservation,
// a failing invariant check or a replica stopping on a fork.
func TestClose_Races(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2})
	const n = 30
	for round := 0; round < maxRounds; round++ {
		scope := fmt.Sprintf("org:race%d", round)
		h.putBudget(scope, "month", "100", "USD")
		res := closeRace(t, h, scope, n)
		require.Empty(t, res.unexpected)
		for _, id := range res.ids {
			require.Equal(t, 1, res.wins[id], "exactly one winner for reservation %s", id)
		}
		v := h.budget(scope, "month")
		require.Equal(t, "0", v.Reserved)
		require.EqualValues(t, 0, v.Open)
		spent := events.Zero
		for i := 0; i < res.settleWins; i++ {
			spent = spent.Add(events.MustMoney("0.75"))
		}
		require.Equal(t, spent.String(), v.Spent)
		t.Logf("round %d: %d settles and %d releases won", round, res.settleWins, res.releaseWins)
		if res.settleWins > 0 && res.releaseWins > 0 {
			return
		}
	}
	t.Fatalf("in %d rounds settles and releases never both won", maxRounds)
}

// TestClose_RacesBlindControl is the negative control of TestClose_Races:
// with the revision check removed, two replicas both close some
// reservation (two winners), or the damage shows in the invariant check or
// as a replica stopping on the fork it wrote.
func TestClose_RacesBlindControl(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, noCheck: true, stopMayFail: true, ledgerOpts: []ledger.Option{ledger.UnsafeBlindWritesForTesting()}})
	broken := false
	for round := 0; round < 20 && !broken; round++ {
		scope := fmt.Sprintf("org:brace%d", round)
		if e, err := h.callE(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: scope, Period: "month", Limit: "100", Unit: "USD"}, nil); e != nil || err != nil {
			broken = true
			break
		}
		ids := make([]string, 0, 30)
		for i := 0; i < 30; i++ {
			var r events.AdmitReply
			e, err := h.callE(streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprintf("%s-r%d", strings.ReplaceAll(scope, ":", "-"), i), Scopes: []string{scope}, Amount: "1"}, &r)
			require.NoError(t, err)
			if e != nil {
				// Only a stopped replica may refuse a valid admit.
				require.Equal(t, events.CodeLedgerUnavailable, e.Code, e.Message)
				broken = true
				break
			}
			require.True(t, r.Admitted)
			ids = append(ids, r.ReservationID)
		}
		if broken {
			break
		}
		res := closeRaceIDs(h, ids)
		twice := false
		for _, id := range ids {
			twice = twice || res.wins[id] > 1
		}
		rep, err := projector.Check(context.Background(), h.env.JS, h.env.Layout)
		require.NoError(t, err)
		t.Logf("round %d: a reservation closed twice %v, unexpected %d, check ok %v, replica stopped %v", round, twice, len(res.unexpected), rep.OK(), h.failed())
		broken = twice || !rep.OK() || h.failed() || len(res.unexpected) > 0
	}
	require.True(t, broken, "without compare-and-set the close race never broke: TestClose_Races would not detect its removal")
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
	// (A scope named twice is no spelling: it is refused.)
	r, e := h.admit(events.AdmitRequest{RequestID: "same", Scopes: []string{"org:idem"}, Amount: "0.500", Metadata: map[string]string{"model": "m1"}})
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
			// 12 rounds, not 40 (40 in .ci/run's soak step): the 8-lane
			// control reserved twice in 40 of 40 rounds when this test was
			// written and in 36 of 40 since (9 in 10), so 12 rounds miss it
			// with probability 0.1^12, and a one-lane arbitration broken
			// the same way fails 12 rounds as surely.
			rounds := 12
			if soak.Long() {
				rounds = 40
			}
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
