package main

import (
	"fmt"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var (
	budgetCommand = command{
		name:     "spendgate budget",
		synopsis: "put|get|list [flags]",
		about: `Manages budgets on a running service:

  put    define or change a budget: a limit per period for a scope
  get    one budget of a scope, with what is spent and reserved
  list   every budget, optionally of one kind of scope`,
	}
	budgetPutCommand = command{
		name:     "spendgate budget put",
		synopsis: "--scope KIND:ID --period month|day|lifetime --limit DECIMAL --unit USD|requests|...",
		about:    "Defines the budget of a scope for a period, or changes its limit. --period is\nrequired, so that a change never lands on another period's budget by default.",
	}
	budgetGetCommand = command{
		name:     "spendgate budget get",
		synopsis: "--scope KIND:ID [--period month|day|lifetime]",
		about:    "Prints a budget of a scope with its current period's spent, reserved and available;\nwithout --period, every budget of the scope.",
	}
	budgetListCommand = command{
		name:     "spendgate budget list",
		synopsis: "[--kind KIND]",
		about:    "Prints every budget, or those whose scope is of one kind.",
	}
)

// budget is spendgate budget put|get|list.
func budget(args []string) int {
	if len(args) == 0 || len(args[0]) > 0 && args[0][0] == '-' {
		fs := newFlagSet("budget")
		if code, ok := budgetCommand.parse(fs, args); !ok {
			return code
		}
		return budgetCommand.usageError(fs, "which budget command? (put, get or list)")
	}
	var c clientFlags
	fs := newFlagSet("budget " + args[0])
	c.register(fs)
	switch args[0] {
	case "put":
		var req events.BudgetPutRequest
		fs.StringVar(&req.Scope, "scope", "", "scope, kind:id (e.g. org:acme)")
		fs.StringVar(&req.Period, "period", "", "month, day or lifetime (UTC); required")
		fs.StringVar(&req.Limit, "limit", "", "limit, a decimal string")
		fs.StringVar(&req.Unit, "unit", "USD", "currency (USD, EUR, ...) or requests")
		if code, ok := budgetPutCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if req.Period == "" {
			return budgetPutCommand.usageError(fs, "--period is required (month, day or lifetime)")
		}
		return c.call(streams.EndpointBudgetPut, req, nil)
	case "get":
		var req events.BudgetGetRequest
		fs.StringVar(&req.Scope, "scope", "", "scope, kind:id")
		fs.StringVar(&req.Period, "period", "", "month, day or lifetime; without it, every budget of the scope")
		if code, ok := budgetGetCommand.parse(fs, args[1:]); !ok {
			return code
		}
		return c.call(streams.EndpointBudgetGet, req, nil)
	case "list":
		var req events.BudgetListRequest
		fs.StringVar(&req.Kind, "kind", "", "only scopes of this kind")
		if code, ok := budgetListCommand.parse(fs, args[1:]); !ok {
			return code
		}
		return c.call(streams.EndpointBudgetList, req, nil)
	}
	return budgetCommand.usageError(nil, fmt.Sprintf("unknown budget command %q", args[0]))
}
