package bench

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/soak"
)

// TestMonth_Small runs the month scenario small: it is deterministic per
// seed, its costs are heavy-tailed, the maximum rule never overruns, a
// fixed slot admits at least as many calls, and under every rule a day's
// spend passes its limit by no more than its overrun (what settles above
// their reservations added: the only way past a limit). Under an exposure
// cap the learned rule's overshoot past the limit, its exposure and its
// amount at risk (spent + reserved + exposure - limit) stay within the cap
// at every step; a cap below what the uncapped rule exposed refuses
// admits, one above it changes nothing; and learned reservations under the
// largest cap fit more calls than the maximum under the budget that binds.
// It can fail: a replay that let admits past the limit, or a maximum below
// an actual, breaks the first checks; the uncapped learned rule's exposure
// passes the smallest cap (checked below), so a replay whose admits
// carried no ceiling, or that skipped the admit's cap check, would break
// the cap's.
//
// It replays 600 calls (2 a burst), 900 in .ci/run's soak step: at 600 as
// at 900 (seed 7) the lower budget denies, each limit has a cap that
// refuses admits, the higher one a cap never reached, and the largest cap
// under the lower budget admits more than the maximum (every branch below
// is taken), for two thirds of the 12 replays' CPU.
func TestMonth_Small(t *testing.T) {
	t.Parallel()
	calls := 600
	if soak.Long() {
		calls = 900
	}
	o := MonthOptions{Calls: calls, Seed: 7}
	require.Equal(t, generateMonth(o), generateMonth(o), "one seed, one month")
	res, err := Month(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, calls, res.Calls)
	perLimit := 3 + len(MonthCapShares)
	require.Len(t, res.Rows, perLimit*len(MonthAllowances))
	median, p95 := events.MustMoney(res.MedianUse), events.MustMoney(res.P95Use)
	require.Positive(t, p95.Cmp(median.Mul(events.MustMoney("3"))), "p95 %s over 3x the median %s: a heavy tail", p95, median)
	require.Positive(t, events.MustMoney(res.MedianMax).Cmp(median.Mul(events.MustMoney("4"))), "the priced maximum holds several times a call's cost")
	require.Positive(t, res.Rows[0].Denied, "the lower budget binds")
	for i, row := range res.Rows {
		require.EqualValues(t, calls, row.Admitted+row.Denied, row.Rule)
		overrun, overLimit := events.MustMoney(row.MaxOverrun), events.MustMoney(row.MaxOverLimit)
		require.LessOrEqual(t, overLimit.Cmp(overrun), 0, "%s: past the limit by %s, overrun %s", row.Rule, overLimit, overrun)
		if row.Rule == "max" {
			require.Zero(t, overrun.Sign(), "an actual never exceeds its priced maximum")
			require.Zero(t, row.MoreCalls)
		} else {
			require.Equal(t, "max", res.Rows[i-i%perLimit].Rule)
		}
		if row.ExposureCap == "" {
			require.Zero(t, row.CapRefused, row.Rule)
			require.GreaterOrEqual(t, row.MoreCalls, int64(0), row.Rule)
			continue
		}
		capAt := events.MustMoney(row.ExposureCap)
		for what, v := range map[string]string{"overshoot": row.MaxOverLimit, "exposure": row.MaxExposure, "at risk": row.MaxAtRisk} {
			require.LessOrEqual(t, events.MustMoney(v).Cmp(capAt), 0, "%s: %s %s past its cap %s", row.Rule, what, v, capAt)
		}
		learned := res.Rows[i-i%perLimit+2]
		require.Equal(t, "learned p95", learned.Rule)
		if events.MustMoney(learned.MaxExposure).Cmp(capAt) > 0 {
			require.Positive(t, row.CapRefused, "%s: a cap below what the calls expose refuses admits", row.Rule)
		} else {
			require.Equal(t, learned.Admitted, row.Admitted, "%s: a cap never reached changes nothing", row.Rule)
		}
		if i%perLimit == perLimit-1 {
			require.Positive(t, events.MustMoney(learned.MaxExposure).Cmp(capAt),
				"without a cap the same calls expose more than the smallest cap, %s: the bound is not vacuous", capAt)
		}
	}
	// Under the budget that binds, learned reservations under the largest
	// cap fit more calls than the maximum.
	require.Equal(t, "learned p95, cap 50%", res.Rows[3].Rule)
	require.Positive(t, res.Rows[3].MoreCalls, "%+v", res.Rows[3])
	var out bytes.Buffer
	require.NoError(t, WriteMonth(&out, res, false))
	require.Contains(t, out.String(), "DAY_LIMIT  RULE")
	t.Log("\n" + out.String())

	_, err = Month(context.Background(), MonthOptions{Calls: 10})
	require.ErrorContains(t, err, "--month-calls")
	require.ErrorContains(t, Options{Duration: 1, Reps: 1, Conns: 1, Replicas: 1, ServiceReplicas: 1, Lanes: 1,
		Scenarios: []string{"month"}, MonthCalls: 10}.Validate(), "--month-calls")
}
