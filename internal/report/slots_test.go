package report_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// runRef is the lifetime balance of run scope run:bulk-i.
func runRef(i int) events.BalanceRef {
	return events.BalanceRef{Scope: events.Scope(fmt.Sprintf("run:bulk-%03d", i)), Period: events.PeriodLifetime, Instance: "all"}
}

var (
	globex = events.BalanceRef{Scope: "org:globex", Period: events.PeriodLifetime, Instance: "all"}
	teamX  = events.BalanceRef{Scope: "team:x", Period: events.PeriodLifetime, Instance: "all"}
)

// spendRuns opens and settles one reservation of 1 in each of runs
// [from, to) at at, 25 to a commit.
func spendRuns(bk *book, from, to int, at time.Time) {
	var evs []events.Event
	for i := from; i < to; i++ {
		id := fmt.Sprintf("rsv_run_%03d", i)
		evs = append(evs, cat(open(id, "1", at, time.Minute, nil, runRef(i)), settle(id, "1", "1", at, false, false, runRef(i)))...)
		if len(evs) >= 50 || i == to-1 {
			bk.commit(evs...)
			evs = nil
		}
	}
}

// requireNamedAndOther checks the aggregate's report got against the
// replay's want: every group got names is want's group of that value, to
// the cent; every group of want that got does not name adds up, with the
// others of its unit, in got's Other groups. With perKind, each adds up in
// the Other group of its kind ("run:*"), and there is no other Other
// group. It returns got's groups by value ("" for the one Other group).
func requireNamedAndOther(t *testing.T, want *report.SpendReport, got *report.AggregateReport, perKind bool) map[string]report.SpendGroup {
	t.Helper()
	require.Equal(t, want.Position, got.Position)
	type sums struct {
		n                        int64
		spend, overrun, reserved events.Money
	}
	add := func(s sums, g report.SpendGroup) sums {
		return sums{s.n + g.Reservations, s.spend.Add(g.Spend), s.overrun.Add(g.Overrun), s.reserved.Add(g.Reserved)}
	}
	wantOf := map[string]report.SpendGroup{}
	for _, g := range want.Groups {
		require.Equal(t, "USD", g.Unit)
		wantOf[g.Value] = g
	}
	gotOf := map[string]report.SpendGroup{}
	otherWant, otherGot := map[string]sums{}, map[string]sums{}
	named := map[string]bool{}
	for i, g := range got.Groups {
		require.Equal(t, "USD", g.Unit)
		if got.IsOther(i) {
			gotOf[g.Value] = g
			k := ""
			if perKind {
				require.True(t, strings.HasSuffix(g.Value, ":*"), "an Other group of a kind: %q", g.Value)
				k = g.Value
			}
			otherGot[k] = add(otherGot[k], g)
			continue
		}
		w, ok := wantOf[g.Value]
		require.True(t, ok, "the report names %s, the replay does not", g.Value)
		require.Equal(t, [8]any{w.Value, w.Unit, w.Reservations, w.Open, w.Settled, w.Released, w.Expired, w.Late},
			[8]any{g.Value, g.Unit, g.Reservations, g.Open, g.Settled, g.Released, g.Expired, g.Late})
		require.Equal(t, [3]string{w.Spend.String(), w.Overrun.String(), w.Reserved.String()},
			[3]string{g.Spend.String(), g.Overrun.String(), g.Reserved.String()}, w.Value)
		gotOf[g.Value] = g
		named[g.Value] = true
	}
	for _, g := range want.Groups {
		if named[g.Value] {
			continue
		}
		k := ""
		if perKind {
			k = report.KindOther(g.Value)
		}
		otherWant[k] = add(otherWant[k], g)
	}
	require.Equal(t, len(otherWant), len(otherGot), "Other groups: want %v got %v", otherWant, otherGot)
	for k, w := range otherWant {
		g := otherGot[k]
		require.Equal(t, [4]string{fmt.Sprint(w.n), w.spend.String(), w.overrun.String(), w.reserved.String()},
			[4]string{fmt.Sprint(g.n), g.spend.String(), g.overrun.String(), g.reserved.String()}, "Other group %q", k)
	}
	return gotOf
}

