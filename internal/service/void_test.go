package service_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

func (h *harness) void(rid string, scopes ...string) (events.VoidReply, *events.Error) {
	h.t.Helper()
	var r events.VoidReply
	e := h.call(streams.EndpointVoid, events.VoidRequest{RequestID: rid, Scopes: scopes}, &r)
	return r, e
}

// twoLanes returns two scopes of kind org whose balances are in different
// lanes of layout.
func twoLanes(t *testing.T, layout streams.Layout) (string, string) {
	t.Helper()
	lane := func(s string) string {
		return layout.LaneKey(events.BalanceRef{Scope: events.Scope(s), Period: events.PeriodMonth, Instance: "2026-11"})
	}
	first := "org:v0"
	for i := 1; i < 100; i++ {
		if s := fmt.Sprintf("org:v%d", i); lane(s) != lane(first) {
			return first, s
		}
	}
	t.Fatal("no two scopes in different lanes")
	return "", ""
}

// TestVoid_LanesAndScopes: on a stream of 4 lanes, with an admit over two
// scopes in different lanes (an atomic batch), a void naming either scope
// alone orders itself with the admit: before it, the admit is refused
// request_voided and reserves nothing; after it, the reservation is
// released in both balances at once.
func TestVoid_LanesAndScopes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{lanes: 4, replicas: 2})
	a, b := twoLanes(t, h.env.Layout)
	h.putBudget(a, "month", "10", "USD")
	h.putBudget(b, "month", "10", "USD")
	h.putBudget(b, "day", "10", "USD")
	req := func(rid string) events.AdmitRequest {
		return events.AdmitRequest{RequestID: rid, Scopes: []string{a, b}, Amount: "1", TTL: "1h"}
	}
	whole := func(what string) {
		t.Helper()
		for _, s := range [][2]string{{a, "month"}, {b, "month"}, {b, "day"}} {
			v := h.budget(s[0], s[1])
			require.Equal(t, "0", v.Reserved, "%s: %s per %s", what, s[0], s[1])
			require.Equal(t, int64(0), v.Open, "%s: %s per %s", what, s[0], s[1])
		}
	}

	// Void first (naming only b), admit later: nothing is reserved.
	v, e := h.void("early", b)
	require.Nil(t, e)
	require.Equal(t, events.StatusVoided, v.Status)
	require.Empty(t, v.ReservationID)
	_, e = h.admit(req("early"))
	require.NotNil(t, e)
	require.Equal(t, events.CodeRequestVoided, e.Code)
	whole("admit after void")

	// Admit first, void later naming only a: released in all three
	// balances, and the admit again is refused.
	r, e := h.admit(req("late"))
	require.Nil(t, e)
	require.True(t, r.Admitted)
	v, e = h.void("late", a)
	require.Nil(t, e)
	require.Equal(t, r.ReservationID, v.ReservationID)
	require.Equal(t, events.StatusReleased, v.ReservationStatus)
	require.Equal(t, "1", v.Reserved)
	require.Len(t, v.Balances, 3)
	whole("void after admit")
	_, e = h.admit(req("late"))
	require.Equal(t, events.CodeRequestVoided, e.Code)
	_, e = h.release(r.ReservationID)
	require.Nil(t, e, "a release of the voided reservation is a replay")
	v, e = h.void("late", a, b)
	require.Nil(t, e)
	require.True(t, v.Replayed)

	// A settled reservation's spend cannot be voided; nothing changes.
	r, _ = h.admit(req("spent"))
	_, e = h.settle(r.ReservationID, "0.5")
	require.Nil(t, e)
	last, _ := h.streamState()
	_, e = h.void("spent", a, b)
	require.NotNil(t, e)
	require.Equal(t, events.CodeAlreadySettled, e.Code)
	require.Equal(t, r.ReservationID, e.ReservationID)
	after, _ := h.streamState()
	require.Equal(t, last, after, "nothing written")

	// No budget in any scope named: nothing could reserve, nothing is
	// written.
	v, e = h.void("nobudget", "org:none")
	require.Nil(t, e)
	require.Equal(t, events.StatusVoided, v.Status)
	again, _ := h.streamState()
	require.Equal(t, after, again, "nothing written")

	// Bad input changes nothing.
	for _, bad := range []events.VoidRequest{{RequestID: "", Scopes: []string{a}}, {RequestID: "x", Scopes: nil}, {RequestID: "x", Scopes: []string{"org:*"}}} {
		var out events.VoidReply
		e := h.call(streams.EndpointVoid, bad, &out)
		require.NotNil(t, e, "%+v", bad)
	}
	final, _ := h.streamState()
	require.Equal(t, again, final, "nothing written")
}

