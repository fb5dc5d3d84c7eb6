package service_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/streams"
)

// openedRequests reads every lane revision of the stream and returns the
// request ids of all ReservationOpened events, with their counts.
func (h *harness) openedRequests() map[string]int {
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
			continue // a deleted message
		}
		if key, ok := h.env.Layout.KeyOf(m.Subject); !ok || !streams.IsLaneKey(key) {
			continue
		}
		rev, err := events.DecodeLaneRevision(m.Data)
		require.NoError(h.t, err)
		for _, b := range rev.Balances {
			for _, e := range b.Events {
				if o, ok := e.(events.ReservationOpened); ok {
					out[o.RequestID]++
				}
			}
		}
	}
	return out
}

func (h *harness) putDef(req events.BudgetPutRequest) (events.BudgetPutReply, *events.Error) {
	h.t.Helper()
	var v events.BudgetPutReply
	e := h.call(streams.EndpointBudgetPut, req, &v)
	return v, e
}

// TestAdmit_CheckAndShadow: a check and a shadow admit answer what an admit
// would do, with every budget and what would remain, and change nothing: the
// stream's last sequence and the balances stay as they were, and the
// request id is not remembered.
func TestAdmit_CheckAndShadow(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.BuildInfo{})
	h := newHarness(t, harnessOpts{metrics: m})
	h.putBudget("org:acme", "month", "10", "USD")
	h.putBudget("user:u-1", "day", "5", "requests")
	real, e := h.admit(events.AdmitRequest{RequestID: "real-1", Scopes: []string{"org:acme"}, Amount: "1"})
	require.Nil(t, e)
	require.True(t, real.Admitted)

	seq, msgs := h.streamState()
	before := h.budget("org:acme", "month")

	for _, mode := range []string{events.ModeCheck, events.ModeShadow} {
		r, e := h.admit(events.AdmitRequest{RequestID: "c-" + mode, Scopes: []string{"org:acme", "user:u-1"}, Amount: "2.5", Mode: mode})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		require.Equal(t, mode, r.Mode)
		require.Empty(t, r.ReservationID)
		require.Nil(t, r.ExpiresAt)
		require.Empty(t, r.Status)
		require.Equal(t, []events.BudgetUse{
			{Scope: "org:acme", Period: "month", Instance: "2026-11", Unit: "USD", Limit: "10", Amount: "2.5", Spent: "0", Reserved: "3.5", Available: "6.5"},
			{Scope: "user:u-1", Period: "day", Instance: "2026-11-30", Unit: "requests", Limit: "5", Amount: "1", Spent: "0", Reserved: "1", Available: "4"},
		}, r.Budgets)

		// Too much: denied as an admit would be, naming the budget.
		d, e := h.admit(events.AdmitRequest{RequestID: "d-" + mode, Scopes: []string{"org:acme"}, Amount: "9.5", Mode: mode})
		require.Nil(t, e)
		require.False(t, d.Admitted)
		require.Equal(t, mode, d.Mode)
		require.Equal(t, events.ReasonLimitReached, d.Denial.Reason)
		require.Equal(t, events.Scope("org:acme"), d.Denial.Scope)
	}
	// A check of an id already admitted answers as its retry would.
	r, e := h.admit(events.AdmitRequest{RequestID: "real-1", Scopes: []string{"org:acme"}, Amount: "1", Mode: events.ModeCheck})
	require.Nil(t, e)
	require.True(t, r.Replayed)
	require.Equal(t, real.ReservationID, r.ReservationID)

	s2, m2 := h.streamState()
	require.Equal(t, seq, s2, "a check or shadow admit wrote to the stream")
	require.Equal(t, msgs, m2)
	require.Equal(t, before, h.budget("org:acme", "month"))

	// The check's request id was not remembered: a real admit with it
	// reserves, and is not a replay.
	r, e = h.admit(events.AdmitRequest{RequestID: "c-check", Scopes: []string{"org:acme"}, Amount: "2"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	require.False(t, r.Replayed)
	require.Empty(t, r.Mode)
	require.NotEmpty(t, r.ReservationID)
	require.Equal(t, "7", r.Budgets[0].Available)

	// Counted apart.
	require.EqualValues(t, 1, testutil.ToFloat64(m.AdmitChecks.WithLabelValues(events.ModeShadow, metrics.ResultAdmitted, "")))
	require.EqualValues(t, 1, testutil.ToFloat64(m.AdmitChecks.WithLabelValues(events.ModeShadow, metrics.ResultDenied, string(events.ReasonLimitReached))))
	require.EqualValues(t, 2, testutil.ToFloat64(m.AdmitChecks.WithLabelValues(events.ModeCheck, metrics.ResultAdmitted, ""))) // incl. the replay
	require.EqualValues(t, 2, testutil.ToFloat64(m.Admits.WithLabelValues(metrics.ResultAdmitted, "")))

	// A bad mode is refused.
	_, e = h.admit(events.AdmitRequest{RequestID: "x", Scopes: []string{"org:acme"}, Amount: "1", Mode: "dry"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidMode, e.Code)
}

// TestAdmit_CheckConcurrentWithAdmits: checks and shadow admits racing real
// admits on one budget never reserve. 20 real admits of 1 against a limit
// of 10 admit exactly 10, and the stream holds exactly those 10 openings
// and none for a check or shadow id. It fails if a check wrote anything (an
// opening with its id, or more than 10) or if a check's decision took part
// in the group's balance (fewer than 10 admitted).
func TestAdmit_CheckConcurrentWithAdmits(t *testing.T) {
	t.Parallel()
	// Two replicas share the requests (one queue group), so checks on one
	// race admits on the other as well as in the same commit group.
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("org:acme", "month", "10", "USD")
	const n = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, errs := 0, []string{}
	for i := 0; i < n; i++ {
		for _, mode := range []string{events.ModeAdmit, events.ModeCheck, events.ModeShadow} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var r events.AdmitReply
				e, err := h.callE(streams.EndpointAdmit, events.AdmitRequest{
					RequestID: fmt.Sprintf("%s-%d", mode, i), Scopes: []string{"org:acme"}, Amount: "1", Mode: mode}, &r)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err.Error())
				case e != nil:
					errs = append(errs, e.Error())
				case mode == events.ModeAdmit && r.Admitted:
					admitted++
				}
			}()
		}
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Equal(t, 10, admitted)
	opened := h.openedRequests()
	require.Len(t, opened, 10)
	for id, c := range opened {
		require.True(t, strings.HasPrefix(id, events.ModeAdmit+"-"), id)
		require.Equal(t, 1, c)
	}
	v := h.budget("org:acme", "month")
	require.Equal(t, "10", v.Reserved)
	require.EqualValues(t, 10, v.Open)
}

