package gate

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// Kind is the kind of a ledger key.
type Kind uint8

// The kinds of key the gate passes.
const (
	KindLane Kind = iota + 1
	KindBudget
	KindPricing
	KindDefault
	KindTrust
	KindAPIKey
	KindTenantLimits
)

// String names the kind as its key family does.
func (k Kind) String() string {
	switch k {
	case KindLane:
		return "lane"
	case KindBudget:
		return "budget"
	case KindPricing:
		return "pricing"
	case KindDefault:
		return "default"
	case KindTrust:
		return "trust"
	case KindAPIKey:
		return "apikey"
	case KindTenantLimits:
		return "tenantlimits"
	}
	return "unknown"
}

// KindOf returns the kind of key under layout, and false for a key no
// writer of the ledger writes (a revision under it is never folded).
func KindOf(layout streams.Layout, key string) (Kind, bool) {
	k, reason := kindOf(layout, key)
	return k, reason == ""
}

// kindOf classifies key under layout: its kind, or why no revision under
// it is folded.
func kindOf(layout streams.Layout, key string) (Kind, signing.Reason) {
	switch {
	case !utf8.ValidString(key):
		// No writer names a key that is not UTF-8; a snapshot (JSON)
		// could not even name it again.
		return 0, signing.ReasonUnknownKey
	case streams.IsLaneKey(key):
		if !layout.HasLane(key) {
			return 0, signing.ReasonWrongLane
		}
		return KindLane, ""
	case streams.IsBudgetKey(key):
		return KindBudget, ""
	case streams.IsPricingKey(key):
		return KindPricing, ""
	case streams.IsDefaultKey(key):
		return KindDefault, ""
	case streams.IsTrustKey(key):
		return KindTrust, ""
	case streams.IsAPIKeyKey(key):
		return KindAPIKey, ""
	case streams.IsTenantLimitsKey(key):
		return KindTenantLimits, ""
	case streams.IsBalanceKey(key):
		return 0, signing.ReasonOldLayout
	}
	return 0, signing.ReasonUnknownKey
}

// Message is one message of the ledger stream, as a consumer, a direct
// get or an archive hands it over.
type Message struct {
	Seq     uint64
	Subject string
	Header  nats.Header
	Data    []byte
	// At is the message's JetStream timestamp.
	At time.Time
}

// Revision is a message that passed the gate, decoded: exactly one of
// Lane, Budget, Pricing, Default, Trust, APIKey and TenantLimits is set,
// as Kind says. Readers
// must not change it: one Revision is handed to every reader of a fold.
type Revision struct {
	Seq  uint64
	Key  string
	Kind Kind
	At   time.Time
	// Hash is the SHA-256 of the payload (events.HashPayload): what the
	// key's next revision names.
	Hash string
	// Signer is the public key that signed it ("" unsigned).
	Signer string
	// Data is the payload as stored (shared with the message: not to be
	// changed). A revision this replica wrote and folds from memory has
	// none.
	Data []byte

	Lane    *events.LaneRevision
	Budget  *events.BudgetRevision
	Pricing *events.PricingRevision
	Default *events.DefaultRevision
	Trust   *events.TrustRevision
	APIKey  *events.APIKeyRevision
	// TenantLimits is a tenant's own limits (KindTenantLimits).
	TenantLimits *events.TenantLimitsRevision
	// Refused, on an auditor's gate (NewAuditor) only, is why the
	// auditor's own keys refuse a revision the ledger's trust passed: its
	// signer is a key they distrust, or retire before it. The revision is
	// folded all the same, as the replicas folded it; the auditor reports
	// it.
	Refused signing.Reason
	// Zone is the budget's loaded time zone (nil for UTC), KindBudget
	// only.
	Zone *time.Location
}

