package gateway

import (
	"fmt"
	"time"

	"github.com/spendgate/spendgate/events"
)

// periodEnd returns when period instance inst (events.Period.InstanceIn's
// form) ends in loc: the next month's, ISO week's or day's start. False for
// lifetime or an instance it cannot read.
func periodEnd(p events.Period, inst string, loc *time.Location) (time.Time, bool) {
	if loc == nil {
		loc = time.UTC
	}
	switch p {
	case events.PeriodMonth:
		t, err := time.ParseInLocation("2006-01", inst, loc)
		if err != nil {
			return time.Time{}, false
		}
		return t.AddDate(0, 1, 0), true
	case events.PeriodDay:
		t, err := time.ParseInLocation("2006-01-02", inst, loc)
		if err != nil {
			return time.Time{}, false
		}
		return t.AddDate(0, 0, 1), true
	case events.PeriodWeek:
		var y, w int
		if _, err := fmt.Sscanf(inst, "%04d-W%02d", &y, &w); err != nil || w < 1 || w > 53 {
			return time.Time{}, false
		}
		// ISO week 1 holds January 4th; weeks start on Monday.
		jan4 := time.Date(y, time.January, 4, 0, 0, 0, 0, loc)
		monday := jan4.AddDate(0, 0, -((int(jan4.Weekday()) + 6) % 7))
		start := monday.AddDate(0, 0, 7*(w-1))
		if events.PeriodWeek.InstanceIn(start, loc) != inst {
			return time.Time{}, false
		}
		return start.AddDate(0, 0, 7), true
	}
	return time.Time{}, false
}
