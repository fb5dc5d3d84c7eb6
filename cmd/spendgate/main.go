// Command spendgate runs the spendgate ledger service and talks to it.
//
//	spendgate serve                      run the service on an embedded NATS server
//	spendgate budget put|get|list        manage budgets
//	spendgate pricing put|get|list|import manage model prices
//	spendgate admit|settle|release|void  reserve and close
//
// Each subcommand is one small file here that parses flags and calls a
// package (serve: service and embedded; bench: bench; demo: demo). Run
// "spendgate help" for every command, and any command with --help for its
// flags.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spendgate/spendgate/internal/secret"
)

const usage = `spendgate: spend caps enforced before the money is spent.

Usage:
  spendgate serve    [--data-dir DIR] [--listen 127.0.0.1:4222] [--nats-url URL] [--config FILE] ...
  spendgate budget put  --scope KIND:ID --period month|week|day|hour|minute|lifetime [--limit DECIMAL] [--unit USD|requests|...] [--tz ZONE] [--fixed-slot DECIMAL] [--replace]
  spendgate budget get  --scope KIND:ID [--period month|week|day|hour|minute|lifetime [--unit UNIT]]
  spendgate budget disable|enable --scope KIND:ID --period PERIOD
  spendgate budget retire --scope KIND:ID --period PERIOD [--reason TEXT]   for good: a finished run's or job's
  spendgate budget list [--kind KIND] [--sort scope|utilization] [--retired] [--max N]
  spendgate pricing put --model NAME --input DECIMAL --output DECIMAL [--cached-input DECIMAL] [--unit USD]
  spendgate pricing get --model NAME | list | import --file PATH [--format json|csv]
  spendgate admit    --scope KIND:ID [--scope ...] --amount DECIMAL [--unit USD] [--ttl 5m] [--request-id ID] [--meta K=V] [--mode check|shadow] [-o json|id]
  spendgate admit    --scope KIND:ID [--scope ...] --model NAME --input-tokens N|--input-chars N --max-output-tokens N [...]
  spendgate settle   --reservation ID --actual DECIMAL [--note WORD]
  spendgate settle   --reservation ID --input-tokens N --output-tokens N [--cached-input-tokens N]
  spendgate release  --reservation ID
  spendgate void     --request-id ID --scope KIND:ID [--scope ...]   release an admit by its request id, landed or not
  spendgate audit check --trusted-keys KEYS  replay the book of record, verify signatures, reconcile with the live balances
  spendgate audit keys [--archive DIR]   which signing key wrote which revisions
  spendgate audit balances --trusted-keys KEYS|--unverified [--at TIME] [--decimal point|comma]   totals per budget period as CSV, optionally as of an RFC 3339 time
  spendgate audit export --trusted-keys KEYS|--unverified [--from TIME] [--to TIME] [--scope KIND:ID ...] [--format csv|jsonl] [--times exact|sheet] [--decimal point|comma] [--totals FILE] [--as-of TIME|POSITION]
                                         one row per reservation, streamed
  spendgate audit archive|trim --dir DIR archive the stream's old revisions; drop what the archive covers
  spendgate snapshot --trusted-keys KEYS --signing-key FILE | --list | --restore FILE   write a snapshot of the book now (replicas also write them periodically)
  spendgate report   --by scope|KEY [--from TIME] [--to TIME] [--period PERIOD] [--format table|csv] [--decimal point|comma]   spend by scope or metadata key, from a replica
  spendgate report   --by scope|KEY --replay --trusted-keys KEYS|--unverified [...]   the same, replayed from the book
  spendgate backtest --scope KIND:ID --trusted-keys KEYS|--unverified [--limit DECIMAL] [--period PERIOD] [--fixed-slot DECIMAL] [--from TIME --to TIME] [-o table|csv|json]
                                         replay a scope's recorded admits under another limit: who would have been denied
  spendgate bench    [--duration 3s] [--reps 3] [--conns 4] [--scenarios hot1,...|mem] [--json]   throughput vs floor and naive CAS
  spendgate demo overrun [--concurrency 20] [--ceiling 0.10] [--price 0.02] [--json]   naive ledger vs spendgate, no setup
  spendgate roles [--account NAME] [--tenant NAME ...] [--tls-cert FILE --tls-key FILE [--tls-ca FILE]] [--nsc]
                                         a nats-server permission layout: replica, service, admin, finance, feed, gateway, alerts, tenants, TLS
  spendgate alerts webhook --url URL [--durable NAME] [--listen ADDR]   deliver budget alerts to a webhook (Slack-compatible), with retries
  spendgate tenant-limits put --tenant NAME [--max-open N] [--max-default-budgets N] [--max-budgets N]
                              [--rate N] [--burst N] [--denial-bytes N]
  spendgate tenant-limits get [--tenant NAME] | list
                                         a tenant's own limits, kept in the ledger (every replica holds it to them)
  spendgate feed consumer --tenant NAME [--replace]  create (as the admin) a tenant's feed consumer t-NAME, which the tenant may only read
  spendgate key --file FILE              the public key of a signing key (created if FILE does not exist)
  spendgate keys create [--scope KIND:ID ...] [--budget DECIMAL] [--access service|admin] | list | update|disable|enable|rotate --id ID
                                         API keys of the gateway (only their hashes are stored)
  spendgate gateway --upstream openai=URL|anthropic=URL [--listen 127.0.0.1:8080]
                                         an OpenAI- and Anthropic-compatible proxy that caps every call, and the HTTP API
  spendgate version                      module version and commit of this binary, as far as it knows them

Every command takes --help for its flags ("spendgate help COMMAND" too).
Client commands connect to --nats-url (default nats://127.0.0.1:4222, or
$SPENDGATE_NATS_URL, or $NATS_URL) with --creds, --nkey, --user/--password,
--token or --tls-* (or the NATS_* variables) and print the JSON reply, its
keys in the order the service sends them (admit -o id prints the
reservation id alone). Each --help lists these "Connection flags" apart.

Exit status:
  0   success; admit: admitted
  1   an error: the service refused the request or could not be reached, or
      a check failed (audit check, demo)
  2   admit: denied by a budget (nothing reserved)
  64  a usage error, found before anything is sent: an unknown command or
      flag, a missing required flag, a bad flag value, an unexpected argument
`

