package main

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var releaseCommand = command{
	name:     "spendgate release",
	synopsis: "--reservation ID [--tenant NAME]",
	about:    "Closes a reservation without cost (the call failed or was not made) and prints the reply.",
}

// releaseCmd is spendgate release.
func releaseCmd(args []string) int {
	var c clientFlags
	fs := newFlagSet("release")
	c.register(fs)
	c.registerTenant(fs)
	var req events.ReleaseRequest
	fs.StringVar(&req.ReservationID, "reservation", "", "reservation id; required")
	if code, ok := releaseCommand.parse(fs, args); !ok {
		return code
	}
	if code, ok := releaseCommand.require(fs, "reservation"); !ok {
		return code
	}
	return c.call(streams.EndpointRelease, req, nil)
}
