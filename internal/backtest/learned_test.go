package backtest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/backtest"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// TestReplay_LearnedCappedHistory records priced calls in a budget that
// learns (p50 of the last 10 calls, cold until 3) under an exposure cap:
// cold starts, learned reservations, exposure_cap denials, and settles
// above the priced maximum (cut at the ceiling, the rest excess). The
// replay under the recorded budgets decides each priced admit again by
// the ledger's own rule (the ledger learns, the cap is checked, the
// settle is cut) and reproduces every recorded balance. It can fail: a
// replay that asked the priced maximum (no learning) reserves more than
// was recorded, and one without the cap's cut spends more; the capped
// replays below also show that a smaller cap refuses more admits and
// keeps the exposure within it (and spent + reserved + exposure within
// limit + cap) after every step, and that a larger one admits more.
func TestReplay_LearnedCappedHistory(t *testing.T) {
	env := testenv.New(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	ctx := ctxFor(t)
	// 1,000 USD per million output tokens: 1,000 tokens cost at most 1.
	_, err := r.Ledger.DefinePrice(ctx, ledger.Price{Model: "m", Unit: "USD", Input: events.Zero, Output: events.MustMoney("1000")}, time.Now())
	require.NoError(t, err)
	rule := events.LearnRule{Percentile: 50, Window: 10, MinSamples: 3}
	capAt := events.MustMoney("2")
	_, err = r.Ledger.DefineBudget(ctx, ledger.Budget{Ref: events.BudgetRef{Scope: "team:llm", Period: events.PeriodMonth},
		Limit: events.MustMoney("3"), Unit: "USD", ExposureCap: &capAt, Learn: &rule}, time.Now())
	require.NoError(t, err)

	var capDenied, excess int
	var open []string
	n := 0
	call := func() (string, bool) {
		n++
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("c-%d", n), Scopes: []string{"team:llm"},
			Model: "m", MaxOutputTokens: 1000, Metadata: map[string]string{"user": fmt.Sprintf("u%d", n%3)}})
		require.NoError(t, err)
		if !rep.Admitted {
			if rep.Denial.Reason == events.ReasonExposureCap {
				capDenied++
			}
			return "", false
		}
		return rep.ReservationID, true
	}
	settle := func(id, actual string) {
		rep, err := r.Settler.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: actual})
		require.NoError(t, err)
		if rep.Excess != "" {
			excess++
		}
	}
	for round := range 6 {
		// Five calls at once: learned ones expose 1 - 0.1 = 0.9 each, so
		// two fit under the cap of 2 and the rest are refused.
		for range 5 {
			if id, ok := call(); ok {
				open = append(open, id)
			}
		}
		for i, id := range open {
			actual := fmt.Sprintf("0.%d", 1+(i+round)%3)
			if i == 0 && round%2 == 1 {
				actual = "1.5" // above the priced maximum: cut at 1
			}
			settle(id, actual)
		}
		open = open[:0]
	}
	require.Positive(t, capDenied, "the cap refused admits")
	require.Positive(t, excess, "a settle above the maximum was cut")
	require.NoError(t, r.Denials.Flush(ctx))

	rd := report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout))
	h, err := backtest.Load(ctx, rd, "team:llm")
	require.NoError(t, err)
	res, err := backtest.Replay(ctx, h, backtest.Policy{}, backtest.Options{})
	require.NoError(t, err)
	require.True(t, res.Exact.Checked)
	require.Zero(t, res.Exact.Mismatches, "%v", res.Exact.Examples)
	require.True(t, res.Exact.Same)
	require.Equal(t, *res.Balances[0].Recorded, res.Balances[0].Replayed)
	// Each cut settle (1.5 at a ceiling of 1) kept 0.5 out of spent: the
	// history says so, and the replay, settling at what the call cost
	// (1.5, not the 1 charged), cuts the same. Before, the history took
	// the charged 1 as the call's cost: both figures were 0.
	wantExcess := events.MustMoney("0.5").Mul(events.MustMoney(fmt.Sprint(excess)))
	require.Equal(t, wantExcess.String(), res.Recorded.Excess.String())
	require.Equal(t, wantExcess.String(), res.Replayed.Excess.String())

	t.Run("without learning the replay differs", func(t *testing.T) {
		steps := clone(h.Steps)
		for i := range steps {
			steps[i].Pricing = nil // asks the priced maximum as an amount
		}
		requireDiffers(t, h, steps)
	})
	t.Run("a smaller cap refuses more and bounds the exposure", func(t *testing.T) {
		small := events.MustMoney("0.9")
		res, err := backtest.Replay(ctx, h, backtest.Policy{ExposureCap: &small}, backtest.Options{})
		require.NoError(t, err)
		require.Equal(t, "0.9", res.ExposureCap)
		require.Greater(t, res.Replayed.ExposureCapDenied, int64(0))
		require.Greater(t, res.Replayed.Admitted, int64(0))
		for _, b := range res.Balances {
			require.Positive(t, b.MaxExposure.Sign())
			require.LessOrEqual(t, b.MaxExposure.Cmp(small), 0, "exposure %s past the cap", b.MaxExposure)
			require.LessOrEqual(t, b.MaxCommitted.Cmp(b.Replayed.Limit.Add(small)), 0, "spent + reserved + exposure %s past limit + cap", b.MaxCommitted)
			require.LessOrEqual(t, b.Replayed.Spent.Cmp(b.Replayed.Limit.Add(small)), 0)
		}
		// The bound is not vacuous: under a wide cap the same calls
		// expose more than the small cap allows.
		big := events.MustMoney("100")
		wide, err := backtest.Replay(ctx, h, backtest.Policy{ExposureCap: &big}, backtest.Options{})
		require.NoError(t, err)
		require.Zero(t, wide.Replayed.ExposureCapDenied)
		require.Greater(t, wide.Replayed.Admitted, res.Replayed.Admitted, "a larger cap admits more")
		require.Positive(t, wide.Balances[0].MaxExposure.Cmp(small), "the wide cap's exposure %s passes 0.9", wide.Balances[0].MaxExposure)
	})
}
