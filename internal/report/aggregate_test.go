package report_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// mixedHistory writes n reservations over several hours on two lanes and
// three scopes: multi-scope ones, settles with and without overrun,
// releases, expiries, settles after expiry, late settles before the
// sweeper, ones left open; metadata with a model always, a user
// sometimes. It returns the time span the reservations opened in.
func mixedHistory(t testing.TB, env *testenv.Env, n int, seed uint64) (time.Time, time.Time) {
	bk := newBook(t, env)
	bk.define(acme.Budget(), "1000000")
	bk.define(acmeDay.Budget(), "1000000")
	bk.define(u17.Budget(), "1000000")
	rng := rand.New(rand.NewPCG(seed, 1))
	scopes := [][]events.BalanceRef{{acme}, {u17}, {u17, acme}, {acmeDay, acme}, {acmeDay}}
	models := []string{"gpt-4o", "claude", "mini"}
	type open struct {
		id       string
		reserved string
		refs     []events.BalanceRef
	}
	var live []open
	start := t0.Add(-5 * time.Hour)
	at := start
	for i := range n {
		at = at.Add(time.Duration(rng.IntN(240)) * time.Second)
		id := fmt.Sprintf("rsv_%04d", i)
		meta := map[string]string{"model": models[rng.IntN(len(models))]}
		if rng.IntN(2) == 0 {
			meta["user"] = fmt.Sprintf("u-%d", rng.IntN(4))
		}
		amount := fmt.Sprintf("%d.%02d", rng.IntN(5), 1+rng.IntN(99))
		refs := scopes[rng.IntN(len(scopes))]
		bk.commit(cat(nil, openEvents(id, amount, at, meta, refs))...)
		live = append(live, open{id, amount, refs})
		// Close some of the open ones.
		for len(live) > 3 && rng.IntN(3) > 0 {
			k := rng.IntN(len(live))
			o := live[k]
			live = append(live[:k], live[k+1:]...)
			actual := fmt.Sprintf("%d.%03d", rng.IntN(6), rng.IntN(1000))
			switch rng.IntN(5) {
			case 0:
				bk.commit(settle(o.id, o.reserved, actual, at, false, false, o.refs...)...)
			case 1:
				bk.commit(settle(o.id, o.reserved, actual, at, true, false, o.refs...)...)
			case 2:
				bk.commit(release(o.id, o.reserved, events.ReasonReleased, at, o.refs...)...)
			case 3:
				bk.commit(release(o.id, o.reserved, events.ReasonExpired, at, o.refs...)...)
			case 4:
				bk.commit(release(o.id, o.reserved, events.ReasonExpired, at, o.refs...)...)
				bk.commit(settle(o.id, o.reserved, actual, at.Add(time.Second), true, true, o.refs...)...)
			}
		}
	}
	return start, at
}

func openEvents(id, amount string, at time.Time, meta map[string]string, refs []events.BalanceRef) []events.Event {
	return open(id, amount, at, time.Minute, meta, refs...)
}

// foldStream folds the ledger stream of env into a, from a's position to
// the stream's last message, through an ordered consumer.
func foldStream(t testing.TB, env *testenv.Env, a *report.Aggregate, until uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)
	last := s.CachedInfo().State.LastSeq
	if until == 0 || until > last {
		until = last
	}
	if a.Position() >= until {
		return
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: a.Position() + 1})
	require.NoError(t, err)
	it, err := c.Messages()
	require.NoError(t, err)
	defer it.Stop()
	for a.Position() < until {
		msg, err := it.Next(jetstream.NextContext(ctx))
		require.NoError(t, err)
		md, err := msg.Metadata()
		require.NoError(t, err)
		key, ok := env.Layout.KeyOf(msg.Subject())
		require.True(t, ok)
		require.NoError(t, a.Apply(md.Sequence.Stream, key, msg.Data(), md.Timestamp))
	}
}