// TestAdmit_ReplyListsBudgets: an admission lists every budget it applied
// to, with what remains after it; a denial names the first that blocked.
func TestAdmit_ReplyListsBudgets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "10", "USD")
	h.putBudget("org:acme", "day", "3", "USD")
	h.putBudget("user:u-1", "lifetime", "2", "requests")
	r, e := h.admit(events.AdmitRequest{RequestID: "a", Scopes: []string{"user:u-1", "org:acme"}, Amount: "1.25"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	require.Equal(t, []events.BudgetUse{
		{Scope: "org:acme", Period: "month", Instance: "2026-11", Unit: "USD", Limit: "10", Amount: "1.25", Spent: "0", Reserved: "1.25", Available: "8.75"},
		{Scope: "org:acme", Period: "day", Instance: "2026-11-30", Unit: "USD", Limit: "3", Amount: "1.25", Spent: "0", Reserved: "1.25", Available: "1.75"},
		{Scope: "user:u-1", Period: "lifetime", Instance: "all", Unit: "requests", Limit: "2", Amount: "1", Spent: "0", Reserved: "1", Available: "1"},
	}, r.Budgets)
	_, e = h.settle(r.ReservationID, "1")
	require.Nil(t, e)
	d, e := h.admit(events.AdmitRequest{RequestID: "b", Scopes: []string{"org:acme", "user:u-1"}, Amount: "2.5"})
	require.Nil(t, e)
	require.False(t, d.Admitted)
	require.Empty(t, d.Budgets)
	require.Equal(t, events.ReasonLimitReached, d.Denial.Reason)
	require.Equal(t, events.PeriodDay, d.Denial.Period)
	// A replay carries no budgets (the numbers have moved on since).
	rp, e := h.admit(events.AdmitRequest{RequestID: "a", Scopes: []string{"user:u-1", "org:acme"}, Amount: "1.25"})
	require.Nil(t, e)
	require.True(t, rp.Replayed)
	require.Empty(t, rp.Budgets)
}

// TestBudgetPut_Lifecycle: a put says what it changed; a unit change is
// refused, with or without spend (it would race a concurrent admit); a zero limit needs allow_zero; errors about
// the limit say "limit"; a budget can be disabled and enabled again.
func TestBudgetPut_Lifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	put := func(req events.BudgetPutRequest) events.BudgetPutReply {
		t.Helper()
		v, e := h.putDef(req)
		require.Nil(t, e)
		return v
	}
	base := events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "100", Unit: "USD"}
	v := put(base)
	require.True(t, v.Created)
	require.Equal(t, []string{}, v.Changed)
	require.Nil(t, v.Previous)

	seq, _ := h.streamState()
	v = put(base)
	require.False(t, v.Created)
	require.Equal(t, []string{}, v.Changed)
	s2, _ := h.streamState()
	require.Equal(t, seq, s2, "the same definition again writes nothing")

	lower := base
	lower.Limit = "5"
	v = put(lower)
	require.Equal(t, []string{"limit"}, v.Changed)
	require.Equal(t, &events.BudgetDefinition{Limit: "100", Unit: "USD"}, v.Previous)
	require.Equal(t, "5", v.Limit)

	// A unit change is refused even with nothing spent or reserved: an
	// admit racing it would be counted in the new unit. Nothing changes.
	eur := lower
	eur.Unit = "EUR"
	seq, _ = h.streamState()
	_, e := h.putDef(eur)
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnitChangeRefused, e.Code)
	s2, _ = h.streamState()
	require.Equal(t, seq, s2)

	// With spend, it is refused too.
	r, e := h.admit(events.AdmitRequest{RequestID: "a", Scopes: []string{"org:acme"}, Amount: "0.16"})
	require.Nil(t, e)
	_, e = h.settle(r.ReservationID, "0.16")
	require.Nil(t, e)
	seq, _ = h.streamState()
	_, e = h.putDef(eur)
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnitChangeRefused, e.Code)
	s2, _ = h.streamState()
	require.Equal(t, seq, s2)
	require.Equal(t, "USD", h.budget("org:acme", "month").Unit)

	// Limits: errors name the limit; zero only with allow_zero.
	for _, bad := range []string{"-1", "", "1e3", "abc"} {
		req := base
		req.Limit = bad
		req.Replace = bad == "" // without replace, no limit keeps the limit
		_, e := h.putDef(req)
		require.NotNil(t, e, bad)
		require.Equal(t, events.CodeInvalidAmount, e.Code)
		require.True(t, strings.HasPrefix(e.Message, "limit"), e.Message)
		require.NotContains(t, e.Message, "amount")
	}
	zero := base
	zero.Limit = "0"
	_, e = h.putDef(zero)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidAmount, e.Code)
	require.Contains(t, e.Message, "allow_zero")
	s3, _ := h.streamState()
	require.Equal(t, seq, s3)
	zero.AllowZero = true
	v = put(zero)
	require.Equal(t, "0", v.Limit)
	d, e := h.admit(events.AdmitRequest{RequestID: "z", Scopes: []string{"org:acme"}, Amount: "0.01"})
	require.Nil(t, e)
	require.Equal(t, events.ReasonLimitReached, d.Denial.Reason)
	put(base)

	// Disable: every admit (and check) is denied budget_disabled.
	pending, e := h.admit(events.AdmitRequest{RequestID: "before-off", Scopes: []string{"org:acme"}, Amount: "0.5"})
	require.Nil(t, e)
	require.True(t, pending.Admitted)
	off := base
	off.Disabled = new(true)
	v = put(off)
	require.Equal(t, []string{"disabled"}, v.Changed)
	require.True(t, v.Disabled)
	for _, mode := range []string{"", events.ModeCheck} {
		d, e = h.admit(events.AdmitRequest{RequestID: "off", Scopes: []string{"org:acme"}, Amount: "0.01", Mode: mode})
		require.Nil(t, e)
		require.False(t, d.Admitted)
		require.Equal(t, events.ReasonBudgetDisabled, d.Denial.Reason)
		require.Equal(t, events.Scope("org:acme"), d.Denial.Scope)
	}
	// Settling a reservation opened before the disable still works.
	c, e := h.settle(pending.ReservationID, "0.25")
	require.Nil(t, e)
	require.Equal(t, events.StatusSettled, c.Status)
	on := base
	on.Disabled = new(false)
	v = put(on)
	require.Equal(t, []string{"disabled"}, v.Changed)
	require.Equal(t, &events.BudgetDefinition{Limit: "100", Unit: "USD", Disabled: true}, v.Previous)
	r, e = h.admit(events.AdmitRequest{RequestID: "on", Scopes: []string{"org:acme"}, Amount: "0.01"})
	require.Nil(t, e)
	require.True(t, r.Admitted)

	// A bad time zone.
	bad := base
	bad.TZ = new("Mars/Olympus")
	_, e = h.putDef(bad)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidTZ, e.Code)
}

