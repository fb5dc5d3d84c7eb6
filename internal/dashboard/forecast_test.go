package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
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

// clocked is a replica on a clock the test sets, and a dashboard over it.
type clocked struct {
	env   *testenv.Env
	r     *replica.Replica
	srv   *httptest.Server
	clock atomic.Int64
}

func (c *clocked) now() time.Time { return time.Unix(0, c.clock.Load()).UTC() }

func (c *clocked) set(t *testing.T, rfc3339 string) {
	t.Helper()
	at, err := time.Parse(time.RFC3339, rfc3339)
	require.NoError(t, err)
	c.clock.Store(at.UnixNano())
}

func (c *clocked) advance(d time.Duration) { c.clock.Add(int64(d)) }

func startClocked(t *testing.T, at string) *clocked {
	t.Helper()
	c := &clocked{}
	c.set(t, at)
	c.env = testenv.New(t)
	c.r = replicatest.Start(t, c.env, replica.Config{SweepInterval: -1, Now: c.now})
	d, err := dashboard.New(dashboard.Config{Book: c.r.Ledger, Series: c.r.Series, Denials: c.r.Service.RecentDenials, Now: c.now})
	require.NoError(t, err)
	c.srv = httptest.NewServer(d)
	t.Cleanup(c.srv.Close)
	return c
}

func (c *clocked) define(t *testing.T, scope, period, limit, tz string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.r.Ledger.DefineBudget(ctx, ledger.Budget{Ref: events.BudgetRef{Scope: events.Scope(scope), Period: events.Period(period)},
		Limit: events.MustMoney(limit), Unit: "USD", TZ: tz}, c.now())
	require.NoError(t, err)
}

// admit sends an admit through the service (as a caller does: a denial
// lands in the replica's recent denials) and settles it at actual when
// admitted and actual is set.
func (c *clocked) admit(t *testing.T, id, scope, amount, actual string) events.AdmitReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rep events.AdmitReply
	request(t, c.env, "admit", events.AdmitRequest{RequestID: id, Scopes: []string{scope}, Amount: amount, TTL: "1h"}, &rep)
	if rep.Admitted && actual != "" {
		_, err := c.r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: actual})
		require.NoError(t, err)
	}
	return rep
}

// row is scope's row of /api/budgets once the series caught up.
func (c *clocked) row(t *testing.T, scope string) dashboard.BudgetRow {
	t.Helper()
	// The series has a write when the follower hands it on, after the
	// book has it: Sync waits for the follower.
	require.NoError(t, c.r.Ledger.Sync(t.Context()))
	var b dashboard.BudgetsReply
	testenv.WaitFor(t, 30*time.Second, "the series to catch up", func() bool {
		getJSON(t, c.srv.URL+"/dashboard/api/budgets", &b)
		return b.Ready
	})
	for _, r := range b.Budgets {
		if string(r.Scope) == scope {
			return r
		}
	}
	require.Failf(t, "no row", "%s not in %+v", scope, b.Budgets)
	return dashboard.BudgetRow{}
}

// A burst then 19 idle minutes: the burn rate decays, and the forecast
// does not say "runs out in 5 min" (on the dashboard before the decaying
// pace it did: 80 in the 19 minutes since the first point is 252/h, so the
// 20 left lasted 4 min 45 s); after an idle hour there is no pace at all
// (before, 80/h and "runs out in 15 min"). The replica's clock starts at
// the wall clock's: the series' points carry the ledger messages' times.
// A lifetime budget: no reset in the hour, whenever the test runs.
func TestDashboard_BurnRateDecaysWhenIdle(t *testing.T) {
	c := startClocked(t, time.Now().UTC().Format(time.RFC3339))
	c.define(t, "team:burst", "lifetime", "100", "")
	require.True(t, c.admit(t, "burst", "team:burst", "80", "80").Admitted)

	c.advance(19 * time.Minute)
	var row dashboard.BudgetRow
	testenv.WaitFor(t, 30*time.Second, "the settle in the series", func() bool {
		row = c.row(t, "team:burst")
		return row.Spent == "80" && row.Forecast.PerHour != ""
	})
	require.NotNil(t, row.Forecast.ExhaustsAt)
	left := row.Forecast.ExhaustsAt.Sub(c.now())
	require.Greater(t, left, 19*time.Minute, "19 idle minutes, and the forecast says it runs out in %s", left)

	c.advance(42 * time.Minute)
	row = c.row(t, "team:burst")
	require.Empty(t, row.Forecast.PerHour, "an idle hour: no burn rate")
	require.Nil(t, row.Forecast.ExhaustsAt, "an idle hour: no forecast")
	require.False(t, row.Forecast.Exhausted)
}

