package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var (
	budgetCommand = command{
		name:     "spendgate budget",
		synopsis: "put|get|list|disable|enable|retire [flags]",
		about: `Manages budgets on a running service:

  put      define or change a budget: a limit per period for a scope
  get      one budget of a scope, with what is spent and reserved
  list     every budget, optionally of one kind of scope
  disable  deny every admit that names the budget (budget_disabled)
  enable   admit against the budget again
  retire   retire a budget for good (an agent run's, once the run is over)`,
	}
	budgetPutCommand = command{
		name:     "spendgate budget put",
		synopsis: "--scope KIND:ID --period month|week|day|hour|minute|lifetime [--limit DECIMAL] [--unit USD|requests|...] [--tz ZONE] [--disabled[=false]] [--allow-zero] [--fixed-slot DECIMAL|\"\"] [--alerts[=false]] [--threshold F ...] [--replace] [--tenant NAME]",
		about: `Defines the budget of a scope for a period, or changes it; the reply says what
changed ("changed") and what it was ("previous"). --period is required, so that
a change never lands on another period's budget by default. A put changes only
the options it gives (--limit alone changes the limit and keeps the zone, the
slot and the alerts); --replace puts the whole definition, resetting every
option left out. Creating a budget needs --limit and --unit. --limit 0 denies
everything and needs --allow-zero. --scope KIND:* (quote it for the shell) defines
the default budget of a kind for the period: a scope of that kind with no budget
of its own in the period gets it on its first admit.`,
	}
	budgetDisableCommand = command{
		name:     "spendgate budget disable",
		synopsis: "--scope KIND:ID --period month|week|day|hour|minute|lifetime [--tenant NAME]",
		about: `Disables a budget: every admit naming it is denied budget_disabled. It keeps the
limit, unit, time zone and fixed slot: it reads the budget and puts it back with only
"disabled" changed. The reply's "changed" shows what the put changed; if
another change landed between the read and the put, it shows that too.`,
	}
	budgetEnableCommand = command{
		name:     "spendgate budget enable",
		synopsis: "--scope KIND:ID --period month|week|day|hour|minute|lifetime [--tenant NAME]",
		about:    "Enables a disabled budget again, keeping the rest of its definition (see\nspendgate budget disable).",
	}
	budgetRetireCommand = command{
		name:     "spendgate budget retire",
		synopsis: "--scope KIND:ID --period month|week|day|hour|minute|lifetime [--unit UNIT] [--reason TEXT] [--tenant NAME]",
		about: `Retires a budget for good: every admit naming its scope is denied budget_retired,
no default creates a budget for the scope again, and a put of it is refused
(budget_retired). Its open reservations still settle, release and expire. Its
balances leave the replicas' memory, their snapshots and what a restart loads
once nothing can change them (nothing open in them, and their last
reservation out of the idempotency window); the ledger stream keeps every
number for audits and exports. Retiring a retired budget changes nothing
("already": true). It cannot be undone: use it for scopes that are over, an
agent run's or a job's, not to pause one (see spendgate budget disable).`,
	}
	budgetGetCommand = command{
		name:     "spendgate budget get",
		synopsis: "--scope KIND:ID [--period month|week|day|hour|minute|lifetime [--unit UNIT]] [--tenant NAME]",
		about:    "Prints a budget of a scope with its current period's spent, reserved and available;\nwithout --period, every budget of the scope.",
	}
	budgetListCommand = command{
		name:     "spendgate budget list",
		synopsis: "[--kind KIND] [--sort scope|utilization] [--retired] [--max N] [--page-size N] [--cursor C] [--tenant NAME]",
		about: `Prints every budget, or those whose scope is of one kind, fetching them page
by page. --sort utilization lists the budgets nearest their limit first
(e.g. --sort utilization --max 10). With --cursor it prints one page and its
next_cursor, as the service answers it.`,
	}
)

