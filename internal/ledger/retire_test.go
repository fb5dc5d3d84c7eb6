package ledger

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// runHistory folds into bk, from seq, runs budgets of agent runs as a
// platform with a lifetime budget per run makes them: each run's budget
// is created from a default, two calls are admitted and settled in it,
// and (when retire) the budget is retired when the run is over. Run 7
// leaves a call open and run 8 lets one expire before it is retired. Each
// revision is stamped by the follower at its own time, a second apart.
// It returns the last sequence and the time of the last revision.
func runHistory(t testing.TB, bk *book, seq uint64, at time.Time, runs int, retire bool) (uint64, time.Time) {
	t.Helper()
	one := events.MustMoney("0.01")
	for i := range runs {
		ref := events.BudgetRef{Scope: events.Scope(fmt.Sprintf("run:r-%d", i)), Period: events.PeriodLifetime}
		def := events.BudgetRevision{Schema: events.SchemaBudget, Budget: ref, Limit: events.MustMoney("1"), Unit: "USD", FromDefault: 1}
		seq++
		bk.setBudget(streams.BudgetKey(ref), seq, &def, nil)
		bal := events.BalanceRef{Scope: ref.Scope, Period: ref.Period, Instance: events.InstanceLifetime}
		var spent, reserved events.Money
		write := func(evs ...events.Event) {
			seq++
			at = at.Add(time.Second)
			bk.applyBalance(streams.BalanceKey(bal), seq, &events.BalanceRevision{Schema: events.SchemaBalance, Balance: bal,
				Unit: "USD", Limit: def.Limit, Spent: spent, Reserved: reserved, Overrun: events.Zero, Events: evs})
			bk.forgetUntil(seq, at)
		}
		open := func(id string) events.Event {
			reserved = reserved.Add(one)
			return events.ReservationOpened{ReservationID: id, RequestID: id, RequestHash: "h", Balance: bal, Amount: one,
				Unit: "USD", Balances: []events.BalanceRef{bal}, ExpiresAt: at.Add(time.Hour), At: at}
		}
		settle := func(id string) events.Event {
			reserved, spent = reserved.Sub(one), spent.Add(one)
			return events.ReservationSettled{ReservationID: id, Balance: bal, Reserved: one, Actual: one, Overrun: events.Zero, At: at}
		}
		a, b := fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)
		write(open(a), open(b))
		write(settle(a), settle(b))
		switch i {
		case 7:
			write(open("stays-open"))
		case 8:
			write(open("expires"))
			reserved = reserved.Sub(one)
			write(events.ReservationReleased{ReservationID: "expires", Balance: bal, Reserved: one, Reason: events.ReasonExpired, At: at})
		}
		if retire {
			rev := def
			rev.Retired, rev.Events = true, events.Events{events.BudgetRetired{Budget: ref, Reason: "run over", At: at}}
			seq++
			at = at.Add(time.Second)
			bk.setBudget(streams.BudgetKey(ref), seq, &rev, nil)
			bk.forgetUntil(seq, at)
		}
	}
	return seq, at
}

