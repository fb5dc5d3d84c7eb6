package report

import (
	"slices"
	"sort"
)

// FoldSmallest moves the n groups with the least spend (then the fewest
// denials, then the last value) into the one Other group of their unit
// (Value "", created if the report has none), so that a reply that must
// fit one message still adds up to every group's totals. Other groups
// are never folded; n past the others is the number there are. It
// returns how many groups it folded.
func (r *AggregateReport) FoldSmallest(n int) int {
	var cand []int
	for i := range r.Groups {
		if !r.IsOther(i) {
			cand = append(cand, i)
		}
	}
	sort.SliceStable(cand, func(a, b int) bool {
		x, y := &r.Groups[cand[a]], &r.Groups[cand[b]]
		if c := x.Spend.Cmp(y.Spend); c != 0 {
			return c < 0
		}
		if x.Denials != y.Denials {
			return x.Denials < y.Denials
		}
		return x.Value > y.Value
	})
	n = min(n, len(cand))
	if n <= 0 {
		return 0
	}
	fold := make(map[int]bool, n)
	for _, i := range cand[:n] {
		fold[i] = true
	}
	// The one Other group of each unit, by index in the kept groups.
	var kept []SpendGroup
	var other []int
	into := map[string]int{}
	for i, g := range r.Groups {
		if fold[i] {
			continue
		}
		kept = append(kept, g)
		if r.IsOther(i) {
			other = append(other, len(kept)-1)
			if g.Value == "" {
				into[g.Unit] = len(kept) - 1
			}
		}
	}
	for i, g := range r.Groups {
		if !fold[i] {
			continue
		}
		j, ok := into[g.Unit]
		if !ok {
			kept = append(kept, SpendGroup{Unit: g.Unit})
			j = len(kept) - 1
			into[g.Unit] = j
			other = append(other, j)
		}
		o := &kept[j]
		o.Reservations += g.Reservations
		o.Open += g.Open
		o.Settled += g.Settled
		o.Released += g.Released
		o.Expired += g.Expired
		o.Late += g.Late
		o.Spend = o.Spend.Add(g.Spend)
		o.Overrun = o.Overrun.Add(g.Overrun)
		o.Reserved = o.Reserved.Add(g.Reserved)
		o.Denials += g.Denials
	}
	r.Groups, r.Other = kept, slices.Clip(other)
	sortGroups(r)
	return n
}

// FoldSmallestShadow moves the m shadow groups with the fewest decisions
// (admitted and denied, then the last value) into the one Other group of
// their mode and unit (Value "", created if the report has none), as
// FoldSmallest does the spend groups. It returns how many it folded.
func (r *AggregateReport) FoldSmallestShadow(m int) int {
	var cand []int
	for i := range r.Shadow {
		if !r.Shadow[i].Other {
			cand = append(cand, i)
		}
	}
	sort.SliceStable(cand, func(a, b int) bool {
		x, y := &r.Shadow[cand[a]], &r.Shadow[cand[b]]
		if nx, ny := x.Admitted+x.Denied, y.Admitted+y.Denied; nx != ny {
			return nx < ny
		}
		return x.Value > y.Value
	})
	m = min(m, len(cand))
	if m <= 0 {
		return 0
	}
	fold := make(map[int]bool, m)
	for _, i := range cand[:m] {
		fold[i] = true
	}
	type modeUnit struct{ mode, unit string }
	var kept []ShadowGroup
	into := map[modeUnit]int{}
	for i, g := range r.Shadow {
		if fold[i] {
			continue
		}
		kept = append(kept, g)
		if g.Other && g.Value == "" {
			into[modeUnit{g.Mode, g.Unit}] = len(kept) - 1
		}
	}
	for i, g := range r.Shadow {
		if !fold[i] {
			continue
		}
		j, ok := into[modeUnit{g.Mode, g.Unit}]
		if !ok {
			kept = append(kept, ShadowGroup{Other: true, Mode: g.Mode, Unit: g.Unit})
			j = len(kept) - 1
			into[modeUnit{g.Mode, g.Unit}] = j
		}
		kept[j].merge(&g)
	}
	sortShadow(kept)
	r.Shadow = kept
	return m
}