// A budget at 98% whose every call is denied is exhausted, not "runs out
// in < 1 min" for ever (before, it was never exhausted: only spent at the
// limit was). A smaller admit that fits does not change that (the denied
// call still does not fit); a settle under the reservation that frees
// enough for it does; spent + reserved at the limit is exhausted again.
func TestDashboard_ExhaustedWhenDenied(t *testing.T) {
	c := startClocked(t, time.Now().UTC().Format(time.RFC3339))
	c.define(t, "team:tight", "lifetime", "100", "")
	big := c.admit(t, "big", "team:tight", "98", "")
	require.True(t, big.Admitted)
	rep := c.admit(t, "denied-1", "team:tight", "5", "")
	require.False(t, rep.Admitted)
	require.Equal(t, events.ReasonLimitReached, rep.Denial.Reason)

	c.advance(20 * time.Minute)
	row := c.row(t, "team:tight")
	require.Equal(t, int64(9800), row.UsedBP)
	require.True(t, row.Forecast.Exhausted, "98%%, and its latest admit was denied: %+v", row.Forecast)
	require.Equal(t, dashboard.ExhaustedDenied, row.Forecast.ExhaustedBy)
	require.Nil(t, row.Forecast.ExhaustsAt)

	require.True(t, c.admit(t, "small", "team:tight", "1", "").Admitted)
	row = c.row(t, "team:tight")
	require.True(t, row.Forecast.Exhausted, "1 available, the denied call asked 5")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.r.Settler.Settle(ctx, events.SettleRequest{ReservationID: big.ReservationID, Actual: "90"})
	require.NoError(t, err)
	testenv.WaitFor(t, 30*time.Second, "the settle on the page", func() bool { return c.row(t, "team:tight").Available == "9" })
	row = c.row(t, "team:tight")
	require.False(t, row.Forecast.Exhausted, "9 available: the denied call fits")

	require.True(t, c.admit(t, "last", "team:tight", "9", "").Admitted)
	testenv.WaitFor(t, 30*time.Second, "the admit on the page", func() bool { return c.row(t, "team:tight").Available == "0" })
	row = c.row(t, "team:tight")
	require.True(t, row.Forecast.Exhausted)
	require.Equal(t, dashboard.ExhaustedLimit, row.Forecast.ExhaustedBy)
}

// request sends req to endpoint of env and decodes the reply into reply.
func request(t *testing.T, env *testenv.Env, endpoint string, req, reply any) {
	t.Helper()
	data, err := json.Marshal(req)
	require.NoError(t, err)
	msg, err := env.Conn.Request(env.Layout.Endpoint(endpoint), data, 10*time.Second)
	require.NoError(t, err)
	var e events.ErrorReply
	require.NoError(t, json.Unmarshal(msg.Data, &e), string(msg.Data))
	require.Nil(t, e.Error, "%s: %s", endpoint, msg.Data)
	require.NoError(t, json.Unmarshal(msg.Data, reply), string(msg.Data))
}