// TestRetire_BalancesLeaveTheBook: 2,000 agent runs, each a lifetime
// budget from a default. Without retirement the book keeps every run's
// balance for good; with it, once the retention has passed, the book
// keeps only the run whose call is still open and the run whose call
// expired (a late settle may still land there for the expired
// retention), with the numbers of the book that keeps everything. Every
// retired budget stays as a tombstone (an admit is denied, a default never
// creates it again) and no longer counts toward its tenant's budgets from
// defaults. A dropped balance reads its final numbers and the budget its
// retirement's time and reason. The snapshot shrinks and loads into a
// book that prunes on and reads the same. It logs the heap and snapshot
// sizes. It can fail: a retire that dropped nothing, or one that ignored
// the open reservation or the expiry, leaves a count the test names; a
// book (or snapshot) that forgot a dropped balance's numbers reads 0.
func TestRetire_BalancesLeaveTheBook(t *testing.T) {
	const runs = 2000
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	build := func(retire bool) (*book, uint64, time.Time, uint64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		bk := newBook(streams.Default(), 15*time.Minute, 48*time.Hour)
		seq, at := runHistory(t, bk, 0, start, runs, retire)
		// The follower reaches a revision written an hour later: the
		// retention of every closed call has passed.
		at = at.Add(time.Hour)
		bk.forgetUntil(seq, at)
		runtime.GC()
		runtime.ReadMemStats(&after)
		return bk, seq, at, after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
	}
	all, seq, _, allHeap := build(false)
	bk, seq2, at, bkHeap := build(true)
	require.Equal(t, seq+runs, seq2, "one retiring revision per run")
	require.Equal(t, runs, len(all.balances), "without retirement: every run's balance stays")
	require.Equal(t, runs, all.tenants.defaults[""])

	require.Equal(t, 2, len(bk.balances), "with it: the run with an open call and the run with an expired one")
	for _, i := range []int{7, 8} {
		ref := events.BalanceRef{Scope: events.Scope(fmt.Sprintf("run:r-%d", i)), Period: events.PeriodLifetime, Instance: events.InstanceLifetime}
		key := streams.BalanceKey(ref)
		require.Contains(t, bk.balances, key)
		want, got := all.balance(key, ref), bk.balance(key, ref)
		require.True(t, got.Retired)
		got.Retired = false
		require.Equal(t, want, got, "run %d: the same numbers", i)
	}
	require.EqualValues(t, runs-2, bk.pruned)
	require.Equal(t, runs, len(bk.budgets), "every retired budget stays, as a tombstone")
	require.True(t, bk.byScope["run:r-0"][0].Retired)
	// A dropped run's balance reads its final numbers, not zero, and its
	// budget says when and why it was retired.
	run0 := events.BalanceRef{Scope: "run:r-0", Period: events.PeriodLifetime, Instance: events.InstanceLifetime}
	key0 := streams.BalanceKey(run0)
	require.NotContains(t, bk.balances, key0)
	require.Equal(t, "0.02", bk.balance(key0, run0).Spent.String(), "the two calls the run settled")
	require.Equal(t, all.balance(key0, run0).Spent.String(), bk.balance(key0, run0).Spent.String())
	require.Equal(t, "run over", bk.byScope["run:r-0"][0].RetiredReason)
	require.False(t, bk.byScope["run:r-0"][0].RetiredAt.IsZero())
	require.Zero(t, bk.tenants.defaults[""], "retired budgets no longer count toward the tenant's budgets from defaults")

	allSnap, bkSnap := snapshotBytes(t, all, seq), snapshotBytes(t, bk, seq2)
	t.Logf("%d agent runs, a lifetime budget each, two calls a run: heap %d KB, snapshot %d KB, %d balances kept; "+
		"retired when over: heap %d KB, snapshot %d KB, %d balances kept", runs, allHeap/1024, len(allSnap)/1024, len(all.balances),
		bkHeap/1024, len(bkSnap)/1024, len(bk.balances))
	require.Less(t, len(bkSnap), len(allSnap), "the snapshot shrinks")

	// The snapshot keeps the tombstones and the two balances; the loaded
	// book prunes on: 48 hours later the expired run's balance goes too,
	// and the open one stays.
	dec, err := decodeSnapshot(bkSnap)
	require.NoError(t, err)
	loaded, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
	require.NoError(t, err)
	require.Equal(t, 2, len(loaded.balances))
	require.Equal(t, runs, len(loaded.budgets))
	require.True(t, loaded.byScope["run:r-5"][0].Retired)
	require.Zero(t, loaded.tenants.defaults[""])
	require.Equal(t, "0.02", loaded.balance(key0, run0).Spent.String(), "the snapshot carries the final numbers")
	require.Equal(t, bk.byScope["run:r-0"][0].RetiredAt, loaded.byScope["run:r-0"][0].RetiredAt)
	require.Equal(t, "run over", loaded.byScope["run:r-0"][0].RetiredReason)
	later := at.Add(49 * time.Hour)
	loaded.forgetUntil(seq2, later)
	loaded.forgetUntil(seq2, later.Add(time.Hour))
	require.Equal(t, 1, len(loaded.balances), "the run whose call is still open")
	run8 := events.BalanceRef{Scope: "run:r-8", Period: events.PeriodLifetime, Instance: events.InstanceLifetime}
	require.Equal(t, all.balance(streams.BalanceKey(run8), run8).Spent.String(), loaded.balance(streams.BalanceKey(run8), run8).Spent.String(),
		"dropped after the load: its final numbers kept")
	require.Contains(t, loaded.balances, streams.BalanceKey(events.BalanceRef{Scope: "run:r-7", Period: events.PeriodLifetime, Instance: events.InstanceLifetime}))
}

