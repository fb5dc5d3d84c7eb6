package dashboard_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// seeded is a replica with a known ledger and a dashboard over it.
type seeded struct {
	env *testenv.Env
	r   *replica.Replica
	d   *dashboard.Dashboard
	srv *httptest.Server
}

// seed defines four budgets and spends in them:
//
//	org:acme     month     limit 100    spent 85           85%
//	team:search  day       limit 50     spent 10, res 5    30%
//	team:ads     month     limit 1000   spent 100          10%
//	user:bob     lifetime  limit 10     spent 2            20%, one denial
func seed(t *testing.T) *seeded {
	t.Helper()
	env := testenv.New(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Reports: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(scope, period, limit string) {
		_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(scope), Period: events.Period(period)}, events.MustMoney(limit), "USD", time.Now())
		require.NoError(t, err)
	}
	put("org:acme", "month", "100")
	put("team:search", "day", "50")
	put("team:ads", "month", "1000")
	put("user:bob", "lifetime", "10")
	n := 0
	spend := func(scope, amount, actual string) string {
		n++
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "req-" + string(rune('a'+n)), Scopes: []string{scope}, Amount: amount})
		require.NoError(t, err)
		require.True(t, rep.Admitted, "%s %s", scope, amount)
		if actual != "" {
			_, err = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: actual})
			require.NoError(t, err)
		}
		return rep.ReservationID
	}
	for range 5 {
		spend("org:acme", "17", "17")
	}
	spend("team:search", "10", "10")
	spend("team:search", "5", "")
	spend("team:ads", "100", "100")
	spend("user:bob", "2", "2")
	// A denial goes through the service (the ring is the service's).
	nc := env.Connect(t)
	msg, err := nc.Request(env.Layout.Endpoint("admit"), []byte(`{"request_id":"too-big","scopes":["user:bob"],"amount":"12"}`), 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), `"admitted":false`)
	// A shadow admit that would be denied: not a denial, not spend.
	msg, err = nc.Request(env.Layout.Endpoint("admit"), []byte(`{"request_id":"shadow-1","scopes":["user:bob"],"amount":"12","mode":"shadow","metadata":{"feature":"eval"}}`), 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), `"mode":"shadow"`)

	d, err := dashboard.New(dashboard.Config{Book: r.Ledger, Series: r.Series, Denials: r.Service.RecentDenials, Shadow: dashboard.ShadowOf(r.Reports), Replica: "test"})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return &seeded{env: env, r: r, d: d, srv: srv}
}
