package projector_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

func ExampleState_Apply() {
	bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	// Lane revision 1 admits a reservation of 0.05; lane revision 2
	// settles it at 0.07, 0.02 beyond what was reserved. Each names the
	// one balance it changes, and revision 2 names revision 1, the one it
	// follows, by sequence and payload hash.
	rev1, _ := json.Marshal(events.LaneRevision{Schema: events.SchemaLane, Balances: []events.BalanceRevision{{
		Schema: events.SchemaBalance, Balance: bal, Unit: "USD", Limit: events.MustMoney("1"),
		Reserved: events.MustMoney("0.05"), Open: 1,
		Events: events.Events{events.ReservationOpened{
			ReservationID: "rsv-1", RequestID: "req-1", Balance: bal, Amount: events.MustMoney("0.05"),
			Unit: "USD", Balances: []events.BalanceRef{bal}, ExpiresAt: at.Add(time.Minute), At: at,
		}},
	}}})
	rev2, _ := json.Marshal(events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: 1, PrevHash: events.HashPayload(rev1)}, Balances: []events.BalanceRevision{{
		Schema: events.SchemaBalance, Balance: bal, Unit: "USD", Limit: events.MustMoney("1"),
		Spent: events.MustMoney("0.07"), Overrun: events.MustMoney("0.02"),
		Events: events.Events{events.ReservationSettled{
			ReservationID: "rsv-1", Balance: bal, Reserved: events.MustMoney("0.05"),
			Actual: events.MustMoney("0.07"), Overrun: events.MustMoney("0.02"), At: at.Add(time.Second),
		}},
	}}})

	lane := streams.Default().LaneKey(bal)
	s := projector.NewState()
	for seq, data := range [][]byte{rev1, rev2} {
		if err := s.Apply(uint64(seq+1), lane, data); err != nil {
			fmt.Println(err)
			return
		}
	}
	b, _ := s.Balance(bal)
	r, _ := s.Reservation("rsv-1")
	fmt.Printf("position %d: %s in %s: limit %s spent %s reserved %s overrun %s open %d\n",
		s.Position(), b.Key, b.Lane, b.Limit, b.Spent, b.Reserved, b.Overrun, b.Open)
	fmt.Printf("%s %s at seqs %v\n", r.ID, r.Status, r.Seqs)
	// Output:
	// position 2: balance.org.acme.month.2026-11 in lane.0: limit 1 spent 0.07 reserved 0 overrun 0.02 open 0
	// rsv-1 settled at seqs [1 2]
}
