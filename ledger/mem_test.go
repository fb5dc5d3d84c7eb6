package ledger

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// BenchmarkClosedReservationBytes measures the heap a closed (settled)
// reservation costs while the idempotency window remembers it: 100,000
// single-balance reservations are opened, settled and stamped into the
// window, and the heap after a GC is divided by their number. Request ids
// are 36 characters, reservation ids 30, request hashes 64 (as admit makes
// them). Run it with
//
//	go test -run '^$' -bench BenchmarkClosedReservationBytes -benchtime 1x ./ledger/
func BenchmarkClosedReservationBytes(b *testing.B) {
	const n = 100_000
	for i := 0; i < b.N; i++ {
		bk := newBook(streams.Default(), time.Hour, time.Hour)
		bl := &balance{key: streams.BalanceKey(bookBal), ref: bookBal, self: []events.BalanceRef{bookBal}, open: map[string]*Reservation{}}
		bk.balances[bl.key] = bl
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for j := 0; j < n; j++ {
			id := fmt.Sprintf("rsv_%026d", j)
			rid := fmt.Sprintf("req-%032d", j)
			hash := fmt.Sprintf("%064d", j)
			bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationOpened{ReservationID: id, RequestID: rid, RequestHash: hash,
				Balance: bookBal, Amount: events.MustMoney("0.25"), Unit: "USD", Balances: []events.BalanceRef{bookBal},
				ExpiresAt: bookT0.Add(time.Hour), At: bookT0})
			bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationSettled{ReservationID: id, Balance: bookBal,
				Reserved: events.MustMoney("0.25"), Actual: events.MustMoney("0.2"), Overrun: events.Zero, At: bookT0})
			bk.forgetUntil(uint64(j+1), bookT0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if len(bk.reservations) != n || len(bk.closed) != n {
			b.Fatalf("the window holds %d reservations, %d closes; want %d", len(bk.reservations), len(bk.closed), n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/closed-reservation")
		runtime.KeepAlive(bk)
	}
}
