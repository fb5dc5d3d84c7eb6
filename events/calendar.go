package events

import (
	"fmt"
	"strconv"
	"time"
)

// The calendar. Every period instance, reset instant and "end of period"
// in spendgate is computed here, from a budget's Period and time zone: the
// ledger's instances (Period.InstanceIn, ledger.Budget.Instance), the
// dashboard's rows, reset times and forecasts, the gateway's reset header,
// the reports. It lives in events, next to Period, because an instance is
// part of the domain's data (BalanceRef.Instance, stored with every
// reservation) and events imports nothing of ours: a calendar package of
// its own would have to import events for Period, and events' Instance
// would then have to import it back.
//
// Every period is a partition of time: each instant is in exactly one
// instance, which starts at Start and ends at End (the next instance's
// start, exclusive). Day, week and month instances are local dates in the
// zone (a day is 23 or 25 hours on a daylight saving change; a date a zone
// skipped, such as Pacific/Apia's 2011-12-30, has no instance). Minute and
// hour instances follow the zone's wall clock too (an hour cap resets at
// :00 local time in Asia/Kathmandu, +05:45), and are named by their start
// with its UTC offset, so that the hour a daylight saving change repeats is
// two instances; where an offset changes inside one (Australia/Lord_Howe's
// half-hour change), the instance is cut at the change.

// Minute and hour periods: caps on requests or tokens per minute or per
// hour, as gateways limit traffic. A new instance needs no write: a
// balance is keyed by its instance, so the first admit of a minute finds
// an empty balance, as the first of a month does.
const (
	PeriodMinute Period = "minute"
	PeriodHour   Period = "hour"
)

// Instance formats, in the zone of the calendar (see Calendar.Instance).
const (
	instanceMonth = "2006-01"
	instanceDay   = "2006-01-02"
	// instanceClock names a minute or hour instance by its start,
	// RFC 3339 to the minute: "2026-11-30T14:05Z", "2026-11-01T01:00-04:00".
	instanceClock = "2006-01-02T15:04Z07:00"
	// InstanceLifetime is the one instance of the lifetime period.
	InstanceLifetime = "all"
)

// Calendar is a period in a time zone: the calendar a budget resets on.
// Its zero value is not usable; make one with CalendarOf.
type Calendar struct {
	period Period
	loc    *time.Location
}

// CalendarOf returns the calendar of period p in loc (nil means UTC). p
// must be a Period constant (the methods panic on another, as
// Period.InstanceIn always did: periods are validated at the edge).
func CalendarOf(p Period, loc *time.Location) Calendar {
	if loc == nil {
		loc = time.UTC
	}
	return Calendar{period: p, loc: loc}
}

// Period returns the calendar's period.
func (c Calendar) Period() Period { return c.period }

// Location returns the calendar's time zone (UTC when it was made with
// nil).
func (c Calendar) Location() *time.Location { return c.loc }

// Instance returns the instance t falls in: "2026-11" (month),
// "2026-W49" (ISO 8601 week: weeks start on Monday, week 1 holds the
// year's first Thursday, the year is the ISO week-year), "2026-11-30"
// (day), "all" (lifetime), "2026-11-30T14:00+01:00" (hour) and
// "2026-11-30T14:05+01:00" (minute), each in the calendar's zone.
func (c Calendar) Instance(t time.Time) string {
	lt := t.In(c.loc)
	switch c.period {
	case PeriodMonth:
		return lt.Format(instanceMonth)
	case PeriodWeek:
		y, w := lt.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	case PeriodDay:
		return lt.Format(instanceDay)
	case PeriodLifetime:
		return InstanceLifetime
	case PeriodHour, PeriodMinute:
		start, _ := c.clockBounds(t)
		return start.In(c.loc).Format(instanceClock)
	}
	panic("events: calendar of unvalidated period " + strconv.Quote(string(c.period)))
}

// Bounds returns the instance t falls in as [start, end): end is when it
// resets. ok is false for lifetime, which never resets.
func (c Calendar) Bounds(t time.Time) (start, end time.Time, ok bool) {
	switch c.period {
	case PeriodLifetime:
		return time.Time{}, time.Time{}, false
	case PeriodHour, PeriodMinute:
		start, end = c.clockBounds(t)
		return start, end, true
	}
	return c.dateStart(t), c.dateEnd(t), true
}

// ResetAt returns when the instance t falls in ends: the budget's next
// reset after t, in the calendar's zone. ok is false for lifetime.
func (c Calendar) ResetAt(t time.Time) (time.Time, bool) {
	_, end, ok := c.Bounds(t)
	return end.In(c.loc), ok
}

