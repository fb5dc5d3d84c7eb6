package service_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// waitDenials waits (bounded) until the replicas have published n denial
// records in all, and returns how many each published.
func (h *harness) waitDenials(n uint64) []uint64 {
	h.t.Helper()
	var per []uint64
	require.Eventually(h.t, func() bool {
		per = per[:0]
		var sum uint64
		for _, r := range h.replicas {
			per = append(per, r.Denials.Recorded())
			sum += r.Denials.Recorded()
		}
		return sum == n
	}, 30*time.Second, 10*time.Millisecond, "denial records published")
	for _, r := range h.replicas {
		require.Zero(h.t, r.Denials.Dropped())
		require.Zero(h.t, r.Denials.Failed())
	}
	return per
}

// denialSums adds up a report's denials in total and per value.
func denialSums(rep events.ReportReply) (int64, map[string]int64) {
	var total int64
	per := map[string]int64{}
	for _, g := range rep.Groups {
		total += g.Denials
		per[g.Value] += g.Denials
	}
	return total, per
}

// TestReport_Denials: on two replicas, a mixed history (reservations of
// every outcome, denied admits of several reasons and models, untenanted
// and a tenant's, spread over hours) gives reports whose denial counts are
// exactly the number of denied admits: by model every denial counts once,
// by scope once in each scope it named. The report endpoint, each
// replica's aggregate and the replay agree on every group (the harness'
// requireReportsEqual compares denials too). A tenant's report counts only
// its own denials; a check-mode denial is counted nowhere, nor is a
// tenant's denial for a scope it has no budget for (only its metric counts
// it: a tenant may not fill the denial stream with scopes it makes up).
// If denials were left out of either side, or counted per replica that
// saw the record, the exact totals fail.
func TestReport_Denials(t *testing.T) {
	t.Parallel() // its own harness (server, replicas, clock)
	h := newHarness(t, harnessOpts{replicas: 2, lanes: 2, reports: true})
	h.putBudget("org:acme", "month", "100000", "USD")
	h.putBudget("user:u-1", "day", "100000", "USD")
	h.putBudget("user:u-2", "day", "100000", "USD")
	h.putBudget("team:tight", "day", "1", "USD")
	var tb events.BudgetView
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:tight", Period: "day", Limit: "1", Unit: "USD"}, &tb))
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "100000", Unit: "USD"}, &tb))
	start := h.clock.now.Load()
	rng := rand.New(rand.NewPCG(7, 12))
	models := []string{"gpt-4o", "claude", ""}

	var denied, tight, tenantDenied, tenantUnknown int64
	perModel := map[string]int64{} // every tenant's: a report without a tenant counts all
	deny := func(tag string, n int) {
		for i := range n {
			h.clock.now.Store(h.clock.now.Load().Add(time.Duration(rng.IntN(1200)) * time.Second))
			model := models[rng.IntN(len(models))]
			meta := map[string]string{"user": "u-1"}
			if model != "" {
				meta["model"] = model
			}
			req := events.AdmitRequest{RequestID: fmt.Sprintf("%s-deny-%d", tag, i), Scopes: []string{"org:acme", "team:tight"},
				Amount: "5", TTL: "1m", Metadata: meta}
			if rng.IntN(4) == 0 {
				req.Scopes = []string{"org:acme", "team:nobudget"} // unknown_budget
			}
			var r events.AdmitReply
			if rng.IntN(3) == 0 {
				require.Nil(t, h.tcall("acme", streams.EndpointAdmit, req, &r))
				if req.Scopes[1] == "team:nobudget" {
					// Counted, not recorded: in no report.
					tenantUnknown++
					require.Equal(t, events.ReasonUnknownBudget, r.Denial.Reason)
					continue
				}
				tenantDenied++
			} else {
				var e *events.Error
				r, e = h.admit(req)
				require.Nil(t, e)
				denied++
				if req.Scopes[1] == "team:tight" {
					tight++
				}
			}
			perModel[model]++
			require.False(t, r.Admitted)
			require.NotNil(t, r.Denial)
		}
	}
	// A check-mode denial is an answer, not a denied admit.
	checkDenial := func() {
		r, e := h.admit(events.AdmitRequest{RequestID: "check-1", Scopes: []string{"team:tight"}, Amount: "5", Mode: events.ModeCheck,
			Metadata: map[string]string{"model": "gpt-4o"}})
		require.Nil(t, e)
		require.False(t, r.Admitted)
	}

	open := h.traffic(rng, 30, "a", nil)
	deny("a", 30)
	checkDenial()
	h.traffic(rng, 20, "b", open)
	deny("b", 30)
	checkDenial()
	per := h.waitDenials(uint64(denied + tenantDenied))
	for i, n := range per {
		require.NotZero(t, n, "replica %d recorded no denial: the test needs both", i)
	}
	require.NotZero(t, tenantUnknown, "the test needs a tenant's unknown-scope denial")
	h.requireReportsEqual(start)

	// Exact counts over the API.
	var byModel, byScope, tByScope events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "model"}, &byModel))
	total, models2 := denialSums(byModel)
	require.Equal(t, denied+tenantDenied, total, "by model, every denied admit counts once")
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "scope"}, &byScope))
	_, scopes := denialSums(byScope)
	require.Equal(t, denied, scopes["org:acme"], "every untenanted denial named org:acme")
	require.Equal(t, tight, scopes["team:tight"])
	require.Equal(t, denied-tight, scopes["team:nobudget"])
	require.Equal(t, tenantDenied, scopes["acme/team:tight"])
	require.Zero(t, scopes["acme/team:nobudget"], "a tenant's unknown-scope denial is not recorded")
	for m, n := range perModel {
		require.Equal(t, n, models2[m], "model %q", m)
	}

	// A tenant's report counts its own denials only, scopes as it names
	// them, and equals the replay of that tenant.
	require.Nil(t, h.tcall("acme", streams.EndpointReport, events.ReportRequest{By: "scope"}, &tByScope))
	_, tscopes := denialSums(tByScope)
	require.Equal(t, tenantDenied, tscopes["org:acme"])
	require.Equal(t, tenantDenied, tscopes["team:tight"])
	require.Zero(t, tscopes["team:nobudget"])
	require.NotContains(t, tscopes, "user:u-1")
	replay, err := report.NewReader(h.env.JS, h.env.Layout, projector.New(h.env.JS, h.env.Layout)).Report(ctxT(t), report.Filter{OneTenant: true, Tenant: "acme"}, report.ByScope)
	require.NoError(t, err)
	var want int64
	for _, g := range replay.Groups {
		want += g.Denials
		require.Equal(t, g.Denials, tscopes[string(events.Scope(g.Value).Local())], g.Value)
	}
	require.Equal(t, 2*tenantDenied, want)

	// A restarted replica reads the denial stream again from its start
	// (the counts are not in its report snapshot) and still agrees.
	require.NoError(t, h.replicas[0].Stop())
	nc := h.env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: h.env.Layout, Now: h.clock.now.Load,
		SweepInterval: -1, Reports: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Stop()) })
	h.replicas[0] = r
	h.requireReportsEqual(start)
}