// requireSameReport checks that the aggregate's report equals the
// replay's, group by group, to the cent (and to the printed digit).
func requireSameReport(t testing.TB, want *report.SpendReport, got *report.AggregateReport) {
	t.Helper()
	require.Empty(t, got.Other)
	require.Equal(t, want.Position, got.Position)
	require.Equal(t, len(want.Groups), len(got.Groups), "groups: want %v got %v", want.Groups, got.Groups)
	for i := range want.Groups {
		w, g := want.Groups[i], got.Groups[i]
		require.Equal(t, [8]any{w.Value, w.Unit, w.Reservations, w.Open, w.Settled, w.Released, w.Expired, w.Late},
			[8]any{g.Value, g.Unit, g.Reservations, g.Open, g.Settled, g.Released, g.Expired, g.Late}, "group %d", i)
		require.Equal(t, [3]string{w.Spend.String(), w.Overrun.String(), w.Reserved.String()},
			[3]string{g.Spend.String(), g.Overrun.String(), g.Reserved.String()}, "group %d (%s)", i, w.Value)
	}
}

// TestAggregate_EqualsReplay folds a mixed history into an Aggregate and
// compares every report (by scope, model, user, a key nobody set; over
// every hour window and open bounds) with the replay's. Half-way, the
// Aggregate is written as a snapshot, read back, and folds on: the
// reports of the restored one must equal them too. The history has 150
// reservations over 5 hours: every kind of reservation in each scope
// (checked below), 10 windows, 40 replays. (It had 300 over about 10
// hours: about 60 replays of twice the messages, 3 times the CPU, for the
// same kinds.)
func TestAggregate_EqualsReplay(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithLayout(lanes2))
	start, end := mixedHistory(t, env, 150, 7)
	p := projector.New(env.JS, env.Layout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a := report.NewAggregate()
	s, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)
	last := s.CachedInfo().State.LastSeq
	foldStream(t, env, a, last/2)
	data, err := a.MarshalJSON()
	require.NoError(t, err)
	restored, err := report.UnmarshalAggregate(data)
	require.NoError(t, err)
	again, err := restored.MarshalJSON()
	require.NoError(t, err)
	require.Equal(t, string(data), string(again), "a snapshot reads back to itself")
	// A replica copies the aggregate under its book's lock and encodes
	// the copy after it, while the fold goes on: the copy shares nothing
	// the later folds change, and encodes as MarshalJSON did when it was
	// taken.
	encodeLater := a.CopySnapshot()
	foldStream(t, env, a, 0)
	foldStream(t, env, restored, 0)
	require.Positive(t, a.Tracked(), "some reservations are left open")
	later, err := encodeLater()
	require.NoError(t, err)
	require.Equal(t, string(data), string(later), "the copy, encoded after the rest of the fold")
	now, err := a.MarshalJSON()
	require.NoError(t, err)
	require.NotEqual(t, string(data), string(now), "the fold moved on")

	// Windows: open bounds, the whole span, each single hour, and
	// half-open ones (each replay costs a consumer, so not every pair).
	h0, h1 := start.Truncate(time.Hour), end.Truncate(time.Hour).Add(time.Hour)
	windows := [][2]time.Time{{}, {h0, h1}, {h0.Add(time.Hour), {}}, {{}, h1.Add(-time.Hour)}, {h0.Add(time.Hour), h1.Add(-2 * time.Hour)}}
	for h := h0; h.Before(h1); h = h.Add(time.Hour) {
		windows = append(windows, [2]time.Time{h, h.Add(time.Hour)})
	}
	require.Greater(t, len(windows), 8, "the history spans several hours")
	// The history holds every kind of reservation in both scopes, and
	// multi-scope ones (with 150 reservations, seed 7: per scope 3 or more
	// open, 37 settled, 9 released, 13 expired, 23 late; 27 multi-scope).
	all, err := report.NewReader(env.JS, env.Layout, p).Report(ctx, report.Filter{}, report.ByScope)
	require.NoError(t, err)
	require.Len(t, all.Groups, 2)
	var inScopes int64
	for _, g := range all.Groups {
		require.True(t, g.Open > 0 && g.Settled > 0 && g.Released > 0 && g.Expired > 0 && g.Late > 0 && g.Overrun.Sign() > 0, "%+v", g)
		inScopes += g.Reservations
	}
	require.Greater(t, inScopes, int64(150), "some reservations are multi-scope")
	for _, by := range []report.GroupBy{report.ByScope, report.ByMetadata("model"), report.ByMetadata("user"), report.ByMetadata("nobody")} {
		for _, w := range windows {
			from, to := w[0], w[1]
			{
				want, err := report.NewReader(env.JS, env.Layout, p).Report(ctx, report.Filter{From: from, To: to}, by)
				require.NoError(t, err)
				for _, agg := range []*report.Aggregate{a, restored} {
					got, err := agg.Report(by, report.Filter{From: from, To: to})
					require.NoError(t, err)
					requireSameReport(t, want, got)
				}
			}
		}
	}
}

