package projector

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/soak"
)

// windowHistory is how many seconds of closes (one a second) the window
// tests fold: 10,000 (Window) and 5,000 (VoidWindow) in .ci/run's soak
// step (SPENDGATE_SOAK), a tenth of that in the suite. A tenth still
// catches what they guard: a State that did not forget holds 1,000 (500)
// where the bound is 63 (62), the one-minute window is passed 16 (8)
// times over, each case of VoidWindow (up to second 111) is in it, and
// the 3-hour expired window outlasts either history as before. Each
// step folds two JSON revisions into two States under -race: 10,000 took
// 5 CPU-s.
func windowHistory(soakN int) int {
	if soak.Long() {
		return soakN
	}
	return soakN / 10
}

// TestState_Window: a State with a window holds what is open plus the
// recently closed, whatever the history's length: 10,000 reservations
// (1,000 in the suite: windowHistory) opened and settled a second apart
// leave at most the last 60 s of them (a 1-minute window); an expired one is kept for the expired window so
// that its settle after expiry still folds; the balance totals equal a
// State that keeps everything, and each forgotten reservation went
// through onForget. How we know it can fail: without advance's
// forgetting, the State holds all of them (the bound is asserted); a
// window that forgot the expired reservation early makes the late settle
// fail with "never opened".
func TestState_Window(t *testing.T) {
	ref := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rev := func(spent, reserved, overrun events.Money, open int64, evs ...events.Event) []byte {
		return laneJSON(t, events.BalanceRevision{Schema: events.SchemaBalance, Balance: ref, Unit: "USD", Limit: events.MustMoney("1000000"),
			Spent: spent, Reserved: reserved, Overrun: overrun, Open: open, Events: evs})
	}
	open := func(id string, at time.Time) events.ReservationOpened {
		return events.ReservationOpened{ReservationID: id, RequestID: "q" + id, Balance: ref, Amount: events.MustMoney("1"), Unit: "USD",
			Balances: []events.BalanceRef{ref}, ExpiresAt: at.Add(time.Minute), At: at}
	}
	lean, full := NewState(), NewState()
	forgotten := 0
	lean.setWindow(time.Minute, 3*time.Hour, func(r *Reservation) {
		require.NotEqual(t, events.StatusOpen, r.Status)
		forgotten++
	})
	seq := uint64(0)
	spent, overrun := events.Zero, events.Zero
	both := func(at time.Time, data []byte) {
		seq++
		lean.advance(at)
		require.NoError(t, lean.Apply(seq, "lane.0", data))
		require.NoError(t, full.Apply(seq, "lane.0", data))
	}
	// One reservation expires first, and is settled late at the end.
	both(t0, rev(spent, events.MustMoney("1"), overrun, 1, open("x", t0)))
	both(t0, rev(spent, events.Zero, overrun, 0, events.ReservationReleased{ReservationID: "x", Balance: ref, Reserved: events.MustMoney("1"), Reason: events.ReasonExpired, At: t0}))
	n := windowHistory(10_000)
	most := 0
	for i := 0; i < n; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		id := fmt.Sprintf("r%d", i)
		both(at, rev(spent, events.MustMoney("1"), overrun, 1, open(id, at)))
		spent = spent.Add(events.MustMoney("1"))
		both(at, rev(spent, events.Zero, overrun, 0, events.ReservationSettled{ReservationID: id, Balance: ref, Reserved: events.MustMoney("1"),
			Actual: events.MustMoney("1"), Overrun: events.Zero, At: at}))
		most = max(most, len(lean.reservations)+len(lean.win.digests))
		require.LessOrEqual(t, len(lean.reservations), 2, "settled reservations are kept as digests")
	}
	require.LessOrEqual(t, most, 63, "held at most a minute of closes (plus the expired one)")
	end := t0.Add(time.Duration(n) * time.Second)
	spent, overrun = spent.Add(events.MustMoney("2")), overrun.Add(events.MustMoney("2"))
	both(end, rev(spent, events.Zero, overrun, 0, events.ReservationSettled{ReservationID: "x", Balance: ref, Reserved: events.MustMoney("1"),
		Actual: events.MustMoney("2"), Overrun: events.MustMoney("2"), Late: true, AfterExpiry: true, At: end}))
	require.Equal(t, full.Balances(), lean.Balances())
	require.Equal(t, n+1, len(lean.reservations)+lean.Forgotten())
	require.Equal(t, forgotten, lean.Forgotten())
	_, status, ok := lean.statusOf("x")
	require.True(t, ok, "settled after expiry: kept for the closed window again")
	require.Equal(t, events.StatusSettled, status)
	// Clones keep their own window.
	c := lean.Clone()
	c.advance(end.Add(2 * time.Hour))
	require.Empty(t, c.win.digests)
	require.NotEmpty(t, lean.win.digests)
}

