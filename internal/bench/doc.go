// Package bench is the driver behind `spendgate bench`: it measures
// admit+settle cycles over NATS request-reply, as remote callers make them,
// next to two baselines of the same run (the request-reply floor and a
// naive get-then-CAS ledger), counts over-admissions with a cap burst per
// scenario, and optionally checks the memory held by open reservations.
//
// Run takes Options (DefaultOptions, then change fields) and writes a table
// or JSON; cmd/spendgate only parses flags into Options.
package bench
