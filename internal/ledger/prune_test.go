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

// minuteDay folds a simulated day of a per-minute budget into a new book
// (retention 15 minutes, expired 48 hours; pruning off with noPrune):
// each minute two calls are admitted and settled, the first minute of
// every hour one more call is left to expire, and one call admitted in
// minute 100 stays open all day. Each revision is stamped by the follower
// at its own time. It returns the book, the last sequence and the day's
// balances by minute.
func minuteDay(t testing.TB, noPrune bool, minutes int) (*book, uint64, []events.BalanceRef) {
	bk := newBook(streams.Default(), 15*time.Minute, 48*time.Hour)
	bk.noPrune = noPrune
	budget := events.BudgetRef{Scope: "key:k-rpm", Period: events.PeriodMinute}
	bk.setBudget(streams.BudgetKey(budget), 1, &events.BudgetRevision{Schema: events.SchemaBudget, Budget: budget,
		Limit: events.MustMoney("600"), Unit: events.UnitRequests}, nil)
	seq := uint64(1)
	cal := events.CalendarOf(events.PeriodMinute, nil)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	one := events.MustMoney("1")
	var refs []events.BalanceRef
	for m := range minutes {
		at := day.Add(time.Duration(m) * time.Minute)
		ref := events.BalanceRef{Scope: budget.Scope, Period: budget.Period, Instance: cal.Instance(at)}
		refs = append(refs, ref)
		var spent, reserved events.Money
		write := func(at time.Time, evs ...events.Event) {
			seq++
			bk.applyBalance(streams.BalanceKey(ref), seq, &events.BalanceRevision{Schema: events.SchemaBalance, Balance: ref,
				Unit: events.UnitRequests, Limit: events.MustMoney("600"), Spent: spent, Reserved: reserved, Overrun: events.Zero, Events: evs})
			bk.forgetUntil(seq, at)
		}
		open := func(id string) events.Event {
			reserved = reserved.Add(one)
			return events.ReservationOpened{ReservationID: id, RequestID: id, RequestHash: "h", Balance: ref, Amount: one,
				Unit: events.UnitRequests, Balances: []events.BalanceRef{ref}, ExpiresAt: at.Add(time.Hour), At: at}
		}
		settle := func(id string) events.Event {
			reserved, spent = reserved.Sub(one), spent.Add(one)
			return events.ReservationSettled{ReservationID: id, Balance: ref, Reserved: one, Actual: one, Overrun: events.Zero, At: at.Add(20 * time.Second)}
		}
		a, b := fmt.Sprintf("a-%d", m), fmt.Sprintf("b-%d", m)
		write(at, open(a), open(b))
		write(at.Add(20*time.Second), settle(a), settle(b))
		if m%60 == 0 {
			x := fmt.Sprintf("x-%d", m)
			write(at.Add(30*time.Second), open(x))
			reserved = reserved.Sub(one)
			write(at.Add(40*time.Second), events.ReservationReleased{ReservationID: x, Balance: ref, Reserved: one, Reason: events.ReasonExpired, At: at.Add(40 * time.Second)})
		}
		if m == 100 {
			write(at.Add(50*time.Second), open("stays-open"))
		}
	}
	return bk, seq, refs
}

// snapshotBytes is the size of bk's snapshot at seq.
func snapshotBytes(t testing.TB, bk *book, seq uint64) []byte {
	st, err := bk.snapshotAs(seq, SnapshotVersion)
	require.NoError(t, err)
	data, err := encodeSnapshot(st, "", nil)
	require.NoError(t, err)
	return data
}

// TestPrune_MinuteBudgetDay: a per-minute budget's day leaves 1,440
// balances in a book that keeps them all; with pruning the book keeps
// only those that can still change: the minutes of the last retention
// (15 minutes) and their margin, the 24 minutes in which a reservation
// expired (a late settle may land there for 48 hours), and the minute
// whose reservation is still open. Every balance it keeps has the same
// numbers as in the book that keeps everything, and so has the snapshot,
// which loads into a book that goes on pruning: 48 hours later, the
// expired minutes go too. It logs the heap and snapshot sizes before and
// after. It can fail: a prune that ignored the open reservation, the
// expiry retention or the instance's end drops a balance the test names.
func TestPrune_MinuteBudgetDay(t *testing.T) {
	const minutes = 24 * 60
	heap := func(noPrune bool) (*book, uint64, []events.BalanceRef, uint64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		bk, seq, refs := minuteDay(t, noPrune, minutes)
		runtime.GC()
		runtime.ReadMemStats(&after)
		return bk, seq, refs, after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
	}
	all, seq, refs, allHeap := heap(true)
	bk, seq2, _, bkHeap := heap(false)
	require.Equal(t, seq, seq2)
	require.Len(t, all.balances, minutes, "without pruning: a balance per minute")

	kept := map[string]bool{}
	for key := range bk.balances {
		kept[key] = true
	}
	for m, ref := range refs {
		key := streams.BalanceKey(ref)
		must := m >= minutes-17 || m%60 == 0 || m == 100
		if must {
			require.True(t, kept[key], "minute %d (%s) must be kept", m, ref.Instance)
		}
		if kept[key] {
			require.Equal(t, all.balance(key, ref), bk.balance(key, ref), "minute %d: the same numbers", m)
		} else {
			require.False(t, must)
			require.Zero(t, len(all.balances[key].open))
		}
	}
	require.LessOrEqual(t, len(bk.balances), 17+24+1)
	require.EqualValues(t, minutes-len(bk.balances), bk.pruned)
	last := refs[len(refs)-1]
	require.Equal(t, events.MustMoney("2").String(), bk.balance(streams.BalanceKey(last), last).Spent.String())

	allSnap, bkSnap := snapshotBytes(t, all, seq), snapshotBytes(t, bk, seq)
	t.Logf("a per-minute budget after a day (%d minutes, 2 calls a minute): %d balances, heap %d KB, snapshot %d KB without pruning; "+
		"%d balances, heap %d KB, snapshot %d KB with it", minutes, len(all.balances), allHeap/1024, len(allSnap)/1024,
		len(bk.balances), bkHeap/1024, len(bkSnap)/1024)
	require.Less(t, len(bkSnap)*5, len(allSnap), "the snapshot shrinks")

	// The snapshot loads the kept balances, stamps included, and the
	// loaded book prunes on: 48 hours later only what changed since is
	// left (the open minute stays).
	dec, err := decodeSnapshot(bkSnap)
	require.NoError(t, err)
	loaded, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
	require.NoError(t, err)
	require.Equal(t, len(bk.balances), len(loaded.balances))
	for key, bl := range bk.balances {
		require.Equal(t, bk.balance(key, bl.ref), loaded.balance(key, bl.ref))
		require.Equal(t, bl.stampedAt, loaded.balances[key].stampedAt, key)
		require.Equal(t, bl.expiredAt, loaded.balances[key].expiredAt, key)
	}
	later := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	ref := events.BalanceRef{Scope: last.Scope, Period: last.Period, Instance: events.CalendarOf(events.PeriodMinute, nil).Instance(later)}
	loaded.applyBalance(streams.BalanceKey(ref), seq+1, &events.BalanceRevision{Schema: events.SchemaBalance, Balance: ref,
		Unit: events.UnitRequests, Limit: events.MustMoney("600"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero})
	loaded.forgetUntil(seq+1, later)
	open := refs[100]
	require.Len(t, loaded.balances, 2, "the minute still open and the new one")
	require.Contains(t, loaded.balances, streams.BalanceKey(open))
	require.Contains(t, loaded.balances, streams.BalanceKey(ref))
}