// TestState_VoidWindow: a State with a window remembers a voided request
// id for the window's closed retention after the revision that voided it,
// as a replica remembers it for its retention, and then forgets it; a
// State without a window keeps every void. 5,000 voids a second apart
// (500 in the suite: windowHistory) leave at most a minute of them (a
// 1-minute window), the balances equal those of the State that keeps everything, a request id voided again is
// kept a minute from its newest void, and an admit carrying a voided
// request id folds alike in both States, within the window or after it
// (the fold never looks a request id up among the voids: the ledger's
// writer refuses such an admit while it remembers the void, and once one
// is written it is an admit like any other). How we know it can fail:
// without advance's forgetting, the lean State holds all the voids (the
// bound is asserted); a forget that ignored a newer void would drop
// "again" at t0+60s; a fold that refused a voided request id would make
// the two admits below fail in one State and not the other.
func TestState_VoidWindow(t *testing.T) {
	ref := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var reserved events.Money = events.Zero
	var open int64
	rev := func(evs ...events.Event) []byte {
		return laneJSON(t, events.BalanceRevision{Schema: events.SchemaBalance, Balance: ref, Unit: "USD", Limit: events.MustMoney("1000000"),
			Reserved: reserved, Open: open, Events: evs})
	}
	void := func(rid string, at time.Time) events.RequestVoided {
		return events.RequestVoided{RequestID: rid, Balance: ref, Scopes: []events.Scope{ref.Scope}, At: at}
	}
	admit := func(id, rid string, at time.Time) events.ReservationOpened {
		reserved, open = reserved.Add(events.MustMoney("1")), open+1
		return events.ReservationOpened{ReservationID: id, RequestID: rid, Balance: ref, Amount: events.MustMoney("1"), Unit: "USD",
			Balances: []events.BalanceRef{ref}, ExpiresAt: at.Add(time.Hour), At: at}
	}
	lean, full := NewState(), NewState()
	lean.setWindow(time.Minute, 3*time.Hour, nil)
	seq := uint64(0)
	both := func(at time.Time, data []byte) {
		t.Helper()
		seq++
		lean.advance(at)
		full.advance(at)
		require.NoError(t, lean.Apply(seq, "lane.0", data))
		require.NoError(t, full.Apply(seq, "lane.0", data))
	}
	both(t0, rev(void("again", t0)))
	n := windowHistory(5_000)
	most := 0
	for i := 0; i < n; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		rid := fmt.Sprintf("v%d", i)
		switch i {
		case 30:
			// An admit of v0, voided 30 s ago: within the window.
			require.True(t, lean.Voided("v0"), "remembered within the window")
			both(at, rev(void(rid, at), admit("late-v0", "v0", at)))
		case 50:
			both(at, rev(void(rid, at), void("again", at)))
		case 100:
			require.False(t, lean.Voided("v0"), "forgotten after the window")
			require.True(t, full.Voided("v0"))
			require.True(t, lean.Voided("again"), "kept a minute from its newest void")
			// An admit of v0 after the window, as a replica that forgot
			// the void admits it.
			both(at, rev(void(rid, at), admit("after-v0", "v0", at)))
		case 111:
			both(at, rev(void(rid, at)))
			require.False(t, lean.Voided("again"), "forgotten a minute after its newest void")
		default:
			both(at, rev(void(rid, at)))
		}
		most = max(most, len(lean.voided))
	}
	require.LessOrEqual(t, most, 62, "held at most a minute of voids")
	require.Len(t, full.voided, n+1, "without a window every void is kept")
	require.Equal(t, full.Balances(), lean.Balances(), "the replay reports the same")
	require.Equal(t, int64(n+2), lean.Balances()[0].Voided)
	for _, id := range []string{"late-v0", "after-v0"} {
		r, ok := lean.Reservation(id)
		require.True(t, ok, id)
		require.Equal(t, "v0", r.RequestID)
		require.Equal(t, events.StatusOpen, r.Status)
	}
	// Clones keep their own voids.
	c := lean.Clone()
	c.advance(t0.Add(time.Duration(2*n) * time.Second))
	require.Empty(t, c.voided)
	require.Empty(t, c.win.voids)
	require.NotEmpty(t, lean.voided)
}

