package service_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

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

// foldedEverywhere waits until every replica has folded the definition
// put answered (a request may go to any replica: one that has not folded
// the put decides on the definition before it).
func (h *harness) foldedEverywhere(put events.BudgetPutReply) {
	h.t.Helper()
	ref := events.BudgetRef{Scope: events.Scope(put.Scope), Period: put.Period}
	require.Eventually(h.t, func() bool {
		for _, r := range h.replicas {
			def, ok := r.Ledger.Budget(ref)
			if !ok || def.Limit.String() != put.Limit || len(def.Thresholds) != len(put.Thresholds) {
				return false
			}
			for i, th := range def.Thresholds {
				if th.String() != put.Thresholds[i] {
					return false
				}
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond, "put folded by every replica")
}

// alertsStored waits until every replica's alert publisher has handled
// published alerts (stored or found stored), then returns the alert
// stream's alerts by id with their counts.
func (h *harness) alertsStored(published uint64) map[string]int {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		var n uint64
		for _, r := range h.replicas {
			n += r.Alerts.Published() + r.Alerts.Duplicates() + r.Alerts.Failed()
		}
		return n >= published
	}, 20*time.Second, 10*time.Millisecond, "alert publishes")
	for _, r := range h.replicas {
		require.Zero(h.t, r.Alerts.Failed()+r.Alerts.Dropped())
	}
	ctx := ctxT(h.t)
	s, err := h.env.JS.Stream(ctx, h.env.Layout.AlertStreamName())
	require.NoError(h.t, err)
	info, err := s.Info(ctx)
	require.NoError(h.t, err)
	out := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(h.t, err)
		a, err := events.DecodeAlert(m.Data)
		require.NoError(h.t, err)
		require.Equal(h.t, h.env.Layout.AlertMsgSubject(a), m.Subject)
		require.Equal(h.t, a.ID, m.Header.Get(streams.HeaderAlertID))
		out[a.ID]++
	}
	return out
}

// TestAlerts_ExactlyOnceAcrossReplicas: 20 concurrent admits of 1 under a
// limit of 10, split over two replicas, cross 50 %, 80 % and 100 % once
// each: one threshold.crossed.v1 per threshold in the stream, and one
// alert per threshold on the alert stream, though both replicas publish
// every alert (each from its own fold). The crossing is
// decided in the revision that crosses, so the compare-and-set that admits
// makes it once: deciding it apart from that write (e.g. from a replica's
// folded state after the commit) would let both replicas see "not yet
// crossed" and count 2.
func TestAlerts_ExactlyOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	put, e := h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "10", Unit: "USD", Alerts: new(true)})
	require.Nil(t, e)
	require.Equal(t, []string{"0.5", "0.8", "1"}, put.Thresholds)

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

	// Three threshold alerts, each published by both replicas, and the
	// blocking alert of the first denial on each (10 of the 20 were
	// denied), stored once each.
	alerts := maps.Clone(want)
	alerts[events.AlertMsgID(events.AlertBlocking, bal, events.Money{}, 0)] = 1
	denied := map[int]bool{}
	for i, r := range replies {
		if !r.Admitted {
			denied[i%2] = true
		}
	}
	require.Equal(t, alerts, h.alertsStored(uint64(6+len(denied))))
	var dup uint64
	for _, r := range h.replicas {
		dup += r.Alerts.Duplicates()
	}
	require.Equal(t, uint64(3+len(denied)-1), dup)

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
	t.Parallel()
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