// TestCalendar_RolloverUTC: with a controlled clock, a day budget rolls
// over at midnight UTC and a week budget on Monday 00:00 UTC; a reservation
// opened before midnight settles into its own period.
func TestCalendar_RolloverUTC(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "day", "1", "USD")
	h.putBudget("org:acme", "week", "5", "USD")
	h.clock.now.Store(time.Date(2026, 11, 29, 23, 59, 59, 999_999_999, time.UTC)) // Sunday
	r, e := h.admit(events.AdmitRequest{RequestID: "late", Scopes: []string{"org:acme"}, Amount: "1", TTL: "1h"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	require.Equal(t, []events.BalanceRef{
		{Scope: "org:acme", Period: "week", Instance: "2026-W48"},
		{Scope: "org:acme", Period: "day", Instance: "2026-11-29"},
	}, r.Balances)
	d, e := h.admit(events.AdmitRequest{RequestID: "late2", Scopes: []string{"org:acme"}, Amount: "1"})
	require.Nil(t, e)
	require.False(t, d.Admitted)

	h.clock.now.Store(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)) // Monday
	r2, e := h.admit(events.AdmitRequest{RequestID: "early", Scopes: []string{"org:acme"}, Amount: "1"})
	require.Nil(t, e)
	require.True(t, r2.Admitted)
	require.Equal(t, "2026-W49", r2.Balances[0].Instance)
	require.Equal(t, "2026-11-30", r2.Balances[1].Instance)

	// The reservation opened on Sunday settles into Sunday and week 48.
	c, e := h.settle(r.ReservationID, "0.4")
	require.Nil(t, e)
	require.Equal(t, r.Balances, c.Balances)
	l := h.replicas[0].Ledger
	require.Equal(t, "0.4", l.Balance(events.BalanceRef{Scope: "org:acme", Period: "day", Instance: "2026-11-29"}).Spent.String())
	require.Equal(t, "0.4", l.Balance(events.BalanceRef{Scope: "org:acme", Period: "week", Instance: "2026-W48"}).Spent.String())
	today := h.budget("org:acme", "day")
	require.Equal(t, "2026-11-30", today.Instance)
	require.Equal(t, "0", today.Spent)
	require.Equal(t, "1", today.Reserved)
}

