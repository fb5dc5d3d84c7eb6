package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// APIKey is an API key of the gateway as the ledger keeps it: the hash of
// its secret, never the secret.
type APIKey struct {
	ID     string
	Hash   string
	Scopes []string
	Tenant string
	Access string
	Name   string
	// Disabled keys are refused.
	Disabled  bool
	CreatedAt time.Time
	// RotatedAt is when the hash last changed; zero if never.
	RotatedAt time.Time
	// Version is the stream sequence of the key's current revision.
	Version uint64
}

// changes names the fields of k that differ from prev: hash, scopes,
// tenant, access, name, disabled, in that order.
func (k APIKey) changes(prev APIKey) []string {
	out := []string{}
	if k.Hash != prev.Hash {
		out = append(out, "hash")
	}
	if !slices.Equal(k.Scopes, prev.Scopes) {
		out = append(out, "scopes")
	}
	if k.Tenant != prev.Tenant {
		out = append(out, "tenant")
	}
	if k.Access != prev.Access {
		out = append(out, "access")
	}
	if k.Name != prev.Name {
		out = append(out, "name")
	}
	if k.Disabled != prev.Disabled {
		out = append(out, "disabled")
	}
	return out
}

// apiKey is the replica's folded state of one API key's key.
type apiKey struct {
	def APIKey
	src events.APIKeyRevision
}

// applyAPIKey folds one API key revision at seq whose payload hashes to
// hash, checking its chain.
func (b *book) applyAPIKey(key string, seq uint64, rev *events.APIKeyRevision, hash string) error {
	if seq <= b.rev(key) {
		return nil
	}
	if err := events.CheckChain(key, seq, rev.Chain, b.valid(key), b.hashes[key]); err != nil {
		return err
	}
	b.setAPIKey(key, seq, rev, hash)
	return nil
}

// setAPIKey makes rev, at seq, the API key's definition.
func (b *book) setAPIKey(key string, seq uint64, rev *events.APIKeyRevision, hash string) {
	if b.apikeys == nil {
		b.apikeys = map[string]*apiKey{}
	}
	k := APIKey{ID: rev.ID, Hash: rev.Hash, Scopes: rev.Scopes, Tenant: rev.Tenant, Access: rev.Access, Name: rev.Name,
		Disabled: rev.Disabled, CreatedAt: rev.CreatedAt, Version: seq}
	if rev.RotatedAt != nil {
		k.RotatedAt = *rev.RotatedAt
	}
	b.apikeys[key] = &apiKey{def: k, src: *rev}
	b.hashes[key] = hash
	delete(b.seen, key)
}

// apiKeyValid is the last folded revision of an API key's key, 0 if none
// (book.valid's answer for the family).
func (b *book) apiKeyValid(key string) uint64 {
	if k := b.apikeys[key]; k != nil {
		return k.def.Version
	}
	return 0
}

// apiKeysExactAt reports whether no API key was folded past seq (part of
// book.exactAt).
func (b *book) apiKeysExactAt(seq uint64) bool {
	for _, k := range b.apikeys {
		if k.def.Version > seq {
			return false
		}
	}
	return true
}

