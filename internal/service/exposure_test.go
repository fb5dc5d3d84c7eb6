package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/streams"
)

// expoModel is priced at 1,000 USD per million output tokens: a call of
// 500 output tokens at most costs at most 0.5.
const expoModel = "expo-model"

func expoPriced(id, scope string) events.AdmitRequest {
	return events.AdmitRequest{RequestID: id, Scopes: []string{scope}, Model: expoModel, MaxOutputTokens: 500, TTL: "1h"}
}

// putExposureBudget defines the model's price and a budget of scope with
// an exposure cap and a learn rule (p50 of the last 20 calls, cold until
// 5), with the harness's request endpoints.
func putExposureBudget(t *testing.T, h *harness, scope, limit, exposureCap string) {
	t.Helper()
	require.Nil(t, h.call(streams.EndpointPricingPut, events.PricingPutRequest{Model: expoModel, Input: "0", Output: "1000"}, nil))
	learn, expo := "p50", exposureCap
	var v events.BudgetPutReply
	require.Nil(t, h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: scope, Period: "month", Limit: limit, Unit: "USD",
		ExposureCap: &expo, Learn: &learn, LearnWindow: 20, LearnMinSamples: 5}, &v))
	require.Equal(t, exposureCap, v.ExposureCap)
	require.Equal(t, "p50 of 20, cold 5, floor 0", v.Learn)
}

// TestExposure_CapHoldsUnderConcurrency: the exposure cap bounds the worst
// overshoot however many callers race, on two replicas of a real
// JetStream. A budget of limit 0.7 and exposure cap 2 learns that calls
// priced at most 0.5 cost 0.05 (five cold-start calls, settled at 0.05),
// so each learned admit reserves 0.05 with a ceiling of 0.5: 0.45 of
// exposure. Forty concurrent admits then fit nine by the limit but four by
// the cap (4 x 0.45 = 1.8 <= 2 < 2.25): exactly four are admitted and 36
// are denied exposure_cap. All four then settle concurrently at 5 (ten
// times their ceiling): each is charged its ceiling, 0.5, with 4.5
// recorded as excess, so spent ends at 0.25 + 4 x 0.5 = 2.25 <= limit +
// cap = 2.7. Every lane revision the stream holds is then read back: no
// balance ever states an exposure above the cap, or spent above limit +
// cap.
//
// How it can fail: without the admit's exposure check, the limit admits
// nine (exposure 2.25 > 2 in the fifth admit's revision, and spent 4.75 >
// 2.7 after the settles); without the settle's clamp at the ceiling, spent
// reaches 20.25; without compare-and-set between the two replicas, the
// burst admits more than four (TestAdmit_BlindWritesOverAdmit shows the
// burst catches a ledger without it).
func TestExposure_CapHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	scope := "team:expo"
	putExposureBudget(t, h, scope, "0.7", "2")

	// Cold start: the priced maximum, with the ceiling at it (no exposure).
	for i := 0; i < 5; i++ {
		r, e := h.admit(expoPriced(fmt.Sprintf("warm-%d", i), scope))
		require.Nil(t, e)
		require.True(t, r.Admitted, "%+v", r.Denial)
		require.Equal(t, "0.5", r.Budgets[0].Amount)
		_, e = h.settle(r.ReservationID, "0.05")
		require.Nil(t, e)
	}
	// Both replicas have folded the five settles before the burst.
	for _, rp := range h.replicas {
		require.NoError(t, rp.Ledger.Sync(ctxT(t)))
	}

	rs := burst(t, h, 40, func(i int) events.AdmitRequest { return expoPriced(fmt.Sprintf("b-%d", i), scope) })
	admitted, denied := countAdmitted(rs)
	require.Equal(t, 4, admitted)
	require.Equal(t, map[events.Code]int{events.ReasonExposureCap: 36}, denied)
	var ids []string
	for _, r := range rs {
		if r.Admitted {
			require.Equal(t, "0.05", r.Budgets[0].Amount, "a learned reservation: p50 of five calls at 0.05")
			ids = append(ids, r.ReservationID)
		}
	}
	v := h.budget(scope, "month")
	require.Equal(t, "1.8", v.Exposure)
	require.Equal(t, "0.2", v.Reserved)

	// Every one settles at its worst, concurrently, on both replicas.
	var wg sync.WaitGroup
	errs := make([]*events.Error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r events.CloseReply
			e, err := h.callE(streams.EndpointSettle, events.SettleRequest{ReservationID: id, Actual: "5"}, &r)
			if err != nil {
				e = &events.Error{Code: events.CodeLedgerUnavailable, Message: err.Error()}
			}
			errs[i] = e
		}()
	}
	wg.Wait()
	for _, e := range errs {
		require.Nil(t, e)
	}
	v = h.budget(scope, "month")
	require.Equal(t, "2.25", v.Spent)
	require.Equal(t, "0", v.Exposure)
	require.Equal(t, "0", v.Reserved)

	// A retry of a clamped settle is a replay.
	var again events.CloseReply
	require.Nil(t, h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: ids[0], Actual: "5"}, &again))
	require.True(t, again.Replayed)

	maxExposure, maxSpent, excess := scanBalances(t, h, scope)
	require.LessOrEqual(t, maxExposure.Cmp(events.MustMoney("2")), 0, "exposure %s above the cap", maxExposure)
	require.LessOrEqual(t, maxSpent.Cmp(events.MustMoney("2.7")), 0, "spent %s above limit + cap", maxSpent)
	require.Equal(t, "1.8", maxExposure.String())
	require.Equal(t, "18", excess.String(), "4 settles x 4.5 above the ceiling, recorded as excess")
}

