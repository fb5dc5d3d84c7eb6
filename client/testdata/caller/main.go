// Command caller is a test's second process: it makes -n concurrent admits
// of -amount against -scope through one coalescing client.Client, each
// with its own request id, once a line arrives on stdin (so that several
// callers start together), and prints one JSON line: how many were
// admitted, how many denied for the limit, and any other error.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

type result struct {
	Admitted int      `json:"admitted"`
	Denied   int      `json:"denied"`
	Errors   []string `json:"errors"`
}

func main() {
	url := flag.String("url", "", "NATS URL")
	n := flag.Int("n", 100, "concurrent admits")
	amount := flag.String("amount", "0.05", "amount of each admit")
	scope := flag.String("scope", "org:acme", "scope of each admit")
	flag.Parse()
	nc, err := nats.Connect(*url, nats.Name("spendgate-test-caller"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu  sync.Mutex
		res = result{Errors: []string{}}
		wg  sync.WaitGroup
	)
	for i := range *n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Admit(ctx, events.AdmitRequest{Scopes: []string{*scope}, Amount: *amount, Unit: "USD"})
			var de *client.DeniedError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				res.Admitted++
			case errors.As(err, &de) && de.Denial.Reason == events.ReasonLimitReached:
				res.Denied++
			default:
				res.Errors = append(res.Errors, fmt.Sprintf("admit %d: %v", i, err))
			}
		}()
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(2)
	}
}
