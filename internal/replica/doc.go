// Package replica assembles one spendgate replica: the ledger and its one
// fold, the readers that fold feeds (spend report, series, feed relay,
// alerts), the admitter, settler and sweeper, the denial records, the
// health probe, and the service that answers requests on NATS. It is the
// composition root: every other package is given what it uses; this one
// alone knows them all, starts them in order and stops them in reverse.
package replica