// TestAggregate_Golden: on the golden export's scenario (late settles
// after expiry, multi-scope, a reservation still open) the aggregate's
// report equals the replay's.
func TestAggregate_Golden(t *testing.T) {
	t.Parallel()
	env := goldenScenario(t)
	p := projector.New(env.JS, env.Layout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	for _, by := range []report.GroupBy{report.ByScope, report.ByMetadata("model"), report.ByMetadata("feature")} {
		want, err := report.NewReader(env.JS, env.Layout, p).Report(ctx, report.Filter{}, by)
		require.NoError(t, err)
		got, err := a.Report(by, report.Filter{})
		require.NoError(t, err)
		requireSameReport(t, want, got)
	}
}

// TestAggregate_Bounded: past MaxReportValues values of a key, the rest
// add up in one Other group; the totals still equal the replay's, and the
// cells do not grow with the number of reservations closed.
func TestAggregate_Bounded(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithLayout(lanes2))
	bk := newBook(t, env)
	bk.define(acme.Budget(), "1000000")
	n := report.MaxReportValues + 20
	// 20 reservations opened and settled per revision: 26 writes, not 520.
	var evs []events.Event
	for i := range n {
		id := fmt.Sprintf("rsv_%05d", i)
		evs = append(evs, cat(open(id, "1", t0, time.Minute, map[string]string{"user": fmt.Sprintf("u-%05d", i)}, acme),
			settle(id, "1", "1", t0, false, false, acme))...)
		if (i+1)%20 == 0 || i == n-1 {
			bk.commit(evs...)
			evs = nil
		}
	}
	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	require.Zero(t, a.Tracked(), "closed reservations are not kept")
	// One bucket: total, one scope, MaxReportValues users and one Other.
	require.Equal(t, 1+1+report.MaxReportValues+1, a.Cells())
	rep, err := a.Report(report.ByMetadata("user"), report.Filter{})
	require.NoError(t, err)
	require.Len(t, rep.Groups, report.MaxReportValues+1)
	require.Len(t, rep.Other, 1)
	o := rep.Groups[rep.Other[0]]
	require.Equal(t, int64(20), o.Reservations)
	require.Equal(t, "20", o.Spend.String())
}

var benchReportRes = flag.Int("report-reservations", 3000, "reservations in the book of BenchmarkAggregate_Report")