// TestAggregate_ScopesPerKind: an agent platform gives every run its own
// scope. After 520 run scopes, a new org's and a new team's spend still
// have their own groups: the runs past MaxReportValues add up in run:*,
// an Other group of their kind, and every named group and the run:*
// group equal the replay's, before and after a snapshot.
//
// How it can fail: with MaxReportValues scopes in all (the first ones met,
// whatever their kind), as before, org:globex and team:x are past them and
// add up with the last runs in the one Other group (""): the report has no
// org:globex group.
func TestAggregate_ScopesPerKind(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithLayout(lanes2))
	bk := newBook(t, env)
	const runs = report.MaxReportValues + 20
	spendRuns(bk, 0, runs, t0)
	// One run past the cap left open, and one of the first ones.
	bk.commit(open("rsv_open_late", "2.5", t0, time.Hour, nil, runRef(runs+1))...)
	bk.commit(open("rsv_open_early", "0.5", t0, time.Hour, nil, runRef(3))...)
	// The org and the team come after every run.
	bk.commit(cat(open("rsv_globex", "10", t0.Add(time.Minute), time.Minute, nil, globex),
		settle("rsv_globex", "10", "7.25", t0.Add(2*time.Minute), false, false, globex))...)
	bk.commit(cat(open("rsv_team", "3", t0.Add(time.Minute), time.Minute, nil, teamX, runRef(runs+2)),
		settle("rsv_team", "3", "3.5", t0.Add(2*time.Minute), false, false, teamX, runRef(runs+2)))...)

	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	data, err := a.MarshalJSON()
	require.NoError(t, err)
	restored, err := report.UnmarshalAggregate(data)
	require.NoError(t, err)
	again, err := restored.MarshalJSON()
	require.NoError(t, err)
	require.Equal(t, string(data), string(again), "a snapshot reads back to itself")

	want, err := report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout)).Report(t.Context(), report.Filter{}, report.ByScope)
	require.NoError(t, err)
	require.Len(t, want.Groups, runs+4)
	for _, agg := range []*report.Aggregate{a, restored} {
		got, err := agg.Report(report.ByScope, report.Filter{})
		require.NoError(t, err)
		groups := requireNamedAndOther(t, want, got, true)
		require.Len(t, got.Other, 1, "one Other group: run:*")
		require.Equal(t, "7.25", groups["org:globex"].Spend.String())
		require.Equal(t, "3.5", groups["team:x"].Spend.String())
		require.Equal(t, "0.5", groups["run:bulk-003"].Reserved.String())
		o := groups["run:*"]
		require.Equal(t, int64(22), o.Reservations, "20 runs past the cap, the open one and the team's")
		require.Equal(t, "23.5", o.Spend.String())
		require.Equal(t, "2.5", o.Reserved.String())
	}

	// The open run past the cap settles: taken out of run:* and put back.
	bk.commit(settle("rsv_open_late", "2.5", "2", t0.Add(time.Hour), false, false, runRef(runs+1))...)
	foldStream(t, env, a, 0)
	foldStream(t, env, restored, 0)
	want, err = report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout)).Report(t.Context(), report.Filter{}, report.ByScope)
	require.NoError(t, err)
	for _, agg := range []*report.Aggregate{a, restored} {
		got, err := agg.Report(report.ByScope, report.Filter{})
		require.NoError(t, err)
		groups := requireNamedAndOther(t, want, got, true)
		require.Equal(t, "25.5", groups["run:*"].Spend.String())
		require.Equal(t, "0", groups["run:*"].Reserved.String())
	}
}

// TestAggregate_ScopeKindsBounded: a tenant tracks scopes of at most
// MaxReportKinds kinds; scopes of the kinds met after them add up in the
// one Other group (""), as every scope past the cap did before.
func TestAggregate_ScopeKindsBounded(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithLayout(lanes2))
	bk := newBook(t, env)
	var evs []events.Event
	for i := range report.MaxReportKinds + 3 {
		ref := events.BalanceRef{Scope: events.Scope(fmt.Sprintf("k%02d:x", i)), Period: events.PeriodLifetime, Instance: "all"}
		id := fmt.Sprintf("rsv_%02d", i)
		evs = append(evs, cat(open(id, "1", t0, time.Minute, nil, ref), settle(id, "1", "1", t0, false, false, ref))...)
	}
	bk.commit(evs...)
	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	want, err := report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout)).Report(t.Context(), report.Filter{}, report.ByScope)
	require.NoError(t, err)
	got, err := a.Report(report.ByScope, report.Filter{})
	require.NoError(t, err)
	groups := requireNamedAndOther(t, want, got, false)
	require.Len(t, got.Groups, report.MaxReportKinds+1)
	require.Equal(t, int64(3), groups[""].Reservations)
}