// TestAlerts_RearmOnDefinitionChange: a limit raised from 4 to 20 re-arms
// the thresholds, so spend reaching 100 % of 20 crosses 100 % again (an
// earlier build kept the balance's crossings whatever the definition
// became, and sent nothing). A change of thresholds re-arms too; disabling
// and enabling does not. Each crossing is its own alert (the arm
// generation is in its id), stored once though two replicas publish it;
// the invariant checker (the projector's replay) accepts the second
// crossing of 1 because its arm generation is later.
func TestAlerts_RearmOnDefinitionChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	put, e := h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "4", Unit: "USD", Thresholds: []string{"0.5", "1"}})
	require.Nil(t, e)
	h.foldedEverywhere(put)
	a, e := h.admit(events.AdmitRequest{RequestID: "r1", Scopes: []string{"org:acme"}, Amount: "4"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	half, full := events.AlertID(bal, events.MustMoney("0.5")), events.AlertID(bal, events.MustMoney("1"))
	require.Equal(t, map[string]int{half: 1, full: 1}, h.crossings())

	// Disabled and enabled again: not re-armed.
	_, e = h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Disabled: new(true)})
	require.Nil(t, e)
	_, e = h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Disabled: new(false)})
	require.Nil(t, e)

	// The limit raised to 20: 4 of 20 is below both thresholds; 16 more
	// reach 100 % of 20, crossing 0.5 and 1 again.
	put, e = h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "20"})
	require.Nil(t, e)
	require.Equal(t, []string{"limit"}, put.Changed)
	h.foldedEverywhere(put)
	a, e = h.admit(events.AdmitRequest{RequestID: "r2", Scopes: []string{"org:acme"}, Amount: "16"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	require.Equal(t, map[string]int{half: 2, full: 2}, h.crossings(), "the raised limit re-arms both thresholds")

	// Nothing more crosses until the definition changes again.
	_, e = h.settle(a.ReservationID, "15")
	require.Nil(t, e)
	a, e = h.admit(events.AdmitRequest{RequestID: "r3", Scopes: []string{"org:acme"}, Amount: "1"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	require.Equal(t, map[string]int{half: 2, full: 2}, h.crossings())

	// New thresholds re-arm: 0.9 and 1 of 20, reached already (20 used),
	// are crossed by the next settle.
	put, e = h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Thresholds: []string{"0.9", "1"}})
	require.Nil(t, e)
	h.foldedEverywhere(put)
	_, e = h.settle(a.ReservationID, "1")
	require.Nil(t, e)
	ninety := events.AlertID(bal, events.MustMoney("0.9"))
	require.Equal(t, map[string]int{half: 2, full: 3, ninety: 1}, h.crossings())

	// On the alert stream: six alerts, every id different (the second and
	// third crossing of 1 carry their arm generation), each once.
	got := h.alertsStored(2 * 6)
	require.Len(t, got, 6)
	for id, n := range got {
		require.Equal(t, 1, n, id)
	}
	require.Equal(t, 1, got[full])
	require.Equal(t, 1, got[half])
}

// TestAlerts_BlockingOnFirstDenial: a budget at 98 % whose every admit is
// denied crosses no 100 % threshold, yet its owners hear: its first
// limit_reached denial in the period sends a blocking alert, once however
// many denials follow on however many replicas; a check or shadow admit
// sends none, nor does a budget with alerts off. Raising the limit re-arms
// it. (An earlier build had no blocking alert.)
func TestAlerts_BlockingOnFirstDenial(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	put, e := h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "10", Unit: "USD", Alerts: new(true)})
	require.Nil(t, e)
	h.foldedEverywhere(put)
	put, e = h.putDef(events.BudgetPutRequest{Scope: "org:quiet", Period: "month", Limit: "1", Unit: "USD"})
	require.Nil(t, e)
	h.foldedEverywhere(put)
	// A request larger than the whole limit can never fit: denied, with
	// no blocking alert (the budget is not full; with one, the arm's
	// blocking alert said "0 of 10 used" and the real blocking below was
	// never announced: the assertions on the stored alert fail so).
	o, e := h.admit(events.AdmitRequest{RequestID: "oversized", Scopes: []string{"org:acme"}, Amount: "11"})
	require.Nil(t, e)
	require.False(t, o.Admitted)
	a, e := h.admit(events.AdmitRequest{RequestID: "big", Scopes: []string{"org:acme"}, Amount: "9.8"})
	require.Nil(t, e)
	require.True(t, a.Admitted)

	c, e := h.admit(events.AdmitRequest{RequestID: "chk", Scopes: []string{"org:acme"}, Amount: "1", Mode: events.ModeCheck})
	require.Nil(t, e)
	require.False(t, c.Admitted)
	for i := range 6 {
		r, err := h.replicas[i%2].Admitter.Admit(context.Background(), events.AdmitRequest{
			RequestID: fmt.Sprintf("d%d", i), Scopes: []string{"org:acme"}, Amount: "1"})
		require.NoError(t, err)
		require.False(t, r.Admitted)
		require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
		q, err := h.replicas[i%2].Admitter.Admit(context.Background(), events.AdmitRequest{
			RequestID: fmt.Sprintf("q%d", i), Scopes: []string{"org:quiet"}, Amount: "2"})
		require.NoError(t, err)
		require.False(t, q.Admitted)
	}
	bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	blocking := events.AlertMsgID(events.AlertBlocking, bal, events.Money{}, 0)
	want := map[string]int{
		events.AlertID(bal, events.MustMoney("0.5")): 1, events.AlertID(bal, events.MustMoney("0.8")): 1, blocking: 1,
	}
	// Both replicas publish the two crossings; each publishes the
	// blocking alert of its first denial.
	require.Equal(t, want, h.alertsStored(2*2+2))
	s, err := h.env.JS.Stream(ctxT(t), h.env.Layout.AlertStreamName())
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(ctxT(t), "spendgate.alert.v1.org.acme.month.2026-11._.blocking.0")
	require.NoError(t, err)
	al, err := events.DecodeAlert(m.Data)
	require.NoError(t, err)
	require.Equal(t, events.AlertBlocking, al.Kind)
	require.Equal(t, "9.8", al.Used.String())
	require.Equal(t, "10", al.Limit.String())
	require.Equal(t, "1", al.Requested)
	require.Equal(t, "org:acme per month (2026-11) is blocking admits - 9.8 of 10 USD used, denied a request for 1", al.Summary())

	// The limit raised to 10.5 re-arms: the next denial blocks anew.
	put, e = h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "10.5"})
	require.Nil(t, e)
	h.foldedEverywhere(put)
	r, e := h.admit(events.AdmitRequest{RequestID: "after", Scopes: []string{"org:acme"}, Amount: "1"})
	require.Nil(t, e)
	require.False(t, r.Admitted)
	got := h.alertsStored(2*2 + 2 + 1)
	require.Len(t, got, 4)
	arm := h.replicas[0].Ledger
	def, ok := arm.Budget(events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth})
	require.True(t, ok)
	require.NotZero(t, def.Arm)
	require.Equal(t, 1, got[events.AlertMsgID(events.AlertBlocking, bal, events.Money{}, def.Arm)])
}

// The replica's recent denials (the dashboard's list) say when the
// denying budget resets, as the denial did; the denial record on the
// stream leaves it out (its readers decode it strictly). How it can fail:
// the ring kept the record's copy, without it.
func TestService_RecentDenialsSayWhenTheBudgetResets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1", Unit: "USD"})
	require.Nil(t, e)
	a, e := h.admit(events.AdmitRequest{RequestID: "fill", Scopes: []string{"org:acme"}, Amount: "0.8"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	d, e := h.admit(events.AdmitRequest{RequestID: "over", Scopes: []string{"org:acme"}, Amount: "0.5"})
	require.Nil(t, e)
	require.False(t, d.Admitted)
	require.NotNil(t, d.Denial.ResetsAt)
	got := h.replicas[0].Service.RecentDenials()
	require.Len(t, got, 1)
	require.NotNil(t, got[0].Denial.ResetsAt)
	require.True(t, d.Denial.ResetsAt.Equal(*got[0].Denial.ResetsAt))
}
