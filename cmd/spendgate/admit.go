package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/uuid"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var admitCommand = command{
	name:     "spendgate admit",
	synopsis: "--scope KIND:ID [--scope ...] --amount DECIMAL|--model NAME --input-tokens N|--input-chars N --max-output-tokens N [--count N] [--unit USD] [--ttl 5m] [--request-id ID] [--meta KEY=VALUE ...] [--mode admit|check|shadow] [-o json|id] [--tenant NAME]",
	about: `Reserves an amount in every budget of every scope, or in none, and prints
the reply. With --model instead of --amount, the amount is the most the call
can cost at the model's price (see spendgate pricing). With --mode check (or
shadow, for evaluation traffic) it prints what an admit would do and reserves
nothing. -o id prints only the reservation id (a denial or an error goes to
stderr), for R=$(spendgate admit ... -o id).
Exit status: 0 admitted (or would be), 2 denied, 1 on an error, 64 on a
usage error (nothing sent).`,
}

// Values of -o/--output.
const (
	outputJSON = "json"
	outputID   = "id"
)

// admitCmd is spendgate admit.
func admitCmd(args []string) int {
	var c clientFlags
	fs := newFlagSet("admit")
	c.register(fs)
	c.registerTenant(fs)
	var req events.AdmitRequest
	var scopes multiFlag
	fs.Var(&scopes, "scope", "scope `kind:id`; repeat for several (reserved in all or none); required")
	fs.StringVar(&req.Amount, "amount", "", "amount to reserve, a decimal string; required unless --model prices the request")
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
	output := outputFlag(fs, "the reservation id")
	if code, ok := admitCommand.parse(fs, args); !ok {
		return code
	}
	if code, ok := admitCommand.require(fs, "scope"); !ok {
		return code
	}
	tokens := req.InputTokens != 0 || req.InputChars != 0 || req.MaxOutputTokens != 0
	switch {
	case req.Amount != "" && req.Model != "":
		return admitCommand.usageError(fs, "--amount and --model together: give the amount, or the model to price")
	case req.Amount == "" && req.Model == "":
		return admitCommand.usageError(fs, "--amount is required (or --model with --input-tokens and --max-output-tokens, to price the request)")
	case req.Model == "" && tokens:
		return admitCommand.usageError(fs, "--input-tokens, --input-chars and --max-output-tokens price a model: they need --model")
	case req.Model != "" && !tokens:
		return admitCommand.usageError(fs, "--model needs the token counts to price: --input-tokens (or --input-chars) and --max-output-tokens")
	}
	if *output == outputID && req.Mode != "" && req.Mode != events.ModeAdmit {
		return admitCommand.usageError(fs, "-o id prints the reservation id, and --mode "+req.Mode+" reserves nothing")
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
	if *output == outputJSON {
		var reply events.AdmitReply
		if code := c.call(streams.EndpointAdmit, req, &reply); code != 0 {
			return code
		}
		if !reply.Admitted {
			return exitDenied
		}
		return exitOK
	}
	// -o id: the id alone on stdout; anything else is the reply, on stderr.
	body, ok := c.request(streams.EndpointAdmit, req)
	if !ok {
		return exitError
	}
	var reply events.AdmitReply
	code := exitOK
	switch {
	case isErrorReply(body) || json.Unmarshal(body, &reply) != nil || reply.Admitted && reply.ReservationID == "":
		code = exitError
	case !reply.Admitted:
		code = exitDenied
	}
	if code != exitOK {
		printReply(os.Stderr, streams.EndpointAdmit, body)
		return code
	}
	if _, err := fmt.Println(reply.ReservationID); err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %s: write the reply: %v\n", streams.EndpointAdmit, err)
		return exitError
	}
	return exitOK
}
