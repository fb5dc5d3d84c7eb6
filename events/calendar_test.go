package events

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	require.NoError(t, err)
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestCalendar_Instances pins instances and resets in these tricky
// zones: a New York day resets at 05:00Z in winter (04:00Z in summer), a
// Kiritimati (+14) day starts at 10:00Z the day before, a Kabul (+04:30)
// midnight is 19:30Z, a week resets on Monday in its zone, an hour in
// Kathmandu (+05:45) at :15Z, and the hour New York repeats at the end of
// daylight saving time is two instances.
func TestCalendar_Instances(t *testing.T) {
	for _, tc := range []struct {
		zone       string
		period     Period
		at         string
		inst       string
		start, end string // "" for none (lifetime)
	}{
		{"UTC", PeriodMonth, "2026-12-31T23:59:59.999999999Z", "2026-12", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"", PeriodDay, "2026-11-30T12:00:00Z", "2026-11-30", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"America/New_York", PeriodDay, "2026-12-01T04:59:59Z", "2026-11-30", "2026-11-30T05:00:00Z", "2026-12-01T05:00:00Z"},
		{"America/New_York", PeriodDay, "2026-07-01T04:00:00Z", "2026-07-01", "2026-07-01T04:00:00Z", "2026-07-02T04:00:00Z"},
		{"America/New_York", PeriodDay, "2026-11-01T12:00:00Z", "2026-11-01", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"}, // 25 hours
		{"Pacific/Kiritimati", PeriodDay, "2026-12-01T10:00:00Z", "2026-12-02", "2026-12-01T10:00:00Z", "2026-12-02T10:00:00Z"},
		{"Pacific/Kiritimati", PeriodMonth, "2026-11-30T10:00:00Z", "2026-12", "2026-11-30T10:00:00Z", "2026-12-31T10:00:00Z"},
		{"Asia/Kabul", PeriodDay, "2026-12-01T19:29:59Z", "2026-12-01", "2026-11-30T19:30:00Z", "2026-12-01T19:30:00Z"},
		{"Europe/Berlin", PeriodWeek, "2026-12-06T22:59:59Z", "2026-W49", "2026-11-29T23:00:00Z", "2026-12-06T23:00:00Z"},
		{"UTC", PeriodWeek, "2027-01-01T00:00:00Z", "2026-W53", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z"},
		{"Europe/Berlin", PeriodLifetime, "2026-12-06T22:59:59Z", "all", "", ""},
		{"Asia/Kathmandu", PeriodHour, "2026-12-01T10:14:59Z", "2026-12-01T15:00+05:45", "2026-12-01T09:15:00Z", "2026-12-01T10:15:00Z"},
		{"UTC", PeriodHour, "2026-12-01T10:14:59Z", "2026-12-01T10:00Z", "2026-12-01T10:00:00Z", "2026-12-01T11:00:00Z"},
		{"America/New_York", PeriodHour, "2026-11-01T05:30:00Z", "2026-11-01T01:00-04:00", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z"},
		{"America/New_York", PeriodHour, "2026-11-01T06:30:00Z", "2026-11-01T01:00-05:00", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"},
		{"Asia/Kabul", PeriodMinute, "2026-12-01T19:29:59.5Z", "2026-12-01T23:59+04:30", "2026-12-01T19:29:00Z", "2026-12-01T19:30:00Z"},
		// Samoa skipped 2011-12-30: the 29th ends where the 31st starts.
		{"Pacific/Apia", PeriodDay, "2011-12-30T09:59:59Z", "2011-12-29", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		{"Pacific/Apia", PeriodDay, "2011-12-30T10:00:00Z", "2011-12-31", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z"},
		// Australia/Lord_Howe moves by half an hour at 02:00 local: the
		// hour is cut at the change.
		{"Australia/Lord_Howe", PeriodHour, "2026-10-03T15:29:00Z", "2026-10-04T01:00+10:30", "2026-10-03T14:30:00Z", "2026-10-03T15:30:00Z"},
		{"Australia/Lord_Howe", PeriodHour, "2026-10-03T15:45:00Z", "2026-10-04T02:30+11:00", "2026-10-03T15:30:00Z", "2026-10-03T16:00:00Z"},
	} {
		name := fmt.Sprintf("%s/%s/%s", tc.zone, tc.period, tc.at)
		c := CalendarOf(tc.period, zone(t, tc.zone))
		at := utc(tc.at)
		require.Equal(t, tc.inst, c.Instance(at), name)
		require.Equal(t, tc.inst, tc.period.InstanceIn(at, c.Location()), name)
		start, end, ok := c.Bounds(at)
		reset, rok := c.ResetAt(at)
		if tc.start == "" {
			require.False(t, ok, name)
			require.False(t, rok, name)
			_, _, ok = c.InstanceBounds(tc.inst)
			require.False(t, ok, name)
			continue
		}
		require.True(t, ok, name)
		require.True(t, start.Equal(utc(tc.start)), "%s: start %s", name, start.UTC())
		require.True(t, end.Equal(utc(tc.end)), "%s: end %s", name, end.UTC())
		require.True(t, rok, name)
		require.True(t, reset.Equal(end), name)
		require.Equal(t, c.Location(), reset.Location(), "%s: the reset is in the budget's zone", name)
		s2, e2, ok := c.InstanceBounds(tc.inst)
		require.True(t, ok, name)
		require.True(t, s2.Equal(start) && e2.Equal(end), "%s: %s %s", name, s2.UTC(), e2.UTC())
	}
}

// TestCalendar_InstanceBoundsRefuses names that are not instances.
func TestCalendar_InstanceBoundsRefuses(t *testing.T) {
	for _, tc := range []struct {
		zone   string
		period Period
		inst   string
	}{
		{"UTC", PeriodMonth, "2026-13"},
		{"UTC", PeriodMonth, "2026-1"},
		{"UTC", PeriodDay, "2026-02-30"},
		{"UTC", PeriodWeek, "2027-W53"}, // 2027 has 52 ISO weeks
		{"UTC", PeriodWeek, "2026-W1"},
		{"UTC", PeriodWeek, "2026-W00"},
		{"Pacific/Apia", PeriodDay, "2011-12-30"}, // skipped
		{"Europe/Berlin", PeriodHour, "2026-11-30T14:00+01:30"},
		{"Europe/Berlin", PeriodHour, "2026-11-30T14:05+01:00"}, // not an hour's start
		{"UTC", PeriodMinute, "2026-11-30T14:05"},
		{"UTC", PeriodLifetime, "all"},
		{"UTC", Period("fortnight"), "2026-11"},
	} {
		_, _, ok := CalendarOf(tc.period, zone(t, tc.zone)).InstanceBounds(tc.inst)
		require.False(t, ok, "%s %s %s", tc.zone, tc.period, tc.inst)
	}
}

// TestCalendar_Partition checks, in zones with every kind of oddity
// (half-hour and 45-minute offsets, daylight saving at midnight, a skipped
// date, a half-hour daylight saving change, +14), at every offset change
// from 2010 to 2030 and at random instants, that each period is a
// partition of time: start <= t < end, the instance holds from start to
// end - 1ns and not at start - 1ns nor at end, the next instance starts at
// end, and the instance's name gives back its bounds.
func TestCalendar_Partition(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Kabul", "Asia/Kathmandu", "Pacific/Kiritimati",
		"Pacific/Apia", "Australia/Lord_Howe", "America/Santiago", "America/Havana", "Asia/Tehran", "Pacific/Chatham"}
	periods := []Period{PeriodMonth, PeriodWeek, PeriodDay, PeriodHour, PeriodMinute}
	rng := rand.New(rand.NewPCG(23, 26))
	lo, hi := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	checked := 0
	for _, name := range zones {
		loc := zone(t, name)
		var instants []time.Time
		for at := lo; at.Before(hi); {
			_, end := at.In(loc).ZoneBounds()
			if end.IsZero() || !end.Before(hi) {
				break
			}
			for _, d := range []time.Duration{-time.Hour, -time.Nanosecond, 0, time.Nanosecond, 30 * time.Minute, 24 * time.Hour} {
				instants = append(instants, end.Add(d))
			}
			at = end
		}
		for range 200 {
			instants = append(instants, lo.Add(time.Duration(rng.Int64N(int64(hi.Sub(lo))))))
		}
		for _, p := range periods {
			c := CalendarOf(p, loc)
			for _, at := range instants {
				inst := c.Instance(at)
				start, end, ok := c.Bounds(at)
				require.True(t, ok)
				where := fmt.Sprintf("%s %s at %s (%s): [%s, %s)", name, p, at.UTC().Format(time.RFC3339Nano), inst, start.UTC(), end.UTC())
				require.False(t, start.After(at), where)
				require.True(t, end.After(at), where)
				require.Equal(t, inst, c.Instance(start), where)
				require.Equal(t, inst, c.Instance(end.Add(-time.Nanosecond)), where)
				require.NotEqual(t, inst, c.Instance(start.Add(-time.Nanosecond)), where)
				require.NotEqual(t, inst, c.Instance(end), where)
				next, _, _ := c.Bounds(end)
				require.True(t, next.Equal(end), where)
				s2, e2, ok := c.InstanceBounds(inst)
				require.True(t, ok, where)
				require.True(t, s2.Equal(start) && e2.Equal(end), where)
				checked++
			}
		}
	}
	t.Logf("%d instants checked", checked)
}

func BenchmarkCalendar_InstanceIn(b *testing.B) {
	loc, _ := LoadZone("America/New_York")
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for b.Loop() {
		_ = PeriodDay.InstanceIn(at, loc)
	}
}

// TestValidateInstance: every period's instance names validate, in UTC
// and at a +05:45 and a -04:00 offset; a '.', a space or a wildcard does not.
func TestValidateInstance(t *testing.T) {
	at := time.Date(2026, 11, 30, 14, 5, 0, 0, time.UTC)
	for _, tz := range []string{"UTC", "Asia/Kathmandu", "America/New_York"} {
		loc, err := LoadZone(tz)
		require.NoError(t, err)
		for _, p := range Periods {
			inst := CalendarOf(p, loc).Instance(at)
			require.NoError(t, ValidateInstance(inst), inst)
		}
	}
	for _, bad := range []string{"", "2026.11", "a b", "*", ">", "a/b", string(make([]byte, MaxIDLen+1))} {
		require.Error(t, ValidateInstance(bad), bad)
	}
}
