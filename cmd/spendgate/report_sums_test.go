package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

// A reservation's budgets may hold different amounts for it: a fixed slot
// holds its slot, the others the admit's amount. The report by scope says
// what each scope's budget holds (what budget get says), live and
// replayed, whichever scope's name sorts first; by a metadata key and in
// the export it is the most any budget holds.
//
// How we know it can fail: before Row.ReservedIn the report gave every
// scope the amount of the reservation's first balance by name: org:acme
// 1.2 (1 + 0.2) where its budget holds 0.4, team:slot 0.2 where its holds 1.
func TestCLI_ReportReservedPerScope(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1, Reports: true})
	url := env.URL()
	ok := e2eOK(t, url)
	ok("budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "100", "--unit", "USD")
	ok("budget", "put", "--scope", "a:slot", "--period", "month", "--limit", "10", "--unit", "USD", "--fixed-slot", "1")
	ok("budget", "put", "--scope", "team:slot", "--period", "month", "--limit", "10", "--unit", "USD", "--fixed-slot", "1")
	ok("admit", "--scope", "org:acme", "--scope", "a:slot", "--amount", "0.2", "--request-id", "s6", "--meta", "user=ann")
	ok("admit", "--scope", "team:slot", "--scope", "org:acme", "--amount", "0.2", "--request-id", "s8", "--meta", "user=ann")
	id := strings.TrimSpace(ok("admit", "--scope", "org:acme", "--scope", "a:slot", "--amount", "0.2", "--request-id", "s5", "-o", "id"))
	ok("settle", "--reservation", id, "--actual", "0.5")

	out := ok("report", "--by", "scope", "--format", "csv")
	require.Equal(t, "scope,unit,reservations,open,settled,released,expired,late,spend,overrun,reserved,denials\n"+
		"a:slot,USD,2,1,1,0,0,0,0.5,0,1,0\n"+
		"org:acme,USD,3,2,1,0,0,0,0.5,0.3,0.4,0\n"+
		"team:slot,USD,1,1,0,0,0,0,0,0,1,0\n", out)
	require.Equal(t, out, ok("report", "--by", "scope", "--format", "csv", "--replay"))
	for scope, want := range map[string]string{"a:slot": "1", "org:acme": "0.4", "team:slot": "1"} {
		var b struct{ Reserved string }
		require.NoError(t, json.Unmarshal([]byte(ok("budget", "get", "--scope", scope, "--period", "month")), &b))
		require.Equal(t, want, b.Reserved, "budget get --scope %s", scope)
	}
	// By a metadata key and in the export's rows: the most a budget holds.
	require.Contains(t, ok("report", "--by", "user", "--format", "csv"), "\nann,USD,2,2,0,0,0,0,0,0,2,0\n")
	totals := filepath.Join(t.TempDir(), "totals.csv")
	ok("audit", "export", "--totals", totals)
	data, err := os.ReadFile(totals)
	require.NoError(t, err)
	// The row's overrun is what the budget holding its reserved was
	// charged above it (a:slot holds 1 of s5's 0.5: none), not org:acme's
	// 0.3 beside a:slot's hold.
	require.Equal(t, "unit,rows,open,settled,released,expired,late,reserved,actual,overrun,excess\nUSD,3,2,1,0,0,0,3,0.5,0,0\n", string(data))

	// A settle above the slot: team:slot is charged 0.5 above its 1,
	// org:acme 1.3 above its 0.2. Unfiltered, s8's row reads as team:slot's
	// (reserved 1, overrun 0.5: reserved + overrun = actual); an export of
	// one scope writes each row as that scope's budget holds and was
	// charged it, so its rows' overruns sum to the scope's balance.
	ok("settle", "--reservation", strings.TrimSpace(ok("admit", "--scope", "team:slot", "--scope", "org:acme", "--amount", "0.2", "--request-id", "s8", "--meta", "user=ann", "-o", "id")), "--actual", "1.5")
	row := func(args ...string) map[string]string {
		recs, err := csv.NewReader(strings.NewReader(ok(append([]string{"audit", "export"}, args...)...))).ReadAll()
		require.NoError(t, err)
		for _, rec := range recs[1:] {
			if rec[1] == "s8" {
				m := map[string]string{}
				for i, name := range recs[0] {
					m[name] = rec[i]
				}
				return m
			}
		}
		t.Fatalf("no row of s8 in %v", recs)
		return nil
	}
	for _, c := range []struct {
		args                      []string
		reserved, actual, overrun string
	}{
		{nil, "1", "1.5", "0.5"},
		{[]string{"--scope", "team:slot"}, "1", "1.5", "0.5"},
		{[]string{"--scope", "org:acme"}, "0.2", "1.5", "1.3"},
	} {
		r := row(c.args...)
		require.Equal(t, []string{c.reserved, c.actual, c.overrun}, []string{r["reserved"], r["actual"], r["overrun"]}, "%v", c.args)
	}
	for scope, want := range map[string]string{"org:acme": "1.6", "team:slot": "0.5", "a:slot": "0"} {
		totals := filepath.Join(t.TempDir(), "totals.csv")
		ok("audit", "export", "--scope", scope, "--totals", totals)
		data, err := os.ReadFile(totals)
		require.NoError(t, err)
		recs, err := csv.NewReader(strings.NewReader(string(data))).ReadAll()
		require.NoError(t, err)
		var b struct{ Overrun string }
		require.NoError(t, json.Unmarshal([]byte(ok("budget", "get", "--scope", scope, "--period", "month")), &b))
		require.Equal(t, want, b.Overrun, "budget get --scope %s", scope)
		require.Equal(t, want, recs[1][9], "the export of %s sums to its balance's overrun", scope)
	}
}