// A scope with a money and a requests budget in one period: a denial by
// the requests budget exhausts that budget's row, not the money budget's,
// whose available amount holds the call (0.4 USD left, a 0.1 call). How it can fail: the denials
// were looked up by scope and period alone, and the USD row read
// "exhausted: denied, of 1.00 USD" (the 1 was one request), which the
// per-budget gauges and the alerting rule on them then repeated.
func TestDashboard_DenialExhaustsOnlyItsUnit(t *testing.T) {
	c := startClocked(t, time.Now().UTC().Format(time.RFC3339))
	c.define(t, "team:mix", "month", "5", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.r.Ledger.DefineBudget(ctx, ledger.Budget{Ref: events.BudgetRef{Scope: "team:mix", Period: events.PeriodMonth, Unit: "requests"},
		Limit: events.MustMoney("1"), Unit: "requests"}, c.now())
	require.NoError(t, err)
	require.True(t, c.admit(t, "first", "team:mix", "4.6", "").Admitted)
	rep := c.admit(t, "second", "team:mix", "0.1", "")
	require.False(t, rep.Admitted)
	require.Equal(t, events.ReasonLimitReached, rep.Denial.Reason)
	require.Equal(t, "requests", rep.Denial.Unit)

	c.advance(time.Minute)
	c.row(t, "team:mix") // the series caught up
	var b dashboard.BudgetsReply
	getJSON(t, c.srv.URL+"/dashboard/api/budgets", &b)
	byUnit := map[string]dashboard.BudgetRow{}
	for _, r := range b.Budgets {
		if r.Scope == "team:mix" {
			byUnit[r.Unit] = r
		}
	}
	require.Len(t, byUnit, 2, "%+v", b.Budgets)
	require.True(t, byUnit["requests"].Forecast.Exhausted, "%+v", byUnit["requests"].Forecast)
	require.False(t, byUnit["USD"].Forecast.Exhausted, "0.4 USD available holds a 0.1 call (the denial's 1 is a request): %+v", byUnit["USD"].Forecast)

	// The chart of each: ?unit= picks it, and its points are its own.
	// (Without it the points were always the first budget's.)
	for unit, reserved := range map[string]string{"USD": "4.6", "requests": "1"} {
		var sr dashboard.SeriesReply
		getJSON(t, c.srv.URL+"/dashboard/api/series?scope=team:mix&period=month&unit="+unit, &sr)
		require.Equal(t, unit, sr.Budget.Unit)
		require.NotEmpty(t, sr.Points, unit)
		require.Equal(t, reserved, sr.Points[len(sr.Points)-1].Reserved, unit)
	}
}

// A limit of 0 admits nothing: its row is at the limit and exhausted, as
// the per-budget utilization gauge says (1). How it can fail: it showed
// 0 % used and not exhausted while every admit was denied.
func TestDashboard_ZeroLimitExhausted(t *testing.T) {
	c := startClocked(t, time.Now().UTC().Format(time.RFC3339))
	c.define(t, "team:frozen", "month", "0", "")
	require.False(t, c.admit(t, "frozen-1", "team:frozen", "0.01", "").Admitted)
	row := c.row(t, "team:frozen")
	require.Equal(t, int64(10000), row.UsedBP)
	require.True(t, row.Forecast.Exhausted, "%+v", row.Forecast)
	require.Equal(t, dashboard.ExhaustedLimit, row.Forecast.ExhaustedBy)
}

// A disabled budget denies every admit whatever it has available: its row
// says so (disabled), where it looked healthy ("runs out in 20 h").
func TestDashboard_DisabledShown(t *testing.T) {
	c := startClocked(t, time.Now().UTC().Format(time.RFC3339))
	c.define(t, "team:off", "month", "10", "")
	require.False(t, c.row(t, "team:off").Disabled)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.r.Ledger.DefineBudget(ctx, ledger.Budget{Ref: events.BudgetRef{Scope: "team:off", Period: events.PeriodMonth},
		Limit: events.MustMoney("10"), Unit: "USD", Disabled: true}, c.now())
	require.NoError(t, err)
	rep := c.admit(t, "off-1", "team:off", "1", "")
	require.Equal(t, events.ReasonBudgetDisabled, rep.Denial.Reason)
	testenv.WaitFor(t, 30*time.Second, "the disable on the page", func() bool { return c.row(t, "team:off").Disabled })
}
