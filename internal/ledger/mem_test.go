package ledger

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// BenchmarkClosedReservationBytes measures the heap a closed (settled)
// reservation costs while the idempotency window remembers it: 100,000
// single-balance reservations are opened, settled and stamped into the
// window, and the heap after a GC is divided by their number. "uuid" has
// ids as admit and the client make them (reservation ids "rsv_" + a
// UUID, request ids UUIDs, request hashes 32 hex characters); "other" has
// ids of other shapes (request ids "req-" + 32 digits, hashes 64
// characters), which the window keeps as text. Run it with
//
//	go test -run '^$' -bench BenchmarkClosedReservationBytes -benchtime 1x ./internal/ledger/
func BenchmarkClosedReservationBytes(b *testing.B) {
	for _, c := range []struct {
		name string
		ids  func(j int) (id, rid, hash string)
	}{
		{"uuid", func(int) (string, string, string) {
			h := uuid.New()
			return "rsv_" + uuid.Must(uuid.NewV7()).String(), uuid.NewString(), fmt.Sprintf("%x", h[:])
		}},
		{"other", func(j int) (string, string, string) {
			return fmt.Sprintf("rsv_%026d", j), fmt.Sprintf("req-%032d", j), fmt.Sprintf("%064d", j)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.ReportMetric(closedBytes(b, c.ids), "heap-B/closed-reservation")
			}
		})
	}
}

func closedBytes(b *testing.B, ids func(int) (string, string, string)) float64 {
	const n = 100_000
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	bl := &balance{key: streams.BalanceKey(bookBal), ref: bookBal, self: []events.BalanceRef{bookBal}, open: map[string]*Reservation{}}
	bk.balances[bl.key] = bl
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for j := 0; j < n; j++ {
		id, rid, hash := ids(j)
		bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationOpened{ReservationID: id, RequestID: rid, RequestHash: hash,
			Balance: bookBal, Amount: events.MustMoney("0.25"), Unit: "USD", Balances: []events.BalanceRef{bookBal},
			ExpiresAt: bookT0.Add(time.Hour), At: bookT0})
		bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationSettled{ReservationID: id, Balance: bookBal,
			Reserved: events.MustMoney("0.25"), Actual: events.MustMoney("0.2"), Overrun: events.Zero, At: bookT0})
		bk.forgetUntil(uint64(j+1), bookT0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if bk.win.len() != n || len(bk.reservations) != 0 {
		b.Fatalf("the window holds %d reservations, the maps %d; want %d, 0", bk.win.len(), len(bk.reservations), n)
	}
	runtime.KeepAlive(bk)
	return float64(after.HeapAlloc-before.HeapAlloc) / n
}
