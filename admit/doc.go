// Package admit decides admissions: it validates an admit request, finds
// every budget of every named scope, computes each budget's period instance
// once, and reserves the amount in all of them or in none through one ledger
// transaction. A retried request id gets its original answer.
package admit
