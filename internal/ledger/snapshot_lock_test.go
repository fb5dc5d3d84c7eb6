package ledger

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// multiScopeBook is a book whose idempotency window holds n settled
// reservations, each held in two balances (an org's and a user's, as an
// admit naming both scopes makes) under a ceiling (the cap of a learned reservation, on
// each part): entries the window keeps, and the window section writes,
// whole, as their reservation's JSON.
func multiScopeBook(t testing.TB, n int) (*book, uint64) {
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	const budgets = 64
	var bals []*balance
	for j := 0; j < budgets; j++ {
		ref := events.BalanceRef{Scope: events.Scope(fmt.Sprintf("org:m%d", j)), Period: events.PeriodMonth, Instance: "2026-11"}
		bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, unit: "USD", open: map[string]*Reservation{}}
		bk.balances[bl.key] = bl
		bals = append(bals, bl)
	}
	for j := 0; j < n; j++ {
		b1, b2 := bals[j%budgets], bals[(j+1)%budgets]
		both := []events.BalanceRef{b1.ref, b2.ref}
		h := uuid.New()
		id, rq := "rsv_"+uuid.Must(uuid.NewV7()).String(), uuid.NewString()
		at := bookT0.Add(time.Duration(j) * time.Millisecond)
		for _, bl := range []*balance{b1, b2} {
			bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationOpened{ReservationID: id, RequestID: rq, RequestHash: hex.EncodeToString(h[:]),
				Balance: bl.ref, Amount: events.MustMoney("0.25"), Unit: "USD", Balances: both, ExpiresAt: at.Add(time.Hour), At: at,
				Ceiling: new(events.MustMoney("0.5"))})
		}
		for _, bl := range []*balance{b1, b2} {
			bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationSettled{ReservationID: id, Balance: bl.ref,
				Reserved: events.MustMoney("0.25"), Actual: events.MustMoney("0.2"), Overrun: events.Zero, At: at})
		}
		bk.forgetUntil(uint64(j+1), at)
	}
	require.Equal(t, n, bk.win.len())
	return bk, uint64(n)
}

// TestSnapshot_WholeEntriesEncodedOffTheLock: a replica copies its book
// for a snapshot under the book's read lock (snapshotCopy), during which
// no commit applies and every admit waits. A window of reservations kept
// whole (before version 5, every admit that names an org and a user; now
// those with a ceiling on a part) is written as JSON; encoding that JSON
// under the lock held admits for 2-6 s per periodic snapshot with
// ~100,000 of them. The copy must
// leave the encoding to finish, after the lock: the copy takes a fraction
// of the encoding, and the snapshot it makes is byte for byte the one
// snapshotAs encodes, and loads into the same book. How it can fail: the
// JSON (or a growing buffer of it) encoded under the lock again makes the
// copy as slow as the encoding; or an entry's JSON spliced in at the
// wrong offset makes the section unreadable.
func TestSnapshot_WholeEntriesEncodedOffTheLock(t *testing.T) {
	bk, seq := multiScopeBook(t, 2_000)
	want, err := bk.snapshotAs(seq, SnapshotVersion)
	require.NoError(t, err)
	wantData, err := encodeSnapshot(want, "", nil)
	require.NoError(t, err)

	// The best of three runs each, so that a busy machine does not decide.
	copied, finished := time.Duration(1<<62), time.Duration(1<<62)
	var got *snapshotState
	for range 3 {
		start := time.Now()
		st, err := bk.snapshotCopy(seq, SnapshotVersion)
		require.NoError(t, err)
		copied = min(copied, time.Since(start))
		start = time.Now()
		require.NoError(t, st.finish())
		finished = min(finished, time.Since(start))
		got = st
	}
	t.Logf("2,000 whole entries: copied (under the lock) in %v, encoded after it in %v", copied, finished)
	require.Less(t, copied, finished/2, "the copy under the book's lock must leave the entries' JSON to finish")

	gotData, err := encodeSnapshot(got, "", nil)
	require.NoError(t, err)
	require.Equal(t, wantData, gotData)
	dec, err := decodeSnapshot(gotData)
	require.NoError(t, err)
	loaded, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
	require.NoError(t, err)
	require.Equal(t, bookView(bk), bookView(loaded))
}

// TestSnapshot_BudgetsEncodedOffTheLock: a month of runs leaves tens of
// thousands of budgets, most of them retired tombstones, and their
// revisions' JSON encoded under the book's read lock held every admit for
// 0.5-2.7 s per snapshot (an operator measured it with 47,000 budgets).
// The copy must leave that JSON to finish, after the lock, and make the
// same snapshot. How it can fail: encoding them in snapshotCopy again
// makes the copy as slow as the encoding.
func TestSnapshot_BudgetsEncodedOffTheLock(t *testing.T) {
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	loc := time.UTC
	for i := range 20_000 {
		ref := events.BudgetRef{Scope: events.Scope(fmt.Sprintf("run:r%d", i)), Period: events.PeriodLifetime}
		rev := &events.BudgetRevision{Schema: events.SchemaBudget, Budget: ref, Limit: events.MustMoney("1"), Unit: "USD",
			Thresholds: []events.Money{events.MustMoney("0.5"), events.MustMoney("0.8")}, FromDefault: 7}
		bk.setBudget(streams.BudgetKey(ref), uint64(2*i+1), rev, loc)
		if i%2 == 0 {
			retired := *rev
			retired.Retired = true
			retired.Events = events.Events{events.BudgetRetired{Budget: ref, Reason: "idle", At: bookT0}}
			bk.setBudget(streams.BudgetKey(ref), uint64(2*i+2), &retired, loc)
		}
	}
	seq := uint64(40_000)
	want, err := bk.snapshotAs(seq, SnapshotVersion)
	require.NoError(t, err)
	wantData, err := encodeSnapshot(want, "", nil)
	require.NoError(t, err)

	copied, finished := time.Duration(1<<62), time.Duration(1<<62)
	var got *snapshotState
	for range 3 {
		start := time.Now()
		st, err := bk.snapshotCopy(seq, SnapshotVersion)
		require.NoError(t, err)
		copied = min(copied, time.Since(start))
		start = time.Now()
		require.NoError(t, st.finish())
		finished = min(finished, time.Since(start))
		got = st
	}
	t.Logf("20,000 budgets: copied (under the lock) in %v, encoded after it in %v", copied, finished)
	// Measured: 21 ms copied against 69 ms encoded; with the JSON under
	// the lock, 90 ms against next to nothing.
	require.Less(t, copied, finished, "the copy under the book's lock must leave the budgets' JSON to finish")
	gotData, err := encodeSnapshot(got, "", nil)
	require.NoError(t, err)
	require.Equal(t, wantData, gotData)
	dec, err := decodeSnapshot(gotData)
	require.NoError(t, err)
	loaded, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
	require.NoError(t, err)
	require.Equal(t, bookView(bk), bookView(loaded))
}