// budget is spendgate budget put|get|list.
func budget(args []string) int {
	if len(args) == 0 || len(args[0]) > 0 && args[0][0] == '-' {
		fs := newFlagSet("budget")
		if code, ok := budgetCommand.parse(fs, args); !ok {
			return code
		}
		return budgetCommand.usageError(fs, "which budget command? (put, get, list, disable, enable or retire)")
	}
	var c clientFlags
	fs := newFlagSet("budget " + args[0])
	c.register(fs)
	c.registerTenant(fs)
	switch args[0] {
	case "put":
		var req events.BudgetPutRequest
		var tz, fixedSlot, exposureCap, learnP string
		var disabled, alerts bool
		fs.StringVar(&req.Scope, "scope", "", "scope, kind:id (e.g. org:acme)")
		fs.StringVar(&req.Period, "period", "", "month, week, day, hour, minute or lifetime; required")
		fs.StringVar(&req.Limit, "limit", "", "limit, a decimal string (required to create the budget)")
		fs.StringVar(&req.Unit, "unit", "", "currency (USD, EUR, ...) or requests (required to create the budget)")
		fs.StringVar(&tz, "tz", "", "IANA time zone of the period's calendar, e.g. Europe/Berlin (\"\" or UTC: UTC)")
		fs.BoolVar(&disabled, "disabled", false, "disable the budget (--disabled=false enables it): every admit naming it is denied")
		fs.BoolVar(&req.AllowZero, "allow-zero", false, "allow --limit 0 (deny everything)")
		fs.StringVar(&fixedSlot, "fixed-slot", "", "reserve this fixed amount per admit instead of the requested one (money budgets; \"\" removes it)")
		fs.BoolVar(&alerts, "alerts", false, "publish threshold alerts at 50%, 80% and 100% of the limit, or at --threshold (--alerts=false turns them off)")
		fs.StringVar(&exposureCap, "exposure-cap", "", "cap the `decimal` that settles above their reservations may add per period (admits that could break it are denied exposure_cap; \"\" removes it)")
		fs.StringVar(&learnP, "learn", "", "reserve a `percentile` (p95) of recent actual costs per model and scope instead of the priced maximum (\"\" removes it)")
		fs.IntVar(&req.LearnWindow, "learn-window", 0, "with --learn: how many recent settled calls count (default 100)")
		fs.IntVar(&req.LearnMinSamples, "learn-min-samples", 0, "with --learn: reserve the priced maximum until this many calls are known (default 20)")
		fs.StringVar(&req.LearnFloor, "learn-floor", "", "with --learn: the least a learned reservation holds (default 0)")
		fs.BoolVar(&req.Replace, "replace", false, "put the whole definition: every option left out is reset to its default")
		var thresholds multiFlag
		fs.Var(&thresholds, "threshold", "alert `fraction` of the limit in (0, 1], e.g. 0.9; repeat for several (turns alerts on)")
		if code, ok := budgetPutCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if req.Period == "" {
			return budgetPutCommand.usageError(fs, "--period is required (month, week, day, hour, minute or lifetime)")
		}
		// Only the options given are sent: the put changes those fields
		// and keeps the others (unless --replace).
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "tz":
				req.TZ = &tz
			case "disabled":
				req.Disabled = &disabled
			case "fixed-slot":
				req.FixedSlot = &fixedSlot
			case "exposure-cap":
				req.ExposureCap = &exposureCap
			case "learn":
				req.Learn = &learnP
			case "alerts":
				req.Alerts = &alerts
			}
		})
		if code, ok := budgetPutCommand.require(fs, "scope"); !ok {
			return code
		}
		req.Thresholds = thresholds
		return c.call(streams.EndpointBudgetPut, req, nil)
	case "get":
		var req events.BudgetGetRequest
		fs.StringVar(&req.Scope, "scope", "", "scope, kind:id")
		fs.StringVar(&req.Period, "period", "", "month, week, day, hour, minute or lifetime; without it, every budget of the scope")
		fs.StringVar(&req.Unit, "unit", "", "with --period: the budget of this unit, when the scope has a money and a requests budget in the period")
		if code, ok := budgetGetCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if code, ok := budgetGetCommand.require(fs, "scope"); !ok {
			return code
		}
		return c.call(streams.EndpointBudgetGet, req, nil)
	case "list":
		var req events.BudgetListRequest
		fs.StringVar(&req.Kind, "kind", "", "only scopes of this kind")
		fs.StringVar(&req.Sort, "sort", events.SortScope, "scope (by scope, then period) or utilization ((spent+reserved)/limit, highest first)")
		fs.IntVar(&req.Limit, "page-size", 0, fmt.Sprintf("budgets per request, 1..%d (default %d)", events.MaxBudgetPage, events.DefaultBudgetPage))
		fs.StringVar(&req.Cursor, "cursor", "", "print only the page after this next_cursor (with its next_cursor)")
		fs.BoolVar(&req.Retired, "retired", false, "list the retired budgets too")
		maxN := fs.Int("max", 0, "print at most this many budgets (0: all)")
		if code, ok := budgetListCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if *maxN < 0 {
			return budgetListCommand.usageError(fs, "--max must not be negative")
		}
		if req.Cursor != "" {
			return c.call(streams.EndpointBudgetList, req, nil)
		}
		return c.listAll(req, *maxN)
	case "retire":
		var req events.BudgetRetireRequest
		fs.StringVar(&req.Scope, "scope", "", "scope, kind:id")
		fs.StringVar(&req.Period, "period", "", "month, week, day, hour, minute or lifetime; required")
		fs.StringVar(&req.Unit, "unit", "", "the budget of this unit, when the scope has a money and a requests budget in the period")
		fs.StringVar(&req.Reason, "reason", "", fmt.Sprintf("a note kept with the retirement, at most %d bytes", events.MaxRetireReasonLen))
		if code, ok := budgetRetireCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if req.Period == "" {
			return budgetRetireCommand.usageError(fs, "--period is required (month, week, day, hour, minute or lifetime)")
		}
		if code, ok := budgetRetireCommand.require(fs, "scope"); !ok {
			return code
		}
		return c.call(streams.EndpointBudgetRetire, req, nil)
	case "disable", "enable":
		var get events.BudgetGetRequest
		fs.StringVar(&get.Scope, "scope", "", "scope, kind:id")
		fs.StringVar(&get.Period, "period", "", "month, week, day, hour, minute or lifetime; required")
		fs.StringVar(&get.Unit, "unit", "", "the budget of this unit, when the scope has a money and a requests budget in the period")
		cmd := budgetDisableCommand
		if args[0] == "enable" {
			cmd = budgetEnableCommand
		}
		if code, ok := cmd.parse(fs, args[1:]); !ok {
			return code
		}
		if get.Period == "" {
			return cmd.usageError(fs, "--period is required (month, week, day, hour, minute or lifetime)")
		}
		if code, ok := cmd.require(fs, "scope"); !ok {
			return code
		}
		// A put of the one field: the rest of the definition is kept, in
		// the same compare-and-set as the change.
		req := events.BudgetPutRequest{Scope: get.Scope, Period: get.Period, Unit: get.Unit, Disabled: new(args[0] == "disable")}
		return c.call(streams.EndpointBudgetPut, req, nil)
	}
	return budgetCommand.usageError(nil, fmt.Sprintf("unknown budget command %q", args[0]))
}

