package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// TestREADME_TestAgainstARealSpendgate is docs/guide.md's "Testing
// against a real spendgate": its first lines are quoted there verbatim
// (cmd/spendgate's README test checks the quote).
func TestREADME_TestAgainstARealSpendgate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	env := testenv.New(t)                      // JetStream on 127.0.0.1, random port, t.TempDir()
	env.StartSpendgate(t, testenv.Spendgate{}) // a replica; stopped when t ends
	c, err := client.New(env.Conn)             // or plain requests to env.Layout.Endpoint("admit")
	require.NoError(t, err)
	_, err = c.PutBudget(ctx, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1.00", Unit: "USD"})
	require.NoError(t, err)
	res, err := c.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.40"})
	require.NoError(t, err)

	// What was acknowledged survives a restart of the server.
	env.Restart(t) // same storage, same port
	v, err := c.GetBudget(ctx, events.BudgetGetRequest{Scope: "org:acme", Period: "month"})
	require.NoError(t, err)
	require.Equal(t, "0.4", v.Reserved)
	_, err = res.Settle(ctx, "0.30")
	require.NoError(t, err)
}