// TestRetire_Final: a definition folded after a budget's retirement (no
// replica writes one: a put of a retired budget is refused) does not bring
// it back, in the book or in what its snapshot carries, and a balance
// revision after the retirement (an admit decided before it was folded)
// is folded and then waits, as any retired balance, to be pruned.
func TestRetire_Final(t *testing.T) {
	bk := newBook(streams.Default(), 15*time.Minute, 48*time.Hour)
	ref := events.BudgetRef{Scope: "run:late", Period: events.PeriodLifetime}
	key := streams.BudgetKey(ref)
	def := events.BudgetRevision{Schema: events.SchemaBudget, Budget: ref, Limit: events.MustMoney("1"), Unit: "USD"}
	bk.setBudget(key, 1, &def, nil)
	retired := def
	retired.Retired = true
	bk.setBudget(key, 2, &retired, nil)
	again := def
	again.Limit = events.MustMoney("100")
	bk.setBudget(key, 3, &again, nil)
	require.True(t, bk.budgets[key].def.Retired)
	require.True(t, bk.budgets[key].src.Retired, "a snapshot carries it retired")

	bal := events.BalanceRef{Scope: ref.Scope, Period: ref.Period, Instance: events.InstanceLifetime}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	bk.applyBalance(streams.BalanceKey(bal), 4, &events.BalanceRevision{Schema: events.SchemaBalance, Balance: bal, Unit: "USD",
		Limit: def.Limit, Spent: events.MustMoney("0.5"), Reserved: events.Zero, Overrun: events.Zero})
	bk.forgetUntil(4, at)
	require.Contains(t, bk.balances, streams.BalanceKey(bal))
	bk.forgetUntil(4, at.Add(49*time.Hour))
	bk.forgetUntil(4, at.Add(50*time.Hour))
	require.NotContains(t, bk.balances, streams.BalanceKey(bal))
}

