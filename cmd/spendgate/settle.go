package main

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var settleCommand = command{
	name:     "spendgate settle",
	synopsis: "--reservation ID --actual DECIMAL | --input-tokens N --output-tokens N [--cached-input-tokens N] [--note WORD] [--tenant NAME]",
	about: `Closes a reservation with the actual cost and prints the reply. A reservation
priced from a model may give its usage instead: the actual is its cost at the
price version the admit used. --note records one word on how the actual was
known (estimate, invoice, ...: letters, digits, '_' and '-'), exported with
the reservation (settle_note).`,
}

// settleCmd is spendgate settle.
func settleCmd(args []string) int {
	var c clientFlags
	fs := newFlagSet("settle")
	c.register(fs)
	c.registerTenant(fs)
	var req events.SettleRequest
	fs.StringVar(&req.ReservationID, "reservation", "", "reservation id; required")
	fs.StringVar(&req.Actual, "actual", "", "actual cost, a decimal string; required unless the usage is given")
	fs.Int64Var(&req.InputTokens, "input-tokens", 0, "usage instead of --actual: input tokens")
	fs.Int64Var(&req.OutputTokens, "output-tokens", 0, "usage instead of --actual: output tokens")
	fs.Int64Var(&req.CachedInputTokens, "cached-input-tokens", 0, "usage instead of --actual: cached input tokens (part of --input-tokens)")
	fs.StringVar(&req.Note, "note", "", "one word on how the actual was known, recorded and exported (settle_note)")
	if code, ok := settleCommand.parse(fs, args); !ok {
		return code
	}
	if code, ok := settleCommand.require(fs, "reservation"); !ok {
		return code
	}
	usage := req.InputTokens != 0 || req.OutputTokens != 0 || req.CachedInputTokens != 0
	switch {
	case req.Actual == "" && !usage:
		return settleCommand.usageError(fs, "--actual is required (or, for a reservation priced from a model, its usage: --input-tokens and --output-tokens)")
	case req.Actual != "" && usage:
		return settleCommand.usageError(fs, "--actual and the usage (--input-tokens, --output-tokens, --cached-input-tokens) together: give one")
	}
	return c.call(streams.EndpointSettle, req, nil)
}
