// Package streams owns every JetStream resource spendgate uses: the ledger
// bucket's stream configuration, the key and subject builders, the service
// subjects, the named limits, and the translation of NATS compare-and-set
// conflicts. Nothing else spells a subject or a key by hand.
//
// The ledger bucket is a KV-shaped stream (KV_<bucket>) that spendgate
// creates itself so it can set what the KV API cannot: every revision is
// kept (the stream is the book of record), and atomic batch publish is on
// (a Tx over balances in several lanes is one all-or-nothing commit with a
// revision check on each lane key). It binds as an ordinary KV bucket.
//
// Its keys: one per budget definition (BudgetKey), and one per commit lane
// (LaneKey). Every balance belongs to one lane, chosen by its scope; a lane
// revision carries every balance it changed, so one compare-and-set folds
// many balances. The number of lanes (Config.Lanes, default 1) is recorded
// in the stream's metadata when it is created and never changes.
package streams
