package signing

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/secret"
	"github.com/spendgate/spendgate/streams"
)

// Reason says why a revision is not folded. The empty Reason means it may
// be. The values are stable: logs, metrics labels and audit reports use
// them.
type Reason string

// Reasons a revision is skipped, in the order they are checked.
const (
	// ReasonUnsigned: no signature headers, past the KeySet's
	// unsigned-until sequence.
	ReasonUnsigned Reason = "unsigned"
	// ReasonUntrustedKey: signed by a key not in the set, or by a key
	// retired before this revision's sequence.
	ReasonUntrustedKey Reason = "untrusted-key"
	// ReasonBadSignature: the signature does not verify (a changed payload,
	// another key name, a malformed header).
	ReasonBadSignature Reason = "bad-signature"
	// ReasonMalformed: the payload is not a revision this code reads.
	ReasonMalformed Reason = "malformed"
	// ReasonReplay: a revision that names a revision older than the last
	// valid one of its key (an old revision written again).
	ReasonReplay Reason = "replay"
	// ReasonChain: a revision that does not follow the last valid revision
	// of its key (a gap or a fork).
	ReasonChain Reason = "chain"
	// ReasonRetiredKey: signed by a key retired before this revision's
	// sequence (what rotation leaves behind: anything it signs later is
	// skipped like garbage).
	ReasonRetiredKey Reason = "retired-key"
	// ReasonDistrustedKey: signed by a key the ledger's trust revision
	// names as no writer.
	ReasonDistrustedKey Reason = "distrusted-key"
	// ReasonUnknownKey: a message under a key (or a subject) that is no
	// key this code folds.
	ReasonUnknownKey Reason = "unknown-key"
	// ReasonOldLayout: a balance key written as a KV key, the layout
	// before lanes.
	ReasonOldLayout Reason = "old-layout"
	// ReasonWrongLane: a lane revision naming a balance that belongs to
	// another lane (a writer with another lane count), or a lane key this
	// layout does not have.
	ReasonWrongLane Reason = "wrong-lane"
	// ReasonInvalid: a revision that decodes but that no writer of this
	// ledger could have written (a time zone that does not load, a trust
	// revision that lists a key that is not a public nkey).
	ReasonInvalid Reason = "invalid"
)

// Reasons lists every Reason, in the order they are checked.
var Reasons = []Reason{ReasonUnknownKey, ReasonUnsigned, ReasonDistrustedKey, ReasonRetiredKey, ReasonUntrustedKey,
	ReasonBadSignature, ReasonOldLayout, ReasonMalformed, ReasonWrongLane, ReasonInvalid, ReasonReplay, ReasonChain}

// domain separates revision signatures from any other use of the key.
const domain = "spendgate.revision.v1\n"

// Input returns the bytes signed for a revision of key whose payload is
// data: the domain string, the key, a newline, then the payload.
func Input(key string, data []byte) []byte {
	b := make([]byte, 0, len(domain)+len(key)+1+len(data))
	b = append(b, domain...)
	b = append(b, key...)
	b = append(b, '\n')
	return append(b, data...)
}

// Signer signs revisions with one Ed25519 key (an nkey seed).
type Signer struct {
	pub  string
	priv ed25519.PrivateKey
}