// TestCalendar_NamedZoneAcrossDST: a day budget in Europe/Berlin rolls over
// at local midnight, which is 22:00 UTC in summer time and 23:00 UTC after
// the change of 25 October 2026 (a day of 25 hours); its instances are
// local dates.
func TestCalendar_NamedZoneAcrossDST(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	v, e := h.putDef(events.BudgetPutRequest{Scope: "org:berlin", Period: "day", Limit: "1", Unit: "requests", TZ: new("Europe/Berlin")})
	require.Nil(t, e)
	require.Equal(t, "Europe/Berlin", v.TZ)
	n := 0
	admitAt := func(at time.Time) events.AdmitReply {
		t.Helper()
		h.clock.now.Store(at)
		n++
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("r%d", n), Scopes: []string{"org:berlin"}, Amount: "1"})
		require.Nil(t, e)
		return r
	}
	steps := []struct {
		at       time.Time
		admitted bool
		instance string
	}{
		{time.Date(2026, 10, 24, 21, 59, 59, 0, time.UTC), true, "2026-10-24"},  // 23:59:59 CEST
		{time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC), true, "2026-10-25"},    // 00:00 local, a new day
		{time.Date(2026, 10, 25, 21, 59, 59, 0, time.UTC), false, "2026-10-25"}, // 22:59:59 CET: same local day (25 hours long)
		{time.Date(2026, 10, 25, 22, 59, 59, 0, time.UTC), false, "2026-10-25"}, // 23:59:59 CET
		{time.Date(2026, 10, 25, 23, 0, 0, 0, time.UTC), true, "2026-10-26"},    // local midnight after the change
	}
	var first events.AdmitReply
	for i, s := range steps {
		r := admitAt(s.at)
		if i == 0 {
			first = r
		}
		require.Equal(t, s.admitted, r.Admitted, s.at)
		if r.Admitted {
			require.Equal(t, s.instance, r.Balances[0].Instance, s.at)
		} else {
			require.Equal(t, s.instance, r.Denial.Instance, s.at)
		}
	}
	require.Equal(t, "2026-10-26", h.budget("org:berlin", "day").Instance)

	// The reservation opened at 23:59:59 local on 24 October settles into
	// its own local day, two days later.
	c, e := h.settle(first.ReservationID, "1")
	require.Nil(t, e)
	require.Equal(t, "2026-10-24", c.Balances[0].Instance)
	require.Equal(t, "1", h.replicas[0].Ledger.Balance(events.BalanceRef{Scope: "org:berlin", Period: "day", Instance: "2026-10-24"}).Spent.String())
}

