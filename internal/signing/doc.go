// Package signing signs the revisions a replica writes and decides whether
// a revision read from the ledger stream may be folded.
//
// A revision's signature travels in two message headers
// (streams.HeaderSigKey, the signer's public nkey, and streams.HeaderSig,
// the base64url Ed25519 signature), so the payload is unchanged. The signed
// bytes (Input) are a fixed domain string, the KV key and the payload:
// the key binds a revision to its key, and the payload's chain (prev and
// prev_hash, see events.Chain) binds it to its place in the key's history,
// so a signed revision replayed anywhere else fails either the signature
// or the chain.
//
// A KeySet is the set of public keys trusted to sign, each optionally
// retired after a stream sequence (what rotation leaves behind: old
// revisions stay verifiable, new ones under the old key are refused), plus
// the sequence up to which unsigned revisions are accepted (history written
// before signing was turned on). Verify answers a Reason: "" to fold, or
// why the revision is skipped. The ledger's follower and the auditor
// (projector.Check) use the same KeySet and the same reasons.
package signing
