// Package streams owns every JetStream resource spendgate uses: the ledger
// bucket's stream configuration, the key and subject builders, the service
// subjects, the named limits, and the translation of NATS compare-and-set
// conflicts. Nothing else spells a subject or a key by hand.
//
// The ledger bucket is a KV-shaped stream (KV_<bucket>) that spendgate
// creates itself so it can set what the KV API cannot: every revision is
// kept (the stream is the book of record), and atomic batch publish is on
// (a reservation across several budgets is one all-or-nothing commit with a
// revision check on each key). It binds as an ordinary KV bucket.
package streams
