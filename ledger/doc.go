// Package ledger is spendgate's storage engine: the in-memory book that every
// replica folds from the ledger stream, and the commit path that turns a
// decision into one compare-and-set write.
//
// # Layout
//
// Every budget definition and every balance (a budget in one period
// instance) is a key of the ledger bucket (see package streams). A balance
// key's value is an events.BalanceRevision: the balance's numbers after the
// revision and the events the revision applied. The stream keeps every
// revision, so it is the book of record: one write carries both the state
// change and its events, and there is no second write to lose.
//
// # Commit path
//
// Callers (packages admit, settle, sweep) describe a change as a Tx: the
// balance keys it touches and a Decide function that looks at a View of those
// balances and returns the events to commit. The ledger
//
//   - groups concurrent single-key Txs on the same key into one revision
//     (group commit: one compare-and-set for many reservations on a hot
//     budget),
//   - writes a single-key revision with Nats-Expected-Last-Subject-Sequence
//     set to the revision it decided on, and a multi-key change as one
//     atomic batch with that check on every key, so a change applies to all
//     its budgets or to none,
//   - on a conflict (another replica wrote first) reads the revisions it
//     missed, folds them, and decides again from the new state.
//
// Decisions are made only against the exact revision that the write then
// requires, so no replica can admit against a stale balance: compare-and-set
// is the only arbiter, across any number of replicas, with no lock held in
// NATS.
package ledger
