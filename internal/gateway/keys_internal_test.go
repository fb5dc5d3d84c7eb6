package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// settled is a key cache entry as resolve leaves it.
func settled(err error, expires time.Time) *keyEntry {
	e := &keyEntry{ready: make(chan struct{}), err: err, expires: expires}
	close(e.ready)
	return e
}

// TestKeys_FloodKeepsValidKeys: the cache full of unknown keys' answers
// (a caller spraying made-up secrets) makes room among them, and the
// valid keys cached stay; a cache full of valid keys drops the expired
// ones first. How it failed: one map held both, and evict, finding no
// expired entry, dropped every settled one, valid keys included, so a
// flood flushed every tenant's key and each next call had to resolve it.
func TestKeys_FloodKeepsValidKeys(t *testing.T) {
	now := time.Now()
	k := NewKeys(nil, time.Minute)
	unknown := events.Errorf(events.CodeUnknownKey, "no such key")
	for i := range 5 {
		k.m[fmt.Sprint("valid", i)] = settled(nil, now.Add(time.Minute))
	}
	for i := range MaxCachedKeys {
		k.neg[fmt.Sprint("bogus", i)] = settled(unknown, now.Add(time.Second))
	}
	// What resolve does with one more unknown key's answer.
	k.mu.Lock()
	if len(k.neg) >= MaxCachedKeys {
		k.evictNegative(now)
	}
	k.neg["bogus-last"] = settled(unknown, now.Add(time.Second))
	k.mu.Unlock()
	require.Len(t, k.neg, 1, "the unknown keys make room among themselves")
	for i := range 5 {
		require.Contains(t, k.m, fmt.Sprint("valid", i), "a valid key stays cached")
	}

	// Full of valid keys, some expired: those go, the live ones stay.
	k = NewKeys(nil, time.Minute)
	for i := range MaxCachedKeys {
		exp := now.Add(time.Minute)
		if i%5 == 0 {
			exp = now.Add(-time.Second)
		}
		k.m[fmt.Sprint("k", i)] = settled(nil, exp)
	}
	k.mu.Lock()
	k.evict(now)
	k.mu.Unlock()
	require.Len(t, k.m, MaxCachedKeys-MaxCachedKeys/5, "only the expired ones were dropped")
	for h, e := range k.m {
		require.True(t, now.Before(e.expires), h)
	}
}

// TestClientAddr: failures are counted by the connection's IP, an IPv6
// one's /64, and never by X-Forwarded-For.
func TestClientAddr(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5555":             "192.0.2.7",
		"[::ffff:192.0.2.7]:5555":    "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443": "2001:db8:1:2::/64",
		"not-an-address":             "not-an-address",
	} {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {"203.0.113.1"}}}
		require.Equal(t, want, clientAddr(r), remote)
	}
}

// TestFailLimiter_TableBounded: past maxAuthAddrs addresses, new ones
// share one bucket until the tracked ones are idle (refilled), which a
// sweep then drops.
func TestFailLimiter_TableBounded(t *testing.T) {
	now := time.Now()
	l := newFailLimiter(1, func() time.Time { return now })
	for i := range maxAuthAddrs {
		ok, _ := l.take(fmt.Sprint("a", i))
		require.True(t, ok)
	}
	// The table is full: two new addresses share the overflow bucket (2).
	for range 2 {
		ok, _ := l.take("new-1")
		require.True(t, ok)
	}
	ok, wait := l.take("new-2")
	require.False(t, ok, "the overflow bucket is spent")
	require.Equal(t, time.Second, wait)
	require.Len(t, l.m, maxAuthAddrs)
	// A second later every tracked bucket has refilled: swept.
	now = now.Add(2 * time.Second)
	ok, _ = l.take("new-3")
	require.True(t, ok)
	require.Len(t, l.m, 1)
}