// InstanceBounds returns the bounds of the instance named inst (as
// Instance names it). ok is false for lifetime and for a name that is not
// an instance of this calendar.
func (c Calendar) InstanceBounds(inst string) (start, end time.Time, ok bool) {
	var t time.Time
	var err error
	// Dates are read at noon, local: a zone may skip a midnight, never a
	// noon (a date it skipped whole has no instance).
	noon := func(layout string) (time.Time, error) {
		d, err := time.Parse(layout, inst)
		return time.Date(d.Year(), d.Month(), d.Day(), 12, 0, 0, 0, c.loc), err
	}
	switch c.period {
	case PeriodMonth:
		t, err = noon(instanceMonth)
	case PeriodDay:
		t, err = noon(instanceDay)
	case PeriodWeek:
		var y, w int
		if n, serr := fmt.Sscanf(inst, "%04d-W%02d", &y, &w); serr != nil || n != 2 || w < 1 || w > 53 {
			return time.Time{}, time.Time{}, false
		}
		// ISO week 1 holds January 4th; weeks start on Monday.
		jan4 := time.Date(y, time.January, 4, 12, 0, 0, 0, c.loc)
		t = jan4.AddDate(0, 0, 7*(w-1)-(int(jan4.Weekday())+6)%7)
	case PeriodHour, PeriodMinute:
		t, err = time.Parse(instanceClock, inst)
	default:
		return time.Time{}, time.Time{}, false
	}
	// A date the zone skipped, a week 53 of a year without one, a minute
	// that is not an instance's start: the name must be what Instance
	// says of the instant it names.
	if err != nil || c.Instance(t) != inst {
		return time.Time{}, time.Time{}, false
	}
	start, end, _ = c.Bounds(t)
	if (c.period == PeriodHour || c.period == PeriodMinute) && !start.Equal(t) {
		return time.Time{}, time.Time{}, false
	}
	return start, end, true
}

// dateStart is the start of t's day, week or month instance: its first
// local midnight, checked against Instance (a zone may skip midnight, or
// a whole date) and searched for when the arithmetic misses.
func (c Calendar) dateStart(t time.Time) time.Time {
	lt := t.In(c.loc)
	var s time.Time
	switch c.period {
	case PeriodMonth:
		s = time.Date(lt.Year(), lt.Month(), 1, 0, 0, 0, 0, c.loc)
	case PeriodWeek:
		s = time.Date(lt.Year(), lt.Month(), lt.Day()-(int(lt.Weekday())+6)%7, 0, 0, 0, 0, c.loc)
	default:
		s = time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, c.loc)
	}
	inst := c.Instance(t)
	if !s.After(t) && c.Instance(s) == inst && c.Instance(s.Add(-time.Nanosecond)) != inst {
		return s
	}
	return c.search(t.Add(-maxInstance), t, inst)
}

// dateEnd is the end of t's day, week or month instance: the next local
// midnight that starts another instance.
func (c Calendar) dateEnd(t time.Time) time.Time {
	lt := t.In(c.loc)
	var e time.Time
	switch c.period {
	case PeriodMonth:
		e = time.Date(lt.Year(), lt.Month()+1, 1, 0, 0, 0, 0, c.loc)
	case PeriodWeek:
		e = time.Date(lt.Year(), lt.Month(), lt.Day()-(int(lt.Weekday())+6)%7+7, 0, 0, 0, 0, c.loc)
	default:
		e = time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, c.loc)
	}
	inst := c.Instance(t)
	if e.After(t) && c.Instance(e) != inst && c.Instance(e.Add(-time.Nanosecond)) == inst {
		return e
	}
	return c.search(t, t.Add(maxInstance), inst)
}

// maxInstance bounds a day, week or month instance's length (a month of
// 31 days plus a skipped date and a daylight saving hour).
const maxInstance = 33 * 24 * time.Hour

// search returns the first instant in (lo, hi] that is not in instance
// inst, knowing that lo is in it... or, when lo is not, the first that is:
// the boundary between inst and its neighbour, found by bisection (local
// dates never decrease as time goes on, so the instance is an interval).
// It is the slow path for the zones time.Date cannot land on (a skipped
// midnight or date) and costs about 60 Instance calls.
func (c Calendar) search(lo, hi time.Time, inst string) time.Time {
	in := c.Instance(lo) == inst
	for hi.Sub(lo) > time.Nanosecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if (c.Instance(mid) == inst) == in {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// clockBounds is the minute or hour instance of t: the local wall clock
// truncated to the minute or hour, cut where the zone's offset changes.
func (c Calendar) clockBounds(t time.Time) (start, end time.Time) {
	length := time.Hour
	lt := t.In(c.loc)
	into := time.Duration(lt.Minute())*time.Minute + time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
	if c.period == PeriodMinute {
		length = time.Minute
		into = time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
	}
	start, end = t.Add(-into), t.Add(-into+length)
	zs, ze := lt.ZoneBounds()
	if !zs.IsZero() && zs.After(start) {
		start = zs
	}
	if !ze.IsZero() && ze.Before(end) {
		end = ze
	}
	return start, end
}

// ValidateInstance checks an instance name as a balance carries it: 1 to
// MaxIDLen characters of [A-Za-z0-9_-], plus ':' and '+' (the UTC offset
// of a minute or hour instance, "2026-11-30T14:05+01:00"). It never
// holds '.', '*', '>' or a space: an instance is the last token of a
// balance key (streams.BalanceKey), never a NATS subject.
func ValidateInstance(s string) error {
	if s == "" || len(s) > MaxIDLen {
		return Errorf(CodeInvalidIdentifier, "instance %q must be 1 to %d characters", s, MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':' || c == '+') {
			return Errorf(CodeInvalidIdentifier, "instance %q may hold only letters, digits, '_', '-', ':' and '+'", s)
		}
	}
	return nil
}