// commands maps each command to its function.
var commands = map[string]func([]string) int{
	"serve":         serve,
	"budget":        budget,
	"pricing":       pricing,
	"admit":         admitCmd,
	"settle":        settleCmd,
	"release":       releaseCmd,
	"void":          voidCmd,
	"audit":         audit,
	"report":        reportCmd,
	"backtest":      backtestCmd,
	"bench":         benchCmd,
	"demo":          demoCmd,
	"roles":         rolesCmd,
	"feed":          feedCmd,
	"alerts":        alertsCmd,
	"key":           keyCmd,
	"keys":          keysCmd,
	"gateway":       gatewayCmd,
	"snapshot":      snapshotCmd,
	"tenant-limits": tenantLimitsCmd,
	"version":       versionCmd,
}

func main() {
	// A panic's value is printed without any seed it may quote. It exits
	// 1, an error: 2 would read as a denied admit.
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "panic: %s\n\n%s", secret.Redact(fmt.Sprint(r)), debug.Stack())
			os.Exit(exitError)
		}
	}()
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			if f, ok := commands[rest[0]]; ok {
				return f(append(rest[1:], "--help"))
			}
			fmt.Fprintf(os.Stderr, "spendgate: unknown command %q\n\n%s", rest[0], usage)
			return exitUsage
		}
		fmt.Print(usage)
		return exitOK
	}
	if f, ok := commands[name]; ok {
		return f(rest)
	}
	fmt.Fprintf(os.Stderr, "spendgate: unknown command %q\n\n%s", name, usage)
	return exitUsage
}
