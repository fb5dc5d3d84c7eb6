// Package backtest replays the recorded admits of a scope under other
// budgets: "what would a limit of 50 have done last month?".
//
// A History is read through a report.Reader (Load), the projector's
// verified read (projector.Read) and the denial stream: the scope's budget
// definitions and every admission, settle, release and expiry in its
// balances, from lane and budget revisions the gate passed (signatures
// and chains verified as a replica verifies them), in stream order; and
// the denial records of admits that named the scope (operational data,
// not the book of record), each placed where the blocking balance held the
// numbers its record states.
//
// Replay decides every admit again, in that order, against a
// ledger.Memory through the admit and settle packages: the live book, the
// live rules, no JetStream. Each reservation the replay opened is closed
// as recorded (its actual, at its time). Under a Policy that changes
// nothing, the replay must reproduce the record exactly: every admit
// admitted, every denial denied by the same balance, every balance after
// every revision at the numbers the revision stated (Result.Exact).
//
// The scope's budgets are replayed alone: an admit that also named other
// scopes is decided by this scope's budgets only (the others admitted it,
// or it would not be recorded); a denial by another scope's budget stays a
// denial.
package backtest
