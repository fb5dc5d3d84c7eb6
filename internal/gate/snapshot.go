package gate

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nkeys"

	"github.com/spendgate/spendgate/internal/signing"
)

// Snapshots pass a gate too: a snapshot of the book is signed by the
// replica (or tool) that wrote it, over its identity and its digest, and a
// reader loads one only if a key it trusts signed it. The signed bytes are
// a fixed domain string, then the bucket, format version, sequence, body
// size and body SHA-256 (hex), one per line: the digest binds the body,
// the rest binds the snapshot to its place.

// snapshotDomain separates snapshot signatures from revision signatures.
const snapshotDomain = "spendgate.snapshot.v1\n"

// SnapshotID is what a snapshot's signature covers besides its body's
// digest.
type SnapshotID struct {
	Bucket  string
	Version int
	Seq     uint64
	Size    int
	SHA256  string
}

func (id SnapshotID) input() []byte {
	b := make([]byte, 0, 160)
	b = append(b, snapshotDomain...)
	b = append(b, id.Bucket...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, int64(id.Version), 10)
	b = append(b, '\n')
	b = strconv.AppendUint(b, id.Seq, 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, int64(id.Size), 10)
	b = append(b, '\n')
	return append(b, id.SHA256...)
}

// SignSnapshot returns the signer's public key and its signature of id
// (base64url, unpadded).
func SignSnapshot(s *signing.Signer, id SnapshotID) (pub, sig string) {
	return s.PublicKey(), base64.RawURLEncoding.EncodeToString(s.SignBytes(id.input()))
}

// ErrSnapshotUntrusted: a snapshot that no key the reader trusts signed
// (unsigned, signed by another key, or a signature that does not verify).
var ErrSnapshotUntrusted = errors.New("gate: snapshot not signed by a trusted key")

// VerifySnapshot checks that pub signed id with sig and that trusted
// accepts pub. It returns nil, or an error wrapping ErrSnapshotUntrusted
// that says which.
func VerifySnapshot(id SnapshotID, pub, sig string, trusted func(pub string) bool) error {
	if pub == "" && sig == "" {
		return fmt.Errorf("%w: it is not signed", ErrSnapshotUntrusted)
	}
	if !nkeys.IsValidPublicKey(pub) {
		return fmt.Errorf("%w: %q is not a public nkey", ErrSnapshotUntrusted, pub)
	}
	raw, err := nkeys.Decode(nkeys.Prefix(pub), []byte(pub))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: %q is not a public nkey", ErrSnapshotUntrusted, pub)
	}
	s, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(s) != ed25519.SignatureSize || !ed25519.Verify(ed25519.PublicKey(raw), id.input(), s) {
		return fmt.Errorf("%w: its signature by %s does not verify", ErrSnapshotUntrusted, pub)
	}
	if trusted == nil || !trusted(pub) {
		return fmt.Errorf("%w: it is signed by %s, which this reader does not trust", ErrSnapshotUntrusted, pub)
	}
	return nil
}
