package bench

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestMonth_Small runs the month scenario small: it is deterministic per
// seed, its costs are heavy-tailed, the maximum rule never overruns, a
// fixed slot admits at least as many calls, and under every rule a day's
// spend passes its limit by no more than its overrun (what settles above
// their reservations added: the only way past a limit). It can fail: a
// replay that let admits past the limit, or a maximum below an actual,
// breaks the last two checks.
func TestMonth_Small(t *testing.T) {
	t.Parallel()
	o := MonthOptions{Calls: 1500, Seed: 7}
	require.Equal(t, generateMonth(o), generateMonth(o), "one seed, one month")
	res, err := Month(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, 1500, res.Calls)
	require.Len(t, res.Rows, 3*len(MonthAllowances))
	median, p95 := events.MustMoney(res.MedianUse), events.MustMoney(res.P95Use)
	require.Positive(t, p95.Cmp(median.Mul(events.MustMoney("3"))), "p95 %s over 3x the median %s: a heavy tail", p95, median)
	require.Positive(t, events.MustMoney(res.MedianMax).Cmp(median.Mul(events.MustMoney("4"))), "the priced maximum holds several times a call's cost")
	require.Positive(t, res.Rows[0].Denied, "the lower budget binds")
	for i, row := range res.Rows {
		require.EqualValues(t, 1500, row.Admitted+row.Denied, row.Rule)
		overrun, overLimit := events.MustMoney(row.MaxOverrun), events.MustMoney(row.MaxOverLimit)
		require.LessOrEqual(t, overLimit.Cmp(overrun), 0, "%s: past the limit by %s, overrun %s", row.Rule, overLimit, overrun)
		if row.Rule == "max" {
			require.Zero(t, overrun.Sign(), "an actual never exceeds its priced maximum")
			require.Zero(t, row.MoreCalls)
		} else {
			require.GreaterOrEqual(t, row.MoreCalls, int64(0), row.Rule)
			require.Equal(t, "max", res.Rows[i-i%3].Rule)
		}
		if row.ExposureCap != "" {
			require.LessOrEqual(t, overrun.Cmp(events.MustMoney(row.ExposureCap)), 0, "%s: overrun %s past its cap %s", row.Rule, overrun, row.ExposureCap)
		}
	}
	var out bytes.Buffer
	require.NoError(t, WriteMonth(&out, res, false))
	require.Contains(t, out.String(), "DAY_LIMIT  RULE")
	t.Log("\n" + out.String())

	_, err = Month(context.Background(), MonthOptions{Calls: 10})
	require.ErrorContains(t, err, "--month-calls")
	require.ErrorContains(t, Options{Duration: 1, Reps: 1, Conns: 1, Replicas: 1, ServiceReplicas: 1, Lanes: 1,
		Scenarios: []string{"month"}, MonthCalls: 10}.Validate(), "--month-calls")
}
