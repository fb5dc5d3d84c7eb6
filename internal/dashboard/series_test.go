package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

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