// TestVoid_RacesAdmit: admits and voids of the same request ids race
// through two replicas, over two scopes in different lanes. Whatever the
// order, no request id ends up holding budget: each admit is refused
// request_voided or its reservation is released by the void. How it can
// fail: a tombstone that did not share a compare-and-set with the admit
// (written to a lane the admit does not write, or checked only in the
// book) lets an admit decided against a stale book land after the void,
// and its reservation stays open.
func TestVoid_RacesAdmit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{lanes: 4, replicas: 2})
	a, b := twoLanes(t, h.env.Layout)
	h.putBudget(a, "month", "1000", "USD")
	h.putBudget(b, "month", "1000", "USD")
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	var mu sync.Mutex
	admitted, refused := 0, 0
	for i := 0; i < n; i++ {
		rid := fmt.Sprintf("race-%d", i)
		scope := []string{a, b}[i%2]
		wg.Add(2)
		go func() {
			defer wg.Done()
			var r events.AdmitReply
			e, err := h.callE(streams.EndpointAdmit, events.AdmitRequest{RequestID: rid, Scopes: []string{a, b}, Amount: "1", TTL: "1h"}, &r)
			switch {
			case err != nil:
				errs <- err
			case e != nil && e.Code == events.CodeRequestVoided:
				mu.Lock()
				refused++
				mu.Unlock()
			case e != nil:
				errs <- fmt.Errorf("admit %s: %s", rid, e.Code)
			case r.Admitted:
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
		go func() {
			defer wg.Done()
			var v events.VoidReply
			e, err := h.callE(streams.EndpointVoid, events.VoidRequest{RequestID: rid, Scopes: []string{scope}}, &v)
			if err != nil || e != nil {
				errs <- fmt.Errorf("void %s: %v %v", rid, err, e)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, n, admitted+refused)
	t.Logf("admitted then voided: %d, refused request_voided: %d", admitted, refused)
	for _, s := range []string{a, b} {
		v := h.budget(s, "month")
		require.Equal(t, "0", v.Reserved, s)
		require.Equal(t, int64(0), v.Open, s)
	}
}

// TestVoid_SurvivesSnapshotRestart: a replica that starts from a snapshot
// taken after a void (and folds nothing of the stream before it) still
// refuses the voided request id.
func TestVoid_SurvivesSnapshotRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:snap", "month", "10", "USD")
	_, e := h.void("gone", "org:snap")
	require.Nil(t, e)
	r, _ := h.admit(events.AdmitRequest{RequestID: "kept", Scopes: []string{"org:snap"}, Amount: "1"})
	require.True(t, r.Admitted)
	info, err := h.replicas[0].Ledger.Snapshot(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, h.replicas[0].Stop())

	nc := h.env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	fresh, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: h.env.Layout, Now: h.clock.now.Load, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fresh.Stop()) })
	require.Equal(t, info.Seq, fresh.Ledger.SnapshotStats().Loaded, "started from the snapshot")
	require.True(t, fresh.Ledger.Voided("gone"))
	_, e = h.admit(events.AdmitRequest{RequestID: "gone", Scopes: []string{"org:snap"}, Amount: "1"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeRequestVoided, e.Code)
	require.Equal(t, "1", h.budget("org:snap", "month").Reserved)
}

// TestVoid_ForgottenAfterTheWindow: a tombstone is kept for the
// idempotency window (the retention of a closed reservation), like a
// request id; after it, the request id is new again.
func TestVoid_ForgottenAfterTheWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{ledgerOpts: []ledger.Option{ledger.WithRetention(time.Second, time.Hour)}})
	h.putBudget("org:win", "month", "100", "USD")
	_, e := h.void("old", "org:win")
	require.Nil(t, e)
	require.True(t, h.replicas[0].Ledger.Voided("old"))
	i := 0
	testenv.WaitFor(t, 20*time.Second, "the void forgotten", func() bool {
		i++
		a, _ := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("tick-%d", i), Scopes: []string{"org:win"}, Amount: "0.01", TTL: "1m"})
		require.True(t, a.Admitted)
		return !h.replicas[0].Ledger.Voided("old")
	})
	r, e := h.admit(events.AdmitRequest{RequestID: "old", Scopes: []string{"org:win"}, Amount: "1"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
}

// TestVoid_Tenants: a void on a tenant's subject voids that tenant's
// request id only: the same request id and scope in another tenant and in
// the untenanted deployment admit as before, the tenant's admit landed
// before is released, and the reply names the request id and balances as
// the tenant sent them.
func TestVoid_Tenants(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, tenant := range []string{"acme", "globex"} {
		var v events.BudgetView
		require.Nil(t, h.tcall(tenant, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:x", Period: "day", Limit: "1", Unit: "USD"}, &v))
	}
	h.putBudget("team:x", "day", "1", "USD")
	req := events.AdmitRequest{RequestID: "same", Scopes: []string{"team:x"}, Amount: "0.4", TTL: "1h"}
	var a events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, req, &a))
	require.True(t, a.Admitted)

	var v events.VoidReply
	require.Nil(t, h.tcall("acme", streams.EndpointVoid, events.VoidRequest{RequestID: "same", Scopes: []string{"team:x"}}, &v))
	require.Equal(t, "same", v.RequestID)
	require.Equal(t, a.ReservationID, v.ReservationID)
	require.Equal(t, events.StatusReleased, v.ReservationStatus)
	require.Equal(t, events.Scope("team:x"), v.Balances[0].Scope, "named as the tenant sent it")
	e := h.tcall("acme", streams.EndpointAdmit, req, &a)
	require.NotNil(t, e)
	require.Equal(t, events.CodeRequestVoided, e.Code)
	require.Equal(t, "request_id same was voided; nothing is reserved for it (use a new request id)", e.Message)

	// Another tenant and the untenanted deployment are untouched.
	require.Nil(t, h.tcall("globex", streams.EndpointAdmit, req, &a))
	require.True(t, a.Admitted)
	r, e := h.admit(req)
	require.Nil(t, e)
	require.True(t, r.Admitted)
	require.False(t, r.Replayed)
}
