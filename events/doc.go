// Package events is spendgate's vocabulary, shared by the server, its
// clients and anyone who reads its streams: money (exact apd decimals,
// parsed from plain decimal strings under hard limits, never a float; see
// ParseMoney), scopes, periods and budgets, the versioned events of the
// book of record and the revisions that carry them, the requests and
// replies of the NATS API, and the error codes that cross the wire. It
// imports nothing else of spendgate.
//
// Every type reads and writes with plain encoding/json: a Go program needs
// nothing else to talk to spendgate or to read its ledger stream. (The
// server and the client use faster hand-written codecs, internal to this
// module, that write the same bytes.)
//
// # Events and revisions
//
// An event is one past-tense fact with an explicit, versioned type, written
// first (EncodeEvent); DecodeEvent reads strictly: an unknown type or field
// is an error. A released version is frozen by the golden files in
// testdata/: a change is a new type or an optional field, so events written
// before encode and decode as they did.
//
// The ledger stream holds revisions under keys: a LaneRevision (the
// balances one write changed, each with the events applied to it), a
// BudgetRevision (a budget's whole definition),
// and PricingRevision, DefaultRevision, APIKeyRevision and TrustRevision.
// Version 2 of a revision names the revision of its key that it follows
// (Chain: its stream sequence and the SHA-256 of its payload); a reader
// never folds past a gap or a fork (CheckChain, ChainError). Version 1 is
// read as an unchained revision (DecodeLaneRevision, DecodeBudgetRevision,
// BudgetDefined through AsBudgetDefinedV2). Signatures travel in message
// headers over the payload bytes, so a payload holds no signature. A feed's
// event id is "<stream seq>-<index in revision>" (EventID).
package events
