package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Keys resolves presented secrets to the API keys of the ledger's key
// table (apikey.resolve), and caches each answer for a bounded time: a
// key that resolved is trusted for its TTL (Config.KeyCache), so a key
// disabled or rotated in the ledger is refused at most that long after the
// change (plus the replicas' fold lag); an unknown or disabled key is
// answered from the cache for a second. An answer the ledger could not
// give is never cached. Concurrent lookups of one secret share one
// request. It is safe for concurrent use, and the httpapi package uses it
// too.
type Keys struct {
	cl  *client.Client
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	// m holds the lookups in flight and the valid keys, neg the unknown
	// and disabled ones, each by the secret's hash: apart, so that a flood
	// of made-up secrets fills neg alone and never pushes a valid key out
	// (evict).
	m, neg map[string]*keyEntry
	// hits and misses count lookups answered from the cache or not.
	hits, misses func()
	// failures limits the unknown keys of each client address through
	// AuthenticateFrom (LimitUnknown; nil: no limit).
	failures *failLimiter
}

// LimitUnknown limits the unknown keys each client address may present
// through AuthenticateFrom to perSecond a second, with a burst of twice
// that (negative: no limit), on the clock now. Call it before the first
// lookup; the gateway's proxy and its HTTP API share the limit.
func (k *Keys) LimitUnknown(perSecond int, now func() time.Time) {
	k.failures = newFailLimiter(perSecond, now)
}

// AuthenticateFrom returns the key secret, presented with request r,
// opens, under the limit of unknown keys of r's client address
// (LimitUnknown): a lookup the cache cannot answer with a valid key takes
// a token of the address's bucket first, and gives it back unless the key
// turned out unknown; with none left it fails with a *TooManyUnknownKeys
// and the ledger is not asked. Other errors: ErrNoKey (empty secret); an
// *events.Error with code unknown_key (also for a secret not of
// spendgate's format) or key_disabled; an error matching
// client.ErrUnavailable when the ledger did not answer; ctx's error.
func (k *Keys) AuthenticateFrom(ctx context.Context, r *http.Request, secret string) (events.APIKeyResolveReply, error) {
	if k.failures == nil {
		return k.authenticate(ctx, secret, nil)
	}
	addr := clientAddr(r)
	var took bool
	var wait time.Duration
	key, err := k.authenticate(ctx, secret, func() bool {
		took, wait = k.failures.take(addr)
		return took
	})
	var ee *events.Error
	if took && !(errors.As(err, &ee) && ee.Code == events.CodeUnknownKey) {
		k.failures.give(addr)
	}
	if errors.Is(err, errTooManyFailures) {
		return key, &TooManyUnknownKeys{wait: wait}
	}
	return key, err
}

// TooManyUnknownKeys: the caller's address presented too many unknown
// keys; its key was not looked up.
type TooManyUnknownKeys struct{ wait time.Duration }

func (e *TooManyUnknownKeys) Error() string { return errTooManyFailures.Error() }

func (e *TooManyUnknownKeys) Unwrap() error { return errTooManyFailures }

// RetryAfter is the whole seconds until the address may present another
// key (at least 1).
func (e *TooManyUnknownKeys) RetryAfter() int64 {
	return max(1, int64((e.wait+time.Second-1)/time.Second))
}

type keyEntry struct {
	ready   chan struct{}
	key     events.APIKeyResolveReply
	err     error
	expires time.Time
}

// NewKeys returns a cache over cl's apikey.resolve with positive entries
// kept ttl (DefaultKeyCache when 0).
func NewKeys(cl *client.Client, ttl time.Duration) *Keys {
	if ttl <= 0 {
		ttl = DefaultKeyCache
	}
	return &Keys{cl: cl, ttl: ttl, now: time.Now, m: map[string]*keyEntry{}, neg: map[string]*keyEntry{}, hits: func() {}, misses: func() {}}
}