// TestFixedSlot_SeedBound is seed 000's bound: a budget of 10 with a fixed
// slot of 1 and calls that cost 6.75. 20 concurrent admits: exactly 10 are
// admitted (each reserving 1, whatever it asked), and when they settle at
// 6.75 the overshoot is exactly 10 x 5.75, recorded as overrun. It fails if
// the slot is not what is reserved (then 1 admit of 10, or none), or if an
// overrun is clamped.
func TestFixedSlot_SeedBound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	v, e := h.putDef(events.BudgetPutRequest{Scope: "org:seed", Period: "month", Limit: "10", Unit: "USD", FixedSlot: new("1")})
	require.Nil(t, e)
	require.Equal(t, "1", v.FixedSlot)
	require.Equal(t, "10", v.MaxInFlight)
	require.Equal(t, "10 x (cost of one call - 1)", v.OvershootBound)

	const n = 20
	replies := make([]events.AdmitReply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			e, err := h.callE(streams.EndpointAdmit, events.AdmitRequest{
				RequestID: fmt.Sprintf("seed-%d", i), Scopes: []string{"org:seed"}, Amount: "6.75", TTL: "10m"}, &replies[i])
			if err == nil && e != nil {
				err = e
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	var admitted []events.AdmitReply
	for i, r := range replies {
		require.NoError(t, errs[i])
		if r.Admitted {
			require.Equal(t, "1", r.Budgets[0].Amount)
			admitted = append(admitted, r)
		} else {
			require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
			require.Equal(t, "1", r.Denial.Requested)
		}
	}
	require.Len(t, admitted, 10)
	for _, r := range admitted {
		c, e := h.settle(r.ReservationID, "6.75")
		require.Nil(t, e)
		require.Equal(t, "1", c.Reserved)
		require.Equal(t, "5.75", c.Overrun)
	}
	got := h.budget("org:seed", "month")
	require.Equal(t, events.MoneyFromInt(10).Mul(events.MustMoney("5.75")).String(), got.Overrun) // 57.5
	require.Equal(t, "67.5", got.Spent)
	require.Equal(t, "0", got.Reserved)
	require.Equal(t, "-57.5", got.Available)

	// A fixed slot on a requests budget, or of zero, is refused.
	_, e = h.putDef(events.BudgetPutRequest{Scope: "org:seed", Period: "day", Limit: "10", Unit: "requests", FixedSlot: new("1")})
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidAmount, e.Code)
	_, e = h.putDef(events.BudgetPutRequest{Scope: "org:seed", Period: "day", Limit: "10", Unit: "USD", FixedSlot: new("0")})
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidAmount, e.Code)
	// Removing the slot is a change the put names.
	v, e = h.putDef(events.BudgetPutRequest{Scope: "org:seed", Period: "month", FixedSlot: new("")})
	require.Nil(t, e)
	require.Equal(t, []string{"fixed_slot"}, v.Changed)
	require.Equal(t, "1", v.Previous.FixedSlot)
	require.Empty(t, v.MaxInFlight)
}

