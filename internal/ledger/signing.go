package ledger

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
)

// keys holds the replica's signing key, replaceable while the ledger runs
// (SetSigner: rotation without a restart), and the count of skipped
// revisions. Who may sign is the gate's (Ledger.gate): the ledger's trust
// revisions, anchored in the keys this replica trusts (SetTrust).
type keys struct {
	signer   atomic.Pointer[signing.Signer]
	rejected atomic.Int64
	// logMu guards logged: how the skipped revisions of each reason were
	// logged (reject).
	logMu  sync.Mutex
	logged map[signing.Reason]*rejectLog
}

// Bounds of the rejection log (reject): each reason's first
// rejectLogBurst skipped revisions are logged one by one, with their
// sequence and key; after that one line a minute sums up the rest of the
// reason's, with the first and last sequence. A login that may write the
// stream could otherwise fill every replica's log with a line per garbage
// message, as many bytes as it writes. The count (Stats.Rejected, the
// metric) and the audit's list stay whole.
const (
	rejectLogBurst = 100
	rejectLogEvery = time.Minute
)

// rejectLog is one reason's rejections past the burst, not logged yet.
type rejectLog struct {
	logged      int
	held        int64
	first, last uint64
	since       time.Time
}

// RejectObserver is an Observer that is also told of every revision the
// replica skipped (see Ledger.Rejected), with its reason.
type RejectObserver interface {
	Rejected(reason string)
}

// Signer returns the key the replica signs with now (nil: unsigned).
func (l *Ledger) Signer() *signing.Signer { return l.keys.signer.Load() }

// SetSigner makes the replica sign the revisions it writes from now on with
// s (nil: unsigned). A write already in flight keeps the key it was signed
// with.
func (l *Ledger) SetSigner(s *signing.Signer) { l.keys.signer.Store(s) }

// SetTrust makes ks this replica's own trusted keys: the anchor of the
// ledger's trust (see package gate). While the ledger holds no trust
// revision they decide alone who may sign (nil: signatures are not
// checked); once it holds one, the ledger decides, and ks only vouches
// for the ledger's first trust revision (see PublishTrust to write ks into
// the ledger). Revisions already folded are not checked again.
func (l *Ledger) SetTrust(ks *signing.KeySet) { l.gate.SetAnchor(ks) }

// Trust returns the key set the replica checks revisions against now: the
// ledger's trust revision's, or this replica's own keys while the ledger
// has none (nil: signatures are not checked).
func (l *Ledger) Trust() *signing.KeySet { return l.gate.Keys() }

// Gate returns the replica's gate: the one verification step of every
// revision it reads.
func (l *Ledger) Gate() *gate.Gate { return l.gate }

// signerKey returns the public key this replica signs with ("" unsigned).
func (l *Ledger) signerKey() string {
	if s := l.keys.signer.Load(); s != nil {
		return s.PublicKey()
	}
	return ""
}

// Rejection is a revision of the ledger stream that a replica (or an
// auditor) does not fold: it is skipped, and the key's chain continues from
// its last valid revision (see package gate).
type Rejection = gate.Rejection

// reject logs and counts a revision the gate skipped (fold has recorded it
// in the heads).
func (l *Ledger) reject(r *Rejection) {
	l.keys.rejected.Add(1)
	if o, ok := l.opts.observer.(RejectObserver); ok {
		o.Rejected(string(r.Reason))
	}
	k := &l.keys
	k.logMu.Lock()
	if k.logged == nil {
		k.logged = map[signing.Reason]*rejectLog{}
	}
	rl := k.logged[r.Reason]
	if rl == nil {
		rl = &rejectLog{}
		k.logged[r.Reason] = rl
	}
	if rl.logged < rejectLogBurst {
		rl.logged++
		rl.since = time.Now()
		k.logMu.Unlock()
		args := []any{"seq", r.Seq, "key", r.Key, "reason", string(r.Reason)}
		if r.Err != nil {
			args = append(args, "err", r.Err)
		}
		l.opts.log.Error("ledger: revision skipped; not folded", args...)
		return
	}
	if rl.held == 0 {
		rl.first = r.Seq
	}
	rl.held++
	rl.last = r.Seq
	if time.Since(rl.since) < rejectLogEvery {
		k.logMu.Unlock()
		return
	}
	held, first, last := rl.held, rl.first, rl.last
	rl.held, rl.since = 0, time.Now()
	k.logMu.Unlock()
	l.opts.log.Error("ledger: more revisions skipped for this reason; not folded (past the first few, summed up once a minute: spendgate audit lists each)",
		"reason", string(r.Reason), "skipped", held, "first_seq", first, "last_seq", last)
}

// sign adds the signature headers of a revision of key with payload data
// to h, if the replica has a signing key.
func (l *Ledger) sign(h nats.Header, key string, data []byte) {
	if s := l.keys.signer.Load(); s != nil {
		s.Sign(h, key, data)
	}
}