// NewSigner returns a Signer for an nkey seed (user, account or operator:
// "SU...", "SA...", "SO..."). Surrounding whitespace and decorated creds
// style (the seed between "-----BEGIN ... NKEY SEED-----" lines) are
// accepted.
func NewSigner(seed []byte) (*Signer, error) {
	kp, err := nkeys.ParseDecoratedNKey(seed)
	if err != nil {
		return nil, fmt.Errorf("signing: not an nkey seed: %w", err)
	}
	raw, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("signing: not an nkey seed: %w", err)
	}
	_, rawSeed, err := nkeys.DecodeSeed(raw)
	if err != nil {
		return nil, fmt.Errorf("signing: not an nkey seed: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	return &Signer{pub: pub, priv: ed25519.NewKeyFromSeed(rawSeed)}, nil
}

// KeyFileOption changes how LoadSigner and LoadOrCreate treat a seed file.
type KeyFileOption func(*keyFileOptions)

type keyFileOptions struct{ insecure bool }

// AllowInsecurePermissions accepts a seed file that its group or others may
// access (serve --insecure-key-permissions). Without it such a file is
// refused (secret.ErrTooOpen), as ssh refuses a private key.
func AllowInsecurePermissions() KeyFileOption {
	return func(o *keyFileOptions) { o.insecure = true }
}

// LoadSigner reads an nkey seed from path.
//
// Errors: secret.ErrTooOpen (wrapped) if the file's group or others may
// access it and AllowInsecurePermissions is not given; the file system's if
// it cannot be read; NewSigner's. No error holds the seed, nor the path if
// the path is itself a seed.
func LoadSigner(path string, opts ...KeyFileOption) (*Signer, error) {
	var o keyFileOptions
	for _, opt := range opts {
		opt(&o)
	}
	b, err := secret.ReadFile(path, o.insecure)
	if err != nil {
		return nil, fmt.Errorf("signing: key: %w", err)
	}
	s, err := NewSigner(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", secret.Redact(path), err)
	}
	return s, nil
}

// ErrSeedAsPath: a seed given where the name of its file belongs.
var ErrSeedAsPath = errors.New("signing: the key file name is an nkey seed (redacted): pass the name of the file that holds the seed, never the seed itself")

// LoadOrCreate returns the Signer of the seed at path, creating a new user
// nkey seed there (mode 0600, its directory 0700) if the file does not
// exist. created reports whether it did. An existing file is read as
// LoadSigner reads it, with opts. Processes that start at once on one path
// share one key: the seed is written to a temporary file and linked into
// place, so a reader never sees half a seed and exactly one creator wins;
// the others load the winner's.
//
// Errors: ErrSeedAsPath if path is itself a seed (nothing is created);
// LoadSigner's for an existing file; the file system's.
func LoadOrCreate(path string, opts ...KeyFileOption) (s *Signer, created bool, err error) {
	if secret.LooksLikeSeed(path) {
		return nil, false, ErrSeedAsPath
	}
	if _, err := os.Stat(path); err == nil {
		s, err := LoadSigner(path, opts...)
		return s, false, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("signing: key: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, false, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("signing: key: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".signing-*.tmp")
	if err != nil {
		return nil, false, fmt.Errorf("signing: key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("signing: key: %w", err)
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("signing: key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("signing: key: %w", err)
	}
	if err := os.Link(tmp, path); errors.Is(err, os.ErrExist) {
		s, err := LoadSigner(path, opts...) // another process created it first
		return s, false, err
	} else if err != nil {
		return nil, false, fmt.Errorf("signing: key: %w", err)
	}
	s, err = NewSigner(seed)
	return s, true, err
}

// NewEphemeral returns a Signer for a new user key that is kept nowhere.
func NewEphemeral() (*Signer, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	return NewSigner(seed)
}

// String names the signer by its public key; the private key never shows
// (fmt's %v, %s and %+v print this).
func (s *Signer) String() string { return "signing.Signer(" + s.pub + ")" }

// GoString is String, for %#v.
func (s *Signer) GoString() string { return s.String() }

// LogValue is String, for log/slog.
func (s *Signer) LogValue() slog.Value { return slog.StringValue(s.String()) }

// PublicKey returns the signer's public nkey: what a KeySet lists.
func (s *Signer) PublicKey() string { return s.pub }

// SignBytes returns the signer's Ed25519 signature of b: for callers that
// sign something other than a revision (a snapshot, under its own domain
// string; see package gate).
func (s *Signer) SignBytes(b []byte) []byte { return ed25519.Sign(s.priv, b) }

// Sign sets the signature headers of a revision of key with payload data
// on h.
func (s *Signer) Sign(h nats.Header, key string, data []byte) {
	sig := ed25519.Sign(s.priv, Input(key, data))
	h.Set(streams.HeaderSigKey, s.pub)
	h.Set(streams.HeaderSig, base64.RawURLEncoding.EncodeToString(sig))
}

// trusted is one public key of a KeySet.
type trusted struct {
	pub   ed25519.PublicKey
	until uint64 // last stream sequence it may sign; 0: no limit
}

// KeySet is the set of public keys trusted to sign revisions. The nil
// *KeySet verifies nothing: every revision is accepted as far as
// signatures go (the chain is still checked). A KeySet is immutable and
// safe for concurrent use.
type KeySet struct {
	keys          map[string]trusted
	unsignedUntil uint64
	// distrusted names keys known not to be writers (see Distrusted).
	distrusted map[string]bool
}

// Key is one entry of a KeySet: a public nkey and, for a retired key, the
// last stream sequence it may sign (0: not retired).
type Key struct {
	Public string
	Until  uint64
}

// NewKeySet returns the set of keys. unsignedUntil is the last stream
// sequence at which an unsigned revision is accepted (0: none is).
func NewKeySet(keys []Key, unsignedUntil uint64) (*KeySet, error) {
	ks := &KeySet{keys: map[string]trusted{}, unsignedUntil: unsignedUntil}
	for _, k := range keys {
		if !nkeys.IsValidPublicKey(k.Public) {
			return nil, notPublic(k.Public)
		}
		raw, err := nkeys.Decode(nkeys.Prefix(k.Public), []byte(k.Public))
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, notPublic(k.Public)
		}
		if old, ok := ks.keys[k.Public]; ok && (old.until == 0 || (k.Until != 0 && k.Until < old.until)) {
			continue // listed twice: the wider trust wins
		}
		ks.keys[k.Public] = trusted{pub: ed25519.PublicKey(raw), until: k.Until}
	}
	if len(ks.keys) == 0 {
		return nil, errors.New("signing: no trusted key")
	}
	return ks, nil
}

// ParseKeys reads a trusted-keys list: entries separated by commas or
// newlines, each one of
//
//	UABC...              a public nkey trusted to sign
//	UABC... until=SEQ    a retired key: trusted up to stream sequence SEQ
//	UABC... distrusted   a key known not to be a writer: what it signs is
//	                     skipped as garbage (it never blocks a key; see
//	                     package gate)
//	unsigned until=SEQ   unsigned revisions accepted up to SEQ (history
//	                     written before signing was turned on)
//	PATH                 a file holding such entries, one per line
//
// Blank lines and lines starting with # are ignored. The set must name at
// least one trusted key.
func ParseKeys(spec string) (*KeySet, error) {
	var unsigned uint64
	distrusted := map[string]bool{}
	keys, err := parseEntries(spec, true, &unsigned, distrusted)
	if err != nil {
		return nil, err
	}
	ks, err := NewKeySet(keys, unsigned)
	if err != nil {
		return nil, err
	}
	return ks.WithDistrusted(sortedKeys(distrusted)...)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WithDistrusted returns a copy of ks that also names pubs as distrusted:
// keys known not to be writers. A key cannot be both trusted and
// distrusted.
func (ks *KeySet) WithDistrusted(pubs ...string) (*KeySet, error) {
	if len(pubs) == 0 {
		return ks, nil
	}
	out := &KeySet{keys: ks.keys, unsignedUntil: ks.unsignedUntil, distrusted: map[string]bool{}}
	for d := range ks.distrusted {
		out.distrusted[d] = true
	}
	for _, p := range pubs {
		if !nkeys.IsValidPublicKey(p) {
			return nil, fmt.Errorf("signing: distrusted %q is not a public nkey", p)
		}
		if _, ok := ks.keys[p]; ok {
			return nil, fmt.Errorf("signing: %s is both trusted and distrusted", p)
		}
		out.distrusted[p] = true
	}
	return out, nil
}

// IsDistrusted reports whether the set names pub as distrusted.
func (ks *KeySet) IsDistrusted(pub string) bool { return ks != nil && ks.distrusted[pub] }

// Distrusted returns the keys the set names as distrusted, sorted.
func (ks *KeySet) Distrusted() []string {
	if ks == nil {
		return nil
	}
	return sortedKeys(ks.distrusted)
}

func parseEntries(spec string, files bool, unsigned *uint64, distrusted map[string]bool) ([]Key, error) {
	var out []Key
	// A list splits at commas and newlines, a file at newlines only (a
	// comment may hold a comma).
	sep := func(r rune) bool { return r == '\n' || (files && r == ',') }
	for _, line := range strings.FieldsFunc(spec, sep) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if fields[0] != "unsigned" && !nkeys.IsValidPublicKey(fields[0]) {
			if !files || len(fields) != 1 || secret.LooksLikeSeed(fields[0]) {
				return nil, notPublic(fields[0])
			}
			b, err := os.ReadFile(fields[0])
			if err != nil {
				return nil, fmt.Errorf("signing: trusted keys: %q is neither a public nkey nor a readable file: %w", fields[0], secret.Error(err))
			}
			keys, err := parseEntries(string(b), false, unsigned, distrusted)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", secret.Redact(fields[0]), err)
			}
			out = append(out, keys...)
			continue
		}
		var until uint64
		if len(fields) == 2 && fields[1] == "distrusted" && fields[0] != "unsigned" {
			distrusted[fields[0]] = true
			continue
		}
		for _, f := range fields[1:] {
			v, ok := strings.CutPrefix(f, "until=")
			if !ok {
				if secret.LooksLikeSeed(f) {
					return nil, notPublic(f)
				}
				return nil, fmt.Errorf("signing: %q: unknown option %q (want until=SEQ or distrusted)", fields[0], f)
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("signing: %q: until=%s is not a stream sequence", fields[0], secret.Redact(v))
			}
			until = n
		}
		if fields[0] == "unsigned" {
			if until == 0 {
				return nil, errors.New("signing: \"unsigned\" needs until=SEQ")
			}
			*unsigned = max(*unsigned, until)
			continue
		}
		out = append(out, Key{Public: fields[0], Until: until})
	}
	return out, nil
}

// ErrSeedInTrustedKeys: a private nkey seed where the trusted keys, which
// are public, belong (a seed file given to --trusted-keys). The seed is
// never shown.
var ErrSeedInTrustedKeys = errors.New("signing: a private nkey seed (redacted) where public keys belong: a trusted-keys list holds public keys (\"U...\"); print a seed file's public key with spendgate key --file FILE, and keep the seed file readable by its owner alone")

// notPublic is the error for an entry s of a trusted-keys list that is not
// a public nkey: ErrSeedInTrustedKeys if it looks like a seed, else one that
// quotes it.
func notPublic(s string) error {
	if secret.LooksLikeSeed(s) {
		return ErrSeedInTrustedKeys
	}
	return fmt.Errorf("signing: %q is not a public nkey", secret.Redact(s))
}

// Keys returns the set's keys sorted by public key.
func (ks *KeySet) Keys() []Key {
	if ks == nil {
		return nil
	}
	out := make([]Key, 0, len(ks.keys))
	for pub, t := range ks.keys {
		out = append(out, Key{Public: pub, Until: t.until})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Public < out[j].Public })
	return out
}

// UnsignedUntil returns the last stream sequence at which an unsigned
// revision is accepted.
func (ks *KeySet) UnsignedUntil() uint64 {
	if ks == nil {
		return 0
	}
	return ks.unsignedUntil
}

// Trusts reports whether pub may sign a revision at stream sequence seq.
func (ks *KeySet) Trusts(pub string, seq uint64) bool {
	if ks == nil {
		return true
	}
	t, ok := ks.keys[pub]
	return ok && (t.until == 0 || seq <= t.until)
}

var inputPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// Verify checks the signature of the revision of key at stream sequence
// seq with headers h and payload data. It returns "" if it may be folded
// (or ks is nil), else ReasonUnsigned, ReasonUntrustedKey or
// ReasonBadSignature.
func (ks *KeySet) Verify(key string, seq uint64, h nats.Header, data []byte) Reason {
	if ks == nil {
		return ""
	}
	pub, sig := h.Get(streams.HeaderSigKey), h.Get(streams.HeaderSig)
	if pub == "" && sig == "" {
		if seq <= ks.unsignedUntil {
			return ""
		}
		return ReasonUnsigned
	}
	t, ok := ks.keys[pub]
	if !ok || (t.until != 0 && seq > t.until) {
		return ReasonUntrustedKey
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return ReasonBadSignature
	}
	bp := inputPool.Get().(*[]byte)
	in := append((*bp)[:0], domain...)
	in = append(in, key...)
	in = append(in, '\n')
	in = append(in, data...)
	ok = ed25519.Verify(t.pub, in, raw)
	*bp = in
	inputPool.Put(bp)
	if !ok {
		return ReasonBadSignature
	}
	return ""
}

// Lookup returns the retirement sequence of pub (0: not retired) and
// whether the set lists it at all.
func (ks *KeySet) Lookup(pub string) (until uint64, ok bool) {
	if ks == nil {
		return 0, false
	}
	t, ok := ks.keys[pub]
	return t.until, ok
}

// VerifyBy checks the signature headers h of a revision of key with
// payload data against the public key they name, whoever it is: it
// reports whether that key signed exactly these bytes, and names the key
// ("" when h carries no signature). A KeySet decides whether the key may
// sign; VerifyBy only whether it did.
func VerifyBy(key string, h nats.Header, data []byte) (signer string, ok bool) {
	pub, sig := h.Get(streams.HeaderSigKey), h.Get(streams.HeaderSig)
	if pub == "" && sig == "" {
		return "", false
	}
	if !nkeys.IsValidPublicKey(pub) {
		return pub, false
	}
	raw, err := nkeys.Decode(nkeys.Prefix(pub), []byte(pub))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return pub, false
	}
	s, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(s) != ed25519.SignatureSize {
		return pub, false
	}
	bp := inputPool.Get().(*[]byte)
	in := append((*bp)[:0], domain...)
	in = append(in, key...)
	in = append(in, '\n')
	in = append(in, data...)
	ok = ed25519.Verify(ed25519.PublicKey(raw), in, s)
	*bp = in
	inputPool.Put(bp)
	return pub, ok
}

