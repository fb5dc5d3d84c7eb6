package report

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
)

// SeriesSection is the name of the spend series' section in a replica's
// ledger snapshots.
const SeriesSection = "series"

// Bounds of a Series.
const (
	// MaxPoints bounds the points kept per budget; when full, every
	// other point is dropped and the minimum gap between points doubles.
	MaxPoints = 360
	// MaxSeriesBudgets bounds the budgets with a series (memory bound
	// with MaxPoints).
	MaxSeriesBudgets = 100_000
)

// Point is a balance after a revision.
type Point struct {
	T        time.Time    `json:"t"`
	Spent    events.Money `json:"spent"`
	Reserved events.Money `json:"reserved"`
}

// series is one budget's points in its latest period instance.
type series struct {
	Instance string        `json:"instance"`
	Points   []Point       `json:"points"`
	Gap      time.Duration `json:"gap"`
}

// add records p for instance; an older instance is ignored, a newer one
// starts the series again.
func (s *series) add(instance string, p Point) {
	switch {
	case instance < s.Instance:
		return
	case instance > s.Instance:
		s.Instance, s.Points, s.Gap = instance, s.Points[:0], 0
	}
	if n := len(s.Points); n >= 2 && p.T.Sub(s.Points[n-2].T) < s.Gap {
		s.Points[n-1] = p // within the resolution: the newest wins
		return
	}
	s.Points = append(s.Points, p)
	if len(s.Points) < MaxPoints {
		return
	}
	kept := s.Points[:0]
	last := s.Points[len(s.Points)-1]
	for i := 0; i < len(s.Points)-1; i += 2 {
		kept = append(kept, s.Points[i])
	}
	kept = append(kept, last)
	s.Points = kept
	if span := last.T.Sub(s.Points[0].T); span > 0 {
		s.Gap = span / time.Duration(MaxPoints/2)
	}
}

// Series is every budget's spend over its latest period instance, point
// by point (at most MaxPoints each), as the replica's one fold hands it
// the lane revisions the gate passed (a ledger.Reader), and travels in
// the replica's ledger snapshots (a ledger.Section). It is the spend
// dashboard's chart and burn rate. Safe for concurrent use.
type Series struct {
	mu sync.Mutex
	m  map[events.BudgetRef]*series
}

// NewSeries returns an empty Series.
func NewSeries() *Series { return &Series{m: map[events.BudgetRef]*series{}} }