// listAll pages through budget.list from the first page and prints every
// budget (at most maxN if maxN > 0) as one {"budgets": [...]} object.
func (c *clientFlags) listAll(req events.BudgetListRequest, maxN int) int {
	cc, err := c.dial()
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return 1
	}
	defer cc.nc.Close()
	all := events.BudgetListReply{Budgets: []events.BudgetView{}}
	pageSize := req.Limit
	for {
		if maxN > 0 {
			// Ask for no more than is left to print.
			left := min(maxN-len(all.Budgets), events.MaxBudgetPage)
			if pageSize > 0 {
				left = min(left, pageSize)
			}
			req.Limit = left
		}
		page, er, err := c.listPage(cc, req)
		if err != nil {
			fmt.Fprintf(os.Stderr, "spendgate: %s: %v\n", streams.EndpointBudgetList, err)
			return 1
		}
		if er != nil {
			b, _ := json.MarshalIndent(events.ErrorReply{Error: er}, "", "  ")
			fmt.Fprintln(os.Stdout, string(b))
			return 1
		}
		all.Budgets = append(all.Budgets, page.Budgets...)
		if maxN > 0 && len(all.Budgets) >= maxN {
			all.Budgets = all.Budgets[:maxN]
			break
		}
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err == nil {
		_, err = fmt.Fprintln(os.Stdout, string(b))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %s: write the reply: %v\n", streams.EndpointBudgetList, err)
		return 1
	}
	return 0
}

// listPage requests one page of budget.list.
func (c *clientFlags) listPage(cc *cliConn, req events.BudgetListRequest) (events.BudgetListReply, *events.Error, error) {
	var page events.BudgetListReply
	data, err := json.Marshal(req)
	if err != nil {
		return page, nil, err
	}
	body, err := cc.roundTrip(streams.EndpointBudgetList, data)
	if err != nil {
		return page, nil, err
	}
	var er events.ErrorReply
	if json.Unmarshal(body, &er) == nil && er.Error != nil {
		return page, er.Error, nil
	}
	return page, nil, json.Unmarshal(body, &page)
}
