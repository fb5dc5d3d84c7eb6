package service_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestAdmit_MinuteAndHourPeriods: a per-minute and a per-hour budget have
// the atomicity of every period (a burst of 100 concurrent admits of 0.05
// against a limit of 1.00 admits exactly 20, on two replicas), and a new
// instance starts empty without a ledger write at the boundary: the
// stream does not move when the clock crosses it, the first admit of the
// next minute or hour is one write and is admitted in a fresh balance, and
// a settle of the old instance's reservation after the boundary lands in
// the old instance.
//
// How it can fail: the burst is TestAdmit_ConcurrentHotBudget's on another
// period (its negative control, TestAdmit_BlindWritesOverAdmit, shows the
// burst catches a ledger without compare-and-set); a boundary that needed
// a write, or a balance not keyed by its instance, fails the stream and
// balance checks.
func TestAdmit_MinuteAndHourPeriods(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		period events.Period
		length time.Duration
	}{{events.PeriodMinute, time.Minute}, {events.PeriodHour, time.Hour}} {
		t.Run(string(tc.period), func(t *testing.T) {
			h := newHarness(t, harnessOpts{replicas: 2})
			// 12:00:30 (minute) or 12:30 (hour): in the middle of an instance.
			h.clock.now.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).Add(tc.length / 2))
			scope := "team:rpm"
			v := h.putBudget(scope, string(tc.period), "1.00", "USD")
			first := v.Instance
			require.Equal(t, events.CalendarOf(tc.period, nil).Instance(h.clock.now.Load()), first)

			rs := burst(t, h, 100, func(i int) events.AdmitRequest {
				return events.AdmitRequest{RequestID: fmt.Sprintf("a-%d", i), Scopes: []string{scope}, Amount: "0.05", TTL: "1h"}
			})
			admitted, denied := countAdmitted(rs)
			require.Equal(t, 20, admitted)
			require.Equal(t, map[events.Code]int{events.ReasonLimitReached: 80}, denied)
			var held string
			for _, r := range rs {
				if r.Admitted {
					held = r.ReservationID
					require.Equal(t, first, r.Balances[0].Instance)
				}
			}

			seq, msgs := h.streamState()
			h.clock.now.Add(tc.length)
			// No write at the boundary: a budget get reads the new instance
			// as an empty balance, and the stream has not moved.
			v = h.budget(scope, string(tc.period))
			require.NotEqual(t, first, v.Instance)
			require.Equal(t, "0", v.Reserved)
			require.Equal(t, "1", v.Available)
			s2, m2 := h.streamState()
			require.Equal(t, seq, s2)
			require.Equal(t, msgs, m2)

			r, e := h.admit(events.AdmitRequest{RequestID: "next", Scopes: []string{scope}, Amount: "0.05", TTL: "1h"})
			require.Nil(t, e)
			require.True(t, r.Admitted, "%+v", r.Denial)
			require.Equal(t, v.Instance, r.Balances[0].Instance)
			s3, _ := h.streamState()
			require.Equal(t, seq+1, s3, "the new instance's first admit is one write")

			// A settle of the old instance's reservation lands there.
			_, e = h.settle(held, "0.05")
			require.Nil(t, e)
			v = h.budget(scope, string(tc.period))
			require.Equal(t, "0", v.Spent)
			require.Equal(t, "0.05", v.Reserved)
		})
	}
}
