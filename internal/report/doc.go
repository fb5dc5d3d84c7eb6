// Package report answers "who spent what": spend reports grouped by scope
// or by a metadata key (model, user, feature), and the finance exports
// (CSV and JSONL, one row per reservation, with totals per unit).
//
// It has two ways in, over one row fold (a reservation becomes a Row when
// it closes, or when its late-settle hold passes):
//
//   - Reader replays the ledger through a projector's verified read
//     (projector.Projector.Read: the one gate, the archive's first if there
//     is one) and reads the denial stream: `spendgate report --replay` and
//     `spendgate audit export`. It never opens a consumer of its own.
//   - Aggregate is fed by a replica's follower (Aggregator is the
//     ledger.Section a replica registers: it folds the revisions the
//     follower verified, and is kept in the replica's snapshots) and
//     answers the live report endpoint in constant time per group.
//
// Series is the dashboard's spend over time, folded the same way.
package report
