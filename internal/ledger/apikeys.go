package ledger

import (
	"context"
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
	// EndUser is the scope kind of the key's end users
	// (events.APIKeyCreateRequest.EndUser), "" for none.
	EndUser string
	// Run is the scope kind of the key's runs
	// (events.APIKeyCreateRequest.Run), "" for none.
	Run string
	// Disabled keys are refused.
	Disabled  bool
	CreatedAt time.Time
	// RotatedAt is when the hash last changed; zero if never.
	RotatedAt time.Time
	// Version is the stream sequence of the key's current revision.
	Version uint64
}

// changes names the fields of k that differ from prev: hash, scopes,
// tenant, access, name, end_user, run, disabled, in that order.
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
	if k.EndUser != prev.EndUser {
		out = append(out, "end_user")
	}
	if k.Run != prev.Run {
		out = append(out, "run")
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

// setAPIKey makes rev, at seq, the API key's definition.
func (b *book) setAPIKey(key string, seq uint64, rev *events.APIKeyRevision) {
	if b.apikeys == nil {
		b.apikeys = map[string]*apiKey{}
	}
	k := APIKey{ID: rev.ID, Hash: rev.Hash, Scopes: rev.Scopes, Tenant: rev.Tenant, Access: rev.Access, Name: rev.Name,
		EndUser: rev.EndUser, Run: rev.Run, Disabled: rev.Disabled, CreatedAt: rev.CreatedAt, Version: seq}
	if rev.RotatedAt != nil {
		k.RotatedAt = *rev.RotatedAt
	}
	b.apikeys[key] = &apiKey{def: k, src: *rev}
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
	// name, end_user, run, disabled); empty for a new key and when
	// nothing changed.
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
	key := streams.APIKeyKey(id)
	var cur APIKey
	var existed bool
	var changed []string
	_, wrote, err := l.define(ctx, "API key "+id, func(b *book) (string, func(events.Chain) any, bool, error) {
		var src events.APIKeyRevision
		cur, existed, changed = APIKey{}, false, nil
		if k := b.apikeys[key]; k != nil {
			cur, existed, src = k.def, true, k.src
		}
		def, err := change(cur, existed)
		if err != nil {
			return "", nil, false, err
		}
		def.ID = id
		if existed {
			if changed = def.changes(cur); len(changed) == 0 {
				return key, nil, true, nil
			}
		}
		at := now.UTC()
		return key, func(ch events.Chain) any {
			value := events.APIKeyRevision{Schema: events.SchemaAPIKey, Chain: ch,
				ID: id, Hash: def.Hash, Scopes: def.Scopes, Tenant: def.Tenant, Access: def.Access, Name: def.Name, EndUser: def.EndUser,
				Run: def.Run, Disabled: def.Disabled, CreatedAt: at, RotatedAt: src.RotatedAt}
			if existed {
				value.CreatedAt = src.CreatedAt
				if slices.Contains(changed, "hash") {
					value.RotatedAt = &at
				}
			}
			value.Events = events.Events{events.APIKeyDefined{ID: id, Hash: def.Hash, Scopes: def.Scopes, Tenant: def.Tenant,
				Access: def.Access, Name: def.Name, EndUser: def.EndUser, Run: def.Run, Disabled: def.Disabled, Changed: changed, At: at}}
			return value
		}, false, nil
	})
	if err != nil {
		return APIKeyChange{}, err
	}
	if !wrote {
		return APIKeyChange{Key: cur, Existed: true, Changed: []string{}}, nil
	}
	l.mu.RLock()
	var after APIKey
	if k := l.bk.apikeys[key]; k != nil {
		after = k.def
	}
	l.mu.RUnlock()
	if changed == nil {
		changed = []string{}
	}
	return APIKeyChange{Key: after, Existed: existed, Changed: changed}, nil
}
