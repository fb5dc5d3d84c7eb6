package ledger

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// ErrNotTrusted: this replica's signing key may not write to this ledger
// (see CheckWriter).
var ErrNotTrusted = errors.New("ledger: this replica's signing key is not trusted by the ledger")

// PublishTrust makes the ledger's trusted keys include what local says,
// signed by this replica's key: one revision of the trust key, written only
// when it changes something. With no trust revision yet, the ledger's
// first is local, or, with local nil, this replica's own key alone (with
// the history already written accepted unsigned, as when signing is
// turned on for an existing ledger). After that local is merged in, the
// stricter word winning for each key: a key distrusted on either side is
// distrusted, a retired one stays retired at the earlier sequence, a key
// only one side lists is added; unsigned_until stays the ledger's. The
// merge is commutative and idempotent, so replicas that start or reload
// in any order with the same lists converge, and one with a stale list
// never undoes a retirement. A key local trusts may write the merge even
// if the ledger does not trust it yet: the replica's own keys are its
// root of trust (an operator who lost every trusted seed adds a new key to
// them; replicas whose own keys do not list it skip the revision). A
// replica that does not sign writes nothing.
//
// It reports whether it wrote. Errors: as DefineBudget's; ErrNotTrusted
// (wrapped) if the ledger's keys do not let this replica write the merge.
func (l *Ledger) PublishTrust(ctx context.Context, local *signing.KeySet, now time.Time) (bool, error) {
	signer := l.keys.signer.Load()
	if signer == nil {
		return false, nil
	}
	pub := signer.PublicKey()
	_, wrote, err := l.define(ctx, "trust", func(b *book) (string, func(events.Chain) any, bool, error) {
		var next events.TrustRevision
		if b.trust == nil {
			if local != nil && !local.Trusts(pub, l.applied.Load()+1) {
				return "", nil, false, errors.Join(ErrNotTrusted, errors.New("the signing key "+pub+" is not among this replica's own trusted keys"))
			}
			next = genesisTrust(local, pub, l.applied.Load())
		} else {
			cur := *b.trust.Trust
			next = mergeTrust(cur, local)
			if sameTrust(cur, next) {
				return streams.TrustKey, nil, false, nil
			}
			if err := l.gate.MayWriteTrust(pub, l.applied.Load()); err != nil {
				return "", nil, false, errors.Join(ErrNotTrusted, err)
			}
		}
		next.Schema, next.By, next.At = events.SchemaTrust, pub, now.UTC()
		return streams.TrustKey, func(ch events.Chain) any {
			next.Chain = ch
			return next
		}, false, nil
	})
	return wrote, err
}

// CheckWriter returns nil if this replica may write: it does not sign
// (signatures are not checked), or its key is among the keys the ledger
// trusts now (its trust revision's, or this replica's own keys while the
// ledger has none). Otherwise an error wrapping ErrNotTrusted that names
// the key and says what to do.
func (l *Ledger) CheckWriter() error {
	pub := l.signerKey()
	if pub == "" {
		return nil
	}
	if err := l.gate.MayWrite(pub, l.applied.Load()); err != nil {
		return errors.Join(ErrNotTrusted, err, errors.New("add its public key to a trusted replica's --trusted-keys list and send that replica SIGHUP, or start this replica with the seed of a trusted key (--signing-key)"))
	}
	return nil
}

// writable is CheckWriter before each write: a replica whose key the
// ledger's trust revision stopped trusting while it ran (distrusted, or
// retired before the stream's end) writes nothing more, since every
// replica, its own fold included, would skip what it wrote and the
// callers' acknowledged reservations would vanish. It answers
// ledger_unavailable, wrapping ErrNotTrusted. (A write decided in the
// moment between the trust revision landing and this replica folding it
// still lands and is skipped: the fold reads the trust key's revisions
// as they come.)
func (l *Ledger) writable() error {
	if err := l.CheckWriter(); err != nil {
		if n := l.untrustedWrites.Add(1); n == 1 || n%1000 == 0 {
			l.opts.log.Error("ledger: not writing: the ledger no longer trusts this replica's signing key; every write answers ledger_unavailable until it does (restart or SIGHUP with a trusted key)", "refused", n, "err", err)
		}
		return &events.Error{Code: events.CodeLedgerUnavailable, Message: "this replica's signing key is not trusted by the ledger", Err: err}
	}
	return nil
}

// genesisTrust is the ledger's first trust revision: local, or pub alone
// with the history up to last accepted unsigned.
func genesisTrust(local *signing.KeySet, pub string, last uint64) events.TrustRevision {
	if local == nil {
		return events.TrustRevision{Keys: []events.TrustedKey{{Public: pub}}, UnsignedUntil: last}
	}
	r := events.TrustRevision{UnsignedUntil: local.UnsignedUntil(), Distrusted: local.Distrusted()}
	for _, k := range local.Keys() {
		r.Keys = append(r.Keys, events.TrustedKey{Public: k.Public, Until: k.Until})
	}
	return r
}

// mergeTrust merges local into cur, the stricter word winning for each key
// (see PublishTrust).
func mergeTrust(cur events.TrustRevision, local *signing.KeySet) events.TrustRevision {
	if local == nil {
		return cur
	}
	distrusted := map[string]bool{}
	for _, d := range cur.Distrusted {
		distrusted[d] = true
	}
	for _, d := range local.Distrusted() {
		distrusted[d] = true
	}
	until := map[string]uint64{}
	add := func(pub string, u uint64) {
		old, seen := until[pub]
		switch {
		case !seen:
			until[pub] = u
		case u != 0 && (old == 0 || u < old):
			until[pub] = u
		}
	}
	for _, k := range cur.Keys {
		add(k.Public, k.Until)
	}
	for _, k := range local.Keys() {
		add(k.Public, k.Until)
	}
	out := events.TrustRevision{UnsignedUntil: cur.UnsignedUntil}
	for pub, u := range until {
		if !distrusted[pub] {
			out.Keys = append(out.Keys, events.TrustedKey{Public: pub, Until: u})
		}
	}
	sort.Slice(out.Keys, func(i, j int) bool { return out.Keys[i].Public < out.Keys[j].Public })
	for d := range distrusted {
		out.Distrusted = append(out.Distrusted, d)
	}
	sort.Strings(out.Distrusted)
	return out
}

// sameTrust reports whether a and b trust the same keys the same way.
func sameTrust(a, b events.TrustRevision) bool {
	norm := func(r events.TrustRevision) ([]events.TrustedKey, []string) {
		ks := slices.Clone(r.Keys)
		sort.Slice(ks, func(i, j int) bool { return ks[i].Public < ks[j].Public })
		ds := slices.Clone(r.Distrusted)
		sort.Strings(ds)
		return ks, ds
	}
	ak, ad := norm(a)
	bk, bd := norm(b)
	return a.UnsignedUntil == b.UnsignedUntil && slices.Equal(ak, bk) && slices.Equal(ad, bd)
}
