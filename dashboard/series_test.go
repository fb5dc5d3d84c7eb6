package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// However many revisions a budget sees, its series stays within MaxPoints,
// keeps its first and latest point, and stays in time order.
func TestSeries_Bounded(t *testing.T) {
	var s series
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100_000 {
		s.add("2026-12", point{T: t0.Add(time.Duration(i) * time.Second), Spent: events.MoneyFromInt(int64(i))})
		require.Less(t, len(s.pts), MaxPoints)
	}
	require.Equal(t, t0, s.pts[0].T)
	require.Equal(t, "99999", s.pts[len(s.pts)-1].Spent.String())
	for i := 1; i < len(s.pts); i++ {
		require.True(t, s.pts[i-1].T.Before(s.pts[i].T))
	}
	s.add("2026-11", point{T: t0, Spent: events.MoneyFromInt(1)}) // an older instance: ignored
	require.Equal(t, "2026-12", s.instance)
	s.add("2027-01", point{T: t0.AddDate(0, 1, 0), Spent: events.MoneyFromInt(1)})
	require.Len(t, s.pts, 1)
}

func TestForecast_Exact(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	pts := []point{
		{T: now.Add(-2 * time.Hour), Spent: events.MustMoney("10")},
		{T: now.Add(-time.Hour), Spent: events.MustMoney("20")},
	}
	// 10 per 2 hours = 5/h; 80 left: 16 h.
	month, day := events.CalendarOf(events.PeriodMonth, nil), events.CalendarOf(events.PeriodDay, nil)
	f := forecast(pts, events.MustMoney("100"), month, now)
	require.Equal(t, "5", f.PerHour)
	require.NotNil(t, f.ExhaustsAt)
	require.Equal(t, now.Add(16*time.Hour), *f.ExhaustsAt)
	require.True(t, f.BeforeReset)
	require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), *f.ResetsAt)
	// The same pace on a day budget outlasts the day.
	f = forecast(pts, events.MustMoney("100"), day, now)
	require.False(t, f.BeforeReset)
	// At the limit: exhausted; no spend: no pace.
	require.True(t, forecast([]point{{T: now, Spent: events.MustMoney("100")}}, events.MustMoney("100"), month, now).Exhausted)
	require.Empty(t, forecast(pts[:1], events.MustMoney("100"), month, now).PerHour)
	require.Equal(t, int64(3333), basisPoints(events.MustMoney("1"), events.MustMoney("3")))
	require.Equal(t, int64(0), basisPoints(events.Zero, events.Zero))
}