// Chain returns the chain the revision names and whether it has one (a
// version-1 lane or budget revision has none).
func (r *Revision) Chain() (events.Chain, bool) {
	switch r.Kind {
	case KindLane:
		return r.Lane.Chain, r.Lane.Chained()
	case KindBudget:
		return r.Budget.Chain, r.Budget.Chained()
	case KindPricing:
		return r.Pricing.Chain, true
	case KindDefault:
		return r.Default.Chain, true
	case KindTrust:
		return r.Trust.Chain, true
	case KindAPIKey:
		return r.APIKey.Chain, true
	case KindTenantLimits:
		return r.TenantLimits.Chain, true
	}
	return events.Chain{}, false
}

// Rejection is a message that did not pass: it is skipped, and its key's
// chain goes on from the key's last revision that passed.
type Rejection struct {
	Seq uint64
	// Key is the message's key, or its subject when it names no key of
	// the ledger bucket.
	Key    string
	Reason signing.Reason
	// Signer is the key named by the signature headers, if any.
	Signer string
	// Err says more, when there is more to say (a decode or chain error).
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

// Gate checks messages of one ledger stream (see the package doc). Its
// trust state is folded from the trust key's revisions as they pass; the
// caller's Heads hold the rest. Safe for concurrent use as far as its own
// state goes; each Heads is guarded by its owner.
type Gate struct {
	layout streams.Layout
	// unverified: signatures are not checked (see NewUnverified).
	unverified bool
	// auditor: the anchor's stricter words bind too (see NewAuditor).
	auditor bool
	anchor  atomic.Pointer[signing.KeySet]
	trust   atomic.Pointer[trustState]
	// mu serializes changes of the trust state.
	mu sync.Mutex
}

// trustState is the ledger's trust revision that passed last.
type trustState struct {
	rev        events.TrustRevision
	seq        uint64
	set        *signing.KeySet
	distrusted map[string]bool
}

// New returns a gate for the ledger stream of layout. anchor is the
// reader's own configured keys: the first trust revision of the ledger
// passes if anchor trusts its signer, and until the ledger has one,
// anchor alone decides who may sign (nil: signatures are not checked,
// and the first trust revision passes on first use).
func New(layout streams.Layout, anchor *signing.KeySet) *Gate {
	g := &Gate{layout: layout}
	g.anchor.Store(anchor)
	return g
}

// NewAuditor returns the gate of a reader that only reads (an audit, an
// export, a replayed report). It folds what a replica's gate (New) folds,
// and besides marks each revision the ledger's trust passed that anchor's
// stricter words refuse (Revision.Refused): signed by a key anchor
// distrusts, or by a key anchor retires at until=N after N, wherever it
// is, even where the replicas folded it (before the ledger learned of the
// distrust, or by a list the replicas were never given). So an auditor who
// distrusts a key sees every revision it signed, while the numbers stay
// the replicas': skipping those revisions would also break the chain of
// every later revision of their keys.
func NewAuditor(layout streams.Layout, anchor *signing.KeySet) *Gate {
	g := New(layout, anchor)
	g.auditor = true
	return g
}

// NewUnverified returns a gate that checks everything but signatures: the
// gate of a tool told --unverified in so many words. Trust revisions are
// decoded and chained but decide nothing.
func NewUnverified(layout streams.Layout) *Gate {
	return &Gate{layout: layout, unverified: true}
}

// Unverified reports whether the gate checks no signature.
func (g *Gate) Unverified() bool { return g.unverified }

// Layout returns the gate's layout.
func (g *Gate) Layout() streams.Layout { return g.layout }

// SetAnchor replaces the reader's own keys (a SIGHUP). It changes who may
// write only while the ledger holds no trust revision.
func (g *Gate) SetAnchor(ks *signing.KeySet) { g.anchor.Store(ks) }

// Anchor returns the reader's own keys.
func (g *Gate) Anchor() *signing.KeySet { return g.anchor.Load() }

// LedgerTrust returns the ledger's last trust revision that passed, its
// sequence, and the key set it makes; ok is false while the ledger has
// none.
func (g *Gate) LedgerTrust() (rev events.TrustRevision, seq uint64, set *signing.KeySet, ok bool) {
	t := g.trust.Load()
	if t == nil {
		return events.TrustRevision{}, 0, nil, false
	}
	return t.rev, t.seq, t.set, true
}

// Keys returns the key set revisions are checked against now: the
// ledger's trust revision's, or the anchor while the ledger has none (nil:
// not checked).
func (g *Gate) Keys() *signing.KeySet {
	if t := g.trust.Load(); t != nil {
		return t.set
	}
	return g.anchor.Load()
}

// MayWrite reports whether pub may sign a revision written now, at a
// sequence after after: nil if so, else an error that says why (for a
// replica that must refuse to write). With no key set (signatures not
// checked) anyone may.
func (g *Gate) MayWrite(pub string, after uint64) error {
	t := g.trust.Load()
	if t != nil && t.distrusted[pub] {
		return fmt.Errorf("the signing key %s is distrusted by the ledger's trust revision %d", pub, t.seq)
	}
	ks := g.Keys()
	if ks == nil {
		return nil
	}
	until, ok := ks.Lookup(pub)
	switch {
	case !ok && t != nil:
		return fmt.Errorf("the signing key %s is not among the ledger's trusted keys (trust revision %d, written by %s)", pub, t.seq, t.rev.By)
	case !ok:
		return fmt.Errorf("the signing key %s is not among this replica's trusted keys", pub)
	case until != 0 && until <= after:
		return fmt.Errorf("the signing key %s is retired after sequence %d", pub, until)
	}
	return nil
}

// Refuses reports why the trust state as it stands refuses a revision at
// seq signed by pub: distrusted-key, untrusted-key or retired-key, or ""
// if it does not (or signatures are not checked). A replica checks its
// own writes with it: it folds them from memory, without Inspect.
func (g *Gate) Refuses(pub string, seq uint64) signing.Reason {
	if g.unverified || pub == "" {
		return ""
	}
	if t := g.trust.Load(); t != nil && t.distrusted[pub] {
		return signing.ReasonDistrustedKey
	}
	ks := g.Keys()
	if ks == nil {
		return ""
	}
	until, listed := ks.Lookup(pub)
	switch {
	case !listed:
		return signing.ReasonUntrustedKey
	case until != 0 && seq > until:
		return signing.ReasonRetiredKey
	}
	return ""
}

// LoadTrust makes rev, the trust revision at seq, the gate's trust state
// without checking it (a snapshot's, itself verified, see the snapshot
// format). It fails on a revision no writer could have written.
func (g *Gate) LoadTrust(rev events.TrustRevision, seq uint64) error {
	st, err := newTrustState(rev, seq)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.trust.Store(st)
	g.mu.Unlock()
	return nil
}

// ResetTrust forgets the ledger's trust state (a fold starting again from
// the stream's first message).
func (g *Gate) ResetTrust() {
	g.mu.Lock()
	g.trust.Store(nil)
	g.mu.Unlock()
}

// TrustSet returns the key set a trust revision makes (its trusted and
// retired keys; distrusted keys are not in it).
func TrustSet(rev events.TrustRevision) (*signing.KeySet, error) {
	st, err := newTrustState(rev, 0)
	if err != nil {
		return nil, err
	}
	return st.set, nil
}

func newTrustState(rev events.TrustRevision, seq uint64) (*trustState, error) {
	keys := make([]signing.Key, len(rev.Keys))
	for i, k := range rev.Keys {
		keys[i] = signing.Key{Public: k.Public, Until: k.Until}
	}
	set, err := signing.NewKeySet(keys, rev.UnsignedUntil)
	if err != nil {
		return nil, err
	}
	st := &trustState{rev: rev, seq: seq, set: set, distrusted: map[string]bool{}}
	for _, d := range rev.Distrusted {
		if !nkeys.IsValidPublicKey(d) {
			return nil, fmt.Errorf("gate: distrusted %q is not a public nkey", d)
		}
		if _, listed := set.Lookup(d); listed {
			return nil, fmt.Errorf("gate: %s is both trusted and distrusted", d)
		}
		st.distrusted[d] = true
	}
	return st, nil
}

// Inspect checks everything about m that needs no Heads: its key, its
// signature against the trust state as it stands, and its payload. It
// reads no Heads, so it may run outside the caller's lock; Admit then
// checks the chain. A reader that folds in stream order sees the trust
// state of the message before m.
func (g *Gate) Inspect(m *Message) (*Revision, *Rejection) {
	key, ok := g.layout.KeyOf(m.Subject)
	if !ok {
		return nil, &Rejection{Seq: m.Seq, Key: m.Subject, Reason: signing.ReasonUnknownKey}
	}
	reject := func(reason signing.Reason, signer string, err error) (*Revision, *Rejection) {
		return nil, &Rejection{Seq: m.Seq, Key: key, Reason: reason, Signer: signer, Err: err}
	}
	kind, reason := kindOf(g.layout, key)
	if reason != "" {
		return reject(reason, "", nil)
	}
	signer, reason := g.verify(kind, key, m)
	if reason != "" {
		return reject(reason, signer, nil)
	}
	rev := &Revision{Seq: m.Seq, Key: key, Kind: kind, At: m.At, Signer: signer, Data: m.Data}
	if reason, err := g.decode(rev, m.Data); reason != "" {
		return reject(reason, signer, err)
	}
	rev.Hash = events.HashPayload(m.Data)
	if g.auditor && signer != "" {
		rev.Refused = refusedBy(g.anchor.Load(), signer, m.Seq)
	}
	return rev, nil
}

// refusedBy is why the key set ks refuses a revision at seq signed by
// signer, that the ledger's trust passed: a key it distrusts, or retires
// at until=N before seq; "" if it does not.
func refusedBy(ks *signing.KeySet, signer string, seq uint64) signing.Reason {
	if ks.IsDistrusted(signer) {
		return signing.ReasonDistrustedKey
	}
	if until, listed := ks.Lookup(signer); listed && until != 0 && seq > until {
		return signing.ReasonRetiredKey
	}
	return ""
}

// KnowsSigner reports whether the gate's trust state decides m's signer
// for good: m is unsigned (or signatures are not checked), or the key it
// names is trusted, retired or distrusted. A reader that reads a revision
// ahead of its fold (a replica's catch-up after a lost compare-and-set)
// and finds a key it does not know first folds the ledger's trust key up
// to date: the key may have been added a moment ago.
func (g *Gate) KnowsSigner(m *Message) bool {
	pub := m.Header.Get(streams.HeaderSigKey)
	ks := g.Keys()
	if g.unverified || ks == nil || pub == "" {
		return true
	}
	if t := g.trust.Load(); t != nil && t.distrusted[pub] {
		return true
	}
	until, listed := ks.Lookup(pub)
	return listed && (until == 0 || m.Seq <= until)
}

// verify checks m's signature against the trust state.
func (g *Gate) verify(kind Kind, key string, m *Message) (signer string, reason signing.Reason) {
	if g.unverified {
		return m.Header.Get(streams.HeaderSigKey), ""
	}
	t := g.trust.Load()
	if kind == KindTrust {
		return g.verifyTrust(t, key, m)
	}
	ks := g.Keys()
	if ks == nil {
		return m.Header.Get(streams.HeaderSigKey), ""
	}
	pub := m.Header.Get(streams.HeaderSigKey)
	if pub == "" && m.Header.Get(streams.HeaderSig) == "" {
		if m.Seq <= ks.UnsignedUntil() {
			return "", ""
		}
		return "", signing.ReasonUnsigned
	}
	if reason := g.Refuses(pub, m.Seq); reason != "" {
		return pub, reason
	}
	if signer, ok := signing.VerifyBy(key, m.Header, m.Data); !ok {
		return signer, signing.ReasonBadSignature
	}
	return pub, ""
}

// verifyTrust checks the signature of a trust revision: always signed, by
// a key the ledger's last trust revision trusts or by a key the anchor
// trusts (the reader's own keys are its root of trust: an operator who
// lost every trusted seed adds a new key to them), the first with no
// anchor on first use (checked in decode, against the keys it lists). A
// key the ledger distrusts never signs one.
func (g *Gate) verifyTrust(t *trustState, key string, m *Message) (string, signing.Reason) {
	signer, ok := signing.VerifyBy(key, m.Header, m.Data)
	switch {
	case signer == "":
		return "", signing.ReasonUnsigned
	case !ok:
		return signer, signing.ReasonBadSignature
	}
	if t != nil && t.distrusted[signer] {
		return signer, signing.ReasonDistrustedKey
	}
	anchor := g.anchor.Load()
	if t == nil && anchor == nil {
		return signer, ""
	}
	reason := signing.ReasonUntrustedKey
	for _, ks := range []*signing.KeySet{t.keys(), anchor} {
		if until, listed := ks.Lookup(signer); listed {
			if until == 0 || m.Seq <= until {
				return signer, ""
			}
			reason = signing.ReasonRetiredKey
		}
	}
	return signer, reason
}

// keys is the trust state's key set (nil for no state).
func (t *trustState) keys() *signing.KeySet {
	if t == nil {
		return nil
	}
	return t.set
}

// MayWriteTrust is MayWrite for a trust revision: pub may also sign one
// if the anchor trusts it (see verifyTrust).
func (g *Gate) MayWriteTrust(pub string, after uint64) error {
	err := g.MayWrite(pub, after)
	if err == nil {
		return nil
	}
	if t := g.trust.Load(); t != nil && t.distrusted[pub] {
		return err
	}
	if g.anchor.Load().Trusts(pub, after+1) {
		return nil
	}
	return err
}

// decode decodes data into rev by its kind and checks that a writer of
// this ledger could have written it.
func (g *Gate) decode(rev *Revision, data []byte) (signing.Reason, error) {
	switch rev.Kind {
	case KindLane:
		r, err := codec.DecodeLane(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		if len(r.Balances) == 0 {
			return signing.ReasonMalformed, fmt.Errorf("a lane revision with no balance")
		}
		for i := range r.Balances {
			if want := g.layout.LaneKey(r.Balances[i].Balance); want != rev.Key {
				return signing.ReasonWrongLane, fmt.Errorf("balance %s belongs to %s with %d lane(s)", r.Balances[i].Balance, want, g.layout.Lanes())
			}
		}
		if err := wellFormed(&r); err != nil {
			return signing.ReasonMalformed, err
		}
		rev.Lane = &r
	case KindBudget:
		r, err := events.DecodeBudgetRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		if got := streams.BudgetKey(r.Budget); got != rev.Key {
			return signing.ReasonInvalid, fmt.Errorf("a revision of budget %s under key %s", got, rev.Key)
		}
		loc, err := events.LoadZone(r.TZ)
		if err != nil {
			return signing.ReasonInvalid, err
		}
		if loc != time.UTC {
			rev.Zone = loc
		}
		rev.Budget = &r
	case KindPricing:
		r, err := events.DecodePricingRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		if got := streams.PricingKey(r.Model); got != rev.Key {
			return signing.ReasonInvalid, fmt.Errorf("prices of model %q under key %s", r.Model, rev.Key)
		}
		rev.Pricing = &r
	case KindDefault:
		r, err := events.DecodeDefaultRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		if got := streams.DefaultKey(r.Kind, r.Period); got != rev.Key {
			return signing.ReasonInvalid, fmt.Errorf("a default of %s/%s under key %s", r.Kind, r.Period, rev.Key)
		}
		if _, err := events.LoadZone(r.TZ); err != nil {
			return signing.ReasonInvalid, err
		}
		rev.Default = &r
	case KindAPIKey:
		r, err := events.DecodeAPIKeyRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		if got := streams.APIKeyKey(r.ID); got != rev.Key {
			return signing.ReasonInvalid, fmt.Errorf("API key %q under key %s", r.ID, rev.Key)
		}
		rev.APIKey = &r
	case KindTenantLimits:
		r, err := events.DecodeTenantLimitsRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		if got := streams.TenantLimitsKey(r.Tenant); got != rev.Key {
			return signing.ReasonInvalid, fmt.Errorf("limits of tenant %q under key %s", r.Tenant, rev.Key)
		}
		rev.TenantLimits = &r
	case KindTrust:
		r, err := events.DecodeTrustRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		if _, err := newTrustState(r, rev.Seq); err != nil {
			return signing.ReasonInvalid, err
		}
		if r.By != rev.Signer {
			return signing.ReasonInvalid, fmt.Errorf("a trust revision by %s signed by %s", r.By, rev.Signer)
		}
		if !g.unverified && g.trust.Load() == nil && g.anchor.Load() == nil && !lists(r, rev.Signer) {
			// Trust on first use: the first trust revision is taken as
			// it is only from a key it trusts itself.
			return signing.ReasonUntrustedKey, fmt.Errorf("the ledger's first trust revision is signed by %s, which it does not list", rev.Signer)
		}
		rev.Trust = &r
	}
	return "", nil
}

func lists(r events.TrustRevision, pub string) bool {
	for _, k := range r.Keys {
		if k.Public == pub {
			return true
		}
	}
	return false
}

// Admit checks that rev, which Inspect passed, follows its key's last
// revision in h, and records it there: it passes (a trust revision
// becomes the gate's trust state). It reports false and no rejection for a
// revision at or below the key's last seen one (it was decided before).
func (g *Gate) Admit(h *Heads, rev *Revision) (bool, *Rejection) {
	hd := h.get(rev.Key)
	if rev.Seq <= max(hd.Valid, hd.Seen) {
		return false, nil
	}
	if rej := checkChain(h, hd, rev); rej != nil {
		return false, rej
	}
	h.pass(rev)
	if rev.Kind == KindTrust && !g.unverified {
		if st, err := newTrustState(*rev.Trust, rev.Seq); err == nil { // Inspect checked it
			g.mu.Lock()
			g.trust.Store(st)
			g.mu.Unlock()
		}
	}
	return true, nil
}

// checkChain checks rev against its key's head. Heads that start after a
// sequence (NewHeadsAfter) take the first revision of a key they hold no
// head of as it is, if it names a revision before their start.
func checkChain(h *Heads, hd Head, rev *Revision) *Rejection {
	ch, chained := rev.Chain()
	if chained && hd.Valid == 0 && hd.Seen == 0 && h.after > 0 && ch.Prev <= h.after {
		return nil
	}
	if !chained {
		if hd.Chained {
			return &Rejection{Seq: rev.Seq, Key: rev.Key, Reason: signing.ReasonReplay, Signer: rev.Signer,
				Err: fmt.Errorf("an unchained revision after the chained revision %d", hd.Valid)}
		}
		return nil
	}
	if err := events.CheckChain(rev.Key, rev.Seq, ch, hd.Valid, hd.Hash); err != nil {
		reason, _ := signing.ChainReason(err)
		return &Rejection{Seq: rev.Seq, Key: rev.Key, Reason: reason, Signer: rev.Signer, Err: err}
	}
	return nil
}

// Skip records rej in h: the key's next write must land after it. It
// reports false if rej was recorded before (a revision at or below the
// key's last seen one), so that a caller logs each rejection once.
func (g *Gate) Skip(h *Heads, rej *Rejection) bool {
	if _, reason := kindOf(g.layout, rej.Key); reason != "" {
		// No key of the ledger (unknown, of an older layout, a lane this
		// layout does not have): no one writes it with a
		// compare-and-set, so there is nothing to record, and recording
		// it would let garbage grow the heads without bound.
		return true
	}
	hd := h.get(rej.Key)
	if rej.Seq <= max(hd.Valid, hd.Seen) {
		return false
	}
	h.see(rej.Key, rej.Seq)
	return true
}

// Check is Inspect, then Admit or Skip: what a reader folding the stream
// in order does with each message. It returns the revision if it passed.
func (g *Gate) Check(h *Heads, m *Message) (*Revision, *Rejection) {
	rev, rej := g.Inspect(m)
	if rej != nil {
		g.Skip(h, rej)
		return nil, rej
	}
	ok, rej := g.Admit(h, rev)
	if rej != nil {
		g.Skip(h, rej)
	}
	if !ok {
		return nil, rej
	}
	return rev, nil
}
