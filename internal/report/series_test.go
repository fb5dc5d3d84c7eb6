package report

import (
	"encoding/json"
	"fmt"
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
		s.add("2026-12", Point{T: t0.Add(time.Duration(i) * time.Second), Spent: events.MoneyFromInt(int64(i))})
		if len(s.Points) >= MaxPoints { // require.Less, without its reflection on each of the 100,000 adds
			require.Less(t, len(s.Points), MaxPoints, "after %d adds", i+1)
		}
	}
	require.Equal(t, t0, s.Points[0].T)
	require.Equal(t, "99999", s.Points[len(s.Points)-1].Spent.String())
	for i := 1; i < len(s.Points); i++ {
		require.True(t, s.Points[i-1].T.Before(s.Points[i].T))
	}
	s.add("2026-11", Point{T: t0, Spent: events.MoneyFromInt(1)}) // an older instance: ignored
	require.Equal(t, "2026-12", s.Instance)
	s.add("2027-01", Point{T: t0.AddDate(0, 1, 0), Spent: events.MoneyFromInt(1)})
	require.Len(t, s.Points, 1)
}

// A Series round-trips through its snapshot section.
func TestSeries_Section(t *testing.T) {
	s := NewSeries()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ref := events.BudgetRef{Scope: "org:a", Period: events.PeriodMonth}
	s.m[ref] = &series{}
	s.m[ref].add("2026-12", Point{T: t0, Spent: events.MustMoney("1.5"), Reserved: events.MustMoney("0.25")})
	data, err := s.MarshalSection()
	require.NoError(t, err)
	back := NewSeries()
	require.NoError(t, back.LoadSection(7, data))
	require.Equal(t, s.Points(ref, "2026-12"), back.Points(ref, "2026-12"))
	back.ResetSection()
	require.Nil(t, back.Points(ref, "2026-12"))
}

// CopySection copies the series when it is called (under the replica's
// book lock) and encodes them as MarshalSection did then, whatever is
// folded in between: a point added, a series started again in the next
// instance (which reuses the points' array).
func TestSeries_CopySection(t *testing.T) {
	s := NewSeries()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := events.BudgetRef{Scope: "org:a", Period: events.PeriodMonth}
	b := events.BudgetRef{Scope: "org:b", Period: events.PeriodDay}
	s.m[a], s.m[b] = &series{}, &series{}
	for i := range 5 {
		s.m[a].add("2026-12", Point{T: t0.Add(time.Duration(i) * time.Minute), Spent: events.MoneyFromInt(int64(i))})
		s.m[b].add("2026-12-01", Point{T: t0.Add(time.Duration(i) * time.Minute), Reserved: events.MoneyFromInt(int64(i))})
	}
	want, err := s.MarshalSection()
	require.NoError(t, err)
	encode := s.CopySection()
	s.m[a].add("2026-12", Point{T: t0.Add(time.Hour), Spent: events.MoneyFromInt(9)})
	s.m[b].add("2026-12-02", Point{T: t0.Add(24 * time.Hour), Reserved: events.MoneyFromInt(7)})
	got, err := encode()
	require.NoError(t, err)
	back, wantBack := NewSeries(), NewSeries()
	require.NoError(t, back.LoadSection(7, got))
	require.NoError(t, wantBack.LoadSection(7, want))
	for _, ref := range []events.BudgetRef{a, b} {
		inst := "2026-12"
		if ref == b {
			inst = "2026-12-01"
		}
		require.Len(t, back.Points(ref, inst), 5)
		require.Equal(t, wantBack.Points(ref, inst), back.Points(ref, inst))
	}
}

// seriesOf is a Series of n budgets of MaxPoints-1 points each.
func seriesOf(n int) *Series {
	s := NewSeries()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for b := range n {
		ref := events.BudgetRef{Scope: events.Scope(fmt.Sprintf("user:u%d", b)), Period: events.PeriodMonth}
		ss := &series{Instance: "2026-12"}
		for i := range MaxPoints - 1 {
			ss.Points = append(ss.Points, Point{T: t0.Add(time.Duration(i) * time.Minute),
				Spent: events.MustMoney(fmt.Sprintf("%d.%03d", i, b%1000)), Reserved: events.MustMoney("0.0150")})
		}
		s.m[ref] = ss
	}
	return s
}

// legacySection is s's section as it was written before Compact: every
// point as Points.
func legacySection(t testing.TB, s *Series) []byte {
	out := make([]seriesEntry, 0, len(s.m))
	for ref, ss := range s.m {
		out = append(out, seriesEntry{Budget: ref, series: *ss})
	}
	data, err := json.Marshal(out)
	require.NoError(t, err)
	return data
}

// The section writes points compact and reads them back, every amount
// to the digit; a section of the earlier form (Points) still loads; a
// series with a point that does not fit (a time not in UTC) is written as
// Points; a section with both forms in one series, or a bad exponent, is
// refused.
func TestSeries_SectionCompact(t *testing.T) {
	s := seriesOf(3)
	odd := events.BudgetRef{Scope: "org:odd", Period: events.PeriodMonth}
	s.m[odd] = &series{Instance: "2026-12", Points: []Point{{T: time.Date(2026, 12, 1, 0, 0, 0, 0, time.FixedZone("x", 3600)), Spent: events.MustMoney("1")}}}
	data, err := s.MarshalSection()
	require.NoError(t, err)
	require.Contains(t, string(data), `"compact":[[`)
	for _, sec := range [][]byte{data, legacySection(t, s)} {
		back := NewSeries()
		require.NoError(t, back.LoadSection(1, sec))
		require.Len(t, back.m, len(s.m))
		for ref, ss := range s.m {
			got := back.m[ref]
			require.Len(t, got.Points, len(ss.Points))
			for i, p := range ss.Points {
				q := got.Points[i]
				require.True(t, p.T.Equal(q.T))
				require.Equal(t, [2]string{p.Spent.String(), p.Reserved.String()}, [2]string{q.Spent.String(), q.Reserved.String()})
			}
		}
	}
	for _, bad := range []string{
		`[{"budget":{"scope":"org:a","period":"month"},"instance":"2026-12","points":[{"t":"2026-12-01T00:00:00Z","spent":"1","reserved":"0"}],"compact":[[0,1,0,0,0]]}]`,
		`[{"budget":{"scope":"org:a","period":"month"},"instance":"2026-12","compact":[[0,1,99,0,0]]}]`,
	} {
		require.Error(t, NewSeries().LoadSection(1, []byte(bad)), bad)
	}
}

// BenchmarkSeries_LoadSection loads the section of 300 budgets' full
// series, compact and in the earlier form. Run it with
//
//	go test -run '^$' -bench BenchmarkSeries_LoadSection ./internal/report/
func BenchmarkSeries_LoadSection(b *testing.B) {
	s := seriesOf(300)
	compact, err := s.MarshalSection()
	require.NoError(b, err)
	for name, data := range map[string][]byte{"compact": compact, "points": legacySection(b, s)} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				require.NoError(b, NewSeries().LoadSection(1, data))
			}
		})
	}
}
