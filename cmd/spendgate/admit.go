package main

import (
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var admitCommand = command{
	name:     "spendgate admit",
	synopsis: "--scope KIND:ID [--scope ...] --amount DECIMAL|--model NAME --input-tokens N --max-output-tokens N [--count N] [--unit USD] [--ttl 5m] [--request-id ID] [--meta KEY=VALUE ...] [--mode admit|check|shadow] [--tenant NAME]",
	about: `Reserves an amount in every budget of every scope, or in none, and prints
the reply. With --model instead of --amount, the amount is the most the call
can cost at the model's price (see spendgate pricing). With --mode check (or shadow, for evaluation traffic) it prints what
an admit would do and reserves nothing. Exit status: 0 admitted (or would be),
2 denied (or a usage error: the message on stderr says which), 1 on an error.`,
}

// admitCmd is spendgate admit.
func admitCmd(args []string) int {
	var c clientFlags
	fs := newFlagSet("admit")
	c.register(fs)
	c.registerTenant(fs)
	var req events.AdmitRequest
	var scopes multiFlag
	fs.Var(&scopes, "scope", "scope `kind:id`; repeat for several (reserved in all or none)")
	fs.StringVar(&req.Amount, "amount", "", "amount to reserve, a decimal string")
	fs.StringVar(&req.Model, "model", "", "price the request from the pricing table instead of --amount: the model")
	fs.Int64Var(&req.InputTokens, "input-tokens", 0, "with --model: input tokens")
	fs.Int64Var(&req.InputChars, "input-chars", 0, "with --model: input characters, priced at one token each (instead of --input-tokens)")
	fs.Int64Var(&req.MaxOutputTokens, "max-output-tokens", 0, "with --model: the most output tokens the call may produce")
	fs.StringVar(&req.Unit, "unit", "", "currency of the amount (default USD)")
	fs.StringVar(&req.TTL, "ttl", "", "reservation TTL, e.g. 30s (default 5m)")
	fs.StringVar(&req.RequestID, "request-id", "", "idempotency key (default: a new UUID)")
	fs.Int64Var(&req.Count, "count", 0, "what the request counts in requests budgets (default 1)")
	fs.StringVar(&req.Mode, "mode", "", "admit (default), check (answer only, reserve nothing) or shadow (evaluation traffic: as check, counted apart)")
	var meta multiFlag
	fs.Var(&meta, "meta", "metadata `key=value` recorded with the reservation (model, user, ...); repeat for several")
	if code, ok := admitCommand.parse(fs, args); !ok {
		return code
	}
	for _, kv := range meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return admitCommand.usageError(fs, fmt.Sprintf("--meta %q: want KEY=VALUE", kv))
		}
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		req.Metadata[k] = v
	}
	req.Scopes = scopes
	if req.RequestID == "" {
		req.RequestID = uuid.NewString()
	}
	var reply events.AdmitReply
	if code := c.call(streams.EndpointAdmit, req, &reply); code != 0 {
		return code
	}
	if !reply.Admitted {
		return 2
	}
	return 0
}
