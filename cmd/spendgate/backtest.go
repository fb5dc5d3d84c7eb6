package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/backtest"
	"github.com/spendgate/spendgate/internal/report"
)

var backtestCommand = command{
	name:     "spendgate backtest",
	synopsis: "--scope KIND:ID [--limit DECIMAL] [--period month|week|day|hour|minute|lifetime] [--fixed-slot DECIMAL] [--learn PERCENTILE] [--exposure-cap DECIMAL] [--from RFC3339 --to RFC3339] [--by KEY ...] [-o table|csv|json] [--decimal point|comma] (--trusted-keys KEYS | --unverified) [--nats-url URL]",
	about: `Replays the recorded admits of one scope under other limits: what a limit
of 50 would have done. It reads the book of record through the same gate as
audit check (every revision verified against --trusted-keys) and the
denial records of admits that named the scope, then decides every admit
again, in the order the ledger committed them, with the live ledger's book
and rules in memory (no write anywhere): each reservation it admits is
settled, released or expired as recorded, with its recorded actual at its
recorded time. A recorded admit it denies makes no call (its actual is
what the limit saves); a recorded denial it admits is settled at what it
asked.

It reports the calls admitted and denied (recorded and replayed), what
the newly denied calls asked and cost, when each period of the budget ran
out, the budget's balances at the end, and the blocked calls grouped by
metadata value (--by KEY, repeatable; every key by default). --limit,
--fixed-slot and --exposure-cap change the budget --period names (its only one by default);
the scope's other budgets replay as recorded. --learn N reserves by
observed cost instead of what each admit asked: the N-th percentile of the
costs of the last calls of its model (at most what it asked), as learned
reservations do. --exposure-cap replaces the budget's exposure cap (what
settles above their reservations may add; admits that could break it are
denied exposure_cap). With none of them, the replay
checks itself: it must reproduce every recorded decision and balance
("exact" in the output; exit 1 if it does not).

--from and --to report the calls of [--from, --to); the replay still
starts at the first recorded event, so that the balances at --from are
what the policy left them.

` + reportDenialsNote,
}

