package feed_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// Example follows the live event feed with a durable consumer and a
// Cursor: each event is handled once, in commit order, even if the process
// dies between handling an event and acknowledging it (the event comes
// again and the cursor, stored with what handle did, skips it).
func Example() {
	// What production already runs: a NATS server and a replica with
	// serve --feed. Here: an embedded server on a random port.
	dir, _ := os.MkdirTemp("", "spendgate-feed-example-")
	defer os.RemoveAll(dir)
	srv, err := testenv.StartServer(testenv.ServerConfig{StoreDir: dir, NoLog: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snc, _ := nats.Connect(srv.ClientURL())
	defer snc.Close()
	sjs, _ := jetstream.New(snc)
	r, err := replica.Start(ctx, snc, sjs, replica.Config{Layout: streams.Default(), SweepInterval: -1, Feed: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Stop()
	_, _ = r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:acme", Period: "month"}, events.MustMoney("10"), "USD", time.Now())
	adm, _ := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "req-1", Scopes: []string{"org:acme"}, Amount: "0.05"})
	_, _ = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: adm.ReservationID, Actual: "0.04"})

	// The consumer: any service, anywhere on the NATS network.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	layout := streams.Default()
	if _, err := streams.EnsureFeed(ctx, js, layout); err != nil {
		fmt.Println(err)
		return
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, layout.FeedStreamName(), feed.ConsumerConfig(layout, "billing"))
	if err != nil {
		fmt.Println(err)
		return
	}
	var cursor feed.Cursor // load it from your store
	for handled := 0; handled < 3; {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			fmt.Println(err)
			return
		}
		m, err := feed.Decode(msg.Data())
		if err != nil {
			fmt.Println(err)
			return
		}
		if cursor.Next(m) { // new: handle it, store the cursor with it
			e, _ := m.Decoded()
			switch e := e.(type) {
			case events.BudgetDefinedV2:
				fmt.Println(m.Type, e.Budget.Scope, e.Limit, e.Unit)
			case events.ReservationOpened:
				fmt.Println(m.Type, e.Balance.Scope, e.Amount, e.Metadata)
			case events.ReservationSettled:
				fmt.Println(m.Type, e.Balance.Scope, e.Actual, "spent now", m.Balance.Spent)
			}
			handled++
		}
		_ = msg.Ack()
	}
	// Output:
	// budget.defined.v2 org:acme 10 USD
	// reservation.opened.v1 org:acme 0.05 map[]
	// reservation.settled.v1 org:acme 0.04 spent now 0.04
}
