package main

import (
	"encoding/json"
	"strings"
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
	require.Contains(t, ok("audit", "balances"), "\nuser:u-1,day,"+day+",USD,40,50,0,0,0,1,1,0,0,0,UTC,\n")
	require.Contains(t, ok("audit", "balances", "--at", before.Format(time.RFC3339Nano)), "\nuser:u-1,day,"+day+",USD,100,50,0,0,0,1,1,0,0,0,UTC,\n")
}

// audit balances says which time zone each instance is a date in (its
// last column): the budget's zone when its admits were folded, with every
// zone of the instance listed once when the zone changed during it, and
// the definition's zone for an idle budget. How we know it can fail:
// without the column the row ends at "late", and without the fold's
// record the changed zone shows alone.
func TestCLI_BalancesShowTheZone(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	ok := e2eOK(t, env.URL())
	ok("budget", "put", "--scope", "team:nz", "--period", "month", "--limit", "100", "--unit", "USD", "--tz", "Pacific/Auckland")
	ok("budget", "put", "--scope", "team:idle", "--period", "month", "--limit", "5", "--unit", "USD", "--tz", "Europe/Berlin")
	ok("admit", "--scope", "team:nz", "--amount", "1", "--request-id", "z1")
	month := time.Now().In(mustZone(t, "Pacific/Auckland")).Format("2006-01")
	out := ok("audit", "balances")
	require.Regexp(t, `(?m)^team:nz,month,`+month+`,USD,100,0,1,0,1,1,0,0,0,0,Pacific/Auckland,$`, out)
	require.Regexp(t, `(?m)^team:idle,month,\d{4}-\d{2},USD,5,0,0,0,0,0,0,0,0,0,Europe/Berlin,$`, out)
	require.True(t, strings.HasPrefix(out, "scope,period,instance,unit,limit,spent,reserved,overrun,open,opened,settled,released,expired,late,tz,retired_at\n"), out)

	// The zone changes during the month (the same month in both zones
	// except in the hours around its turn).
	ok("budget", "put", "--scope", "team:nz", "--period", "month", "--tz", "Pacific/Chatham")
	if m := time.Now().In(mustZone(t, "Pacific/Chatham")).Format("2006-01"); m != month {
		t.Skip("the month turned between the zones")
	}
	ok("admit", "--scope", "team:nz", "--amount", "1", "--request-id", "z2")
	require.Regexp(t, `(?m)^team:nz,month,`+month+`,USD,100,0,2,0,2,2,0,0,0,0,Pacific/Auckland Pacific/Chatham,$`, ok("audit", "balances"))
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}
