package ledger

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// BenchmarkSnapshotLoad_Gateway: loading a snapshot whose window holds
// what an LLM gateway's traffic leaves there, each reservation held in an
// org's, one of 16 teams' and one of 256 users' balances and priced from a
// model (a compact version 5 entry with two more parts and a quote): the
// time to check and decode the snapshot and build its book, per entry, as
// a replica's restart after a graceful stop spends it. Run it with
//
//	go test -run '^$' -bench BenchmarkSnapshotLoad_Gateway -benchtime 5x ./internal/ledger/
//
// (a million, as the restart scenario's; SPENDGATE_WINDOW=n for another
// size).
func BenchmarkSnapshotLoad_Gateway(b *testing.B) {
	bk, n := gatewayBook(b)
	st, err := bk.snapshotAs(uint64(n), SnapshotVersion)
	require.NoError(b, err)
	data, err := encodeSnapshot(st, "", nil)
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dec, err := decodeSnapshot(data)
		require.NoError(b, err)
		got, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
		require.NoError(b, err)
		require.Equal(b, n, got.win.len())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
	b.ReportMetric(float64(len(data))/float64(n), "B/entry")
}

// BenchmarkSnapshotCopy_Gateway: the copy of that book a replica makes for
// a snapshot under the book's read lock (snapshotCopy), when no commit
// applies and every admit waits: per snapshot of a million gateway-shaped
// entries. The first copy sizes the window section's buffer from the
// default bytes per entry, the next from the one before (see
// window.sectionBytes).
func BenchmarkSnapshotCopy_Gateway(b *testing.B) {
	bk, n := gatewayBook(b)
	_, err := bk.snapshotCopy(uint64(n), SnapshotVersion)
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, err := bk.snapshotCopy(uint64(n), SnapshotVersion)
		require.NoError(b, err)
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e6/float64(n), "s-locked/M-entries")
}

// gatewayBook is a book whose window holds SPENDGATE_WINDOW (default a
// million) gateway-shaped entries.
func gatewayBook(b *testing.B) (*book, int) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SPENDGATE_WINDOW")); err == nil && v > 0 {
		n = v
	}
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	scope := func(s string) *balance {
		ref := events.BalanceRef{Scope: events.Scope(s), Period: events.PeriodMonth, Instance: "2026-11", Unit: "USD"}
		bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, unit: "USD", open: map[string]*Reservation{}}
		bk.balances[bl.key] = bl
		return bl
	}
	org := scope("org:acme")
	var teams, users []*balance
	for i := 0; i < 16; i++ {
		teams = append(teams, scope(fmt.Sprintf("team:t%d", i)))
	}
	for i := 0; i < 256; i++ {
		users = append(users, scope(fmt.Sprintf("user:u%d", i)))
	}
	q := events.PriceQuote{Model: "gpt-4o", Version: 1, Unit: "USD", Input: events.MustMoney("0.0000025"), Output: events.MustMoney("0.00001")}
	for j := 0; j < n; j++ {
		quote := q
		quote.InputTokens, quote.MaxOutputTokens = int64(1000+j%2000), 1024
		r := &Reservation{ID: "rsv_" + uuid.Must(uuid.NewV7()).String(), RequestID: uuid.NewString(), RequestHash: fmt.Sprintf("%032x", j),
			OpenedAt: bookT0, ExpiresAt: bookT0.Add(time.Minute), Status: events.StatusSettled, Pricing: &quote}
		for _, bl := range []*balance{org, teams[j%16], users[j%256]} {
			r.Balances = append(r.Balances, bl.ref)
			r.Parts = append(r.Parts, Part{Key: bl.key, Unit: "USD", Amount: events.MustMoney("0.0127"), Actual: events.MustMoney("0.0093")})
		}
		bk.win.add(winClosed, r, bk.balances, bookT0.Add(time.Duration(j)*time.Millisecond))
	}
	return bk, n
}