// TestBudgetPut_ChangesNamedFields: a put changes only the fields it names
// (before, a put with only a limit reset the zone to UTC and dropped the
// thresholds and the fixed slot, and listed them as changed); replace puts
// the whole definition; the same holds for a kind's default.
func TestBudgetPut_ChangesNamedFields(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	full := events.BudgetPutRequest{Scope: "team:ml", Period: "week", Limit: "50", Unit: "USD", TZ: new("Europe/Berlin"),
		FixedSlot: new("2"), Thresholds: []string{"0.5", "0.9"}}
	v, e := h.putDef(full)
	require.Nil(t, e)
	require.True(t, v.Created)

	v, e = h.putDef(events.BudgetPutRequest{Scope: "team:ml", Period: "week", Limit: "20"})
	require.Nil(t, e)
	require.Equal(t, []string{"limit"}, v.Changed)
	require.Equal(t, "20", v.Limit)
	require.Equal(t, "Europe/Berlin", v.TZ)
	require.Equal(t, "2", v.FixedSlot)
	require.Equal(t, []string{"0.5", "0.9"}, v.Thresholds)
	require.Equal(t, &events.BudgetDefinition{Limit: "50", Unit: "USD", TZ: "Europe/Berlin", FixedSlot: "2", Thresholds: []string{"0.5", "0.9"}}, v.Previous)

	// One field at a time, each named and only it changed.
	for _, tc := range []struct {
		req     events.BudgetPutRequest
		changed string
		check   func(events.BudgetPutReply)
	}{
		{events.BudgetPutRequest{TZ: new("")}, "tz", func(v events.BudgetPutReply) { require.Empty(t, v.TZ) }},
		{events.BudgetPutRequest{Disabled: new(true)}, "disabled", func(v events.BudgetPutReply) { require.True(t, v.Disabled) }},
		{events.BudgetPutRequest{Disabled: new(false)}, "disabled", func(v events.BudgetPutReply) { require.False(t, v.Disabled) }},
		{events.BudgetPutRequest{FixedSlot: new("")}, "fixed_slot", func(v events.BudgetPutReply) { require.Empty(t, v.FixedSlot) }},
		{events.BudgetPutRequest{Alerts: new(false)}, "thresholds", func(v events.BudgetPutReply) { require.Empty(t, v.Thresholds) }},
		{events.BudgetPutRequest{Alerts: new(true)}, "thresholds", func(v events.BudgetPutReply) { require.Equal(t, []string{"0.5", "0.8", "1"}, v.Thresholds) }},
		{events.BudgetPutRequest{Thresholds: []string{"1"}}, "thresholds", func(v events.BudgetPutReply) { require.Equal(t, []string{"1"}, v.Thresholds) }},
	} {
		req := tc.req
		req.Scope, req.Period = "team:ml", "week"
		v, e := h.putDef(req)
		require.Nil(t, e)
		require.Equal(t, []string{tc.changed}, v.Changed)
		require.Equal(t, "20", v.Limit)
		tc.check(v)
	}
	// Alerts on again keeps the thresholds it has.
	v, e = h.putDef(events.BudgetPutRequest{Scope: "team:ml", Period: "week", Alerts: new(true)})
	require.Nil(t, e)
	require.Equal(t, []string{}, v.Changed)
	require.Equal(t, []string{"1"}, v.Thresholds)
	_, e = h.putDef(events.BudgetPutRequest{Scope: "team:ml", Period: "week", Alerts: new(false), Thresholds: []string{"0.5"}})
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidRequest, e.Code)

	// Replace: the whole definition, what it leaves out reset.
	_, e = h.putDef(events.BudgetPutRequest{Scope: "team:ml", Period: "week", TZ: new("Asia/Kabul"), FixedSlot: new("1")})
	require.Nil(t, e)
	v, e = h.putDef(events.BudgetPutRequest{Scope: "team:ml", Period: "week", Limit: "30", Unit: "USD", Replace: true})
	require.Nil(t, e)
	require.Equal(t, []string{"limit", "tz", "fixed_slot", "thresholds"}, v.Changed)
	require.Empty(t, v.TZ)
	require.Empty(t, v.FixedSlot)
	require.Empty(t, v.Thresholds)

	// A put naming a budget that does not exist must define it.
	_, e = h.putDef(events.BudgetPutRequest{Scope: "team:none", Period: "week", Disabled: new(true)})
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnknownBudget, e.Code)
	// One that defines it (a unit) without a limit lacks its limit: the
	// wire table's invalid_amount, naming the field.
	_, e = h.putDef(events.BudgetPutRequest{Scope: "team:none", Period: "week", Unit: "USD"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidAmount, e.Code)
	require.Contains(t, e.Message, "limit is required")
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:ml", Period: "week"}, nil))
	// A get in a unit the budget is not in says which unit it looked for.
	e = h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:ml", Period: "week", Unit: "EUR"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnknownBudget, e.Code)
	require.Equal(t, "no budget in EUR is defined for team:ml per week", e.Message)
	// A fixed slot cannot land on a requests budget by a later put either.
	h.putBudget("team:count", "day", "10", "requests")
	_, e = h.putDef(events.BudgetPutRequest{Scope: "team:count", Period: "day", FixedSlot: new("1")})
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidAmount, e.Code)
	// Without a unit, a put picks the budget defined first; with one,
	// the budget of that kind alongside it.
	h.putBudget("team:count", "day", "5", "USD")
	v, e = h.putDef(events.BudgetPutRequest{Scope: "team:count", Period: "day", Limit: "11"})
	require.Nil(t, e)
	require.Equal(t, "requests", v.Unit)
	v, e = h.putDef(events.BudgetPutRequest{Scope: "team:count", Period: "day", Unit: "USD", Limit: "6"})
	require.Nil(t, e)
	require.Equal(t, "USD", v.Unit)
	require.Equal(t, "6", v.Limit)

	// A default changes field by field too.
	_, e = h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "month", Limit: "10", Unit: "USD", TZ: new("America/New_York"), Alerts: new(true)})
	require.Nil(t, e)
	v, e = h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "month", Limit: "12"})
	require.Nil(t, e)
	require.Equal(t, []string{"limit"}, v.Changed)
	require.Equal(t, "America/New_York", v.TZ)
	require.Equal(t, []string{"0.5", "0.8", "1"}, v.Thresholds)
}