// BenchmarkAggregate_Report compares one hour's report by model from the
// maintained aggregate with the replay of the book (what every report
// cost before), on a mixed history of -report-reservations reservations
// over about -report-reservations x 2 minutes.
func BenchmarkAggregate_Report(b *testing.B) {
	env := testenv.New(b, testenv.WithLayout(lanes2))
	start, _ := mixedHistory(b, env, *benchReportRes, 3)
	a := report.NewAggregate()
	foldStream(b, env, a, 0)
	p := projector.New(env.JS, env.Layout)
	from := start.Truncate(time.Hour).Add(2 * time.Hour)
	to := from.Add(time.Hour)
	by := report.ByMetadata("model")
	ctx := context.Background()
	b.Run("aggregate", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.Report(by, report.Filter{From: from, To: to}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(a.Cells()), "cells")
	})
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			if _, err := report.NewReader(env.JS, env.Layout, p).Report(ctx, report.Filter{From: from, To: to}, by); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// long is a lifetime balance: any event time lands in its one instance.
var long = events.BalanceRef{Scope: "org:long", Period: events.PeriodLifetime, Instance: "all"}

// lifetimeBook is a fresh server with long's budget defined.
func lifetimeBook(t *testing.T) (*testenv.Env, *book) {
	env := testenv.New(t)
	bk := newBook(t, env)
	bk.define(long.Budget(), "1000000")
	return env, bk
}

// TestAggregate_RollsUpOldHours: a history of 100 days keeps hour buckets
// for the last HourDays days and one bucket per UTC day before that, so
// its cells grow with days, not hours. Every report whose bounds are whole
// days before the horizon (and whole hours after it) equals the replay's,
// before and after a snapshot; one bound inside a rolled day is refused.
// A reservation opened on the first day and settled on the last moves its
// contribution within its rolled day. How we know it can fail: with the
// contribution taken out of the hour bucket instead of the day (bucketOf
// in place of a.bucket), the settled reservation stays open in the first
// day's cell and the whole-range report differs from the replay's.
func TestAggregate_RollsUpOldHours(t *testing.T) {
	t.Parallel()
	env, bk := lifetimeBook(t)
	start := t0.Add(-100 * 24 * time.Hour).Add(7 * time.Hour) // 07:00 on the first day
	bk.commit(open("rsv_first", "5", start, 24*time.Hour*365, map[string]string{"model": "old"}, long)...)
	const n = 150 // one every 16 hours: 100 days
	at := start
	for i := range n {
		at = start.Add(time.Duration(i) * 16 * time.Hour).Add(time.Duration(i%7) * time.Minute)
		id := fmt.Sprintf("rsv_%03d", i)
		bk.commit(cat(open(id, "1", at, time.Minute, map[string]string{"model": []string{"a", "b"}[i%2]}, long),
			settle(id, "1", fmt.Sprintf("0.%d", 1+i%9), at.Add(time.Second), false, false, long))...)
	}
	end := at
	a := report.NewAggregate()
	s, err := env.JS.Stream(t.Context(), env.Layout.StreamName())
	require.NoError(t, err)
	foldStream(t, env, a, s.CachedInfo().State.LastSeq*2/3)
	data, err := a.MarshalJSON()
	require.NoError(t, err)
	restored, err := report.UnmarshalAggregate(data)
	require.NoError(t, err)
	bk.commit(settle("rsv_first", "5", "4.5", end.Add(time.Minute), false, false, long)...)
	foldStream(t, env, a, 0)
	foldStream(t, env, restored, 0)

	day := 24 * time.Hour
	horizon := end.Truncate(day).Add(-report.HourDays * day)
	require.Equal(t, horizon, a.RolledUpBefore(), "hours are kept for %d days back from the latest one", report.HourDays)
	require.Equal(t, horizon, restored.RolledUpBefore())
	// Before the horizon one bucket a day, after it one an hour: each
	// bucket here holds the total, the scope and one model (the first
	// day's 07:00 bucket two models, its cells merged into the day's).
	oldDays := int(horizon.Sub(start.Truncate(day)) / day)
	var snap struct {
		Cells []struct {
			Bucket int64 `json:"bucket"`
		} `json:"cells"`
	}
	data, err = a.MarshalJSON()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &snap))
	buckets := map[int64]bool{}
	for _, c := range snap.Cells {
		buckets[c.Bucket] = true
		if c.Bucket < horizon.Unix() {
			require.Zero(t, c.Bucket%(24*60*60), "a bucket before the horizon is a whole UTC day")
		}
	}
	var before int
	for b := range buckets {
		if b < horizon.Unix() {
			before++
		}
	}
	require.LessOrEqual(t, before, oldDays)
	require.Greater(t, before, oldDays/2, "every old day with a reservation has its bucket")

	p := projector.New(env.JS, env.Layout)
	first := start.Truncate(day)
	windows := [][2]time.Time{
		{},                             // everything
		{first, first.Add(day)},        // the first day, whose reservation was settled last
		{first.Add(10 * day), horizon}, // whole old days
		{first.Add(20 * day), end.Truncate(time.Hour).Add(-5 * time.Hour)}, // across the horizon, ending on an hour
		{end.Truncate(time.Hour).Add(-48 * time.Hour), {}},                 // recent hours
	}
	for _, by := range []report.GroupBy{report.ByScope, report.ByMetadata("model")} {
		for _, w := range windows {
			want, err := report.NewReader(env.JS, env.Layout, p).Report(t.Context(), report.Filter{From: w[0], To: w[1]}, by)
			require.NoError(t, err)
			for _, agg := range []*report.Aggregate{a, restored} {
				got, err := agg.Report(by, report.Filter{From: w[0], To: w[1]})
				require.NoError(t, err, "%v", w)
				requireSameReport(t, want, got)
			}
		}
	}
	_, err = a.Report(report.ByScope, report.Filter{From: first.Add(3*day + 5*time.Hour)})
	require.ErrorIs(t, err, report.ErrRolledUp, "an hour inside a rolled day")
	_, err = a.Report(report.ByScope, report.Filter{To: first.Add(3*day + 5*time.Hour)})
	require.ErrorIs(t, err, report.ErrRolledUp)
}

