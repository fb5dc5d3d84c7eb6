package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// ExampleDo wraps a (fake) LLM call in price -> reserve -> call ->
// settle | release, against an embedded spendgate.
func ExampleDo() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// An embedded JetStream server and one spendgate replica; in
	// production both already run, and the service only needs nc.
	dir, err := os.MkdirTemp("", "spendgate-client-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	s, err := testenv.StartServer(testenv.ServerConfig{StoreDir: dir, NoLog: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.WaitForShutdown()
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	replica, err := service.StartReplica(ctx, nc, js, service.ReplicaConfig{Layout: streams.Default(), SweepInterval: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer replica.Stop()

	c, err := client.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := c.PutBudget(ctx, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1.00", Unit: "USD"}); err != nil {
		fmt.Println(err)
		return
	}

	// Price: the most this call can cost (max tokens × the model's price).
	req := func() events.AdmitRequest {
		return events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.50", Unit: "USD", TTL: "30s"}
	}
	// A fake upstream: it answers with its actual cost, or fails.
	upstream := func(fail bool) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			if fail {
				return "", errors.New("upstream: 502 bad gateway")
			}
			return "0.12", nil
		}
	}
	show := func(what string, err error) {
		v, gerr := c.GetBudget(ctx, events.BudgetGetRequest{Scope: "org:acme", Period: "month"})
		if gerr != nil {
			fmt.Println(gerr)
			return
		}
		fmt.Printf("%s: err=%v spent=%s reserved=%s available=%s\n", what, err, v.Spent, v.Reserved, v.Available)
	}

	// Reserved 0.50, the call cost 0.12: settled at 0.12.
	err = client.Do(ctx, c, req(), upstream(false))
	show("success", err)
	// Reserved 0.50, the call failed: released in full.
	err = client.Do(ctx, c, req(), upstream(true))
	show("failure", err)
	// A request the budget cannot cover is denied before any money is spent.
	big := req()
	big.Amount = "2.00"
	err = client.Do(ctx, c, big, upstream(false))
	var denied *client.DeniedError
	if errors.As(err, &denied) {
		fmt.Println("denied:", denied.Denial.Reason)
	}
	// Output:
	// success: err=<nil> spent=0.12 reserved=0 available=0.88
	// failure: err=upstream: 502 bad gateway spent=0.12 reserved=0 available=0.88
	// denied: limit_reached
}