// TestBudgetPut_ConcurrentFields: puts changing different fields of one
// budget at once all land: each put's read of the definition and its write
// are one compare-and-set (ledger.EditBudget). A put that read the
// definition, merged, then wrote it whole would, when two interleave,
// write back the other's field as it was before, and a check below fails
// (it can pass by luck on a quiet machine; eight rounds make that rare).
func TestBudgetPut_ConcurrentFields(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2})
	for round := range 8 {
		scope := fmt.Sprintf("team:c%d", round)
		h.putBudget(scope, "month", "10", "USD")
		reqs := []events.BudgetPutRequest{
			{Limit: "11"}, {TZ: new("Asia/Kabul")}, {Disabled: new(true)}, {FixedSlot: new("2")}, {Thresholds: []string{"0.7"}},
		}
		var wg sync.WaitGroup
		errs := make([]*events.Error, len(reqs))
		fails := make([]error, len(reqs))
		for i := range reqs {
			reqs[i].Scope, reqs[i].Period = scope, "month"
			wg.Go(func() { errs[i], fails[i] = h.callE(streams.EndpointBudgetPut, reqs[i], nil) })
		}
		wg.Wait()
		for i := range errs {
			require.NoError(t, fails[i])
			require.Nil(t, errs[i])
		}
		b := h.budget(scope, "month")
		require.Equal(t, "11", b.Limit, "round %d", round)
		require.Equal(t, "Asia/Kabul", b.TZ, "round %d", round)
		require.True(t, b.Disabled, "round %d", round)
		require.Equal(t, "2", b.FixedSlot, "round %d", round)
		require.Equal(t, []string{"0.7"}, b.Thresholds, "round %d", round)
	}
}