// scanBalances reads every lane revision of the ledger stream and returns,
// for scope's balances, the largest exposure and spent any revision states
// and the excess its settles recorded.
func scanBalances(t *testing.T, h *harness, scope string) (maxExposure, maxSpent, excess events.Money) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.env.JS.Stream(ctx, h.env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		if err == jetstream.ErrMsgNotFound {
			continue
		}
		require.NoError(t, err)
		rev, ok, err := codec.DecodeCanonicalLane(msg.Data)
		if !ok || err != nil {
			if rev, err = events.DecodeLaneRevision(msg.Data); err != nil {
				continue // not a lane revision
			}
		}
		for _, b := range rev.Balances {
			if string(b.Balance.Scope) != scope {
				continue
			}
			if b.Exposure != nil && b.Exposure.Cmp(maxExposure) > 0 {
				maxExposure = *b.Exposure
			}
			maxSpent = maxSpent.Max(b.Spent)
			for _, e := range b.Events {
				if st, ok := e.(events.ReservationSettled); ok && st.Excess != nil {
					excess = excess.Add(*st.Excess)
				}
			}
		}
	}
	return maxExposure, maxSpent, excess
}

// TestExposure_SettleReplyNamesEachBudgetsExcess: a priced reservation in
// a learned budget with an exposure cap (team:cap: learned 0.05, ceiling
// 0.5) and in one without a cap (org:acme, holding the priced 0.5),
// settled at 0.8: the reply's budgets say what each recorded, team:cap
// charged its ceiling with 0.3 of excess, although the top-level fields
// are org:acme's, the first by scope name. How it can fail: before
// budgets[].excess the reply named no excess anywhere, while the event
// recorded it.
func TestExposure_SettleReplyNamesEachBudgetsExcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	putExposureBudget(t, h, "team:cap", "10", "2")
	for i := 0; i < 5; i++ { // cold start: five calls that cost 0.05
		r, e := h.admit(expoPriced(fmt.Sprintf("warm-%d", i), "team:cap"))
		require.Nil(t, e)
		require.True(t, r.Admitted, "%+v", r.Denial)
		_, e = h.settle(r.ReservationID, "0.05")
		require.Nil(t, e)
	}
	require.Nil(t, h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "10", Unit: "USD"}, nil))
	req := expoPriced("x1", "team:cap")
	req.Scopes = append(req.Scopes, "org:acme")
	a, e := h.admit(req)
	require.Nil(t, e)
	require.True(t, a.Admitted, "%+v", a.Denial)
	var r events.CloseReply
	require.Nil(t, h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, Actual: "0.8"}, &r))
	require.Equal(t, "0.8", r.Actual)
	require.Equal(t, "0.3", r.Overrun, "org:acme's")
	require.Empty(t, r.Excess, "org:acme's: none")
	got := map[events.Scope]events.BudgetClose{}
	for _, b := range r.Budgets {
		b.Instance = ""
		got[b.Scope] = b
	}
	require.Equal(t, map[events.Scope]events.BudgetClose{
		"org:acme": {Scope: "org:acme", Period: events.PeriodMonth, Unit: "USD", Reserved: "0.5", Actual: "0.8", Overrun: "0.3"},
		"team:cap": {Scope: "team:cap", Period: events.PeriodMonth, Unit: "USD", Reserved: "0.05", Actual: "0.5", Overrun: "0.45", Excess: "0.3"},
	}, got)
}

// TestExposure_CapDoesNotHideAPlainOverrun: in a budget with an exposure
// cap, a reservation without a ceiling (an amount its caller gave) settled
// above its amount is charged in full, as in a budget without a cap: spent
// counts it, and the limit then denies. How it can fail: charged at most
// its amount (the rule before), a caller reserving 0.01 and settling 5
// left spent at 0.01 a call, its 4.99 recorded only as excess, and the
// budget admitted it for ever while it spent.
func TestExposure_CapDoesNotHideAPlainOverrun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	expo := "1"
	require.Nil(t, h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:capped", Period: "month", Limit: "10", Unit: "USD", ExposureCap: &expo}, nil))
	for i := 0; i < 2; i++ {
		a, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprint("p", i), Scopes: []string{"team:capped"}, Amount: "0.01", Unit: "USD"})
		require.Nil(t, e)
		require.True(t, a.Admitted, "%+v", a.Denial)
		r, e := h.settle(a.ReservationID, "5")
		require.Nil(t, e)
		require.Equal(t, "5", r.Actual)
		require.Equal(t, "4.99", r.Overrun)
		require.Empty(t, r.Excess, "nothing kept out of spent")
	}
	v := h.budget("team:capped", "month")
	require.Equal(t, "10", v.Spent)
	require.Equal(t, "9.98", v.Overrun)
	a, e := h.admit(events.AdmitRequest{RequestID: "p2", Scopes: []string{"team:capped"}, Amount: "0.01", Unit: "USD"})
	require.Nil(t, e)
	require.False(t, a.Admitted, "the limit stops a caller that spent it")
	require.Equal(t, events.ReasonLimitReached, a.Denial.Reason)
}