// TestAggregate_ScopeSlotsFromVersion6: a report snapshot written before
// per-kind slots (version 6: the first MaxReportValues scopes of every
// kind together, the rest in the one Other group) still loads and goes
// on counting. Before it, 505 runs and then org:globex spent: globex and
// the last runs are in the one Other group, with an open reservation in
// a run past the cap. After it, globex spends again, a new team spends,
// the open reservation settles. Every report still equals the replay
// where it names a scope, and its Other groups add up to the rest: a
// report that covers the hours before the snapshot does not name globex
// nor the team (what of theirs the old Other group holds is not known),
// one from after them names both. The upgraded aggregate written again
// (version 7) keeps this.
//
// How it can fail: loaded without upgradeSlots' move of the open
// reservation, its settle takes it out of run:*, where it never was: the
// one Other group holds 2.5 reserved of a reservation settled, and its
// sums differ from the replay's. Without legacyScopes, globex, tracked
// after the snapshot, is named in the report of everything with its one
// reservation since (the replay has 2).
func TestAggregate_ScopeSlotsFromVersion6(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithLayout(lanes2))
	bk := newBook(t, env)
	const runs = report.MaxReportValues + 5
	spendRuns(bk, 0, runs, t0)
	bk.commit(open("rsv_open_late", "2.5", t0, 3*time.Hour, nil, runRef(runs-1))...)
	bk.commit(cat(open("rsv_globex_1", "4", t0.Add(time.Minute), time.Minute, nil, globex),
		settle("rsv_globex_1", "4", "3", t0.Add(2*time.Minute), false, false, globex))...)

	// The snapshot the code before per-kind slots wrote of this stream
	// (commit a056425, the same book: the same revisions, sequences and
	// chain): globex's spend in the one Other group, as are the runs past
	// the cap and the open reservation.
	v6 := readGzip(t, "testdata/report-v6.json.gz")
	var s struct {
		Version int    `json:"version"`
		Seq     uint64 `json:"seq"`
	}
	require.NoError(t, json.Unmarshal(v6, &s))
	require.Equal(t, 6, s.Version)
	require.Contains(t, string(v6), `"Value":"","Other":true,"Unit":"USD","Reservations":7,"Open":1`)
	old, err := report.UnmarshalAggregate(v6)
	require.NoError(t, err)
	require.Equal(t, s.Seq, old.Position())
	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	require.Equal(t, s.Seq, a.Position(), "the snapshot is of this stream")

	// After the snapshot, two hours on.
	t1 := t0.Add(2 * time.Hour)
	bk.commit(cat(open("rsv_globex_2", "5", t1, time.Minute, nil, globex),
		settle("rsv_globex_2", "5", "4", t1, false, false, globex))...)
	bk.commit(cat(open("rsv_team", "2", t1, time.Minute, nil, teamX),
		settle("rsv_team", "2", "2", t1, false, false, teamX))...)
	bk.commit(settle("rsv_open_late", "2.5", "1.5", t1, false, false, runRef(runs-1))...)
	bk.commit(cat(open("rsv_run_new", "1", t1, time.Minute, nil, runRef(runs+10)),
		settle("rsv_run_new", "1", "1", t1, false, false, runRef(runs+10)))...)
	foldStream(t, env, old, 0)
	data, err := old.MarshalJSON()
	require.NoError(t, err)
	require.Contains(t, string(data), `"version":7`)
	v7, err := report.UnmarshalAggregate(data)
	require.NoError(t, err)
	again, err := v7.MarshalJSON()
	require.NoError(t, err)
	require.Equal(t, string(data), string(again), "a snapshot reads back to itself")

	reader := report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout))
	for _, agg := range []*report.Aggregate{old, v7} {
		// Everything: globex and the team are not named.
		want, err := reader.Report(t.Context(), report.Filter{}, report.ByScope)
		require.NoError(t, err)
		got, err := agg.Report(report.ByScope, report.Filter{})
		require.NoError(t, err)
		groups := requireNamedAndOther(t, want, got, false)
		require.NotContains(t, groups, "org:globex")
		require.NotContains(t, groups, "team:x")
		require.Equal(t, "0", groups[""].Reserved.String(), "the open reservation left the old Other group")
		// The hours after the snapshot's: named, to the cent.
		f := report.Filter{From: t0.Add(time.Hour)}
		want, err = reader.Report(t.Context(), f, report.ByScope)
		require.NoError(t, err)
		got, err = agg.Report(report.ByScope, f)
		require.NoError(t, err)
		groups = requireNamedAndOther(t, want, got, true)
		require.Equal(t, "4", groups["org:globex"].Spend.String())
		require.Equal(t, "2", groups["team:x"].Spend.String())
		require.Equal(t, int64(1), groups["run:*"].Reservations, "the new run, past the cap")
		// The snapshot's hour: the settled reservation counts where it
		// opened, in run:*, and globex's first spend in the old Other.
		f = report.Filter{To: t0.Add(time.Hour)}
		want, err = reader.Report(t.Context(), f, report.ByScope)
		require.NoError(t, err)
		got, err = agg.Report(report.ByScope, f)
		require.NoError(t, err)
		requireNamedAndOther(t, want, got, false)
	}
}

// readGzip reads the gzipped file at path.
func readGzip(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	r, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	return out
}
