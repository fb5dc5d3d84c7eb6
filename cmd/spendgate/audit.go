package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// audit replays the book of record for finance:
//
//	spendgate audit check               replay == live, to the last digit
//	spendgate audit balances [--at T]   totals per balance (CSV), optionally as of time T
func audit(args []string) int {
	if len(args) == 0 || (args[0] != "check" && args[0] != "balances") {
		fmt.Fprint(os.Stderr, "usage: spendgate audit check|balances [--at RFC3339] [--nats-url URL] [--bucket NAME]\n")
		return 1
	}
	fs := flag.NewFlagSet("audit "+args[0], flag.ContinueOnError)
	var c clientFlags
	c.register(fs)
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	at := fs.String("at", "", "balances as of this time (RFC 3339), default now")
	if fs.Parse(args[1:]) != nil {
		return 1
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: c.prefix})
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate:", err)
		return 1
	}
	nc, err := nats.Connect(c.url, nats.Name("spendgate-audit"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: connect %s: %v\n", c.url, err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if args[0] == "check" {
		rep, err := projector.Check(ctx, js, layout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: audit check:", err)
			return 1
		}
		fmt.Println(rep)
		if !rep.OK() {
			return 1
		}
		return 0
	}
	p := projector.New(js, layout)
	var st *projector.State
	if *at != "" {
		t, perr := time.Parse(time.RFC3339Nano, *at)
		if perr != nil {
			fmt.Fprintf(os.Stderr, "spendgate: --at %q: %v\n", *at, perr)
			return 1
		}
		st, err = p.ReplayUntil(ctx, t)
	} else {
		st, err = p.CatchUp(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: audit balances:", err)
		return 1
	}
	w := csv.NewWriter(os.Stdout)
	_ = w.Write([]string{"scope", "period", "instance", "unit", "limit", "spent", "reserved", "overrun", "open", "opened", "settled", "released", "expired", "late"})
	for _, b := range st.Balances() {
		_ = w.Write([]string{string(b.Ref.Scope), string(b.Ref.Period), b.Ref.Instance, b.Unit,
			b.Limit.String(), b.Spent.String(), b.Reserved.String(), b.Overrun.String(),
			strconv.FormatInt(b.Open, 10), strconv.FormatInt(b.Opened, 10), strconv.FormatInt(b.Settled, 10),
			strconv.FormatInt(b.Released, 10), strconv.FormatInt(b.Expired, 10), strconv.FormatInt(b.Late, 10)})
	}
	w.Flush()
	return 0
}