// resolveTimeout bounds one resolve (the client's own attempts are
// shorter).
const resolveTimeout = 10 * time.Second

// ErrNoKey: no secret was presented.
var ErrNoKey = errors.New("gateway: no API key")

// errTooManyFailures: the guard of authenticate refused the lookup.
var errTooManyFailures = errors.New("gateway: too many unknown keys from this address")

// authenticate is Authenticate, where guard (when not nil) is asked first
// for every secret the cache does not know as a valid key's (a malformed
// one, an unknown or disabled one cached, one to look up): when it says
// no, the answer is errTooManyFailures and the ledger is not asked. A
// secret that resolved to a valid key, even one whose entry has expired,
// is never held back by it.
func (k *Keys) authenticate(ctx context.Context, secret string, guard func() bool) (events.APIKeyResolveReply, error) {
	if secret == "" {
		return events.APIKeyResolveReply{}, ErrNoKey
	}
	id, ok := events.ParseAPIKey(secret)
	if !ok {
		if guard != nil && !guard() {
			return events.APIKeyResolveReply{}, errTooManyFailures
		}
		return events.APIKeyResolveReply{}, events.Errorf(events.CodeUnknownKey, "the key is not a spendgate key (sgk_...)")
	}
	hash := events.HashAPIKey(secret)
	now := k.now()
	k.mu.Lock()
	e := k.m[hash]
	if e == nil {
		e = k.neg[hash]
	}
	// A settled entry's fields are written under mu.
	valid := e != nil && !e.pending() && e.err == nil
	if guard != nil && !valid && !guard() {
		k.mu.Unlock()
		return events.APIKeyResolveReply{}, errTooManyFailures
	}
	if e != nil && now.Before(e.expires) {
		k.mu.Unlock()
		k.hits()
		return e.wait(ctx)
	}
	if len(k.m) >= MaxCachedKeys {
		k.evict(now)
	}
	// Until resolved, the entry holds the callers that come meanwhile.
	e = &keyEntry{ready: make(chan struct{}), expires: now.Add(time.Hour)}
	k.m[hash] = e
	delete(k.neg, hash)
	k.mu.Unlock()
	k.misses()
	k.resolve(e, hash, id)
	return e.wait(ctx)
}

// resolve asks the ledger, under its own deadline (a caller that gives up
// does not fail the others waiting on the entry), and settles e.
func (k *Keys) resolve(e *keyEntry, hash, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	r, err := k.cl.ResolveAPIKey(ctx, events.APIKeyResolveRequest{ID: id, Hash: hash})
	now := k.now()
	k.mu.Lock()
	e.key, e.err = r, err
	var ee *events.Error
	switch {
	case err == nil:
		e.expires = now.Add(k.ttl)
	case errors.As(err, &ee) && !errors.Is(err, client.ErrUnavailable):
		e.expires = now.Add(min(k.ttl, negativeKeyCache))
		k.drop(hash, e)
		if len(k.neg) >= MaxCachedKeys {
			k.evictNegative(now)
		}
		k.neg[hash] = e
	default:
		k.drop(hash, e) // not an answer: ask again next time
		e.expires = now
	}
	close(e.ready)
	k.mu.Unlock()
}

func (e *keyEntry) pending() bool {
	select {
	case <-e.ready:
		return false
	default:
		return true
	}
}

func (e *keyEntry) wait(ctx context.Context) (events.APIKeyResolveReply, error) {
	select {
	case <-e.ready:
		return e.key, e.err
	case <-ctx.Done():
		return events.APIKeyResolveReply{}, ctx.Err()
	}
}

// drop removes e from m, if it is still hash's entry there. Called with
// mu held.
func (k *Keys) drop(hash string, e *keyEntry) {
	if k.m[hash] == e {
		delete(k.m, hash)
	}
}

