package ledger

import (
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/signing"
)

// keys holds the replica's signing key and the set of keys it trusts,
// both replaceable while the ledger runs (SetSigner, SetTrust: rotation
// without a restart).
type keys struct {
	signer   atomic.Pointer[signing.Signer]
	trust    atomic.Pointer[signing.KeySet]
	rejected atomic.Int64
}

// RejectObserver is an Observer that is also told of every revision the
// replica skipped (see Ledger.Rejected), with its reason.
type RejectObserver interface {
	Rejected(reason signing.Reason)
}

// SetSigner makes the replica sign the revisions it writes from now on with
// s (nil: unsigned). A write already in flight keeps the key it was signed
// with.
func (l *Ledger) SetSigner(s *signing.Signer) { l.keys.signer.Store(s) }

// SetTrust makes the replica check every revision it folds from now on
// against ks (nil: signatures are not checked). Revisions already folded
// are not checked again.
func (l *Ledger) SetTrust(ks *signing.KeySet) { l.keys.trust.Store(ks) }

// Trust returns the key set the replica checks revisions against now (nil:
// signatures are not checked).
func (l *Ledger) Trust() *signing.KeySet { return l.keys.trust.Load() }

// Rejection is a revision of the ledger stream that a replica (or an
// auditor) does not fold: it is skipped, and the key's chain continues from
// its last valid revision.
type Rejection struct {
	// Seq is the revision's stream sequence, Key its KV key.
	Seq uint64
	Key string
	// Reason says why (see package signing).
	Reason signing.Reason
	// Err is the decode or chain error, if that is the reason.
	Err error
}

// Error names the sequence, the key and the reason.
func (r *Rejection) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("revision %d of %s skipped (%s): %v", r.Seq, r.Key, r.Reason, r.Err)
	}
	return fmt.Sprintf("revision %d of %s skipped (%s)", r.Seq, r.Key, r.Reason)
}

// Unwrap returns Err.
func (r *Rejection) Unwrap() error { return r.Err }

// reject records that the revision r names was skipped: the book's next
// write of the key must land after it (book.skip), and it is logged and
// counted.
func (l *Ledger) reject(r *Rejection) {
	l.mu.Lock()
	l.bk.skip(r.Key, r.Seq)
	l.mu.Unlock()
	l.keys.rejected.Add(1)
	l.opts.log.Error("ledger: revision skipped; not folded", "seq", r.Seq, "key", r.Key, "reason", string(r.Reason), "err", r.Err)
	if o, ok := l.opts.observer.(RejectObserver); ok {
		o.Rejected(r.Reason)
	}
}

// sign adds the signature headers of a revision of key with payload data
// to h, if the replica has a signing key.
func (l *Ledger) sign(h nats.Header, key string, data []byte) {
	if s := l.keys.signer.Load(); s != nil {
		s.Sign(h, key, data)
	}
}
