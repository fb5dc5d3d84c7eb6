// Package events is spendgate's domain root: the money type, identifiers,
// budgets and periods, the versioned events that make up the book of record,
// the wire requests and replies, and the error codes that cross the wire.
//
// It imports nothing else of spendgate. Every other package imports it.
//
// # Revisions
//
// The ledger stream holds revisions: a LaneRevision under a lane key, a
// BudgetRevision under a budget key. Version 2 (lane.v2, budget.v2, what
// writers emit) names the revision of the same key it follows: Prev, its
// stream sequence, and PrevHash, the SHA-256 of its exact payload bytes (see
// Chain). Readers never fold past a gap or a fork (CheckChain, ChainError):
// they skip such a revision, as they skip one whose signature fails. Version
// 1 is read through an upcaster (DecodeLaneRevision, DecodeBudgetRevision)
// as an unchained revision; the chain is checked from a key's first
// version-2 revision on. The format is designed once for what comes next:
// signatures go in message headers over the payload bytes (package
// signing; no payload change); the chain is over valid revisions (a revision that fails its
// signature is skipped, and the next valid one names the last valid one);
// a feed's stable event ids are "<stream seq>-<index in revision>"
// (EventID); a leaner payload is left to S2 stream compression, to be
// measured.
//
// Budget definitions: writers emit BudgetDefinedV2 (budget.defined.v2: limit,
// unit, time zone, disabled, fixed slot, thresholds, and the fields it
// changed); readers upcast the frozen BudgetDefined (v1) with
// AsBudgetDefinedV2. A budget revision states the whole definition after it.
//
// Pricing (pricing.go): a PricingRevision (pricing.v1) under a model's key
// carries PricingDefined; a priced ReservationOpened records the PriceQuote
// it reserved against (version and prices), and a settle from usage records
// its Usage, priced at that quote. Defaults per scope kind (defaults.go): a
// DefaultRevision (default.v1) carries DefaultDefined; a budget created from
// it names its revision (BudgetDefinedV2.FromDefault). Alerts (alerts.go):
// ThresholdCrossed sits in the lane revision that crossed the threshold. A
// budget defined alongside another of the other kind in its period (counts
// next to money) is named with its unit (BudgetRef.Unit, BalanceRef.Unit).
// Every addition is an optional field or a new type: events written before
// encode and decode as they did.
//
// Money never touches a float: amounts are apd decimals, parsed from plain
// decimal strings under hard limits (see ParseMoney) and written back as
// canonical decimal strings.
package events
