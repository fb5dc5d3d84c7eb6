package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// A replica on an embedded server, driven with plain JSON requests as any
// language would.
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "spendgate-example-")
	defer os.RemoveAll(dir)
	srv, err := testenv.StartServer(testenv.ServerConfig{StoreDir: dir, NoLog: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	r, err := replica.Start(context.Background(), nc, js, replica.Config{Layout: streams.Default()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Stop()

	call := func(endpoint string, req any) []byte {
		data, _ := json.Marshal(req)
		msg, err := nc.Request(streams.Default().Endpoint(endpoint), data, 5*time.Second)
		if err != nil {
			return []byte(err.Error())
		}
		return msg.Data
	}
	call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:acme", Period: "lifetime", Limit: "0.10", Unit: "USD"})
	for i := 0; i < 3; i++ {
		var a events.AdmitReply
		_ = json.Unmarshal(call(streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("r", i), Scopes: []string{"org:acme"}, Amount: "0.04"}), &a)
		if a.Admitted {
			fmt.Println("admitted", a.Amount)
		} else {
			fmt.Println("denied:", a.Denial.Reason, "reserved", a.Denial.Reserved, "of", a.Denial.Limit)
		}
	}
	fmt.Println(string(call(streams.EndpointSettle, events.SettleRequest{ReservationID: "rsv_nope", Actual: "0.01"})))
	// Output:
	// admitted 0.04
	// admitted 0.04
	// denied: limit_reached reserved 0.08 of 0.1
	// {"error":{"code":"unknown_reservation","message":"reservation rsv_nope is unknown"}}
}
