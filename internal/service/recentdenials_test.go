package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/testenv"
)

// TestRecentDenials_EveryReplicaAndAfterARestart: the dashboard's recent
// denials are every replica's (read from the denial stream as the report
// reads it), not the half a replica denied itself; a replica started
// afterwards lists them too (the stream is read from its start: they
// outlive a restart), with when the budget resets (the records leave it
// out; the dashboard has it from the budget's calendar). Forged records
// are not listed: TestReport_DenialRecordsSigned. How it can fail: with each replica's
// ring in memory, each lists only the denials it answered, and a new
// replica none.
func TestRecentDenials_EveryReplicaAndAfterARestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2, reports: true})
	h.putBudget("org:acme", "month", "1", "USD")
	a, e := h.admit(events.AdmitRequest{RequestID: "fill", Scopes: []string{"org:acme"}, Amount: "0.9", TTL: "1h"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("deny-%d", i)
		ids = append(ids, id)
		r, e := h.admit(events.AdmitRequest{RequestID: id, Scopes: []string{"org:acme"}, Amount: "0.5"})
		require.Nil(t, e)
		require.False(t, r.Admitted)
	}
	per := h.waitDenials(20)
	require.Positive(t, per[0], "both replicas answered some (20 requests over a queue group)")
	require.Positive(t, per[1])
	listed := func(r *replica.Replica) []string {
		var out []string
		for _, d := range r.RecentDenials() {
			out = append(out, d.RequestID)
		}
		slices.Sort(out)
		return out
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	for i, r := range h.replicas {
		testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("replica %d lists every replica's denials", i), func() bool {
			return slices.Equal(listed(r), want)
		})
	}

	// A replica started now (as after a restart) lists them as well, and
	// its dashboard says when the budget resets.
	nc := h.env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r3, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: h.env.Layout, Now: h.clock.now.Load, SweepInterval: -1,
		Reports: true, ServiceConn: h.env.Connect(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r3.Stop()) })
	testenv.WaitFor(t, 30*time.Second, "the new replica lists the denials", func() bool { return slices.Equal(listed(r3), want) })
	d, err := dashboard.New(dashboard.Config{Book: r3.Ledger, Series: r3.Series, Denials: r3.RecentDenials})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+dashboard.Path+"api/denials", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var dr dashboard.DenialsReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&dr))
	require.Len(t, dr.Denials, 20)
	wantReset := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, x := range dr.Denials {
		require.NotNil(t, x.Denial.ResetsAt, x.RequestID)
		require.True(t, wantReset.Equal(*x.Denial.ResetsAt), "%s: %s", x.RequestID, x.Denial.ResetsAt)
	}
}
