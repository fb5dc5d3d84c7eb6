package learn_test

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/settle"
)

// Synthetic month of LLM calls (monthCalls offered, in waves of monthWave
// concurrent calls: each wave is admitted, then settled). A call may use
// up to 4,096 output tokens at 1,000 USD per million (at most 4.096 USD),
// and uses base << k tokens, base uniform in [100, 300) and k heavy-tailed
// (P(k >= j) = 4^-j, at most 4), cut at 4,096: about 330 tokens on
// average, a p95 near 1,000, a few at the maximum. One call in 500 costs
// 1.5 times its priced maximum (an upstream that charges more than the
// price says).
const (
	monthCalls = 4_000
	monthWave  = 8
	monthMax   = 4096
)

// monthCost returns the cost of call i of the month, in tokens.
func monthTokens(rng *rand.Rand) int64 {
	base := 100 + rng.Int64N(200)
	k := min(bits.TrailingZeros64(rng.Uint64()|1<<63)/2, 4)
	return min(base<<k, monthMax)
}

// monthResult is one policy's month.
type monthResult struct {
	name, limit             string
	admitted, denied, calls int
	spent, maxOver, excess  events.Money
	exposureCap             string
}

// runMonth replays the synthetic month against a budget of scope in m
// under learn (nil: reserve the maximum) and exposure cap (""), with the
// same calls for every policy (seed).
func runMonth(t *testing.T, m *ledger.Memory, scope, monthLimit, exposureCap string, rule *events.LearnRule) monthResult {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	def := ledger.Budget{Ref: events.BudgetRef{Scope: events.Scope(scope), Period: events.PeriodMonth}, Limit: events.MustMoney(monthLimit), Unit: "USD", Learn: rule}
	if exposureCap != "" {
		c := events.MustMoney(exposureCap)
		def.ExposureCap = &c
	}
	require.NoError(t, m.Define(def))
	a, err := admit.New(m, admit.WithClock(clock))
	require.NoError(t, err)
	s, err := settle.New(m, settle.WithClock(clock))
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	res := monthResult{name: scope, limit: monthLimit, exposureCap: exposureCap}
	limit := events.MustMoney(monthLimit)
	perToken := events.MustMoney("0.001")
	calls := monthCalls
	if monthLimit == "25" {
		calls = monthCalls / 4 // the budget is spent after about 100
	}
	for i := 0; i < calls; i += monthWave {
		type open struct {
			id     string
			actual events.Money
		}
		var wave []open
		for j := i; j < i+monthWave; j++ {
			actual := events.MoneyFromInt(monthTokens(rng)).Mul(perToken)
			if rng.IntN(500) == 0 {
				actual = events.MoneyFromInt(monthMax).Mul(perToken).Mul(events.MustMoney("1.5"))
			}
			res.calls++
			r, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", events.Scope(scope).ID(), j), Scopes: []string{scope},
				Model: "month-model", MaxOutputTokens: monthMax, TTL: "1h"})
			require.NoError(t, err)
			if !r.Admitted {
				res.denied++
				continue
			}
			res.admitted++
			wave = append(wave, open{r.ReservationID, actual})
		}
		for _, o := range wave {
			rep, err := s.Settle(ctx, events.SettleRequest{ReservationID: o.id, Actual: o.actual.String()})
			require.NoError(t, err)
			if rep.Excess != "" {
				res.excess = res.excess.Add(events.MustMoney(rep.Excess))
			}
		}
		bal := m.Balance(def.Balance(now))
		res.spent = bal.Spent
		res.maxOver = res.maxOver.Max(bal.Spent.Sub(limit))
		if def.ExposureCap != nil {
			require.LessOrEqual(t, bal.Exposure.Cmp(*def.ExposureCap), 0, "exposure %s above the cap", bal.Exposure)
			require.LessOrEqual(t, bal.Spent.Cmp(limit.Add(*def.ExposureCap)), 0, "spent %s above limit + cap", bal.Spent)
		}
	}
	return res
}

// TestLearn_SyntheticMonth measures, on the same synthetic month of
// heavy-tailed calls, how many calls fit in a budget (of 25 and of 1,000
// USD) when
// each reserves its priced maximum and when each reserves the p95 of the
// scope's recent calls under an exposure cap, and the largest overshoot
// of the limit seen against the cap, which it asserts is never exceeded
// (after every wave, exposure <= cap and spent <= limit + cap). It runs
// on ledger.Memory: the same decisions and rules as a replica, without
// JetStream. The figures are logged (go test -v -run
// TestLearn_SyntheticMonth ./internal/learn/).
//
// How it can fail: an admit that broke the cap, or a settle charged above
// its ceiling (the one call in 500 that costs 1.5 times its maximum),
// trips the bound; learned reservations that fit no more calls than the
// maximum fail the comparison.
func TestLearn_SyntheticMonth(t *testing.T) { syntheticMonth(t, "25") }

// TestLearn_SyntheticMonthLarge is TestLearn_SyntheticMonth on a budget of
// 1,000 USD, which about 3,300 calls spend: a soak test (about 30 s under
// the race detector).
func TestLearn_SyntheticMonthLarge(t *testing.T) {
	soak.Only(t)
	syntheticMonth(t, "1000")
}

func syntheticMonth(t *testing.T, limits ...string) {
	m := ledger.NewMemory()
	m.DefinePrice(ledger.Price{Model: "month-model", Unit: "USD", Input: events.MustMoney("0"), Output: events.MustMoney("1000")})
	rule := events.DefaultLearnRule()
	t.Logf("synthetic month: heavy-tailed calls offered in waves of %d (1,000 to the 25 USD budget, %d to the 1,000 USD one), priced maximum 4.096 USD, about 0.33 USD a call", monthWave, monthCalls)
	t.Logf("%-22s %6s %8s %8s %10s %14s %8s %6s", "policy", "limit", "admitted", "denied", "spent", "max overshoot", "excess", "cap")
	for _, limit := range limits {
		results := []monthResult{
			runMonth(t, m, "team:max-"+limit, limit, "", nil),
			runMonth(t, m, "team:p95-half-"+limit, limit, events.MustMoney(limit).Mul(events.MustMoney("0.5")).String(), &rule),
			runMonth(t, m, "team:p95-fifth-"+limit, limit, events.MustMoney(limit).Mul(events.MustMoney("0.2")).String(), &rule),
		}
		for _, r := range results {
			t.Logf("%-22s %6s %8d %8d %10s %14s %8s %6s", r.name, r.limit, r.admitted, r.denied, r.spent, r.maxOver, r.excess, r.exposureCap)
			if r.exposureCap != "" {
				cap := events.MustMoney(r.exposureCap)
				require.LessOrEqual(t, r.maxOver.Cmp(cap), 0, "%s: overshoot %s above the cap %s", r.name, r.maxOver, cap)
			}
		}
		if limit == "25" {
			// A budget small against the calls in flight: the maximum
			// blocks it with money left; learned reservations spend it.
			require.Greater(t, results[1].admitted, results[0].admitted)
		}
	}
}
