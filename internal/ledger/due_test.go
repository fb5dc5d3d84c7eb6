package ledger

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestBook_DueIndex: over random opens, settles, releases and expiries,
// expiredBy answers exactly what a scan of every reservation answers, at
// random instants. How it can fail: an index entry left behind by a close
// (or one missing after an open) shows up as a difference from the scan.
func TestBook_DueIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	b := newBook(streams.Default(), time.Minute, time.Hour)
	bl := &balance{key: "k", ref: bookBal, self: []events.BalanceRef{bookBal}, open: map[string]*Reservation{}}
	var ids []string
	scan := func(now time.Time) []string {
		var out []string
		for _, r := range b.reservations {
			if r.Status == events.StatusOpen && !r.ExpiresAt.After(now) {
				out = append(out, r.ID)
			}
		}
		sort.Strings(out)
		return out
	}
	for step := 0; step < 5000; step++ {
		switch op := rng.IntN(10); {
		case op < 5 || len(ids) == 0:
			id := fmt.Sprintf("r%d", step)
			ids = append(ids, id)
			b.applyEvent(bl, "k", uint64(step+1), events.ReservationOpened{ReservationID: id, RequestID: id,
				Balance: bookBal, Amount: events.MustMoney("1"), Unit: "USD",
				ExpiresAt: bookT0.Add(time.Duration(rng.IntN(1000)) * time.Second), At: bookT0})
		case op < 7:
			id := ids[rng.IntN(len(ids))]
			b.applyEvent(bl, "k", uint64(step+1), events.ReservationSettled{ReservationID: id, Balance: bookBal,
				Reserved: events.MustMoney("1"), Actual: events.MustMoney("1"), Overrun: events.Zero})
		default:
			reason := events.ReasonReleased
			if op == 9 {
				reason = events.ReasonExpired
			}
			id := ids[rng.IntN(len(ids))]
			b.applyEvent(bl, "k", uint64(step+1), events.ReservationReleased{ReservationID: id, Balance: bookBal,
				Reserved: events.MustMoney("1"), Reason: reason})
		}
		if step%50 == 0 {
			now := bookT0.Add(time.Duration(rng.IntN(1100)) * time.Second)
			var got []string
			for _, r := range b.expiredBy(now) {
				got = append(got, r.ID)
			}
			sort.Strings(got)
			require.Equal(t, scan(now), got, "step %d", step)
			open := 0
			for _, r := range b.reservations {
				if r.Status == events.StatusOpen {
					open++
				}
			}
			require.Len(t, b.due, open, "the index holds exactly the open reservations")
		}
	}
}