// backtestCmd is spendgate backtest.
func backtestCmd(args []string) int {
	cmd := backtestCommand
	fs := newFlagSet("backtest")
	var r replayFlags
	r.register(fs)
	for name, usage := range map[string]string{
		"scope": "the scope to replay, KIND:ID (one; a tenant's as TENANT/KIND:ID, or KIND:ID with --tenant)",
		"from":  "report the calls from this RFC 3339 time (the replay still starts at the first recorded event)",
		"to":    "report the calls before this RFC 3339 time",
	} {
		fs.Lookup(name).Usage = usage
	}
	limit := fs.String("limit", "", "the budget's limit in the replay (a decimal; default: the recorded limits)")
	period := fs.String("period", "", "the period of the budget the replay changes (month, week, day, lifetime, ...; default: the scope's only budget)")
	unit := fs.String("unit", "", "the unit of that budget, when the scope has a money and a count budget in the period")
	slot := fs.String("fixed-slot", "", "a fixed slot the budget reserves per admit in the replay (a decimal)")
	expCap := fs.String("exposure-cap", "", "the budget's exposure cap in the replay (a decimal, 0 or more): an admit whose ceiling would take the balance's exposure past it is denied exposure_cap, and a settle is charged at most its ceiling")
	learnPct := fs.Int("learn", 0, "reserve by observed cost in the replay: this percentile (1..100) of the actual costs of the last --learn-window calls of the same model the replay settled (0: off; the maximum until --learn-min calls are known)")
	learnWindow := fs.Int("learn-window", events.DefaultLearnWindow, "with --learn: how many recent calls count")
	learnMin := fs.Int("learn-min", events.DefaultLearnMinSamples, "with --learn: the cold start, calls known before the rule applies")
	var by multiFlag
	fs.Var(&by, "by", "group the blocked calls by this metadata key (repeatable; default: every key)")
	out := &choiceFlag{value: backtest.FormatTable, choices: []string{backtest.FormatTable, backtest.FormatCSV, backtest.FormatJSON}}
	fs.Var(out, "output", "`table|csv|json`: how to print the result")
	fs.Var(out, "o", "shorthand for --output")
	decimal := decimalFlag(fs)
	if code, ok := cmd.parse(fs, args); !ok {
		return code
	}
	dec, err := report.ParseDecimal(*decimal)
	if err != nil {
		return cmd.usageError(fs, "--decimal "+strconv.Quote(*decimal)+": want point or comma")
	}
	if dec != report.DecimalPoint && out.value != backtest.FormatCSV {
		return cmd.usageError(fs, "--decimal comma is for -o csv")
	}
	if code, ok := cmd.require(fs, "scope"); !ok {
		return code
	}
	if len(r.scopes) != 1 {
		return cmd.usageError(fs, "--scope: give exactly one scope")
	}
	f, err := r.filter()
	if err != nil {
		return cmd.usageError(fs, err.Error())
	}
	if _, err := r.verify.keys(); err != nil {
		return cmd.usageError(fs, err.Error())
	}
	var pol backtest.Policy
	if *period != "" {
		p, err := events.ParsePeriod(*period)
		if err != nil {
			return cmd.usageError(fs, fmt.Sprintf("--period %q: %v", *period, err))
		}
		pol.Period = p
	}
	if *unit != "" {
		if err := events.ValidateUnit(*unit); err != nil {
			return cmd.usageError(fs, fmt.Sprintf("--unit %q: %v", *unit, err))
		}
		pol.Unit = *unit
	}
	for _, m := range []struct {
		name, value string
		to          **events.Money
	}{{"limit", *limit, &pol.Limit}, {"fixed-slot", *slot, &pol.FixedSlot}, {"exposure-cap", *expCap, &pol.ExposureCap}} {
		if m.value == "" {
			continue
		}
		v, err := events.ParseMoney(m.value)
		if err != nil {
			return cmd.usageError(fs, fmt.Sprintf("--%s %q: %v", m.name, m.value, err))
		}
		*m.to = &v
	}
	if pol.ExposureCap != nil && pol.ExposureCap.Sign() < 0 {
		return cmd.usageError(fs, fmt.Sprintf("--exposure-cap %s: must not be negative", pol.ExposureCap))
	}
	if pol.FixedSlot != nil && pol.FixedSlot.Sign() <= 0 {
		return cmd.usageError(fs, fmt.Sprintf("--fixed-slot %s: must be greater than zero", pol.FixedSlot))
	}
	if *learnPct != 0 {
		rule := events.LearnRule{Percentile: *learnPct, Window: *learnWindow, MinSamples: *learnMin}
		if err := rule.Validate(); err != nil {
			return cmd.usageError(fs, "--learn: "+err.(*events.Error).Message)
		}
		pol.Learn = &rule
	}
	for _, k := range by {
		if err := events.ValidateToken("metadata key", k, 64); err != nil {
			return cmd.usageError(fs, fmt.Sprintf("--by %q: %v", k, err))
		}
	}
	rd, ctx, done, err := r.reader("backtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: backtest:", err)
		return exitError
	}
	defer done()
	h, err := backtest.Load(ctx, rd, f.Scopes[0])
	if err != nil {
		return backtestError(cmd, err)
	}
	res, err := backtest.Replay(ctx, h, pol, backtest.Options{From: f.From, To: f.To, By: by})
	if err != nil {
		return backtestError(cmd, err)
	}
	if out.value == backtest.FormatCSV {
		err = res.WriteCSV(os.Stdout, dec)
	} else {
		err = res.Write(os.Stdout, out.value)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: backtest:", err)
		return exitError
	}
	if res.Exact.Checked && !res.Exact.Same {
		fmt.Fprintf(os.Stderr, "spendgate: backtest: the replay under the recorded budgets differs from the record in %d places:\n  %s\n",
			res.Exact.Mismatches, strings.Join(res.Exact.Examples, "\n  "))
		return exitError
	}
	return exitOK
}

// backtestError prints err: a refusal of what the command line asked (a
// scope without a budget, a period it has no budget in, an ambiguous
// budget, a bad amount) as {"error": {code, message}} on stdout and exit
// 64, as a usage error; anything else on stderr, exit 1.
func backtestError(cmd command, err error) int {
	var e *events.Error
	if errors.As(err, &e) {
		switch e.Code {
		case events.CodeUnknownBudget, events.CodeInvalidPeriod, events.CodeInvalidAmount:
			b, _ := json.MarshalIndent(events.ErrorReply{Error: e}, "", "  ")
			fmt.Fprintln(os.Stdout, string(b))
			fmt.Fprintf(os.Stderr, "%s: %s (see --help)\n", cmd.name, e.Message)
			return exitUsage
		}
	}
	fmt.Fprintln(os.Stderr, "spendgate: backtest:", err)
	return exitError
}
