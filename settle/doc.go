// Package settle closes reservations: Settle records the actual cost, Release
// gives the whole reservation back, and Expire (used by the sweeper) releases
// a reservation whose TTL has passed. Each is one ledger transaction over all
// of the reservation's balances, so settle, release and the sweeper may race
// from any number of replicas and exactly one transition wins; the others get
// an answer saying what already happened.
package settle
