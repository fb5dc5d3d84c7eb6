// Package projector rebuilds spendgate's balances from the book of record.
//
// The ledger is one KV-shaped JetStream stream (streams.Layout.StreamName)
// that keeps every revision of every key. Balances are written in commit
// lanes: a fixed number of lane keys (streams.Layout.LaneKey), each balance
// in one lane for good. A lane key holds an events.LaneRevision: the
// balances the revision changed, in streams.BalanceKey order, each with
// its numbers after the revision and the events the revision applied to
// it. A balance's revision is the stream sequence of the last lane
// revision that named it. A budget key holds an events.BudgetRevision.
// Balance keys (streams.BalanceKey) name balances in the book but are not
// KV keys: a stream that has them is of an older layout, which the fold
// rejects.
//
// State is a pure fold over those messages: State.Apply decodes one
// message, applies its events with the rules below (written independently
// of the ledger writer, so that replay == live is a real check), and then
// verifies the numbers the revision states against the folded totals; a
// lane revision applies all of its balances or none. It
// has no clock and does no I/O; its position is the stream sequence.
//
// Per balance, the fold rules are:
//
//   - ReservationOpened: reserved += Amount; open += 1; the reservation is
//     open in that balance holding Amount.
//   - ReservationSettled: spent += Actual; overrun += Overrun; unless
//     AfterExpiry, reserved -= Reserved and open -= 1. Reserved must be the
//     amount opened in that balance and Overrun must be
//     max(0, Actual-Reserved). AfterExpiry is only valid for a reservation
//     the sweeper released as expired in that balance.
//   - ReservationReleased: reserved -= Reserved; open -= 1; the reason is
//     "released", "expired" or "voided" (its request id was voided).
//   - RequestVoided: a tombstone for a request id; no number changes. The
//     balance must be one of the void's scopes.
//   - BudgetDefined (v1, upcast with events.AsBudgetDefinedV2) and
//     BudgetDefinedV2: the budget's whole definition (limit, unit, time
//     zone, disabled, fixed slot, thresholds). A zone must load and a fixed
//     slot be positive. Admission invariants do not change: a fixed slot is
//     the amount its ReservationOpened carries, and a disabled budget only
//     opens nothing.
//
// Projector reads the stream with an ordered consumer, every message
// through the one gate (internal/gate): CatchUp folds it from the first
// message to the last as of the call, Run keeps folding until its context
// ends, ReplayUntil answers "balances at time T". Check replays the stream
// and reconciles the result with the live lane values to the last digit.
// Read is the verified read that reports and exports (internal/report)
// build on; Archive and Trim move the stream's old revisions to segment
// files and back (audit archive, audit trim).
package projector
