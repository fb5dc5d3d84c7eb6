package main

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var voidCommand = command{
	name:     "spendgate void",
	synopsis: "--request-id ID --scope KIND:ID [--scope ...] [--tenant NAME]",
	about: `Voids an admit by its request id, whether or not it has landed, and prints
the reply: a reservation it opened is released at once (reason voided), and
an admit with that request id that arrives later reserves nothing (it is
answered request_voided). For an admit whose outcome you could not learn
(it timed out): give its request id and its scopes (at least one of them).
Voiding again answers "replayed": true; voiding an admit whose reservation
was settled is refused with already_settled (exit 1) and changes nothing.`,
}

// voidCmd is spendgate void.
func voidCmd(args []string) int {
	var c clientFlags
	fs := newFlagSet("void")
	c.register(fs)
	c.registerTenant(fs)
	var req events.VoidRequest
	var scopes multiFlag
	fs.StringVar(&req.RequestID, "request-id", "", "the request id of the admit to void; required")
	fs.Var(&scopes, "scope", "a scope `kind:id` of the admit; repeat for several (the admit's list is simplest); required")
	if code, ok := voidCommand.parse(fs, args); !ok {
		return code
	}
	if code, ok := voidCommand.require(fs, "request-id", "scope"); !ok {
		return code
	}
	req.Scopes = scopes
	return c.call(streams.EndpointVoid, req, nil)
}
