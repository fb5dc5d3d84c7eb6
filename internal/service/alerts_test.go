package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// crossings reads every lane revision of the stream and returns the
// threshold crossings, keyed by alert id, with their counts.
func (h *harness) crossings() map[string]int {
	h.t.Helper()
	ctx := ctxT(h.t)
	s, err := h.env.JS.Stream(ctx, h.env.Layout.StreamName())
	require.NoError(h.t, err)
	info, err := s.Info(ctx)
	require.NoError(h.t, err)
	out := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		if key, ok := h.env.Layout.KeyOf(m.Subject); !ok || !streams.IsLaneKey(key) {
			continue
		}
		rev, err := events.DecodeLaneRevision(m.Data)
		require.NoError(h.t, err)
		for _, b := range rev.Balances {
			for _, e := range b.Events {
				if c, ok := e.(events.ThresholdCrossed); ok {
					out[events.AlertID(c.Balance, c.Threshold)]++
				}
			}
		}
	}
	return out
}

// TestAlerts_ExactlyOnceAcrossReplicas: 20 concurrent admits of 1 under a
// limit of 10, split over two replicas, cross 50 %, 80 % and 100 % once
// each: one threshold.crossed.v1 per threshold in the stream, and one NATS
// alert per threshold on spendgate.alert.v1.<kind>.<id>. The crossing is
// decided in the revision that crosses, so the compare-and-set that admits
// makes it once: deciding it apart from that write (e.g. from a replica's
// folded state after the commit) would let both replicas see "not yet
// crossed" and count 2.
func TestAlerts_ExactlyOnceAcrossReplicas(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2})
	put, e := h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "10", Unit: "USD", Alerts: new(true)})
	require.Nil(t, e)
	require.Equal(t, []string{"0.5", "0.8", "1"}, put.Thresholds)

	got := make(chan *nats.Msg, 64)
	sub, err := h.nc.ChanSubscribe("spendgate.alert.v1.>", got)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, h.nc.Flush())

	// A check crosses nothing.
	c, e := h.admit(events.AdmitRequest{RequestID: "chk", Scopes: []string{"org:acme"}, Amount: "9", Mode: events.ModeCheck})
	require.Nil(t, e)
	require.True(t, c.Admitted)

	var wg sync.WaitGroup
	replies := make([]events.AdmitReply, 20)
	errs := make([]error, 20)
	for i := range replies {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			replies[i], errs[i] = h.replicas[i%2].Admitter.Admit(context.Background(), events.AdmitRequest{
				RequestID: fmt.Sprintf("a%d", i), Scopes: []string{"org:acme"}, Amount: "1"})
		}(i)
	}
	wg.Wait()
	admitted := 0
	for i := range replies {
		require.NoError(t, errs[i])
		if replies[i].Admitted {
			admitted++
		}
	}
	require.Equal(t, 10, admitted)

	bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	want := map[string]int{}
	for _, th := range []string{"0.5", "0.8", "1"} {
		want[events.AlertID(bal, events.MustMoney(th))] = 1
	}
	require.Equal(t, want, h.crossings())

	alerts := map[string]int{}
	deadline := time.After(10 * time.Second)
	for len(alerts) < 3 {
		select {
		case m := <-got:
			require.Equal(t, "spendgate.alert.v1.org.acme", m.Subject)
			ev, err := events.DecodeEvent(m.Data)
			require.NoError(t, err)
			c := ev.(events.ThresholdCrossed)
			id := m.Header.Get(streams.HeaderAlertID)
			require.Equal(t, events.AlertID(c.Balance, c.Threshold), id)
			alerts[id]++
		case <-deadline:
			t.Fatalf("alerts received: %v", alerts)
		}
	}
	require.Equal(t, want, alerts)
	// Nothing more is queued for the subscriber.
	require.NoError(t, h.nc.Flush())
	require.Len(t, got, 0)

	// Settling below the reservation and admitting again crosses nothing
	// new: each threshold once per period instance.
	for _, r := range replies {
		if r.Admitted {
			_, e := h.settle(r.ReservationID, "0.5")
			require.Nil(t, e)
		}
	}
	a, e := h.admit(events.AdmitRequest{RequestID: "again", Scopes: []string{"org:acme"}, Amount: "5"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	require.Equal(t, want, h.crossings())

	// The next month crosses afresh.
	h.clock.now.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	a, e = h.admit(events.AdmitRequest{RequestID: "dec", Scopes: []string{"org:acme"}, Amount: "6"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	dec := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"}
	want[events.AlertID(dec, events.MustMoney("0.5"))] = 1
	require.Equal(t, want, h.crossings())
}

// TestAlerts_SettleAboveReservation: a settle whose actual exceeds the
// reservation can cross a threshold; bad thresholds are refused.
func TestAlerts_SettleAboveReservation(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "10", Unit: "USD", Thresholds: []string{"0.9"}})
	require.Nil(t, e)
	a, e := h.admit(events.AdmitRequest{RequestID: "s1", Scopes: []string{"org:acme"}, Amount: "1"})
	require.Nil(t, e)
	_, e = h.settle(a.ReservationID, "9.5")
	require.Nil(t, e)
	bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	require.Equal(t, map[string]int{events.AlertID(bal, events.MustMoney("0.9")): 1}, h.crossings())

	for _, th := range [][]string{{"0"}, {"1.5"}, {"0.5", "0.5"}, {"x"}} {
		_, e := h.putDef(events.BudgetPutRequest{Scope: "org:b", Period: "month", Limit: "10", Unit: "USD", Thresholds: th})
		require.NotNil(t, e, "%v", th)
		require.Equal(t, events.CodeInvalidAmount, e.Code)
	}
}
