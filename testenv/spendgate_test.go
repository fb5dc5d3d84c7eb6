package testenv_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestEnv_StartSpendgate: another project's test gets a running spendgate
// in two lines, and it survives a server restart.
func TestEnv_StartSpendgate(t *testing.T) {
	env := testenv.New(t)
	env.StartSpendgate(t, testenv.Spendgate{SweepInterval: -1})
	req := func(endpoint string, in, out any) {
		t.Helper()
		data, err := json.Marshal(in)
		require.NoError(t, err)
		var msg []byte
		testenv.WaitFor(t, 30*time.Second, endpoint+" answered", func() bool {
			m, err := env.Conn.Request(env.Layout.Endpoint(endpoint), data, time.Second)
			if err != nil {
				return false
			}
			msg = m.Data
			return true
		})
		require.NoError(t, json.Unmarshal(msg, out))
	}
	var v events.BudgetView
	req(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:other", Period: "day", Limit: "1", Unit: "USD"}, &v)
	require.Equal(t, "1", v.Limit)
	var a events.AdmitReply
	req(streams.EndpointAdmit, events.AdmitRequest{RequestID: "r1", Scopes: []string{"org:other"}, Amount: "0.4"}, &a)
	require.True(t, a.Admitted)

	env.Restart(t)
	req(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:other", Period: "day"}, &v)
	require.Equal(t, "0.4", v.Reserved)
	req(streams.EndpointAdmit, events.AdmitRequest{RequestID: "r2", Scopes: []string{"org:other"}, Amount: "0.7"}, &a)
	require.False(t, a.Admitted)
	require.Equal(t, events.ReasonLimitReached, a.Denial.Reason)
}
