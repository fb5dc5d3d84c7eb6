package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// A limit lowered after the period's last write (every admit after it is
// denied, so nothing more is written to the balance) shows in audit
// balances as budget get shows it; --at before the change shows the old
// one.
//
// How we know it can fail: without report.DefinedLimits, audit balances
// takes the limit from the balance's last revision and prints 100 after
// the change.
func TestCLI_BalancesShowChangedLimit(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	url := env.URL()
	ok := e2eOK(t, url)
	ok("budget", "put", "--scope", "user:u-1", "--period", "day", "--limit", "100", "--unit", "USD")
	var adm struct {
		ReservationID string `json:"reservation_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("admit", "--scope", "user:u-1", "--amount", "60", "--request-id", "r1")), &adm))
	ok("settle", "--reservation", adm.ReservationID, "--actual", "50")
	before := time.Now().UTC()
	day := before.Format(time.DateOnly)
	ok("budget", "put", "--scope", "user:u-1", "--period", "day", "--limit", "40")
	if d := time.Now().UTC().Format(time.DateOnly); d != day {
		t.Skip("the UTC day changed during the test")
	}
	code, _, _ := e2eCLIErr(t, url, "admit", "--scope", "user:u-1", "--amount", "1", "--request-id", "r2")
	require.Equal(t, 2, code, "denied: 50 spent of 40")

	var got struct {
		Limit string `json:"limit"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("budget", "get", "--scope", "user:u-1", "--period", "day")), &got))
	require.Equal(t, "40", got.Limit)
	require.Contains(t, ok("audit", "balances"), "\nuser:u-1,day,"+day+",USD,40,50,0,0,0,1,1,0,0,0\n")
	require.Contains(t, ok("audit", "balances", "--at", before.Format(time.RFC3339Nano)), "\nuser:u-1,day,"+day+",USD,100,50,0,0,0,1,1,0,0,0\n")
}
