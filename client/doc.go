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
//	if err != nil && out.Cost == "" {
//		res.Release(ctx) // nothing was billed: give the whole reservation back
//		return err
//	}
//	res.Settle(ctx, out.Cost) // records the actual cost, also of a billed call that failed
//
// Call runs that pattern around a function and returns an Outcome (the
// admit reply with the reservation and its status, the settle or release
// reply); Do is Call without the Outcome. A function that fails after it
// was billed returns its cost next to its error and is settled with it:
// money spent is never recorded as zero. One that returns no cost and no
// error is settled at its whole reservation (note NoteNoActual).
//
// # Errors
//
// Every error of this package is told apart with errors.Is against a
// sentinel:
//
//   - ErrDenied: the admit was not admitted. A budget said no (a
//     *DeniedError whose Denial says which budget and why), or, together
//     with ErrUnavailable, the ledger did not answer and the client failed
//     closed.
//   - ErrUnavailable: the ledger did not answer usefully (no responders,
//     no reply within the timeout on every attempt, ledger_busy,
//     ledger_unavailable, internal). The error is an *UnavailableError and
//     never an *events.Error: an outage is not a refusal of the request,
//     and retrying later with the same request id is safe.
//   - ErrInvalid: the service refused the request as wrong in itself
//     (invalid_amount, invalid_identifier, ...): a bug of the caller's;
//     retrying cannot succeed.
//   - ErrNotFound: the request names what the ledger does not know
//     (unknown_reservation, unknown_budget).
//   - ErrConflict: the request contradicts what already happened
//     (already_settled, already_released, idempotency_mismatch).
//
// A refusal (ErrInvalid, ErrNotFound, ErrConflict) is also the service's
// *events.Error, found with errors.As: its Code, Message and, for a
// refusal about a reservation, ReservationID and Status (the reservation's
// state: open, settled, released or expired). A cancelled or expired ctx
// comes back as ctx's error, wrapped, matching none of the sentinels.
//
// # Failing closed
//
// When the ledger cannot answer, Admit denies with reason
// ledger_unavailable. WithFailOpen changes that, explicitly and with a
// WARN log line for every admission made without the ledger.
//
// # Retries and idempotency
//
// Admit sets the request id before the first attempt and every retry
// reuses it, so a retried admit whose first reply was lost reserves once
// (the reply then says "replayed" and the reservation's current status).
// An admit answered as a replay of a reservation that is closed already
// (settled, released or expired) holds nothing: Admit returns it as an
// error matching ErrConflict (already_settled or already_released, its
// *events.Error naming the reservation and its Status), never as
// admitted, so that the paid call is not made again unreserved.
// Settle and Release run under context.WithoutCancel: a cancelled caller
// is exactly the one that must still give its reservation back.
//
// # Batching
//
// Concurrent admits, settles and releases of one Client share batch
// messages (the service's admit.batch, settle.batch and release.batch
// when the calls gathered are of one kind, its mixed batch when they are
// not, so that one caller's settle and another's admit travel together;
// a service without the mixed batch gets a batch per kind): a call made
// while no message is in flight goes at once, alone; otherwise it waits
// at most DefaultLinger for others (WithBatching, WithoutBatching). Each call keeps its own request, retries, errors and
// result. An admit whose caller's ctx ends before its batch is sent is
// never sent; one whose caller's ctx ends while its batch is in flight is
// released when the batch's answer comes. Share one Client per connection
// among a process's goroutines so that their calls can meet.
//
// # Shutting down
//
// The client works in the background for callers that gave up: it voids
// the request id of an admit whose ctx ended mid-request, and releases
// what a batched admit reserved after its caller had gone. Call Drain
// before closing the connection: it waits for that work (each piece
// bounded by timeout × attempts), which, cut off by the close, would
// leave its reservations held until their TTL.
//
//	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
//	defer cancel()
//	_ = c.Drain(ctx) // the background voids and releases are done
//	nc.Close()
package client
