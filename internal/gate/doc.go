// Package gate is the one verification step between the ledger stream and
// everything that interprets it. Every message of the ledger's stream,
// whatever its key (lane, budget, pricing, default, trust, a balance key
// of an older layout, a key no version of spendgate writes), passes the
// gate before any code reads its payload; a replica's fold, its catch-up
// after a lost compare-and-set, the audit, the export, the report replay
// and the snapshot tools all use this one gate, so they agree on what the
// ledger says.
//
// A message passes when it is, in this order:
//
//  1. under a key this code folds (ReasonUnknownKey otherwise; a balance
//     key of the layout before lanes is ReasonOldLayout);
//  2. signed by a key the ledger trusts at its sequence (ReasonUnsigned,
//     ReasonDistrustedKey, ReasonRetiredKey, ReasonUntrustedKey,
//     ReasonBadSignature), see Trust;
//  3. a revision of its key's kind, decoded strictly (ReasonMalformed),
//     that a writer of this ledger could have written (ReasonWrongLane,
//     ReasonInvalid);
//  4. on its key's chain: it names the last revision of the key that
//     passed, by sequence and payload hash (ReasonReplay for an older
//     one, ReasonChain for a gap or a fork). A key whose last passed
//     revision is chained refuses an unchained (version 1) one.
//
// What fails is a *Rejection: skipped, never folded, counted and logged by
// the caller. Nothing a message says can stop a fold: the gate has no
// error other than a rejection.
//
// # Trust
//
// Who may sign is part of the ledger (events.TrustRevision under
// streams.TrustKey). A trust revision passes when a key the last trust
// revision trusts signed it; the first one, when the reader's anchor (its
// own configured keys, see New) trusts its signer, or with no anchor when
// its signer is among the keys it lists (trust on first use). Until the
// ledger holds a trust revision the anchor decides alone (nil: signatures
// are not checked).
//
// Replicas agree on who may write because the ledger says it, and a
// replica whose key the ledger does not trust refuses to write at all (see
// ledger.CheckWriter): so a revision signed by a key the ledger does not
// trust is garbage, skipped like any other, and the key's next write lands
// after it. A reader that reads a revision ahead of its fold, and so may
// hold trust that is behind, asks KnowsSigner first and folds the trust
// key up to date before it decides on an unknown key.
//
// # Heads
//
// The gate's state per key (Heads) is the last revision that passed (what
// the next revision's chain names) and the last one seen and skipped after
// it (what a writer's compare-and-set names, so its write lands after it).
// The caller owns the Heads and guards them with its own lock; Inspect
// reads none of them and may run outside that lock.
package gate
