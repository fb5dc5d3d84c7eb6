// Package service exposes spendgate over NATS request-reply as a NATS micro
// service named "spendgate": JSON in and out, failures as
// {"error":{"code","message"}} with the stable codes of package events; a
// refusal that concerns a reservation (already_settled, already_released,
// idempotency_mismatch) also carries "reservation_id" and "status", the
// reservation's state. budget.get with a scope and a period answers one
// budget; with only a scope it answers {"budgets":[...]}, every budget of
// the scope. `nats micro info spendgate` lists its endpoints.
//
// It is the transport only: it decodes a request, hands it to the
// admitter, settler or ledger it is given, and encodes the answer. Package
// replica assembles those and starts the service.
package service
