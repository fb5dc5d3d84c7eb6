package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/backtest"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// The backtest through the real service and CLI: under the recorded
// limit it reproduces the record (exact); under a lower one it denies
// calls that were admitted, by user; as a table, CSV and JSON; bad input
// is a usage error (64), an unknown scope or period a structured one.
func TestCLI_Backtest(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	url := env.URL()
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := e2eCLIErr(t, url, args...)
		require.Equal(t, want, code, errOut)
		return out
	}
	run(0, "budget", "put", "--scope", "team:search", "--period", "month", "--limit", "1", "--unit", "USD")
	for i, user := range []string{"ana", "bo", "ana", "cy"} {
		var r events.AdmitReply
		require.NoError(t, json.Unmarshal([]byte(run(0, "admit", "--scope", "team:search", "--amount", "0.30", "--meta", "user="+user)), &r))
		run(0, "settle", "--reservation", r.ReservationID, "--actual", []string{"0.20", "0.25", "0.10", "0.05"}[i])
	}
	run(2, "admit", "--scope", "team:search", "--amount", "0.90", "--meta", "user=bo") // 0.60 spent: denied
	require.Eventually(t, func() bool {
		s, err := env.JS.Stream(context.Background(), env.Layout.DenialStreamName())
		return err == nil && s.CachedInfo().State.Msgs == 1
	}, 10*time.Second, 10*time.Millisecond, "the denial record is published")

	var same backtest.Result
	require.NoError(t, json.Unmarshal([]byte(run(0, "backtest", "--scope", "team:search", "--unverified", "-o", "json")), &same))
	require.True(t, same.Exact.Checked)
	require.True(t, same.Exact.Same, same.Exact.Examples)
	require.EqualValues(t, 4, same.Recorded.Admitted)
	require.EqualValues(t, 1, same.Recorded.Denied)
	require.Equal(t, same.Recorded, same.Replayed)

	var low backtest.Result
	require.NoError(t, json.Unmarshal([]byte(run(0, "backtest", "--scope", "team:search", "--limit", "0.5", "--by", "user", "--unverified", "-o", "json")), &low))
	require.False(t, low.Exact.Checked)
	// 0.30 fits, then 0.20 spent + 0.30 = 0.50 fits, then 0.45 + 0.30 > 0.5.
	require.EqualValues(t, 2, low.Replayed.Admitted)
	require.EqualValues(t, 2, low.NewlyDenied.Calls)
	require.Equal(t, "0.15", low.NewlyDenied.Spent.String())
	require.Equal(t, "0.45", low.Replayed.Spent.String())
	groups := map[string]backtest.Group{}
	for _, g := range low.Groups {
		groups[g.Value] = g
	}
	require.EqualValues(t, 1, groups["ana"].NewlyDenied)
	require.EqualValues(t, 1, groups["cy"].NewlyDenied)
	require.EqualValues(t, 1, groups["bo"].RecordedDenied)

	var learned backtest.Result
	require.NoError(t, json.Unmarshal([]byte(run(0, "backtest", "--scope", "team:search", "--learn", "50", "--learn-min", "2", "--unverified", "-o", "json")), &learned))
	require.Equal(t, "p50 of 100, cold 2, floor 0", learned.Learn)

	var capped backtest.Result
	require.NoError(t, json.Unmarshal([]byte(run(0, "backtest", "--scope", "team:search", "--exposure-cap", "0.1", "--unverified", "-o", "json")), &capped))
	require.Equal(t, "0.1", capped.ExposureCap)
	require.False(t, capped.Exact.Checked, "a policy with a cap is not the record")
	require.Regexp(t, `(?m)^calls\s+exposure_cap_denied\s+0\s+\d+$`, run(0, "backtest", "--scope", "team:search", "--exposure-cap", "0.1", "--unverified"))

	table := run(0, "backtest", "--scope", "team:search", "--limit", "0.5", "--unverified")
	require.Contains(t, table, "# backtest of team:search per month under limit 0.5")
	require.Regexp(t, `(?m)^calls\s+admitted\s+4\s+2$`, table)
	require.Contains(t, run(0, "backtest", "--scope", "team:search", "--unverified"), "# exact: the replay reproduces every recorded decision and balance")
	recs, err := csv.NewReader(strings.NewReader(strings.SplitN(run(0, "backtest", "--scope", "team:search", "--limit", "0.5", "--unverified", "-o", "csv"), "\n\n", 2)[0])).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"section", "what", "recorded", "replayed"}, recs[0])
	require.Equal(t, []string{"calls", "admitted", "4", "2"}, recs[1])

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backtest", "--unverified"}, "--scope is required"},
		{[]string{"backtest", "--scope", "team:search"}, "needs --trusted-keys"},
		{[]string{"backtest", "--scope", "team:search", "--scope", "team:x", "--unverified"}, "exactly one scope"},
		{[]string{"backtest", "--scope", "team:search", "--limit", "lots", "--unverified"}, "--limit"},
		{[]string{"backtest", "--scope", "team:search", "--limit", "-1", "--unverified"}, "--limit"},
		{[]string{"backtest", "--scope", "team:search", "--fixed-slot", "0", "--unverified"}, "--fixed-slot"},
		{[]string{"backtest", "--scope", "team:search", "--exposure-cap", "-1", "--unverified"}, "--exposure-cap"},
		{[]string{"backtest", "--scope", "team:search", "--period", "fortnight", "--unverified"}, "--period"},
		{[]string{"backtest", "--scope", "team:search", "-o", "xml", "--unverified"}, "table or csv or json"},
		{[]string{"backtest", "--scope", "team search", "--unverified"}, "--scope"},
		{[]string{"backtest", "--scope", "team:search", "--learn", "101", "--unverified"}, "--learn"},
	} {
		code, out, errOut := e2eCLIErr(t, url, tc.args...)
		require.Equal(t, exitUsage, code, "%v", tc.args)
		require.Empty(t, out, "%v", tc.args)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
	}
	for _, tc := range []struct {
		args []string
		code events.Code
	}{
		{[]string{"backtest", "--scope", "team:nobody", "--unverified"}, events.CodeUnknownBudget},
		{[]string{"backtest", "--scope", "team:search", "--period", "week", "--unverified"}, events.CodeUnknownBudget},
	} {
		code, out, _ := e2eCLIErr(t, url, tc.args...)
		require.Equal(t, exitUsage, code, "%v", tc.args)
		var reply events.ErrorReply
		require.NoError(t, json.Unmarshal([]byte(out), &reply), out)
		require.Equal(t, tc.code, reply.Error.Code)
	}
}