// TestAggregate_FutureStampRollsUpNothing: a reservation stamped decades
// ahead (a replica with a wrong clock) moves the hour horizon no further
// than the hour after its message's stream time: what is rolled up is
// before now. Without that bound every hour before 2099-09-30 would be
// rolled up into days.
func TestAggregate_FutureStampRollsUpNothing(t *testing.T) {
	t.Parallel()
	env, bk := lifetimeBook(t)
	bk.commit(open("rsv_now", "1", t0, time.Minute, nil, long)...)
	bk.commit(open("rsv_2099", "1", time.Date(2099, 12, 1, 5, 0, 0, 0, time.UTC), time.Minute, nil, long)...)
	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	require.True(t, a.RolledUpBefore().Before(time.Now()), "rolled up before %s", a.RolledUpBefore())
	// Whole days: t0's hours are rolled up once this test runs more than
	// HourDays after t0, and the test must pass then too.
	day := t0.Truncate(24 * time.Hour)
	rep, err := a.Report(report.ByScope, report.Filter{From: day, To: day.Add(24 * time.Hour)})
	require.NoError(t, err)
	require.Len(t, rep.Groups, 1)
	require.Equal(t, int64(1), rep.Groups[0].Reservations)
}

// A report snapshot of an earlier version still loads (a replica on a
// trimmed stream has nothing else to start from); one of a later version
// than this binary knows is refused, so that replica folds the stream.
func TestUnmarshalAggregate_Versions(t *testing.T) {
	t.Parallel()
	data, err := report.NewAggregate().MarshalJSON()
	require.NoError(t, err)
	want := fmt.Sprintf(`"version":%d`, report.AggregateVersion)
	require.Contains(t, string(data), want)
	for v := 1; v <= report.AggregateVersion+1; v++ {
		_, err := report.UnmarshalAggregate([]byte(strings.Replace(string(data), want, fmt.Sprintf(`"version":%d`, v), 1)))
		if v <= report.AggregateVersion {
			require.NoError(t, err, "version %d", v)
		} else {
			require.ErrorContains(t, err, "version", "version %d", v)
		}
	}
}