// TestReport_DenialStreamMaxAge: the denial stream a replica ensures keeps
// a record 31 days by default, or the replica's DenialMaxAge; its dedupe
// window never exceeds it; it holds at most DefaultDenialMaxBytes (or the
// replica's DenialMaxBytes), the oldest records going first.
func TestReport_DenialStreamMaxAge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s, err := h.env.JS.Stream(ctxT(t), h.env.Layout.DenialStreamName())
	require.NoError(t, err)
	require.Equal(t, 31*24*time.Hour, s.CachedInfo().Config.MaxAge)
	require.Equal(t, streams.DefaultDenialMaxAge, s.CachedInfo().Config.MaxAge)
	require.Equal(t, []string{"spendgate.denial.v1.>"}, s.CachedInfo().Config.Subjects)

	require.Equal(t, int64(streams.DefaultDenialMaxBytes), s.CachedInfo().Config.MaxBytes, "the denial stream has a byte cap")
	require.Equal(t, jetstream.DiscardOld, s.CachedInfo().Config.Discard)

	s, err = streams.EnsureDenials(ctxT(t), h.env.JS, h.env.Layout, 2*time.Minute, 1<<20)
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, s.CachedInfo().Config.MaxAge)
	require.Equal(t, int64(1<<20), s.CachedInfo().Config.MaxBytes)
	require.LessOrEqual(t, s.CachedInfo().Config.Duplicates, 2*time.Minute)
	_, err = streams.EnsureDenials(ctxT(t), h.env.JS, h.env.Layout, -time.Second, 0)
	require.Error(t, err)
}

// TestReport_DenialRetryOnce: a retry of one denied request on one replica
// is recorded once (its Nats-Msg-Id is the replica, tenant and request
// id); another request id, or the same id of another tenant, is another
// denial. Without the header the stream would hold four records and the
// report count four.
func TestReport_DenialRetryOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reports: true})
	h.putBudget("team:tight", "day", "1", "USD")
	var tb events.BudgetView
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:tight", Period: "day", Limit: "1", Unit: "USD"}, &tb))
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "100000", Unit: "USD"}, &tb))
	req := events.AdmitRequest{RequestID: "same", Scopes: []string{"team:tight"}, Amount: "5"}
	for range 2 {
		r, e := h.admit(req)
		require.Nil(t, e)
		require.False(t, r.Admitted)
	}
	var r events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, req, &r))
	require.False(t, r.Admitted)
	req.RequestID = "other"
	_, e := h.admit(req)
	require.Nil(t, e)
	// Four publishes acknowledged (a duplicate is acknowledged too), three
	// records stored.
	h.waitDenials(4)
	s, err := h.env.JS.Stream(ctxT(t), h.env.Layout.DenialStreamName())
	require.NoError(t, err)
	require.Equal(t, uint64(3), s.CachedInfo().State.Msgs)
	var rep events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "scope"}, &rep))
	_, per := denialSums(rep)
	require.Equal(t, map[string]int64{"team:tight": 2, "acme/team:tight": 1}, per)
}
