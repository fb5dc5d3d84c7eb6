// Package client is the Go client of spendgate, for services that pay for
// upstream calls (LLM calls above all) and must stay under their budgets.
//
// The pattern is price -> reserve -> call -> settle | release:
//
//	res, err := c.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.50"})
//	if err != nil {
//		return err // denied (errors.Is(err, client.ErrDenied)) or not admitted
//	}
//	out, err := upstream(ctx)
//	if err != nil {
//		res.Release(ctx) // gives the whole reservation back, even if ctx is cancelled
//		return err
//	}
//	res.Settle(ctx, out.Cost) // records the actual cost
//
// Do runs that pattern around a function.
//
// The client fails closed: when the ledger cannot answer (no responders,
// no reply within the timeout after every attempt, or a ledger_busy,
// ledger_unavailable or internal error from the service), Admit denies
// with reason ledger_unavailable. WithFailOpen changes that, explicitly and
// with a WARN log line for every admission made without the ledger.
//
// Admit sets the request id before the first attempt and every retry
// reuses it, so a retried admit whose first reply was lost reserves once.
// Settle and Release run under context.WithoutCancel: a cancelled caller is
// exactly the one that must still give its reservation back.
package client
