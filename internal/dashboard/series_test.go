package dashboard

import (
	"github.com/cockroachdb/apd/v3"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/report"
)

// steady is a spend of 1 every minute for two hours before now (and 30 s).
func steady(now time.Time) []point {
	var pts []point
	for i := 120; i >= 1; i-- {
		pts = append(pts, point{T: now.Add(-time.Duration(i)*time.Minute + 30*time.Second), Spent: events.MustMoney(itoa(121 - i))})
	}
	return pts
}

func itoa(n int) string { return strconv.Itoa(n) }

func in(pts []point, gap time.Duration, limit, used string, cal events.Calendar, now time.Time) paceIn {
	return paceIn{pts: pts, gap: gap, limit: events.MustMoney(limit), used: events.MustMoney(used), cal: cal, now: now}
}

// A steady pace reads as itself: about 60 per hour, whether the points
// are one per revision (each spend at its instant) or downsampled (each
// spread since the point before: then exactly 60 * (2^-0.1 - 2^-12.1):
// the half minute since the last point holds no spend, and spend older
// than the window is left out).
func TestForecast_SteadyPace(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	month := events.CalendarOf(events.PeriodMonth, nil)
	f := forecast(in(steady(now), 0, "1000", "120", month, now))
	require.Equal(t, "59.94", f.PerHour, "one spend a minute, half a minute before each whole minute")
	f = forecast(in(steady(now), time.Minute, "1000", "120", month, now))
	require.Equal(t, "55.97", f.PerHour)
	// 880 left at 55.97/h: about 15 h 43 min.
	require.NotNil(t, f.ExhaustsAt)
	require.InDelta(t, 880/55.97, f.ExhaustsAt.Sub(now).Hours(), 0.01)
	require.True(t, f.BeforeReset)
	require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), *f.ResetsAt)
	require.Equal(t, "2027-01-01 00:00 UTC", f.ResetsLocal)
	// The same pace on a day budget outlasts the day.
	f = forecast(in(steady(now), time.Minute, "1000", "120", events.CalendarOf(events.PeriodDay, nil), now))
	require.False(t, f.BeforeReset)
}

// An idle budget's pace halves every PaceHalfLife and is gone after
// PaceWindow: 80 of 100 spent at once, then 19 idle minutes, no longer
// reads "runs out in 5 min" (the pace since the first point did).
func TestForecast_IdleDecays(t *testing.T) {
	t0 := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	pts := []point{{T: t0, Reserved: events.MustMoney("80")}, {T: t0, Spent: events.MustMoney("80")}}
	day := events.CalendarOf(events.PeriodDay, nil)
	at := func(idle time.Duration) Forecast { return forecast(in(pts, 0, "100", "80", day, t0.Add(idle))) }
	f := at(19 * time.Minute)
	require.NotNil(t, f.ExhaustsAt)
	require.Greater(t, f.ExhaustsAt.Sub(t0.Add(19*time.Minute)), 19*time.Minute, "idle longer than the forecast")
	require.Equal(t, t0, *f.LastSpendAt)
	// 80 * 2^-3.8 * ln 2 * 12 per hour.
	require.Equal(t, "47.77", f.PerHour)
	require.Equal(t, "23.89", at(24*time.Minute).PerHour, "halved after another half-life")
	f = at(PaceWindow)
	require.Empty(t, f.PerHour, "nothing in the window: no pace")
	require.Nil(t, f.ExhaustsAt)
}

// Exhausted: nothing available, or the latest admit the budget denied
// would still not fit; freeing enough for it ends that.
func TestForecast_Exhausted(t *testing.T) {
	t0 := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	day := events.CalendarOf(events.PeriodDay, nil)
	pts := []point{{T: t0, Spent: events.MustMoney("98")}}
	f := forecast(in(pts, 0, "100", "98", day, t0.Add(time.Minute)))
	require.False(t, f.Exhausted)
	require.NotNil(t, f.ExhaustsAt, "a fast pace: it would run out soon")

	x := in(pts, 0, "100", "98", day, t0.Add(time.Minute))
	x.denied = &events.AdmitDenied{At: t0.Add(30 * time.Second), Denial: events.Denial{Reason: events.ReasonLimitReached, Requested: "5"}}
	f = forecast(x)
	require.True(t, f.Exhausted)
	require.Equal(t, ExhaustedDenied, f.ExhaustedBy)
	require.Equal(t, "5", f.DeniedAmount)
	require.Nil(t, f.ExhaustsAt, "never 'in < 1 min' for ever")

	x.used = events.MustMoney("95")
	require.False(t, forecast(x).Exhausted, "5 available: the denied call fits now")

	x.used = events.MustMoney("1")
	x.denied.Denial.Requested = "100.5"
	f = forecast(x)
	require.False(t, f.Exhausted, "a call asking more than the whole limit never fits; the budget still admits")
	require.Equal(t, "100.5", f.DeniedAmount, "the denial is still shown")

	f = forecast(in(pts, 0, "100", "100", day, t0))
	require.True(t, f.Exhausted)
	require.Equal(t, ExhaustedLimit, f.ExhaustedBy)
	require.Equal(t, int64(3333), basisPoints(events.MustMoney("1"), events.MustMoney("3")))
	require.Equal(t, int64(0), basisPoints(events.Zero, events.Zero))
}

