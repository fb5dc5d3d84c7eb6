package sweep_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/sweep"
)

// book is a stand-in for the ledger: reservations with their expiry and
// status. It is both the Lister and the Expirer (in spendgate they are
// ledger.Ledger and settle.Settler); a pass expires several reservations
// at once, so, like them, it is safe for concurrent use.
type book struct {
	mu      sync.Mutex
	expires map[string]time.Time
	status  map[string]string
}

func (b *book) Expired(now time.Time, max int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for _, id := range []string{"rsv_a", "rsv_b", "rsv_c"} { // oldest expiry first
		if len(ids) < max && b.status[id] == events.StatusOpen && !b.expires[id].After(now) {
			ids = append(ids, id)
		}
	}
	return ids
}

func (b *book) Expire(_ context.Context, id string) (events.CloseReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status[id] != events.StatusOpen {
		return events.CloseReply{ReservationID: id, Status: b.status[id], Replayed: true}, nil
	}
	b.status[id] = events.StatusExpired
	return events.CloseReply{ReservationID: id, Status: events.StatusExpired}, nil
}

// A sweeper releases the reservations whose holder vanished. Here the clock
// is fixed so the example is deterministic; in serve it is time.Now and Run
// calls Pass every interval.
func ExampleSweeper_Pass() {
	admitted := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := &book{
		expires: map[string]time.Time{
			"rsv_a": admitted.Add(30 * time.Second),
			"rsv_b": admitted.Add(time.Minute),
			"rsv_c": admitted.Add(5 * time.Minute),
		},
		status: map[string]string{"rsv_a": events.StatusOpen, "rsv_b": events.StatusOpen, "rsv_c": events.StatusOpen},
	}
	now := admitted.Add(2 * time.Minute)
	s, err := sweep.New(b, b, sweep.WithClock(func() time.Time { return now }), sweep.WithMaxPerPass(100))
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := s.Pass(context.Background())
	fmt.Println("expired:", n, err)
	n, err = s.Pass(context.Background())
	fmt.Println("expired again:", n, err)
	for _, id := range []string{"rsv_a", "rsv_b", "rsv_c"} {
		fmt.Println(id, b.status[id])
	}
	// Output:
	// expired: 2 <nil>
	// expired again: 0 <nil>
	// rsv_a expired
	// rsv_b expired
	// rsv_c open
}
