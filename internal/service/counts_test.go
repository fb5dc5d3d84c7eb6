package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestBudgets_CountAndMoneyInOnePeriod: a scope holds a USD budget and a
// requests budget in the same month; the second is defined alongside the
// first under its own key (the first keeps its plain key), each admit
// takes the amount in one and the count in the other, and a put of
// another currency is still a refused unit change.
func TestBudgets_CountAndMoneyInOnePeriod(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("org:acme", "month", "1.00", "USD")
	q, e := h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "3", Unit: "requests"})
	require.Nil(t, e)
	require.True(t, q.Created)
	require.Equal(t, "requests", q.Unit)
	require.EqualValues(t, 1, h.revisionsOf("budget.org.acme.month"))
	require.EqualValues(t, 1, h.revisionsOf("budget.org.acme.month.requests"))

	// Changing the requests budget targets it, not the USD one.
	q, e = h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "4", Unit: "requests"})
	require.Nil(t, e)
	require.Equal(t, []string{"limit"}, q.Changed)
	_, e = h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1", Unit: "EUR"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnitChangeRefused, e.Code)

	a, e := h.admit(events.AdmitRequest{RequestID: "a1", Scopes: []string{"org:acme"}, Amount: "0.25", Count: 3})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	require.Len(t, a.Budgets, 2)
	a, e = h.admit(events.AdmitRequest{RequestID: "a2", Scopes: []string{"org:acme"}, Amount: "0.25", Count: 2})
	require.Nil(t, e)
	require.False(t, a.Admitted, "3 + 2 requests exceed 4")
	require.Equal(t, events.ReasonLimitReached, a.Denial.Reason)
	require.Equal(t, "requests", a.Denial.Unit)

	var usd, req events.BudgetView
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:acme", Period: "month"}, &usd))
	require.Equal(t, "USD", usd.Unit)
	require.Equal(t, "0.25", usd.Reserved)
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:acme", Period: "month", Unit: "requests"}, &req))
	require.Equal(t, "3", req.Reserved)
	var all events.BudgetListReply
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:acme"}, &all))
	require.Len(t, all.Budgets, 2)
	require.Len(t, h.listAll(events.BudgetListRequest{Limit: 1}), 2, "paging keeps both budgets of one scope and period")

	// The settle records the amount in USD and the count in requests.
	first, e := h.admit(events.AdmitRequest{RequestID: "a1", Scopes: []string{"org:acme"}, Amount: "0.25", Count: 3})
	require.Nil(t, e)
	_, e = h.settle(first.ReservationID, "0.2")
	require.Nil(t, e)
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:acme", Period: "month", Unit: "requests"}, &req))
	require.Equal(t, "3", req.Spent)
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:acme", Period: "month"}, &usd))
	require.Equal(t, "0.2", usd.Spent)
}
