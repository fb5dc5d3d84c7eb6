package dashboard_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// TestDashboard_Calendar: budgets in Pacific/Kiritimati (+14), New York,
// Kabul and a Berlin week show the ledger's current instance at a time
// when their local dates differ from UTC's, with what the ledger holds in
// it and their reset in their zone. Before the calendar, the dashboard
// computed instances and resets in UTC: Kiritimati showed 2026-12-01 at 0
// while the ledger held 1.25 in 2026-12-02, New York reset at 00:00Z
// instead of 05:00Z, and a week had no reset.
func TestDashboard_Calendar(t *testing.T) {
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	set := func(s string) {
		at, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		clock.Store(at.UnixNano())
	}
	set("2026-12-01T10:30:00Z") // Kiritimati 12-02 00:30, New York 12-01 05:30, Kabul 12-01 15:00
	env := testenv.New(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Now: now})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	define := func(scope, period, tz string) {
		_, err := r.Ledger.DefineBudget(ctx, ledger.Budget{Ref: events.BudgetRef{Scope: events.Scope(scope), Period: events.Period(period)},
			Limit: events.MustMoney("10"), Unit: "USD", TZ: tz}, now())
		require.NoError(t, err)
	}
	define("team:kiri", "day", "Pacific/Kiritimati")
	define("team:ny", "day", "America/New_York")
	define("team:kabul", "day", "Asia/Kabul")
	define("team:berlin", "week", "Europe/Berlin")
	for i, scope := range []string{"team:kiri", "team:ny", "team:kabul", "team:berlin"} {
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "cal-" + string(rune('a'+i)), Scopes: []string{scope}, Amount: "1.25", TTL: "1h"})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
	}
	d, err := dashboard.New(dashboard.Config{Book: r.Ledger, Series: r.Series, Denials: r.Service.RecentDenials, Now: now})
	require.NoError(t, err)

	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)

	type want struct{ instance, reserved, resets, tz string }
	check := func(wants map[string]want) {
		t.Helper()
		var b dashboard.BudgetsReply
		testenv.WaitFor(t, 30*time.Second, "the series to catch up", func() bool {
			getJSON(t, srv.URL+"/dashboard/api/budgets", &b)
			return b.Ready
		})
		require.Len(t, b.Budgets, len(wants))
		for _, row := range b.Budgets {
			w := wants[string(row.Scope)]
			require.Equal(t, w.instance, row.Instance, row.Scope)
			require.Equal(t, w.reserved, row.Reserved, row.Scope)
			require.Equal(t, w.tz, row.TZ, row.Scope)
			require.NotNil(t, row.Forecast.ResetsAt, row.Scope)
			require.Equal(t, w.resets, row.Forecast.ResetsAt.UTC().Format(time.RFC3339), row.Scope)
			// The series of the budget starts where its instance does.
			var s dashboard.SeriesReply
			getJSON(t, srv.URL+"/dashboard/api/series?scope="+url.QueryEscape(string(row.Scope))+"&period="+string(row.Period), &s)
			require.Equal(t, w.instance, s.Budget.Instance)
			loc, err := events.LoadZone(w.tz)
			require.NoError(t, err)
			start, _, ok := events.CalendarOf(row.Period, loc).InstanceBounds(w.instance)
			require.True(t, ok)
			require.True(t, s.Start.Equal(start), "%s: series starts %s", row.Scope, s.Start)
		}
	}
	check(map[string]want{
		"team:kiri":   {"2026-12-02", "1.25", "2026-12-02T10:00:00Z", "Pacific/Kiritimati"},
		"team:ny":     {"2026-12-01", "1.25", "2026-12-02T05:00:00Z", "America/New_York"},
		"team:kabul":  {"2026-12-01", "1.25", "2026-12-01T19:30:00Z", "Asia/Kabul"},
		"team:berlin": {"2026-W49", "1.25", "2026-12-06T23:00:00Z", "Europe/Berlin"},
	})
	// After Kabul's midnight its day is a new one, empty: not
	// yesterday's spend.
	set("2026-12-01T19:30:00Z")
	check(map[string]want{
		"team:kiri":   {"2026-12-02", "1.25", "2026-12-02T10:00:00Z", "Pacific/Kiritimati"},
		"team:ny":     {"2026-12-01", "1.25", "2026-12-02T05:00:00Z", "America/New_York"},
		"team:kabul":  {"2026-12-02", "0", "2026-12-02T19:30:00Z", "Asia/Kabul"},
		"team:berlin": {"2026-W49", "1.25", "2026-12-06T23:00:00Z", "Europe/Berlin"},
	})
}
