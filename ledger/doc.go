// Package ledger is spendgate's storage engine: the in-memory book that every
// replica folds from the ledger stream, and the commit path that turns a
// decision into one compare-and-set write.
//
// # Layout
//
// Every budget definition is a key of the ledger bucket, and so is every
// commit lane (see package streams). Every balance (a budget in one period
// instance) belongs to one lane, chosen by its scope. A lane key's value is
// an events.LaneRevision: each balance the revision changed, with its
// numbers after the revision and the events the revision applied to it. The
// stream keeps every revision, so it is the book of record: one write
// carries both the state change and its events, and there is no second
// write to lose.
//
// # Commit path
//
// Callers (packages admit, settle, sweep) describe a change as a Tx: the
// balances it touches and a Decide function that looks at a View of those
// balances and returns the events to commit. The ledger
//
//   - groups the concurrent Txs of one lane into one revision of the lane
//     (group commit: one compare-and-set for many reservations, on one hot
//     budget or on many cold ones, single- or multi-budget),
//   - writes a lane revision with Nats-Expected-Last-Subject-Sequence set
//     to the lane revision it decided on, and a change whose balances span
//     lanes as one atomic batch with that check on every lane, so a change
//     applies to all its budgets or to none,
//   - on a conflict (another replica wrote first) reads the revisions it
//     missed, folds them, and decides again from the new state.
//
// Decisions are made only against the exact lane revisions that the write
// then requires, so no replica can admit against a stale balance:
// compare-and-set is the only arbiter, across any number of replicas, with
// no lock held in NATS.
package ledger
