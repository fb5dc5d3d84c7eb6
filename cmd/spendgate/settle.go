package main

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var settleCommand = command{
	name:     "spendgate settle",
	synopsis: "--reservation ID --actual DECIMAL [--tenant NAME]",
	about:    "Closes a reservation with the actual cost and prints the reply.",
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
	if code, ok := settleCommand.parse(fs, args); !ok {
		return code
	}
	return c.call(streams.EndpointSettle, req, nil)
}
