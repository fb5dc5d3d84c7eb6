package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spendgate/spendgate/internal/demo"
)

var demoCommand = command{
	name:     "spendgate demo",
	synopsis: "overrun [flags]",
	about: `Demonstrations that need no setup. One so far:

  overrun   a burst of concurrent priced calls against a check-then-act ledger
            and through spendgate, then four ways a ledger fails open`,
}

var demoOverrunCommand = command{
	name:     "spendgate demo overrun",
	synopsis: "[--concurrency 20] [--ceiling 0.10] [--price 0.02] [--latency 10ms] [--json]",
	about: `Starts an embedded NATS server with JetStream (temp dir, random port), one
spendgate replica and a fake priced upstream, then runs the same burst of
concurrent priced calls against a check-then-act ledger and through spendgate,
and four ways a ledger fails open: check-then-act under concurrency, post-hoc
accounting, best-effort recording, an unpriced model costed at zero.

Exit status: 0 when spendgate held every ceiling (the naive ledger's breaches
are expected); 1 if a spendgate ceiling is breached or on an error; 64 on a
usage error.`,
}

// demoCmd is spendgate demo: a subcommand, flags into demo.Options, then
// demo.Overrun.
func demoCmd(args []string) int {
	if len(args) == 0 || args[0] != "overrun" {
		return demoCommand.noSubcommand(args, "which demo? (overrun)")
	}
	o := demo.DefaultOptions()
	fs := newFlagSet("demo overrun")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "concurrent priced calls in the headline burst")
	fs.StringVar(&o.Ceiling, "ceiling", o.Ceiling, "the headline budget's ceiling, a decimal string (USD)")
	fs.StringVar(&o.Price, "price", o.Price, "what one call costs, a decimal string (USD)")
	fs.DurationVar(&o.Latency, "latency", o.Latency, "how long the fake upstream takes per call")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	if code, ok := demoOverrunCommand.parse(fs, args[1:]); !ok {
		return code
	}
	if err := o.Validate(); err != nil {
		return demoOverrunCommand.usageError(fs, err.Error())
	}
	rep, err := demo.Overrun(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate demo overrun:", err)
		return exitError
	}
	if *asJSON {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			_, err = fmt.Println(string(b))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate demo overrun: write the report:", err)
			return exitError
		}
	} else if err := rep.Print(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate demo overrun: write the report:", err)
		return exitError
	}
	if !rep.Held || !rep.AuditOK {
		return exitError
	}
	return exitOK
}
