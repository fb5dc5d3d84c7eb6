package service_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// tcall is harness.call on tenant's subject of endpoint
// ("spendgate.t.<tenant>.<endpoint>").
func (h *harness) tcall(tenant, endpoint string, req any, out any) *events.Error {
	h.t.Helper()
	data, err := json.Marshal(req)
	require.NoError(h.t, err)
	msg, err := h.nc.Request(h.env.Layout.TenantEndpoint(tenant, endpoint), data, 10*time.Second)
	require.NoError(h.t, err)
	var er events.ErrorReply
	require.NoError(h.t, json.Unmarshal(msg.Data, &er), string(msg.Data))
	if er.Error != nil {
		return er.Error
	}
	if out != nil {
		require.NoError(h.t, json.Unmarshal(msg.Data, out))
	}
	return nil
}

// TestTenants_Wire: on the tenant subjects every endpoint acts for the
// subject's tenant: budgets are the tenant's own (the same scope name in
// another tenant or the untenanted deployment is another budget), replies
// name scopes and request ids as the tenant sent them, a replay is the
// tenant's, another tenant's reservation is unknown, a tenant-qualified
// scope in a body is refused, an invalid tenant token writes nothing, and
// the sweeper expires a tenant's reservation like any other.
func TestTenants_Wire(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, tenant := range []string{"acme", "globex", ""} {
		var v events.BudgetView
		var e *events.Error
		if tenant == "" {
			v = h.putBudget("team:search", "day", "2", "USD")
		} else {
			e = h.tcall(tenant, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:search", Period: "day", Limit: "1", Unit: "USD"}, &v)
		}
		require.Nil(t, e)
		require.Equal(t, events.Scope("team:search"), v.Scope)
	}

	var a events.AdmitReply
	req := events.AdmitRequest{RequestID: "same", Scopes: []string{"team:search"}, Amount: "0.4", TTL: "10s"}
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, req, &a))
	require.True(t, a.Admitted)
	require.Equal(t, "same", a.RequestID)
	require.Equal(t, events.Scope("team:search"), a.Balances[0].Scope)
	require.Equal(t, events.Scope("team:search"), a.Budgets[0].Scope)
	require.Equal(t, "0.6", a.Budgets[0].Available)

	// The retry is acme's replay; the same id in globex is globex's own.
	var again, g events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, req, &again))
	require.True(t, again.Replayed)
	require.Equal(t, a.ReservationID, again.ReservationID)
	require.Equal(t, "same", again.RequestID)
	require.Nil(t, h.tcall("globex", streams.EndpointAdmit, req, &g))
	require.False(t, g.Replayed)
	require.NotEqual(t, a.ReservationID, g.ReservationID)
	// And untenanted: another request again (its budget is 2).
	u, e := h.admit(req)
	require.Nil(t, e)
	require.False(t, u.Replayed)

	// Another tenant's, or the untenanted deployment's, settle or release
	// of acme's reservation: unknown_reservation, nothing written.
	seq, _ := h.streamState()
	e = h.tcall("globex", streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, Actual: "0.4"}, nil)
	require.Equal(t, events.CodeUnknownReservation, e.Code)
	e = h.tcall("globex", streams.EndpointRelease, events.ReleaseRequest{ReservationID: a.ReservationID}, nil)
	require.Equal(t, events.CodeUnknownReservation, e.Code)
	_, e = h.settle(a.ReservationID, "0.4")
	require.Equal(t, events.CodeUnknownReservation, e.Code)
	e = h.tcall("acme", streams.EndpointRelease, events.ReleaseRequest{ReservationID: u.ReservationID}, nil)
	require.Equal(t, events.CodeUnknownReservation, e.Code)
	after, _ := h.streamState()
	require.Equal(t, seq, after, "a refused cross-tenant call wrote nothing")

	// A tenant-qualified scope is never a caller's to spell, on either
	// subject; nor is an invalid tenant token.
	for _, tenant := range []string{"globex", ""} {
		var e *events.Error
		bad := events.AdmitRequest{Scopes: []string{"acme/team:search"}, Amount: "0.6", TTL: "24h"}
		if tenant == "" {
			_, e = h.admit(bad)
		} else {
			e = h.tcall(tenant, streams.EndpointAdmit, bad, nil)
		}
		require.Equal(t, events.CodeInvalidIdentifier, e.Code)
		e = h.tcall("globex", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "acme/team:search", Period: "day"}, nil)
		require.Equal(t, events.CodeInvalidIdentifier, e.Code)
	}
	for _, tok := range []string{"ACME", "9lives"} {
		e = h.tcall(tok, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:x", Period: "day", Limit: "1", Unit: "USD"}, nil)
		require.Equal(t, events.CodeInvalidIdentifier, e.Code, tok)
	}
	after, _ = h.streamState()
	require.Equal(t, seq, after)

	// budget.get and budget.list are the tenant's own.
	var v events.BudgetView
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search", Period: "day"}, &v))
	require.Equal(t, "0.4", v.Reserved)
	require.Nil(t, h.tcall("globex", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search", Period: "day"}, &v))
	require.Equal(t, "0.4", v.Reserved)
	require.Equal(t, "1", v.Limit)
	var l events.BudgetListReply
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search"}, &l))
	require.Len(t, l.Budgets, 1)
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetList, events.BudgetListRequest{Kind: "team", Sort: events.SortUtilization}, &l))
	require.Len(t, l.Budgets, 1)
	require.Equal(t, events.Scope("team:search"), l.Budgets[0].Scope)
	require.Nil(t, h.tcall("nobody", streams.EndpointBudgetList, events.BudgetListRequest{}, &l))
	require.Empty(t, l.Budgets)
	e = h.tcall("nobody", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search"}, nil)
	require.Equal(t, events.CodeUnknownBudget, e.Code)
	require.Equal(t, "no budget is defined for scope team:search", e.Message)

	// The sweeper expires every tenant's reservations.
	h.clock.now.Store(h.clock.now.Load().Add(11 * time.Second))
	n, err := h.replicas[0].Sweeper.Pass(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search", Period: "day"}, &v))
	require.Equal(t, "0", v.Reserved)
	var c events.CloseReply
	require.Nil(t, h.tcall("acme", streams.EndpointRelease, events.ReleaseRequest{ReservationID: a.ReservationID}, &c))
	require.Equal(t, events.StatusExpired, c.Status)
	require.Equal(t, events.Scope("team:search"), c.Balances[0].Scope)
	h.check()
}

// TestTenants_SettleReplyNamesLocalScopes: a tenant's settle of a
// reservation held in two budgets answers each budget's figures with the
// scope as the tenant names it, as its balances are. It can fail: the
// budgets were answered with the stored scope ("acme/run:a-1"), which
// names the tenant the reply is already for.
func TestTenants_SettleReplyNamesLocalScopes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, scope := range []string{"run:a-1", "team:search"} {
		require.Nil(t, h.tcall("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: scope, Period: "month", Limit: "1", Unit: "USD"}, nil))
	}
	var a events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "two", Scopes: []string{"run:a-1", "team:search"}, Amount: "0.3"}, &a))
	require.True(t, a.Admitted)
	var c events.CloseReply
	require.Nil(t, h.tcall("acme", streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, Actual: "0.25"}, &c))
	require.Len(t, c.Budgets, 2)
	for _, b := range c.Budgets {
		require.False(t, strings.Contains(string(b.Scope), "/"), "budget scope %q", b.Scope)
	}
	require.ElementsMatch(t, []events.Scope{"run:a-1", "team:search"}, []events.Scope{c.Budgets[0].Scope, c.Budgets[1].Scope})
}
