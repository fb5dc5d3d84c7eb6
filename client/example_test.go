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
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// exampleLedger starts what the examples talk to: an embedded JetStream
// server on 127.0.0.1 (random port, temporary storage), one spendgate
// replica and, unless noService, the README's budget (org:acme, 1.00 USD a
// month). In production both already run; an example only needs the URL.
func exampleLedger(noService bool) (url string, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	dir, err := os.MkdirTemp("", "spendgate-client-example-")
	if err != nil {
		return "", nil, err
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	s, err := testenv.StartServer(testenv.ServerConfig{StoreDir: dir, NoLog: true})
	if err != nil {
		return "", nil, err
	}
	stops = append(stops, func() { s.Shutdown(); s.WaitForShutdown() })
	if noService {
		return s.ClientURL(), stop, nil
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		return "", nil, err
	}
	stops = append(stops, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	replica, err := replica.Start(ctx, nc, js, replica.Config{Layout: streams.Default(), SweepInterval: -1, Reports: true})
	if err != nil {
		return "", nil, err
	}
	stops = append(stops, func() { _ = replica.Stop() })
	c, err := client.New(nc)
	if err != nil {
		return "", nil, err
	}
	_, err = c.PutBudget(ctx, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1.00", Unit: "USD"})
	if err != nil {
		return "", nil, err
	}
	return s.ClientURL(), stop, nil
}

// ExampleCall is the README's Go snippet (section "Go"): connect, make a client,
// and run one upstream call under a reservation.
func ExampleCall() {
	url, stop, err := exampleLedger(false) // in production: "nats://127.0.0.1:4222"
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()

	nc, err := nats.Connect(url, nats.MaxReconnects(-1)) // through any restart
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	c, err := client.New(nc) // fails closed by default
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := client.Call(ctx, c, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.05"},
		func(ctx context.Context) (string, error) {
			// Call the upstream here and return its actual cost; a call
			// that fails after it was billed returns its cost and its error.
			return "0.04", nil
		})
	switch {
	case errors.Is(err, client.ErrUnavailable) && errors.Is(err, client.ErrDenied):
		fmt.Println("denied: the ledger did not answer (fail closed)")
	case errors.Is(err, client.ErrDenied):
		fmt.Println("denied:", out.Admit.Denial.Message)
	case err != nil:
		fmt.Println("error:", err) // the call failed, or its cost was not recorded
	default:
		fmt.Println("reserved", out.Admit.Amount, "then", out.Close.Status, out.Close.Actual)
	}
	// Output:
	// reserved 0.05 then settled 0.04
}

// ExampleErrUnavailable: with no spendgate answering (here a NATS server
// without the service), the client denies: it fails closed, and the
// error says both that it is a denial and that the ledger was unavailable.
func ExampleErrUnavailable() {
	url, stop, err := exampleLedger(true)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1)) // through any restart
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithTimeout(200*time.Millisecond), client.WithRetries(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := client.Call(context.Background(), c, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.05"},
		func(ctx context.Context) (string, error) { return "0.04", nil })
	var ee *events.Error
	fmt.Println("denied:", errors.Is(err, client.ErrDenied))
	fmt.Println("unavailable:", errors.Is(err, client.ErrUnavailable))
	fmt.Println("a refusal of the request:", errors.As(err, &ee))
	fmt.Println("called:", out.Called)
	// Output:
	// denied: true
	// unavailable: true
	// a refusal of the request: false
	// called: false
}

// ExampleDo wraps a (fake) LLM call in price -> reserve -> call ->
// settle | release: a success is settled at its actual cost, a failure
// that was billed is settled at what it cost, a failure that was not
// billed is released, and a request the budget cannot cover is denied
// before any money is spent.
func ExampleDo() {
	url, stop, err := exampleLedger(false)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1)) // through any restart
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Price: the most this call can cost (max tokens × the model's price).
	req := func(amount string) events.AdmitRequest {
		return events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: amount, Unit: "USD", TTL: "30s"}
	}
	// A fake upstream: it answers with its actual cost and error.
	upstream := func(cost string, err error) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return cost, err }
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
	err = client.Do(ctx, c, req("0.50"), upstream("0.12", nil))
	show("success", err)
	// Reserved 0.50, the call failed before it was billed: released in full.
	err = client.Do(ctx, c, req("0.50"), upstream("", errors.New("upstream: 502 bad gateway")))
	show("failure", err)
	// Reserved 0.50, the stream broke after 0.07 was billed: settled at 0.07.
	err = client.Do(ctx, c, req("0.50"), upstream("0.07", errors.New("upstream: stream reset")))
	show("billed failure", err)
	// A request the budget cannot cover is denied before any money is spent.
	err = client.Do(ctx, c, req("2.00"), upstream("0.12", nil))
	var denied *client.DeniedError
	if errors.As(err, &denied) {
		fmt.Println("denied:", denied.Denial.Reason)
	}
	// Output:
	// success: err=<nil> spent=0.12 reserved=0 available=0.88
	// failure: err=upstream: 502 bad gateway spent=0.12 reserved=0 available=0.88
	// billed failure: err=upstream: stream reset spent=0.19 reserved=0 available=0.81
	// denied: limit_reached
}

// ExampleClient_Report: spend by metadata key, from the replica's
// maintained report (equal to `spendgate report --replay`).
func ExampleClient_Report() {
	url, stop, err := exampleLedger(false)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1)) // through any restart
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, model := range []string{"gpt-x", "gpt-x", "mini"} {
		_, err := client.Call(ctx, c, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.05", Metadata: map[string]string{"model": model}},
			func(ctx context.Context) (string, error) { return "0.03", nil })
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	rep, err := c.Report(ctx, events.ReportRequest{By: "model"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range rep.Groups {
		fmt.Println(g.Value, g.Reservations, g.Spend, g.Unit)
	}
	_, err = c.Report(ctx, events.ReportRequest{By: "model", From: "2026-12-01T10:30:00Z"})
	fmt.Println(errors.Is(err, client.ErrInvalid), err)
	// Output:
	// gpt-x 2 0.06 USD
	// mini 1 0.03 USD
	// true invalid_time: from "2026-12-01T10:30:00Z" is not on a whole UTC hour (the report's bucket); the replay (spendgate report --replay) takes any time
}
