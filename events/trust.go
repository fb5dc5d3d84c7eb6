package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Trust: the public keys that may sign the ledger's revisions are part of
// the ledger itself, under one key (streams.TrustKey), one revision per
// change, chained like a budget revision. A revision of the trust key is
// folded only if a key the previous one trusts signed it (the first one:
// a key the reader's own anchor trusts, see package gate), so every
// replica and every auditor that folds the stream agrees on who may
// write, and a replica whose key is not among them refuses to write.

// SchemaTrust is the schema of a trust revision.
const SchemaTrust = "trust.v1"

// MaxTrustedKeys bounds the keys one trust revision lists (trusted and
// distrusted together).
const MaxTrustedKeys = 256

// TrustedKey is one key of a trust revision: a public nkey, and for a
// retired key the last stream sequence it may sign (0: not retired).
type TrustedKey struct {
	Public string `json:"public"`
	Until  uint64 `json:"until,omitempty"`
}

// TrustRevision is the value of the trust key: the whole set after the
// revision, chained to the key's previous revision.
//
// Keys may sign (a retired key up to its Until). Distrusted keys are
// known not to be writers: what they sign is skipped like garbage. A
// revision signed by a key in neither list is skipped too, but it may be
// a replica whose key was not added yet: the key it was written under
// answers ledger_unavailable rather than be written over (see package
// gate). UnsignedUntil is the last stream sequence at which an unsigned
// revision is folded (history written before signing; 0: none).
type TrustRevision struct {
	Schema string `json:"schema"`
	Chain
	Keys          []TrustedKey `json:"keys"`
	Distrusted    []string     `json:"distrusted,omitempty"`
	UnsignedUntil uint64       `json:"unsigned_until,omitempty"`
	// By is the public key that wrote the revision (its signature says
	// the same; kept for readers of the raw value).
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// DecodeTrustRevision decodes a trust revision strictly: one JSON object
// of schema trust.v1, no unknown field, no trailing data, at least one key
// and at most MaxTrustedKeys in all.
func DecodeTrustRevision(data []byte) (TrustRevision, error) {
	var r TrustRevision
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return TrustRevision{}, fmt.Errorf("events: trust revision: %w", err)
	}
	if dec.More() {
		return TrustRevision{}, fmt.Errorf("events: trust revision: trailing data")
	}
	if r.Schema != SchemaTrust {
		return TrustRevision{}, fmt.Errorf("events: schema %q under the trust key, want %q", r.Schema, SchemaTrust)
	}
	if len(r.Keys) == 0 {
		return TrustRevision{}, fmt.Errorf("events: trust revision lists no key")
	}
	if len(r.Keys)+len(r.Distrusted) > MaxTrustedKeys {
		return TrustRevision{}, fmt.Errorf("events: trust revision lists %d keys; the limit is %d", len(r.Keys)+len(r.Distrusted), MaxTrustedKeys)
	}
	return r, nil
}