// TestAggregate_SlotsPerTenant: each tenant has its own MaxReportKeys
// keys and MaxReportValues values. Tenant a meets MaxReportValues+5
// values of one key, then MaxReportKeys+16 other keys; tenant b, after it, still reports
// by a key of its own and keeps its values out of Other, while a's report
// by a key past its slots is refused and its late values add up in Other.
// The operator's report over every tenant is refused by a key a tenant
// may have dropped. A snapshot written and read back keeps all of it, and
// so does a version 4 snapshot (slots shared by every tenant). With the
// slots shared, as before, b's report by its key is refused and its value
// lands in Other: the test fails.
func TestAggregate_SlotsPerTenant(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithLayout(lanes2))
	bk := newBook(t, env)
	ta := events.BalanceRef{Scope: "ta/org:x", Period: events.PeriodMonth, Instance: "2026-11"}
	tb := events.BalanceRef{Scope: "tb/org:y", Period: events.PeriodMonth, Instance: "2026-11"}
	bk.define(ta.Budget(), "1000000")
	bk.define(tb.Budget(), "1000000")
	id := 0
	reserve := func(ref events.BalanceRef, meta map[string]string) []events.Event {
		id++
		rid := fmt.Sprintf("rsv_%05d", id)
		return cat(open(rid, "1", t0, time.Minute, meta, ref), settle(rid, "1", "1", t0, false, false, ref))
	}
	// Tenant a: MaxReportValues+5 users, 25 reservations to a revision.
	var evs []events.Event
	for i := range report.MaxReportValues + 5 {
		evs = append(evs, reserve(ta, map[string]string{"user": fmt.Sprintf("u-%04d", i)})...)
		if len(evs) >= 50 {
			bk.commit(evs...)
			evs = nil
		}
	}
	bk.commit(evs...)
	// Tenant a: MaxReportKeys+16 keys, 16 to a reservation.
	for i := 0; i < report.MaxReportKeys+16; i += events.MaxMetadata {
		meta := map[string]string{}
		for k := i; k < i+events.MaxMetadata; k++ {
			meta[fmt.Sprintf("k%02d", k)] = "v"
		}
		bk.commit(reserve(ta, meta)...)
	}
	// Tenant b, after all of a's: a key of its own and a new user.
	bk.commit(reserve(tb, map[string]string{"team": "blue", "user": "u-b"})...)

	check := func(t *testing.T, a *report.Aggregate) {
		t.Helper()
		one := func(tenant string) report.Filter { return report.Filter{OneTenant: true, Tenant: tenant} }
		rep, err := a.Report(report.ByMetadata("team"), one("tb"))
		require.NoError(t, err, "b's own key")
		require.Equal(t, []string{"blue"}, groupValues(rep))
		rep, err = a.Report(report.ByMetadata("user"), one("tb"))
		require.NoError(t, err)
		require.Equal(t, []string{"u-b"}, groupValues(rep))
		require.Empty(t, rep.Other, "b's user is not Other")

		_, err = a.Report(report.ByMetadata(fmt.Sprintf("k%02d", report.MaxReportKeys+1)), one("ta"))
		require.ErrorIs(t, err, report.ErrKeyNotTracked, "a's key past its slots")
		_, err = a.Report(report.ByMetadata("team"), report.Filter{})
		require.ErrorIs(t, err, report.ErrKeyNotTracked, "every tenant's, a having dropped keys")
		rep, err = a.Report(report.ByMetadata("user"), one("ta"))
		require.NoError(t, err)
		require.Len(t, rep.Other, 1)
		require.Equal(t, int64(5), rep.Groups[rep.Other[0]].Reservations)
	}
	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	t.Run("folded", func(t *testing.T) { check(t, a) })

	data, err := json.Marshal(a)
	require.NoError(t, err)
	t.Run("snapshot", func(t *testing.T) {
		r, err := report.UnmarshalAggregate(data)
		require.NoError(t, err)
		check(t, r)
	})
	t.Run("version 4", func(t *testing.T) {
		// Before per-tenant slots, one set served every tenant: b's
		// "team" was dropped and its user is Other. Each tenant keeps
		// the shared set, so what it counted stays where it was.
		var s map[string]any
		require.NoError(t, json.Unmarshal(data, &s))
		keys := []string{"user"}
		for i := range report.MaxReportKeys - 1 {
			keys = append(keys, fmt.Sprintf("k%02d", i))
		}
		values := map[string][]string{}
		for _, sl := range s["slots"].([]any) {
			for d, vs := range sl.(map[string]any)["values"].(map[string]any) {
				for _, v := range vs.([]any) {
					if len(values[d]) < report.MaxReportValues && !slices.Contains(values[d], v.(string)) {
						values[d] = append(values[d], v.(string))
					}
				}
			}
		}
		delete(s, "slots")
		s["version"], s["keys"], s["over_keys"], s["values"] = 4, keys, true, values
		v4, err := json.Marshal(s)
		require.NoError(t, err)
		r, err := report.UnmarshalAggregate(v4)
		require.NoError(t, err)
		_, err = r.Report(report.ByMetadata("team"), report.Filter{OneTenant: true, Tenant: "tb"})
		require.ErrorIs(t, err, report.ErrKeyNotTracked)
		rep, err := r.Report(report.ByMetadata("user"), report.Filter{OneTenant: true, Tenant: "ta"})
		require.NoError(t, err)
		require.Len(t, rep.Other, 1)
	})
}

