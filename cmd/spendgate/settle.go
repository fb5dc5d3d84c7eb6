package main

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var settleCommand = command{
	name:     "spendgate settle",
	synopsis: "--reservation ID --actual DECIMAL | --input-tokens N --output-tokens N [--cached-input-tokens N] [--tenant NAME]",
	about: `Closes a reservation with the actual cost and prints the reply. A reservation
priced from a model may give its usage instead: the actual is its cost at the
price version the admit used.`,
}

// settleCmd is spendgate settle.
func settleCmd(args []string) int {
	var c clientFlags
	fs := newFlagSet("settle")
	c.register(fs)
	c.registerTenant(fs)
	var req events.SettleRequest
	fs.StringVar(&req.ReservationID, "reservation", "", "reservation id")
	fs.StringVar(&req.Actual, "actual", "", "actual cost, a decimal string")
	fs.Int64Var(&req.InputTokens, "input-tokens", 0, "usage instead of --actual: input tokens")
	fs.Int64Var(&req.OutputTokens, "output-tokens", 0, "usage instead of --actual: output tokens")
	fs.Int64Var(&req.CachedInputTokens, "cached-input-tokens", 0, "usage instead of --actual: cached input tokens (part of --input-tokens)")
	if code, ok := settleCommand.parse(fs, args); !ok {
		return code
	}
	return c.call(streams.EndpointSettle, req, nil)
}