// String lists the set as ParseKeys reads it, one entry per line.
func (ks *KeySet) String() string {
	var b bytes.Buffer
	if u := ks.UnsignedUntil(); u != 0 {
		fmt.Fprintf(&b, "unsigned until=%d\n", u)
	}
	for _, d := range ks.Distrusted() {
		fmt.Fprintf(&b, "%s distrusted\n", d)
	}
	for _, k := range ks.Keys() {
		b.WriteString(k.Public)
		if k.Until != 0 {
			fmt.Fprintf(&b, " until=%d", k.Until)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// ChainReason classifies a chain error (an *events.ChainError in err's
// tree): a revision naming a revision older than the last valid one of its
// key is a replay (ReasonReplay); any other break, a gap or a fork, is
// ReasonChain. ok is false if err holds no chain error.
func ChainReason(err error) (r Reason, ok bool) {
	var ce *events.ChainError
	if !errors.As(err, &ce) {
		return "", false
	}
	if ce.Prev < ce.WantPrev {
		return ReasonReplay, true
	}
	return ReasonChain, true
}

// Other things than revisions are signed too, each under its own domain
// string so that no signature of one kind can pass as another's: a feed
// message (DomainFeed) over its subject and body, a feed checkpoint
// (DomainFeedCheckpoint), a denial or check record (DomainDenial) over
// its subject and body (DomainDenialID, SignDenial: its Nats-Msg-Id too),
// an alert (DomainAlert) over its subject and body.
const (
	DomainFeed           = "spendgate.feed.v1\n"
	DomainFeedCheckpoint = "spendgate.feed-checkpoint.v1\n"
	DomainDenial         = "spendgate.denial.v1\n"
	DomainDenialID       = "spendgate.denial.v2\n"
	DomainAlert          = "spendgate.alert.v1\n"
)

// SignDenial signs a denial or check record's message under
// DomainDenialID: its subject, its Nats-Msg-Id (h's, set before) and its
// body. A copy of the record published again under another id does not
// verify, and one under the same id is the stream's to drop as a
// duplicate, so a record signed this way is stored once (within the
// stream's duplicate window: a later copy is told by its age).
func (s *Signer) SignDenial(h nats.Header, subject string, body []byte) {
	s.SignMsg(h, DomainDenialID, denialSubject(subject, h), body)
}

// VerifyDenial verifies a denial or check record's message as VerifyMsg
// does: signed under DomainDenialID (SignDenial), or else under
// DomainDenial, as replicas signed records before they signed the id
// (legacy true).
func VerifyDenial(h nats.Header, subject string, body []byte) (signer string, ok, legacy bool) {
	if signer, ok = VerifyMsg(h, DomainDenialID, denialSubject(subject, h), body); ok {
		return signer, true, false
	}
	if old, ok := VerifyMsg(h, DomainDenial, subject, body); ok {
		return old, true, true
	}
	return signer, false, false
}

// denialSubject is what DomainDenialID signs as the subject: the subject,
// a newline, the Nats-Msg-Id (a subject holds no newline).
func denialSubject(subject string, h nats.Header) string {
	return subject + "\n" + h.Get(nats.MsgIdHdr)
}

// msgInput is the signed bytes of a message under domain: the domain, the
// subject, a newline, then the body.
func msgInput(domain, subject string, body []byte) []byte {
	b := make([]byte, 0, len(domain)+len(subject)+1+len(body))
	b = append(b, domain...)
	b = append(b, subject...)
	b = append(b, '\n')
	return append(b, body...)
}

// SignMsg sets the signature headers of a message of subject with body,
// under domain, on h.
func (s *Signer) SignMsg(h nats.Header, domain, subject string, body []byte) {
	h.Set(streams.HeaderSigKey, s.pub)
	h.Set(streams.HeaderSig, base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, msgInput(domain, subject, body))))
}

// VerifyMsg reports whether the key h names signed the message of subject
// with body under domain, and names the key ("" when h carries none). A
// KeySet decides whether that key may sign.
func VerifyMsg(h nats.Header, domain, subject string, body []byte) (signer string, ok bool) {
	pub, sig := h.Get(streams.HeaderSigKey), h.Get(streams.HeaderSig)
	if pub == "" && sig == "" {
		return "", false
	}
	if !nkeys.IsValidPublicKey(pub) {
		return secret.Redact(pub), false
	}
	raw, err := nkeys.Decode(nkeys.Prefix(pub), []byte(pub))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return pub, false
	}
	s, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(s) != ed25519.SignatureSize {
		return pub, false
	}
	return pub, ed25519.Verify(ed25519.PublicKey(raw), msgInput(domain, subject, body), s)
}
