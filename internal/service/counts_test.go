package service_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
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

// TestReport_CountAndMoneyReservation: a reservation admitted against a
// USD budget and a requests budget (a gateway key's own request budget
// beside its team's money, as the README sets one up) counts in reports
// and exports with its money: the amount, the actual and the unit of the
// USD part, whichever part the lane revision names first. An earlier
// build took the first part's, so the spend report by model showed the
// call as "1 requests" and its USD spend nowhere. The requests budget
// keeps its own count (budget get).
func TestReport_CountAndMoneyReservation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reports: true})
	h.putBudget("team:t", "month", "10", "USD")
	h.putBudget("key:k", "month", "5", "requests")
	meta := map[string]string{"model": "m"}
	a, e := h.admit(events.AdmitRequest{RequestID: "r1", Scopes: []string{"team:t", "key:k"}, Amount: "0.5", Metadata: meta})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	_, e = h.settle(a.ReservationID, "0.3")
	require.Nil(t, e)
	open, e := h.admit(events.AdmitRequest{RequestID: "r2", Scopes: []string{"key:k", "team:t"}, Amount: "0.4", Metadata: meta})
	require.Nil(t, e)
	require.True(t, open.Admitted)

	want := events.ReportGroup{Value: "m", Unit: "USD", Reservations: 2, Open: 1, Settled: 1, Spend: "0.3", Overrun: "0", Reserved: "0.4"}
	var api events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "model"}, &api))
	require.Equal(t, []events.ReportGroup{want}, api.Groups, "the aggregate's report")
	rd := report.NewReader(h.env.JS, h.env.Layout, projector.New(h.env.JS, h.env.Layout))
	g, _, _, err := report.ParseReportRequest(events.ReportRequest{By: "model"})
	require.NoError(t, err)
	replay, err := rd.Report(ctxT(t), report.Filter{}, g)
	require.NoError(t, err)
	require.Len(t, replay.Groups, 1, "the replay's report")
	rg := replay.Groups[0]
	require.Equal(t, want, events.ReportGroup{Value: rg.Value, Unit: rg.Unit, Reservations: rg.Reservations, Open: rg.Open, Settled: rg.Settled,
		Spend: rg.Spend.String(), Overrun: rg.Overrun.String(), Reserved: rg.Reserved.String()}, "the replay's report")

	rows := map[string]*report.Row{}
	_, err = rd.Rows(ctxT(t), report.Filter{}, func(r *report.Row) error { rows[r.ReservationID] = r; return nil })
	require.NoError(t, err)
	settled := rows[a.ReservationID]
	require.NotNil(t, settled)
	require.Equal(t, "USD", settled.Unit)
	require.Equal(t, "0.5", settled.Reserved.String())
	require.Equal(t, "0.3", settled.Actual.String())
	require.Equal(t, "USD", rows[open.ReservationID].Unit)
	require.Equal(t, "0.4", rows[open.ReservationID].Reserved.String())
	// The auditor's fold names the same unit (a snapshot already did).
	st, err := projector.New(h.env.JS, h.env.Layout).CatchUp(ctxT(t))
	require.NoError(t, err)
	pr, ok := st.Reservation(a.ReservationID)
	require.True(t, ok)
	require.Equal(t, "USD", pr.Unit)

	var req events.BudgetView
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "key:k", Period: "month"}, &req))
	require.Equal(t, "1", req.Spent)
	require.Equal(t, "1", req.Reserved)

	// Across a restart from a ledger snapshot, whose report section must
	// say which part is the count: here the money part ("acct:t") comes
	// first in the revision, so a count part taken for money would settle
	// last and leave the row at "1".
	h.putBudget("acct:t", "month", "10", "USD")
	h.putBudget("zz:k", "month", "5", "requests")
	kept, e := h.admit(events.AdmitRequest{RequestID: "r3", Scopes: []string{"acct:t", "zz:k"}, Amount: "0.7", Metadata: map[string]string{"model": "n"}})
	require.Nil(t, e)
	require.True(t, kept.Admitted)
	_, err = h.replicas[0].Ledger.Snapshot(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, h.replicas[0].Stop())
	nc := h.env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: h.env.Layout, Now: h.clock.now.Load, SweepInterval: -1, Reports: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Stop()) })
	h.replicas[0] = r
	require.NoError(t, r.Reports.Sync(ctxT(t)))
	require.NotZero(t, r.Reports.Loaded(), "the report restarted from the snapshot's section")
	_, e = h.settle(kept.ReservationID, "0.6")
	require.Nil(t, e)
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "model"}, &api))
	require.Contains(t, api.Groups, events.ReportGroup{Value: "n", Unit: "USD", Reservations: 1, Settled: 1, Spend: "0.6", Overrun: "0", Reserved: "0"})
}