// TestIdleBudgets: under a rule run=1h, two hours after the last call,
// every run's budget from the default is idle except the run whose call
// is still open; a budget put for its scope and a kind without a rule are
// never listed, nor is one retired. The latest call's time travels in the
// snapshot, so a book loaded from it lists the same; a snapshot that does
// not say (written before it was kept) makes its balances count as
// active when the book was loaded. It can fail: without the open
// reservation's check run 7 is listed; without the scope's put budget's
// check run 2 is; without the time of the latest
// call every run is idle at once, or never.
func TestIdleBudgets(t *testing.T) {
	bk := newBook(streams.Default(), 15*time.Minute, 48*time.Hour)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	seq, at := runHistory(t, bk, 0, start, 10, false)
	// A budget put for its scope, and a team's: used, never listed; nor
	// is run 2's budget from the default, as its scope has a budget put
	// for it (retiring the one would deny the other's admits).
	for _, ref := range []events.BudgetRef{{Scope: "run:manual", Period: events.PeriodLifetime}, {Scope: "team:t", Period: events.PeriodMonth},
		{Scope: "run:r-2", Period: events.PeriodDay}} {
		seq++
		bk.setBudget(streams.BudgetKey(ref), seq, &events.BudgetRevision{Schema: events.SchemaBudget, Budget: ref, Limit: events.MustMoney("5"), Unit: "USD"}, nil)
		bal := events.BalanceRef{Scope: ref.Scope, Period: ref.Period, Instance: ref.Period.Instance(start)}
		seq++
		bk.applyBalance(streams.BalanceKey(bal), seq, &events.BalanceRevision{Schema: events.SchemaBalance, Balance: bal, Unit: "USD",
			Limit: events.MustMoney("5"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero,
			Events: events.Events{events.RequestVoided{RequestID: "v", Scopes: []events.Scope{ref.Scope}, At: start}}})
	}
	rules := map[string]time.Duration{"run": time.Hour, "team": time.Hour}
	scopes := func(ib []IdleBudget) []string {
		var out []string
		for _, b := range ib {
			out = append(out, string(b.Ref.Scope))
		}
		return out
	}
	require.Empty(t, bk.idleBudgets(rules, at.Add(30*time.Minute), 100), "nothing is idle for an hour yet")
	want := []string{"run:r-0", "run:r-1", "run:r-3", "run:r-4", "run:r-5", "run:r-6", "run:r-8", "run:r-9"}
	later := at.Add(2 * time.Hour)
	got := bk.idleBudgets(rules, later, 100)
	require.Equal(t, want, scopes(got), "oldest first; run 7's call is open")
	require.Equal(t, []string{"run:r-0", "run:r-1"}, scopes(bk.idleBudgets(rules, later, 2)))

	// Retired: never listed again.
	d := bk.budgets[streams.BudgetKey(got[0].Ref)]
	retired := d.src
	retired.Retired = true
	seq++
	bk.setBudget(streams.BudgetKey(got[0].Ref), seq, &retired, nil)
	require.Equal(t, want[1:], scopes(bk.idleBudgets(rules, later, 100)))

	// The snapshot carries the latest call's time.
	data := snapshotBytes(t, bk, seq)
	dec, err := decodeSnapshot(data)
	require.NoError(t, err)
	loaded, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
	require.NoError(t, err)
	require.Equal(t, want[1:], scopes(loaded.idleBudgets(rules, later, 100)))

	// One that does not: active when the book was loaded.
	for i := range dec.Balances {
		dec.Balances[i].LastAt = nil
	}
	old, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
	require.NoError(t, err)
	require.Empty(t, old.idleBudgets(rules, later, 100))
	require.Equal(t, want[1:], scopes(old.idleBudgets(rules, old.born.Add(time.Hour), 100)))

	// A budget from a default that was never admitted into (a denied
	// admit made it): idle from its definition's time, oldest first among
	// the rest. One of a minute period keeps no balances however busy it
	// is: never listed. How it can fail: they were skipped for having no
	// balance, so such budgets stayed for good (and counted toward their
	// tenant's budgets from defaults).
	for _, c := range []struct {
		scope  events.Scope
		period events.Period
	}{{"run:never", events.PeriodLifetime}, {"run:busy-minute", events.PeriodMinute}} {
		ref := events.BudgetRef{Scope: c.scope, Period: c.period}
		seq++
		bk.setBudget(streams.BudgetKey(ref), seq, &events.BudgetRevision{Schema: events.SchemaBudget, Budget: ref,
			Limit: events.MustMoney("1"), Unit: "USD", FromDefault: 1,
			Events: events.Events{events.BudgetDefinedV2{Budget: ref, Limit: events.MustMoney("1"), Unit: "USD", At: start}}}, nil)
	}
	got = bk.idleBudgets(rules, later, 100)
	require.Equal(t, append([]string{"run:never"}, want[1:]...), scopes(got))
	require.Equal(t, start, got[0].Since)
	require.Empty(t, bk.idleBudgets(rules, start.Add(30*time.Minute), 100), "defined half an hour ago: not idle for an hour")
}

// BenchmarkIdleBudgets is the sweeper's idle walk (once a minute, under
// the book's read lock) in a book holding 100,000 retired runs'
// tombstones and 1,000 live runs, none idle yet.
func BenchmarkIdleBudgets(b *testing.B) {
	bk := newBook(streams.Default(), 15*time.Minute, 48*time.Hour)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	seq, at := runHistory(b, bk, 0, start, 100_000, true)
	for i := range 1000 {
		ref := events.BudgetRef{Scope: events.Scope(fmt.Sprintf("run:live-%d", i)), Period: events.PeriodLifetime}
		seq++
		bk.setBudget(streams.BudgetKey(ref), seq, &events.BudgetRevision{Schema: events.SchemaBudget, Budget: ref, Limit: events.MustMoney("1"), Unit: "USD", FromDefault: 1}, nil)
		bal := events.BalanceRef{Scope: ref.Scope, Period: ref.Period, Instance: events.InstanceLifetime}
		seq++
		bk.applyBalance(streams.BalanceKey(bal), seq, &events.BalanceRevision{Schema: events.SchemaBalance, Balance: bal, Unit: "USD",
			Limit: events.MustMoney("1"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero,
			Events: events.Events{events.RequestVoided{RequestID: fmt.Sprint("v-", i), Scopes: []events.Scope{ref.Scope}, At: at}}})
	}
	rules := map[string]time.Duration{"run": 24 * time.Hour}
	b.ResetTimer()
	for b.Loop() {
		if got := bk.idleBudgets(rules, at.Add(time.Hour), 10_000); len(got) != 0 {
			b.Fatalf("%d idle", len(got))
		}
	}
}
