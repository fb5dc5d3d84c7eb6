package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPeriodBounds: report --period takes the calendar's UTC instances,
// weeks included.
func TestPeriodBounds(t *testing.T) {
	t.Parallel()
	day := func(s string) time.Time { t, _ := time.Parse(time.DateOnly, s); return t }
	for _, tc := range []struct {
		in         string
		start, end time.Time
	}{
		{"2026-11", day("2026-11-01"), day("2026-12-01")},
		{"2026-W53", day("2026-12-28"), day("2027-01-04")},
		{"2026-11-30", day("2026-11-30"), day("2026-12-01")},
	} {
		s, e, err := periodBounds(tc.in)
		require.NoError(t, err, tc.in)
		require.True(t, s.Equal(tc.start) && e.Equal(tc.end), "%s: %s %s", tc.in, s, e)
	}
	for _, bad := range []string{"2026-13", "2027-W53", "2026-11-31", "all", ""} {
		_, _, err := periodBounds(bad)
		require.Error(t, err, bad)
	}
}