// groupValues lists a report's group values but the "" group's.
func groupValues(rep *report.AggregateReport) []string {
	var out []string
	for _, g := range rep.Groups {
		if g.Value != "" {
			out = append(out, g.Value)
		}
	}
	return out
}

// A cell's sums add up reservations of many budgets, so they may pass the
// 18 integer digits of one amount: two budgets each settle 6e17 under one
// model. The report snapshot holding that cell reads back (a replica that
// could not read it would skip every later snapshot too), and the report
// equals the replay's.
//
// How we know it can fail: without aggCell.UnmarshalJSON, UnmarshalAggregate
// refuses "1200000000000000000": invalid_amount, more than 18 integer
// digits.
func TestAggregate_SnapshotSumsPastOneAmount(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithLayout(lanes2))
	bk := newBook(t, env)
	bk.define(acme.Budget(), "999999999999999999")
	bk.define(u17.Budget(), "999999999999999999")
	const big = "600000000000000000"
	meta := map[string]string{"model": "xl"}
	bk.commit(open("rsv_a", big, t0, time.Minute, meta, acme)...)
	bk.commit(open("rsv_b", big, t0, time.Minute, meta, u17)...)
	bk.commit(settle("rsv_a", big, big, t0.Add(time.Second), false, false, acme)...)
	bk.commit(settle("rsv_b", big, big, t0.Add(time.Second), false, false, u17)...)

	a := report.NewAggregate()
	foldStream(t, env, a, 0)
	data, err := a.MarshalJSON()
	require.NoError(t, err)
	require.Contains(t, string(data), `"1200000000000000000"`)
	restored, err := report.UnmarshalAggregate(data)
	require.NoError(t, err)
	again, err := restored.MarshalJSON()
	require.NoError(t, err)
	require.Equal(t, string(data), string(again), "a snapshot reads back to itself")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout)).Report(ctx, report.Filter{}, report.ByMetadata("model"))
	require.NoError(t, err)
	require.Equal(t, "1200000000000000000", want.Groups[0].Spend.String())
	got, err := restored.Report(report.ByMetadata("model"), report.Filter{})
	require.NoError(t, err)
	requireSameReport(t, want, got)
}
