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
	"github.com/spendgate/spendgate/streams"
)

// TestReport_ShadowDecisions: on two replicas, shadow and check admits
// (some that would be admitted, some denied for the limit or an unknown
// budget, with metadata) mixed with real traffic over hours are reported
// apart from the spend: by scope and by a metadata key, per mode, with the
// exact counts, amounts and reasons sent; a real denial is still a denial
// and no shadow decision is one. Both replicas' aggregates, the endpoint
// and the replay agree (requireReportsEqual compares Shadow), and so does
// a replica restarted afterwards (it folds the denial stream again). Before
// the records, the report had no shadow section at all: the decisions were
// a metric only, gone with the replica.
func TestReport_ShadowDecisions(t *testing.T) {
	t.Parallel() // its own harness (server, replicas, clock)
	h := newHarness(t, harnessOpts{replicas: 2, lanes: 2, reports: true})
	h.putBudget("org:acme", "month", "100000", "USD")
	h.putBudget("user:u-1", "day", "100000", "USD")
	h.putBudget("user:u-2", "day", "100000", "USD")
	h.putBudget("team:tight", "day", "1", "USD")
	start := h.clock.now.Load()
	rng := rand.New(rand.NewPCG(3, 9))
	open := h.traffic(rng, 20, "a", nil)

	type want struct{ admitted, denied int64 }
	perMode := map[string]*want{events.ModeShadow: {}, events.ModeCheck: {}}
	var tightDenied, nobudget, featureX int64
	n := 0
	decide := func(k int) {
		for range k {
			n++
			h.clock.now.Store(h.clock.now.Load().Add(time.Duration(rng.IntN(900)) * time.Second))
			mode := []string{events.ModeShadow, events.ModeCheck}[rng.IntN(2)]
			meta := map[string]string{"model": "gpt-4o"}
			if rng.IntN(2) == 0 {
				meta["feature"] = "x"
			}
			var scopes []string
			switch rng.IntN(3) {
			case 0:
				scopes = []string{"org:acme", "user:u-1"} // admitted
			case 1:
				scopes = []string{"org:acme", "team:tight"} // limit_reached
			default:
				scopes = []string{"team:nobudget"} // unknown_budget
			}
			r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("sh-%d", n), Scopes: scopes, Amount: "2", Mode: mode, Metadata: meta})
			require.Nil(t, e)
			require.Equal(t, mode, r.Mode)
			if r.Admitted {
				perMode[mode].admitted++
			} else {
				perMode[mode].denied++
				switch r.Denial.Reason {
				case events.ReasonLimitReached:
					tightDenied++
				case events.ReasonUnknownBudget:
					nobudget++
				default:
					t.Fatalf("unexpected reason %s", r.Denial.Reason)
				}
			}
			if meta["feature"] == "x" {
				featureX++
			}
		}
	}
	decide(30)
	h.traffic(rng, 20, "b", open)
	decide(30)
	// One real denial: a denial, not a shadow decision.
	r, e := h.admit(events.AdmitRequest{RequestID: "real-denied", Scopes: []string{"team:tight"}, Amount: "5"})
	require.Nil(t, e)
	require.False(t, r.Admitted)

	require.Eventually(t, func() bool {
		var checks uint64
		for _, r := range h.replicas {
			checks += r.Denials.RecordedChecks()
		}
		return checks == uint64(n)
	}, 30*time.Second, 10*time.Millisecond, "check records published")
	for i, r := range h.replicas {
		require.NotZero(t, r.Denials.RecordedChecks(), "replica %d recorded no decision: the test needs both", i)
	}
	h.requireReportsEqual(start)

	var byScope, byFeature events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "scope", Shadow: true}, &byScope))
	var plain events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "scope"}, &plain))
	require.Empty(t, plain.Shadow, "only when asked")
	shadow := map[string]events.ShadowGroup{}
	for _, g := range byScope.Shadow {
		require.Equal(t, "USD", g.Unit)
		shadow[g.Value+"/"+g.Mode] = g
	}
	for mode, w := range perMode {
		acme := shadow["org:acme/"+mode]
		require.Equal(t, w.admitted, acme.Admitted, mode)
		require.Equal(t, fmt.Sprint(2*w.admitted), acme.Amount, mode)
	}
	var tight, unknown, limitReasons int64
	for _, mode := range []string{events.ModeShadow, events.ModeCheck} {
		tight += shadow["team:tight/"+mode].Denied
		unknown += shadow["team:nobudget/"+mode].Reasons[events.ReasonUnknownBudget]
		limitReasons += shadow["org:acme/"+mode].Reasons[events.ReasonLimitReached]
	}
	require.Equal(t, tightDenied, tight)
	require.Equal(t, tightDenied, limitReasons, "by scope a decision counts in every scope it named")
	require.Equal(t, nobudget, unknown)
	for _, g := range byScope.Groups {
		if g.Value == "team:tight" {
			require.Equal(t, int64(1), g.Denials, "the real denial only")
		}
	}

	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "feature", Shadow: true}, &byFeature))
	var x, none int64
	for _, g := range byFeature.Shadow {
		switch g.Value {
		case "x":
			x += g.Admitted + g.Denied
		case "":
			none += g.Admitted + g.Denied
		}
	}
	require.Equal(t, featureX, x)
	require.Equal(t, int64(n)-featureX, none)

	// A restarted replica folds the denial stream again and agrees.
	require.NoError(t, h.replicas[0].Stop())
	nc := h.env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	rr, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: h.env.Layout, Now: h.clock.now.Load, SweepInterval: -1, Reports: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rr.Stop()) })
	h.replicas[0] = rr
	h.requireReportsEqual(start)
}