// One call is no pace: 10 of a 1,000 month budget spent at once shows a
// burn rate, but no "runs out" (extrapolated, it read "runs out in 12 h",
// before the month's reset, for half an hour, and the Prometheus rule on
// spendgate_budget_exhausts_before_reset fired on a budget 1% used).
// Three moments of spend make a pace; so do one or two that spent as much
// as is left.
func TestForecast_OneCallIsNoPace(t *testing.T) {
	t0 := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	month := events.CalendarOf(events.PeriodMonth, nil)
	one := []point{{T: t0, Spent: events.MustMoney("10")}}
	f := forecast(in(one, 0, "1000", "10", month, t0.Add(time.Minute)))
	require.NotEmpty(t, f.PerHour, "the pace is shown")
	require.Nil(t, f.ExhaustsAt)
	require.False(t, f.BeforeReset)

	three := []point{{T: t0, Spent: events.MustMoney("10")}, {T: t0.Add(time.Minute), Spent: events.MustMoney("20")},
		{T: t0.Add(2 * time.Minute), Spent: events.MustMoney("30")}}
	f = forecast(in(three, 0, "1000", "30", month, t0.Add(3*time.Minute)))
	require.NotNil(t, f.ExhaustsAt, "three calls in three minutes are a pace")
	require.True(t, f.BeforeReset)

	f = forecast(in(one, 0, "15", "10", month, t0.Add(time.Minute)))
	require.NotNil(t, f.ExhaustsAt, "one call spent more than is left: as much again runs it out")
}

// The forecast from a series' Recent (the points in the window and the
// one before them) is the forecast from every point, downsampled or not,
// busy or idle.
func TestForecast_RecentIsAllPoints(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	month := events.CalendarOf(events.PeriodMonth, nil)
	ref := events.BudgetRef{Scope: "team:a", Period: events.PeriodMonth}
	for _, tc := range []struct {
		name  string
		spans time.Duration // the points are a spend a minute for spans
		at    time.Time     // the forecast's time
	}{
		{"two hours", 2 * time.Hour, now},
		{"a day, downsampled", 24 * time.Hour, now},
		{"idle 30 min", 2 * time.Hour, now.Add(30 * time.Minute)},
		{"idle 2 h", 2 * time.Hour, now.Add(2 * time.Hour)},
		{"within the window", 20 * time.Minute, now},
	} {
		s := report.NewSeries()
		n := int(tc.spans / time.Minute)
		for i := range n {
			at := now.Add(-tc.spans + time.Duration(i)*time.Minute)
			s.Fold(&gate.Revision{Kind: gate.KindLane, At: at, Lane: &events.LaneRevision{Balances: []events.BalanceRevision{
				{Balance: events.BalanceRef{Scope: ref.Scope, Period: ref.Period, Instance: "2026-12"}, Spent: events.MoneyFromInt(int64(i / 2))}}}}, false)
		}
		all := in(s.Points(ref, "2026-12"), s.Resolution(ref, "2026-12"), "100000", "720", month, tc.at)
		rec, ok := s.Recent(ref, "2026-12", tc.at.Add(-PaceWindow))
		require.True(t, ok)
		require.Less(t, len(rec.Points), 62, tc.name)
		part := all
		part.pts, part.before, part.recent, part.lastSpend = rec.Points, rec.Before, true, rec.LastSpend
		want, got := forecast(all), forecast(part)
		require.Equal(t, want, got, tc.name)
		require.NotNil(t, got.LastSpendAt, tc.name)
	}
}

// A burn rate shows 2 places, or 3 significant digits below 1: a per-user
// budget burning 0.0000432 an hour showed "0" beside a date it runs out.
func TestForecast_ShownRate(t *testing.T) {
	for in, want := range map[string]string{
		"203.7861":        "203.79",
		"1":               "1",
		"0.999":           "0.999",
		"0.12345":         "0.123",
		"0.0000432198":    "0.0000432",
		"0.0000000000049": "0.000000000005",
	} {
		d, _, err := apd.NewFromString(in)
		require.NoError(t, err)
		require.Equal(t, want, shownRate(d), in)
	}
}
