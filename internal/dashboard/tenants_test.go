package dashboard_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/streams"
)

// TestDashboard_Tenants: ?tenant=NAME shows only that tenant's budgets,
// series and denials; without it the operator sees every tenant's, scopes
// carrying the tenant.
func TestDashboard_Tenants(t *testing.T) {
	s := seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "acme/team:search", Period: "month"}, events.MustMoney("1"), "USD", time.Now())
	require.NoError(t, err)
	rep, err := s.r.Admitter.Admit(events.ContextWithTenant(ctx, "acme"), events.AdmitRequest{RequestID: "x", Scopes: []string{"team:search"}, Amount: "0.5"})
	require.NoError(t, err)
	require.True(t, rep.Admitted)
	// A denial of acme's, through the service's tenant subject.
	nc := s.env.Connect(t)
	msg, err := nc.Request(s.env.Layout.TenantEndpoint("acme", streams.EndpointAdmit), []byte(`{"request_id":"big","scopes":["team:search"],"amount":"2"}`), 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), `"admitted":false`)

	var all, mine, none dashboard.BudgetsReply
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+dashboard.Path+"api/budgets", &all))
	require.Len(t, all.Budgets, 5)
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+dashboard.Path+"api/budgets?tenant=acme", &mine))
	require.Len(t, mine.Budgets, 1)
	require.Equal(t, events.Scope("acme/team:search"), mine.Budgets[0].Scope)
	require.Equal(t, "acme", mine.Budgets[0].Tenant)
	require.Equal(t, "team", mine.Budgets[0].Kind)
	require.Equal(t, "0.5", mine.Budgets[0].Reserved)
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+dashboard.Path+"api/budgets?tenant=", &none))
	require.Len(t, none.Budgets, 4)

	var s1, s2 dashboard.SeriesReply
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+dashboard.Path+"api/series?tenant=acme&scope=team:search&period=month", &s1))
	require.Equal(t, "1", s1.Budget.Limit)
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+dashboard.Path+"api/series?scope=acme/team:search&period=month", &s2))
	require.Equal(t, "1", s2.Budget.Limit)
	var bad map[string]any
	require.Equal(t, http.StatusBadRequest, getJSON(t, s.srv.URL+dashboard.Path+"api/series?tenant=acme&scope=acme/team:search&period=month", &bad))

	var dAll, dMine dashboard.DenialsReply
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+dashboard.Path+"api/denials", &dAll))
	require.Len(t, dAll.Denials, 2)
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+dashboard.Path+"api/denials?tenant=acme", &dMine))
	require.Len(t, dMine.Denials, 1)
	require.Equal(t, "acme", dMine.Denials[0].Tenant)
	require.Equal(t, events.Scope("team:search"), dMine.Denials[0].Denial.Scope)
}