// evict makes room in m, which holds only lookups in flight and valid
// keys (unknown and disabled ones are in neg, bounded on their own): it
// drops the expired entries, and if m is still full (as many valid keys
// in use as it may hold), settled entries at random until a tenth of it is
// free, so that the next lookups do not scan it again. Secrets made up by
// a caller never push a valid key out. Called with mu held.
func (k *Keys) evict(now time.Time) {
	for h, e := range k.m {
		if !e.pending() && !now.Before(e.expires) {
			delete(k.m, h)
		}
	}
	if len(k.m) < MaxCachedKeys {
		return
	}
	for h, e := range k.m {
		if len(k.m) < MaxCachedKeys-MaxCachedKeys/10 {
			return
		}
		if !e.pending() {
			delete(k.m, h)
		}
	}
}

// evictNegative makes room in neg: it drops the expired entries, and if
// none were, every one (each is an answer of at most a second, asked
// again at worst). Called with mu held.
func (k *Keys) evictNegative(now time.Time) {
	for h, e := range k.neg {
		if !now.Before(e.expires) {
			delete(k.neg, h)
		}
	}
	if len(k.neg) >= MaxCachedKeys {
		clear(k.neg)
	}
}

// secretOf returns the secret a request presents: "Authorization: Bearer
// <secret>", or for the Anthropic API its "x-api-key" header (which its
// SDK sends) when there is no bearer.
func secretOf(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		return BearerSecret(a)
	}
	return strings.TrimSpace(r.Header.Get("X-Api-Key"))
}

// BearerSecret is the secret of an Authorization header's value "Bearer
// <secret>", "" for another scheme. The scheme is matched in any case, as
// RFC 7235 has it: hand-written clients send "bearer".
func BearerSecret(auth string) string {
	scheme, s, ok := strings.Cut(strings.TrimSpace(auth), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(s)
}

// ClientSet holds one client.Client per tenant over one NATS connection:
// the deployment's ("") on "<prefix><endpoint>", a tenant's on
// "<prefix>t.<tenant>.<endpoint>", where the replica takes the tenant from
// the subject. Each is made on first use. Held returns the same on the
// held subjects ("<prefix>held.<endpoint>", "<prefix>held.t.<tenant>.
// <endpoint>"), which the gateway's calls admit and close through.
type ClientSet struct {
	nc     *nats.Conn
	prefix string
	opts   []client.Option

	mu sync.Mutex
	m  map[string]*client.Client
	h  map[string]*client.Client
}

// NewClientSet returns the clients of nc under prefix, each made with
// opts (which must not set the prefix).
func NewClientSet(nc *nats.Conn, prefix string, opts ...client.Option) (*ClientSet, error) {
	s := &ClientSet{nc: nc, prefix: prefix, opts: opts, m: map[string]*client.Client{}, h: map[string]*client.Client{}}
	if _, err := s.For(""); err != nil {
		return nil, err
	}
	return s, nil
}

// For returns tenant's client ("" for the deployment's).
func (s *ClientSet) For(tenant string) (*client.Client, error) { return s.get(s.m, s.prefix, tenant) }

// Held returns tenant's client on the held subjects ("" for the
// deployment's): the one a call's admit and close go through, so that the
// call's reservation (its request id starts events.HeldRequestPrefix) is
// closed by this gateway alone, never by a holder of the key through the
// plain endpoints.
func (s *ClientSet) Held(tenant string) (*client.Client, error) {
	return s.get(s.h, s.prefix+streams.HeldToken+".", tenant)
}

func (s *ClientSet) get(m map[string]*client.Client, prefix, tenant string) (*client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := m[tenant]; c != nil {
		return c, nil
	}
	if tenant != "" {
		if err := events.ValidateTenant(tenant); err != nil {
			return nil, err
		}
		prefix += "t." + tenant + "."
	}
	c, err := client.New(s.nc, append(append([]client.Option(nil), s.opts...), client.WithPrefix(prefix))...)
	if err != nil {
		return nil, err
	}
	m[tenant] = c
	return c, nil
}