// snapshotAPIKeys returns the API keys as a snapshot lists them: each as
// the revision it was folded from, sorted by key.
func (b *book) snapshotAPIKeys() ([]snapBudget, error) {
	var out []snapBudget
	for key, k := range b.apikeys {
		raw, err := json.Marshal(&k.src)
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot of API key %s: %w", key, err)
		}
		out = append(out, snapBudget{snapKey{key, k.def.Version, b.hashes[key]}, raw})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// loadAPIKeys sets the API keys of a snapshot at seq into b.
func (b *book) loadAPIKeys(keys []snapBudget, seq uint64) error {
	for _, sk := range keys {
		rev, err := events.DecodeAPIKeyRevision(sk.Revision)
		if err != nil {
			return fmt.Errorf("API key %s: %v", sk.Key, err)
		}
		if streams.APIKeyKey(rev.ID) != sk.Key || sk.Rev == 0 || sk.Rev > seq {
			return fmt.Errorf("API key %s: revision of %s at %d", sk.Key, streams.APIKeyKey(rev.ID), sk.Rev)
		}
		b.setAPIKey(sk.Key, sk.Rev, &rev, sk.Hash)
	}
	return nil
}

// APIKey returns key id as this replica has folded it.
func (l *Ledger) APIKey(id string) (APIKey, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	k := l.bk.apikeys[streams.APIKeyKey(id)]
	if k == nil {
		return APIKey{}, false
	}
	return k.def, true
}

// APIKeys returns every API key, sorted by id.
func (l *Ledger) APIKeys() []APIKey {
	l.mu.RLock()
	out := make([]APIKey, 0, len(l.bk.apikeys))
	for _, k := range l.bk.apikeys {
		out = append(out, k.def)
	}
	l.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// APIKeyChange is what DefineAPIKey did.
type APIKeyChange struct {
	// Key is the definition now (its Version the revision).
	Key APIKey
	// Existed is true when the key existed before.
	Existed bool
	// Changed names the changed fields (hash, scopes, tenant, access,
	// name, disabled); empty for a new key and when nothing changed.
	Changed []string
}

// DefineAPIKey changes API key id: change gets the key's current
// definition (and whether it exists) and returns the new one, or an error
// that DefineAPIKey returns as it is (a key that must or must not exist).
// The change is one APIKeyDefined event in one compare-and-set write of
// the key's key, chained to its previous revision; change runs again
// with the newer definition after a lost compare-and-set. A change that
// changes nothing writes nothing. All attempts share one deadline, as in
// DefinePrice.
//
// Errors: change's error; *events.Error with CodeLedgerUnavailable or
// CodeLedgerBusy.
func (l *Ledger) DefineAPIKey(ctx context.Context, id string, change func(cur APIKey, exists bool) (APIKey, error), now time.Time) (APIKeyChange, error) {
	if err := l.live(); err != nil {
		return APIKeyChange{}, err
	}
	ctx, cancel := l.commitContext(ctx)
	defer cancel()
	key := streams.APIKeyKey(id)
	for attempt := 0; attempt < l.opts.maxAttempts; attempt++ {
		if err := l.live(); err != nil {
			return APIKeyChange{}, err
		}
		if ctx.Err() != nil {
			return APIKeyChange{}, &events.Error{Code: events.CodeLedgerUnavailable, Message: "deadline passed writing an API key", Err: ctx.Err()}
		}
		l.mu.RLock()
		// rev names the compare-and-set, valid the chain (see
		// DefineBudget).
		var cur APIKey
		var valid uint64
		var src events.APIKeyRevision
		if k := l.bk.apikeys[key]; k != nil {
			cur, valid, src = k.def, k.def.Version, k.src
		}
		rev := l.bk.rev(key)
		prevHash := l.bk.hashes[key]
		l.mu.RUnlock()
		def, err := change(cur, valid > 0)
		if err != nil {
			return APIKeyChange{}, err
		}
		def.ID = id
		var changed []string
		if valid > 0 {
			if changed = def.changes(cur); len(changed) == 0 {
				latest, err := l.latestRev(ctx, key)
				if err != nil {
					return APIKeyChange{}, err
				}
				if latest == rev {
					return APIKeyChange{Key: cur, Existed: true, Changed: []string{}}, nil
				}
				if err := l.catchUp(ctx, key); err != nil {
					return APIKeyChange{}, err
				}
				continue
			}
		}
		at := now.UTC()
		value := events.APIKeyRevision{Schema: events.SchemaAPIKey, Chain: events.Chain{Prev: valid, PrevHash: prevHash},
			ID: id, Hash: def.Hash, Scopes: def.Scopes, Tenant: def.Tenant, Access: def.Access, Name: def.Name, Disabled: def.Disabled,
			CreatedAt: at, RotatedAt: src.RotatedAt}
		if valid > 0 {
			value.CreatedAt = src.CreatedAt
			if slices.Contains(changed, "hash") {
				value.RotatedAt = &at
			}
		}
		value.Events = events.Events{events.APIKeyDefined{ID: id, Hash: def.Hash, Scopes: def.Scopes, Tenant: def.Tenant,
			Access: def.Access, Name: def.Name, Disabled: def.Disabled, Changed: changed, At: at}}
		data, err := json.Marshal(value)
		if err != nil {
			return APIKeyChange{}, &events.Error{Code: events.CodeInternal, Message: "encoding API key", Err: err}
		}
		seq, err := l.publishOne(ctx, key, rev, data)
		if err == nil {
			l.mu.Lock()
			err = l.bk.applyAPIKey(key, seq, &value, events.HashPayload(data))
			var now APIKey
			if k := l.bk.apikeys[key]; k != nil {
				now = k.def
			}
			l.mu.Unlock()
			if err != nil {
				return APIKeyChange{}, &events.Error{Code: events.CodeInternal, Message: "folding own API key write", Err: err}
			}
			l.ownFolded()
			if changed == nil {
				changed = []string{}
			}
			return APIKeyChange{Key: now, Existed: valid > 0, Changed: changed}, nil
		}
		if !streams.IsConflict(err) && !isTimeout(err) {
			return APIKeyChange{}, &events.Error{Code: events.CodeLedgerUnavailable, Message: "writing an API key", Err: err}
		}
		if err := l.catchUp(ctx, key); err != nil {
			return APIKeyChange{}, err
		}
	}
	return APIKeyChange{}, events.Errorf(events.CodeLedgerBusy, "API key %s: too many concurrent writers", id)
}