// Fold records every balance of a lane revision (ledger.Reader).
func (s *Series) Fold(rev *gate.Revision, _ bool) {
	if rev.Kind == gate.KindBudget && rev.Budget.Retired {
		// Over for good (budget retire): its chart goes with it.
		s.mu.Lock()
		delete(s.m, rev.Budget.Budget)
		s.mu.Unlock()
		return
	}
	if rev.Kind != gate.KindLane {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range rev.Lane.Balances {
		ref := b.Balance.Budget()
		ss := s.m[ref]
		if ss == nil {
			if len(s.m) >= MaxSeriesBudgets {
				continue
			}
			ss = &series{}
			s.m[ref] = ss
		}
		ss.add(b.Balance.Instance, Point{T: rev.At.UTC(), Spent: b.Spent, Reserved: b.Reserved})
	}
}

// Points returns a copy of ref's points if its series is of instance
// inst (nil otherwise).
func (s *Series) Points(ref events.BudgetRef, inst string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[ref]
	if ss == nil || ss.Instance != inst {
		return nil
	}
	return append([]Point(nil), ss.Points...)
}

// Recent is what a burn rate reads of one budget's series (Series.Recent).
type Recent struct {
	// Points are the series' latest points after a time, oldest first,
	// led by the point before them when there is one (then Before is
	// set): a copy.
	Points []Point
	Before bool
	// Gap is the series' resolution (Series.Resolution).
	Gap time.Duration
	// LastSpend is the time of the series' latest point whose spent grew
	// over the point before it (the first point: over zero); zero if none.
	LastSpend time.Time
}

// Recent returns what a burn rate at a time after from needs of ref's
// series if it is of instance inst (ok false otherwise): the trailing
// points later than from, the one before them, the resolution and when
// the spend last grew, without copying the older points. Points are kept
// in the order they are folded, which is the ledger's order of revisions
// and their times: a point out of that order before the trailing run is
// not returned. The dashboard computes every budget's forecast from it,
// each call taking the lock for the copy of a few points (Points copies
// up to MaxPoints).
func (s *Series) Recent(ref events.BudgetRef, inst string, from time.Time) (r Recent, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[ref]
	if ss == nil || ss.Instance != inst {
		return Recent{}, false
	}
	pts := ss.Points
	for i := len(pts) - 1; i >= 0; i-- {
		if i == 0 && pts[0].Spent.Sign() > 0 || i > 0 && pts[i].Spent.Cmp(pts[i-1].Spent) > 0 {
			r.LastSpend = pts[i].T
			break
		}
	}
	k := len(pts)
	for k > 0 && pts[k-1].T.After(from) {
		k--
	}
	if k > 0 {
		k, r.Before = k-1, true
	}
	r.Points = append([]Point(nil), pts[k:]...)
	r.Gap = ss.Gap
	return r, true
}

// Resolution returns the minimum gap between ref's points if its series
// is of instance inst: 0 while every point is one revision (the series was
// never downsampled); after a downsampling, a point holds the balance
// after every revision since the point before it, so the spend it adds
// happened somewhere in between (the dashboard's burn rate spreads it).
func (s *Series) Resolution(ref events.BudgetRef, inst string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[ref]
	if ss == nil || ss.Instance != inst {
		return 0
	}
	return ss.Gap
}

// seriesEntry is one budget's series in a snapshot section. Its points
// are written compact (Compact: each [unix nanoseconds, spent coefficient,
// spent exponent, reserved coefficient, reserved exponent], numbers that
// decode about twice as fast as decimal strings and RFC 3339 times, in
// 4.1 MB instead of 7.1 for 300 full series (BenchmarkSeries_LoadSection:
// 130-139 ms against 281-322 ms): a replica's start reads every series
// before its first admit), or, for a series with a
// point that does not fit (a time outside 1678..2262 or not in UTC, an
// amount Compact cannot split), as Points; a section written before
// Compact existed has Points only, and loads as it did.
type seriesEntry struct {
	Budget events.BudgetRef `json:"budget"`
	series
	Compact [][5]int64 `json:"compact,omitempty"`
}

// compactEntry is e with its points moved to Compact, if they all fit.
func compactEntry(e seriesEntry) seriesEntry {
	c := make([][5]int64, len(e.Points))
	for i, p := range e.Points {
		t := p.T.UnixNano()
		sc, se, ok1 := p.Spent.Compact()
		rc, re, ok2 := p.Reserved.Compact()
		if !ok1 || !ok2 || p.T.Location() != time.UTC || !time.Unix(0, t).Equal(p.T) {
			return e
		}
		c[i] = [5]int64{t, sc, int64(se), rc, int64(re)}
	}
	e.Points, e.Compact = nil, c
	return e
}

// points returns e's points, from Compact when it has them.
func (e *seriesEntry) points() ([]Point, error) {
	if e.Compact == nil {
		return e.Points, nil
	}
	if len(e.Points) > 0 {
		return nil, fmt.Errorf("series of %v: points both compact and not", e.Budget)
	}
	out := make([]Point, len(e.Compact))
	for i, c := range e.Compact {
		for _, exp := range []int64{c[2], c[4]} {
			if exp < -events.MaxFractionDigits || exp > events.MaxIntegerDigits {
				return nil, fmt.Errorf("series of %v: point %d: exponent %d", e.Budget, i, exp)
			}
		}
		out[i] = Point{T: time.Unix(0, c[0]).UTC(), Spent: events.MoneyFromCompact(c[1], int8(c[2])), Reserved: events.MoneyFromCompact(c[3], int8(c[4]))}
	}
	return out, nil
}

// SectionName is SeriesSection (ledger.Section).
func (s *Series) SectionName() string { return SeriesSection }

// MarshalSection returns every series as a snapshot section.
func (s *Series) MarshalSection() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]seriesEntry, 0, len(s.m))
	for ref, ss := range s.m {
		out = append(out, compactEntry(seriesEntry{Budget: ref, series: *ss}))
	}
	return json.Marshal(out)
}

// CopySection copies every series and returns the function that encodes
// the copy as MarshalSection does (ledger.SectionCopier): a replica copies
// while it holds its book's lock, and encodes after it (thousands of
// budgets' series take hundreds of milliseconds to encode).
func (s *Series) CopySection() func() ([]byte, error) {
	s.mu.Lock()
	out := make([]seriesEntry, 0, len(s.m))
	for ref, ss := range s.m {
		c := *ss
		c.Points = append([]Point(nil), ss.Points...)
		out = append(out, seriesEntry{Budget: ref, series: c})
	}
	s.mu.Unlock()
	return func() ([]byte, error) {
		for i := range out {
			out[i] = compactEntry(out[i])
		}
		return json.Marshal(out)
	}
}

// LoadSection replaces every series by a snapshot section's.
func (s *Series) LoadSection(_ uint64, data []byte) error {
	var in []seriesEntry
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	if len(in) > MaxSeriesBudgets {
		return fmt.Errorf("%d series, more than %d", len(in), MaxSeriesBudgets)
	}
	m := make(map[events.BudgetRef]*series, len(in))
	for _, e := range in {
		if len(e.Points) > MaxPoints || len(e.Compact) > MaxPoints {
			return fmt.Errorf("series of %v: %d points, more than %d", e.Budget, max(len(e.Points), len(e.Compact)), MaxPoints)
		}
		ss := e.series
		var err error
		if ss.Points, err = e.points(); err != nil {
			return err
		}
		m[e.Budget] = &ss
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	return nil
}

// ResetSection forgets every series.
func (s *Series) ResetSection() {
	s.mu.Lock()
	s.m = map[events.BudgetRef]*series{}
	s.mu.Unlock()
}
