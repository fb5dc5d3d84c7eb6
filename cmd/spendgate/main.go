// Command spendgate runs the spendgate ledger service and talks to it.
//
//	spendgate serve                      run the service on an embedded NATS server
//	spendgate budget put|get|list        manage budgets
//	spendgate admit|settle|release       reserve and close
//
// Run "spendgate help" for every command and flag.
package main

import (
	"fmt"
	"os"
)

const usage = `spendgate: spend caps enforced before the money is spent.

Usage:
  spendgate serve    [--data-dir DIR] [--listen 127.0.0.1:4222] [--nats-url URL] ...
  spendgate budget put  --scope KIND:ID --period month|day|lifetime --limit DECIMAL --unit USD|requests|...
  spendgate budget get  --scope KIND:ID --period month|day|lifetime
  spendgate budget list [--kind KIND]
  spendgate admit    --scope KIND:ID [--scope ...] --amount DECIMAL [--unit USD] [--ttl 5m] [--request-id ID]
  spendgate settle   --reservation ID --actual DECIMAL
  spendgate release  --reservation ID
  spendgate audit check                  replay the book of record and reconcile it with the live balances
  spendgate audit balances [--at TIME]   totals per budget period as CSV, optionally as of an RFC 3339 time
  spendgate bench    [--duration 3s] [--reps 3] [--conns 4] [--scenarios hot1,...|mem] [--json]   throughput vs floor and naive CAS
  spendgate demo overrun [--concurrency 20] [--ceiling 0.10] [--price 0.02] [--json]   naive ledger vs spendgate, no setup

Every command takes -h for its flags. Client commands connect to --nats-url
(default nats://127.0.0.1:4222, or $SPENDGATE_NATS_URL) and print the JSON
reply. Exit status: 0 success or admitted, 2 denied, 1 error.
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 1
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(rest)
	case "budget":
		return budget(rest)
	case "admit":
		return admitCmd(rest)
	case "settle":
		return settleCmd(rest)
	case "release":
		return releaseCmd(rest)
	case "audit":
		return audit(rest)
	case "bench":
		return benchCmd(rest)
	case "demo":
		return demoCmd(rest)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "spendgate: unknown command %q\n\n%s", cmd, usage)
	return 1
}
