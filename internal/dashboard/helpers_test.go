package dashboard_test

import (
	"context"
	"net/http/httptest"
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
//	team:search  day       limit 50     spent 10, res 5    30%, exposure 7 of a cap of 10
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
	// team:search learns (p100 of the last call, after one) with an
	// exposure cap of 10: its open reservation is a learned one.
	learned := events.LearnRule{Percentile: 100, Window: 1, MinSamples: 1}
	exposureCap := events.MustMoney("10")
	_, err := r.Ledger.DefineBudget(ctx, ledger.Budget{Ref: events.BudgetRef{Scope: "team:search", Period: events.PeriodDay}, Limit: events.MustMoney("50"),
		Unit: "USD", ExposureCap: &exposureCap, Learn: &learned}, time.Now())
	require.NoError(t, err)
	// A model at 1 USD an output token: 12 output tokens cost at most 12.
	_, err = r.Ledger.DefinePrice(ctx, ledger.Price{Model: "m-12", Unit: "USD", Input: events.Zero, Output: events.MustMoney("1000000")}, time.Now())
	require.NoError(t, err)
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
	// A cold start reserves the priced maximum, 12, and settles at 5
	// (spent 5); an unpriced call spends 5 more; the next priced call
	// reserves what the last one cost, 5, up to a ceiling of 12: the
	// balance exposes 12 - 5 = 7.
	priced := func(actual string) {
		n++
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "req-" + string(rune('a'+n)), Scopes: []string{"team:search"}, Model: "m-12", MaxOutputTokens: 12})
		require.NoError(t, err)
		require.True(t, rep.Admitted, "a priced call")
		if actual != "" {
			_, err = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: actual})
			require.NoError(t, err)
		}
	}
	priced("5")
	spend("team:search", "5", "5")
	priced("")
	spend("team:ads", "100", "100")
	spend("user:bob", "2", "2")
	// A denial goes through the service (the ring is the service's).
	nc := env.Connect(t)
	msg, err := nc.Request(env.Layout.Endpoint("admit"), []byte(`{"request_id":"too-big","scopes":["user:bob"],"amount":"9"}`), 10*time.Second)
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
	// The book has each write when its call returns; the series when the
	// replica's follower hands it on. Sync waits for the follower, which
	// feeds its readers before it moves on.
	require.NoError(t, r.Ledger.Sync(ctx))
	return &seeded{env: env, r: r, d: d, srv: srv}
}
