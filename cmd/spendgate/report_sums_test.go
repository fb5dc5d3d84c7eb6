package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// A report's sums may pass the 18 integer digits of one amount: two check
// admits that each ask the most an admit may (999999999999999999) and are
// denied sum to 19 digits in the decisions' asked. The report from the
// replica prints them, as the replay does, instead of refusing its reply.
//
// How we know it can fail: with events.ParseMoney in reportOf, spendgate
// report exits 1: the reply holds "1999999999999999998": invalid_amount.
func TestCLI_ReportSumsPastOneAmount(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1, Reports: true})
	url := env.URL()
	ok := e2eOK(t, url)
	ok("budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "1", "--unit", "USD")
	for _, id := range []string{"chk-1", "chk-2"} {
		code, _, _ := e2eCLIErr(t, url, "admit", "--scope", "org:acme", "--amount", "999999999999999999", "--mode", "check", "--request-id", id)
		require.Equal(t, 2, code, "denied")
	}
	require.Eventually(t, func() bool {
		s, err := env.JS.Stream(context.Background(), env.Layout.DenialStreamName())
		return err == nil && s.CachedInfo().State.Msgs == 2
	}, 10*time.Second, 10*time.Millisecond, "both decisions are recorded")
	out := ok("report", "--by", "scope", "--shadow", "--format", "csv")
	require.Equal(t, "scope,mode,unit,admitted,denied,amount,asked,reasons\n"+
		"org:acme,check,USD,0,2,0,1999999999999999998,limit_reached=2\n", out)
	require.Equal(t, out, ok("report", "--by", "scope", "--shadow", "--format", "csv", "--replay"))
}