// TestState_QuarantineWindowOpenedAndVoidedInOneRevision: the audit's
// fold (applyLaneQuarantine, which folds a lane revision balance by
// balance) with a window hands a reservation to the window once the
// whole revision is folded. An admit in two budgets and its void, in one
// group commit, make one lane revision in which the reservation opens and
// is released in each balance; forgetting it after its first balance
// checked it with one part ("lists balance ... but was never opened
// there", once per other balance) and opened it anew in the next, so
// audit check failed on a ledger the replicas fold without a problem (it
// happens when a client voids an admit whose answer it lost, and both
// reach a replica together after a NATS outage). How we know it can fail:
// with closed() called per balance, as before, onForget sees the
// reservation twice, each time with one part.
func TestState_QuarantineWindowOpenedAndVoidedInOneRevision(t *testing.T) {
	at := time.Date(2026, 12, 6, 18, 51, 38, 0, time.UTC)
	org := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"}
	team := events.BalanceRef{Scope: "team:a", Period: events.PeriodMonth, Instance: "2026-12"}
	both := []events.BalanceRef{org, team}
	one := func(ref events.BalanceRef) events.BalanceRevision {
		return events.BalanceRevision{Schema: events.SchemaBalance, Balance: ref, Unit: "USD", Limit: events.MustMoney("100"),
			Events: events.Events{
				events.ReservationOpened{ReservationID: "r1", RequestID: "q1", Balance: ref, Amount: events.MustMoney("1"), Unit: "USD",
					Balances: both, ExpiresAt: at.Add(time.Minute), At: at},
				events.ReservationReleased{ReservationID: "r1", Balance: ref, Reserved: events.MustMoney("1"), Reason: events.ReasonVoided, At: at},
				events.RequestVoided{RequestID: "q1", Balance: ref, Scopes: []events.Scope{org.Scope, team.Scope}, ReservationID: "r1", At: at},
			}}
	}
	st := NewState()
	var forgotten []Reservation
	st.setWindow(time.Minute, 3*time.Hour, func(r *Reservation) { forgotten = append(forgotten, *r.clone()) })
	st.advance(at)
	failed, err := st.applyLaneQuarantine(1, "lane.0", laneJSON(t, one(org), one(team)), nil, map[string]bool{})
	require.NoError(t, err)
	require.Empty(t, failed)
	require.Len(t, forgotten, 1, "the reservation is forgotten once, after the whole revision")
	require.Len(t, forgotten[0].Parts, 2, "with its part in each balance")
	for _, ref := range both {
		require.Equal(t, events.StatusReleased, forgotten[0].Parts[ref].Status)
	}
	require.Equal(t, 1, st.Forgotten())
}