// TestFixedSlot_SettleReplyPerBudget: a request admitted in a fixed-slot
// budget (reserving its slot of 1) and in a plain budget (reserving the
// asked 0.5) settles with a reply whose overrun is that of the budget
// whose reserved it shows (before, reserved came from one budget and
// overrun from the other), and with each budget's own numbers.
func TestFixedSlot_SettleReplyPerBudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "org:slot", Period: "month", Limit: "10", Unit: "USD", FixedSlot: new("1")})
	require.Nil(t, e)
	h.putBudget("user:u-1", "month", "10", "USD")
	h.putBudget("user:u-1", "day", "100", "requests")
	consistent := func(c events.CloseReply) {
		t.Helper()
		actual, reserved := events.MustMoney(c.Actual), events.MustMoney(c.Reserved)
		if c.Overrun == "" {
			require.LessOrEqual(t, actual.Cmp(reserved), 0, "no overrun, but actual %s > reserved %s", c.Actual, c.Reserved)
		} else {
			require.Equal(t, actual.Sub(reserved).String(), c.Overrun, "overrun of another budget than reserved %s", c.Reserved)
		}
	}
	for _, tc := range []struct {
		actual                 string
		slotOverrun, usrOverrn string
	}{
		{"0.8", "", "0.3"},
		{"1.5", "0.5", "1"},
	} {
		r, e := h.admit(events.AdmitRequest{RequestID: "slot-" + strings.ReplaceAll(tc.actual, ".", "_"), Scopes: []string{"org:slot", "user:u-1"}, Amount: "0.5"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		for _, replay := range []bool{false, true} {
			c, e := h.settle(r.ReservationID, tc.actual)
			require.Nil(t, e)
			require.Equal(t, replay, c.Replayed)
			consistent(c)
			require.Len(t, c.Budgets, 3, "replay %v", replay)
			byScope := map[string]events.BudgetClose{}
			for _, b := range c.Budgets {
				byScope[string(b.Scope)+"/"+string(b.Period)] = b
			}
			require.Equal(t, events.BudgetClose{Scope: "org:slot", Period: "month", Instance: "2026-11", Unit: "USD",
				Reserved: "1", Actual: tc.actual, Overrun: tc.slotOverrun}, byScope["org:slot/month"])
			require.Equal(t, events.BudgetClose{Scope: "user:u-1", Period: "month", Instance: "2026-11", Unit: "USD",
				Reserved: "0.5", Actual: tc.actual, Overrun: tc.usrOverrn}, byScope["user:u-1/month"])
			require.Equal(t, events.BudgetClose{Scope: "user:u-1", Period: "day", Instance: "2026-11-30", Unit: "requests",
				Reserved: "1", Actual: "1"}, byScope["user:u-1/day"])
		}
	}
	// One budget: the reply is that budget's, with no list.
	r, e := h.admit(events.AdmitRequest{RequestID: "one", Scopes: []string{"org:slot"}, Amount: "0.5"})
	require.Nil(t, e)
	c, e := h.settle(r.ReservationID, "3")
	require.Nil(t, e)
	require.Equal(t, "2", c.Overrun)
	require.Empty(t, c.Budgets)
}
