package service_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// TestReport_RunScopesKeepOrgsNamed: a tenant's agent platform gives every
// run its own scope, from a run:* default. After 520 runs, a budget owner
// puts org:globex and spends in it: the report endpoint (on the tenant's
// subject, and the operator's over every tenant) names org:globex with the
// replay's sums, and adds up the runs past the first 500 in one group,
// run:* with "other": true (acme/run:* in the operator's report), whose
// sums are the replay's of those runs. Every named group equals the
// replay's.
//
// How it can fail: with the first 500 scopes of every kind together
// tracked, as before, org:globex and the runs past 500 add up in the one
// Other group (value "", other: true): the reply has no org:globex group.
func TestReport_RunScopesKeepOrgsNamed(t *testing.T) {
	t.Parallel()
	// No request rate: 1,000 requests as fast as they are answered.
	h := newHarness(t, harnessOpts{reports: true, tenantLimits: service.TenantLimits{Rate: -1}})
	h.tputBudget("acme", "run:*", "lifetime", "100")
	const runs = report.MaxReportValues + 20
	for i := range runs {
		var a events.AdmitReply
		require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprintf("run-%d", i),
			Scopes: []string{fmt.Sprintf("run:bulk-%d", i)}, Amount: "0.5", TTL: "1m"}, &a))
		require.True(t, a.Admitted)
		if i%2 == 0 {
			require.Nil(t, h.tcall("acme", streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, Actual: "0.25"}, nil))
		}
	}
	h.tputBudget("acme", "org:globex", "month", "100")
	var a events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "globex-1",
		Scopes: []string{"org:globex", "run:bulk-late"}, Amount: "3", TTL: "1m"}, &a))
	require.True(t, a.Admitted)
	require.Nil(t, h.tcall("acme", streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, Actual: "2.75"}, nil))

	p := projector.New(h.env.JS, h.env.Layout)
	for _, tenant := range []string{"acme", ""} {
		want, err := report.NewReader(h.env.JS, h.env.Layout, p).Report(ctxT(t), report.Filter{OneTenant: tenant != "", Tenant: tenant}, report.ByScope)
		require.NoError(t, err)
		var got events.ReportReply
		if tenant == "" {
			require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "scope"}, &got))
		} else {
			require.Nil(t, h.tcall(tenant, streams.EndpointReport, events.ReportRequest{By: "scope"}, &got))
		}
		require.Equal(t, want.Position, got.Position)
		wantOf := map[string]report.SpendGroup{}
		for _, w := range want.Groups {
			v := w.Value
			if tenant != "" {
				v = string(events.Scope(v).Local())
			}
			wantOf[v] = w
		}
		runStar := "acme/run:*"
		if tenant != "" {
			runStar = "run:*"
		}
		var other *events.ReportGroup
		named := map[string]bool{}
		for i, g := range got.Groups {
			if g.Other {
				require.Nil(t, other, "one Other group: %+v", got.Groups)
				require.Equal(t, runStar, g.Value)
				other = &got.Groups[i]
				continue
			}
			w, ok := wantOf[g.Value]
			require.True(t, ok, "%q names %s, the replay does not", tenant, g.Value)
			require.Equal(t, events.ReportGroup{Value: g.Value, Unit: w.Unit, Reservations: w.Reservations, Open: w.Open,
				Settled: w.Settled, Released: w.Released, Expired: w.Expired, Late: w.Late,
				Spend: w.Spend.String(), Overrun: w.Overrun.String(), Reserved: w.Reserved.String()}, g)
			named[g.Value] = true
		}
		globex := "acme/org:globex"
		if tenant != "" {
			globex = "org:globex"
		}
		require.True(t, named[globex], "%q: org:globex has its own group", tenant)
		require.Equal(t, "2.75", wantOf[globex].Spend.String())
		// The runs the report does not name add up in run:*.
		require.NotNil(t, other)
		var n int64
		spend, reserved := events.Zero, events.Zero
		for v, w := range wantOf {
			if !named[v] {
				require.Equal(t, "run", events.Scope(v).Local().Kind(), v)
				n += w.Reservations
				spend, reserved = spend.Add(w.Spend), reserved.Add(w.Reserved)
			}
		}
		require.Equal(t, int64(21), n, "20 runs past the first 500, and globex's run")
		require.Equal(t, [3]string{fmt.Sprint(n), spend.String(), reserved.String()}, [3]string{fmt.Sprint(other.Reservations), other.Spend, other.Reserved})
		require.Equal(t, "5.25", other.Spend, "10 runs settled at 0.25 and globex's run at 2.75")
	}
}
