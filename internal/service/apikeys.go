package service

import (
	"context"
	"crypto/subtle"
	"strings"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// addAPIKeyEndpoints registers the API key endpoints with add (Start's),
// on the deployment's subjects only: a tenant does not manage keys (a key
// names its tenant).
func (s *Service) addAPIKeyEndpoints(add func(name, desc string, h handler, bh batchHandler, single string, tenants bool) error) error {
	for _, e := range []struct {
		name, desc string
		h          handler
	}{
		{streams.EndpointAPIKeyCreate, "store a new gateway API key: the hash of its secret, its scopes", s.apikeyCreate},
		{streams.EndpointAPIKeyRotate, "replace an API key's hash: the old secret stops working", s.apikeyRotate},
		{streams.EndpointAPIKeyUpdate, "change an API key's scopes, HTTP API access, name, end-user or run kind", s.apikeyUpdate},
		{streams.EndpointAPIKeyDisable, "disable an API key", s.apikeyDisable},
		{streams.EndpointAPIKeyEnable, "enable a disabled API key", s.apikeyEnable},
		{streams.EndpointAPIKeyGet, "read an API key (never its hash)", s.apikeyGet},
		{streams.EndpointAPIKeyList, "list every API key (never their hashes)", s.apikeyList},
		{streams.EndpointAPIKeyResolve, "the scopes of the key a presented secret opens", s.apikeyResolve},
	} {
		if err := add(e.name, e.desc, e.h, nil, "", false); err != nil {
			return err
		}
	}
	for _, e := range []struct {
		name, desc string
		h          handler
	}{
		{streams.EndpointKeyedBudgetPut, "budget.put for the holder of an API key with admin access, in the key's tenant", s.keyed(s.budgetPut)},
		{streams.EndpointKeyedPricingPut, "pricing.put for the holder of an API key with admin access, in the key's tenant", s.keyed(s.pricingPut)},
		{streams.EndpointKeyedBudgetRetire, "budget.retire for the holder of an API key with admin access, in the key's tenant", s.keyed(s.budgetRetire)},
	} {
		if err := add(e.name, e.desc, e.h, nil, "", false); err != nil {
			return err
		}
	}
	return nil
}

// keyed runs h (budget.put, pricing.put) on behalf of the API key its
// request presents (events.KeyedRequest), in the key's tenant: only for an
// enabled key of the ledger's key table, as of the ledger's head, whose
// access is admin. The gateway's HTTP API sends these for the keys its
// callers present, so that a gateway's NATS login alone changes no budget
// and no price. Errors: CodeUnknownKey (not a key, or not this key's
// secret), CodeKeyDisabled, CodeKeyForbidden, then h's.
func (s *Service) keyed(h handler) handler {
	return func(ctx context.Context, data []byte) (any, error) {
		var req events.KeyedRequest
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
		if err := refuseTenant(ctx); err != nil {
			return nil, err
		}
		id, ok := events.ParseAPIKey(req.Key)
		if !ok {
			return nil, events.Errorf(events.CodeUnknownKey, "key is not a spendgate key (sgk_...)")
		}
		// As of the ledger's head: a key disabled or rotated through
		// another replica a moment ago must not change a budget here.
		if err := s.l.Sync(ctx); err != nil {
			return nil, err
		}
		k, err := s.openKey(ctx, id, events.HashAPIKey(req.Key))
		if err != nil {
			return nil, err
		}
		if k.Access != events.AccessAdmin {
			return nil, events.Errorf(events.CodeKeyForbidden, "key %s may not change budgets or prices (its access: %q; admin may)", id, k.Access)
		}
		if k.Tenant != "" {
			ctx = events.ContextWithTenant(ctx, k.Tenant)
		}
		return h(ctx, req.Request)
	}
}

// APIKeyView is k on the wire: never its hash.
func APIKeyView(k ledger.APIKey) events.APIKeyView {
	v := events.APIKeyView{ID: k.ID, Prefix: events.APIKeyPrefix + k.ID + "_", Scopes: k.Scopes, Tenant: k.Tenant,
		Access: k.Access, Name: k.Name, EndUser: k.EndUser, Run: k.Run, Disabled: k.Disabled, CreatedAt: k.CreatedAt, Version: k.Version}
	if v.Scopes == nil {
		v.Scopes = []string{}
	}
	if !k.RotatedAt.IsZero() {
		at := k.RotatedAt
		v.RotatedAt = &at
	}
	return v
}

// ParseAPIKeyCreate validates apikey.create. Errors (*events.Error), in
// precedence order: CodeInvalidIdentifier (id, a scope, tenant),
// CodeInvalidRequest (hash; more than events.MaxScopes scopes or one
// twice; access; name), CodeInvalidIdentifier (end_user, run),
// CodeInvalidRequest (a key with neither scopes nor access; fits).
func ParseAPIKeyCreate(req events.APIKeyCreateRequest) (ledger.APIKey, error) {
	if err := events.ValidateKeyID(req.ID); err != nil {
		return ledger.APIKey{}, err
	}
	if err := events.ValidateKeyHash(req.Hash); err != nil {
		return ledger.APIKey{}, err
	}
	if err := validateKeyScopes(req.Scopes); err != nil {
		return ledger.APIKey{}, err
	}
	if req.Tenant != "" {
		if err := events.ValidateTenant(req.Tenant); err != nil {
			return ledger.APIKey{}, err
		}
	}
	if err := events.ValidateAccess(req.Access); err != nil {
		return ledger.APIKey{}, err
	}
	if err := validateKeyName(req.Name); err != nil {
		return ledger.APIKey{}, err
	}
	if err := validateCallKind("end_user", req.EndUser); err != nil {
		return ledger.APIKey{}, err
	}
	if err := validateCallKind("run", req.Run); err != nil {
		return ledger.APIKey{}, err
	}
	k := ledger.APIKey{ID: req.ID, Hash: req.Hash, Scopes: req.Scopes, Tenant: req.Tenant, Access: req.Access, Name: req.Name,
		EndUser: req.EndUser, Run: req.Run}
	return k, fits(k)
}

// validateCallKind checks the scope kind of field (end_user, run): ""
// (none) or a scope kind. Errors: CodeInvalidIdentifier.
func validateCallKind(field, kind string) error {
	if kind == "" {
		return nil
	}
	if _, err := events.ParseScope(kind + ":x"); err != nil {
		example := map[string]string{"end_user": "user", "run": "run"}[field]
		return events.Errorf(events.CodeInvalidIdentifier, "%s %q is not a scope kind like %q", field, kind, example)
	}
	return nil
}

// fits refuses a key that could call nothing, or whose calls would name
// more than events.MaxScopes scopes with its end user's and its run's, or
// whose caller could name, as its end user or run, a scope it must not
// charge.
func fits(k ledger.APIKey) error {
	if err := callsSomething(k); err != nil {
		return err
	}
	// The scopes a call names beside the key's own.
	var with, names []string
	if k.EndUser != "" {
		with, names = append(with, "an end-user scope"), append(names, "end user's")
	}
	if k.Run != "" {
		with, names = append(with, "a run scope"), append(names, "run's")
	}
	if own := events.MaxScopes - len(with); len(k.Scopes) > own {
		return events.Errorf(events.CodeInvalidRequest, "a key with %s names at most %d scopes of its own (a call names its %s too)",
			strings.Join(with, " and "), own, strings.Join(names, " and "))
	}
	for _, c := range []struct{ field, kind, who, like string }{
		{"end_user", k.EndUser, "end user", "user or customer"}, {"run", k.Run, "run", "run or job"},
	} {
		if c.kind == "" {
			continue
		}
		if len(k.Scopes) == 0 {
			return events.Errorf(events.CodeInvalidRequest, "%s %q needs scopes of the key's own: its gateway calls are admitted against both", c.field, c.kind)
		}
		if c.kind == "key" {
			// A caller naming its end user (run) would charge any key's budget.
			return events.Errorf(events.CodeInvalidRequest, "%s \"key\" would let a caller charge another key's budget: name a kind of your %ss, like %s",
				c.field, c.who, c.like)
		}
		for _, sc := range k.Scopes {
			if events.Scope(sc).Kind() == c.kind {
				return events.Errorf(events.CodeInvalidRequest, "%s %q is the kind of the key's own scope %s: a caller could name that scope, or another of its kind, as its %s", c.field, c.kind, sc, c.who)
			}
		}
	}
	if k.EndUser != "" && k.EndUser == k.Run {
		return events.Errorf(events.CodeInvalidRequest, "end_user and run are both %q: a caller could name an end user as its run, and a call whose end user and run are one id would name one scope twice", k.Run)
	}
	return nil
}

// validateKeyScopes checks a key's scopes: at most events.MaxScopes, each
// valid and named once. Errors: CodeInvalidIdentifier, CodeInvalidRequest.
func validateKeyScopes(scopes []string) error {
	if len(scopes) > events.MaxScopes {
		return events.Errorf(events.CodeInvalidRequest, "a key names at most %d scopes", events.MaxScopes)
	}
	seen := map[string]bool{}
	for _, sc := range scopes {
		if _, err := events.ParseScope(sc); err != nil {
			return err
		}
		if seen[sc] {
			return events.Errorf(events.CodeInvalidRequest, "scope %s is named twice", sc)
		}
		seen[sc] = true
	}
	return nil
}

// validateKeyName checks a key's label.
func validateKeyName(name string) error {
	if len(name) > events.MaxKeyNameLen || !utf8.ValidString(name) {
		return events.Errorf(events.CodeInvalidRequest, "name must be UTF-8 of at most %d bytes", events.MaxKeyNameLen)
	}
	return nil
}

// callsSomething refuses a key with neither scopes nor HTTP API access.
func callsSomething(k ledger.APIKey) error {
	if len(k.Scopes) == 0 && k.Access == events.AccessNone {
		return events.Errorf(events.CodeInvalidRequest, "a key with no scopes and no access could call nothing: give --scope (the gateway) or --access (the HTTP API)")
	}
	return nil
}

// refuseTenant refuses an API key request that came on a tenant's subject
// (the endpoints have none; this holds if one is ever added).
func refuseTenant(ctx context.Context) error {
	if events.TenantFromContext(ctx) != "" {
		return events.Errorf(events.CodeInvalidRequest, "API keys are managed by the deployment, not by a tenant")
	}
	return nil
}

func (s *Service) apikeyCreate(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyCreateRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if err := refuseTenant(ctx); err != nil {
		return nil, err
	}
	def, err := ParseAPIKeyCreate(req)
	if err != nil {
		return nil, err
	}
	ch, err := s.l.DefineAPIKey(ctx, def.ID, func(_ ledger.APIKey, exists bool) (ledger.APIKey, error) {
		if exists {
			return ledger.APIKey{}, events.Errorf(events.CodeKeyExists, "key %s exists; make a new id", def.ID)
		}
		return def, nil
	}, s.now())
	if err != nil {
		return nil, err
	}
	return events.APIKeyPutReply{APIKeyView: APIKeyView(ch.Key), Created: !ch.Existed, Changed: ch.Changed}, nil
}

// changeAPIKey applies f to an existing key id (unknown_key if none); an
// error of f's is the reply's, and nothing is written.
func (s *Service) changeAPIKey(ctx context.Context, id string, f func(*ledger.APIKey) error) (any, error) {
	if err := refuseTenant(ctx); err != nil {
		return nil, err
	}
	if err := events.ValidateKeyID(id); err != nil {
		return nil, err
	}
	// A key just created through another replica: fold it first.
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	ch, err := s.l.DefineAPIKey(ctx, id, func(cur ledger.APIKey, exists bool) (ledger.APIKey, error) {
		if !exists {
			return ledger.APIKey{}, events.Errorf(events.CodeUnknownKey, "no key has id %s", id)
		}
		cur.Scopes = append([]string(nil), cur.Scopes...)
		if err := f(&cur); err != nil {
			return ledger.APIKey{}, err
		}
		return cur, nil
	}, s.now())
	if err != nil {
		return nil, err
	}
	return events.APIKeyPutReply{APIKeyView: APIKeyView(ch.Key), Changed: ch.Changed}, nil
}

func (s *Service) apikeyRotate(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyRotateRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if err := events.ValidateKeyHash(req.Hash); err != nil {
		return nil, err
	}
	return s.changeAPIKey(ctx, req.ID, func(k *ledger.APIKey) error { k.Hash = req.Hash; return nil })
}

// apikeyUpdate changes the fields req gives. Errors (*events.Error), in
// precedence order: CodeInvalidRequest (body; no field given),
// CodeInvalidIdentifier (id, a scope), CodeInvalidRequest (more than
// events.MaxScopes scopes or one twice; access; name), CodeUnknownKey,
// CodeInvalidRequest (a key left with neither scopes nor access). A
// change that changes nothing writes nothing (changed is empty).
func (s *Service) apikeyUpdate(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyUpdateRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if req.Scopes == nil && req.Access == nil && req.Name == nil && req.EndUser == nil && req.Run == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "nothing to change: give scopes, access, name, end_user or run")
	}
	if err := events.ValidateKeyID(req.ID); err != nil {
		return nil, err
	}
	if req.Scopes != nil {
		if err := validateKeyScopes(*req.Scopes); err != nil {
			return nil, err
		}
	}
	if req.Access != nil {
		if err := events.ValidateAccess(*req.Access); err != nil {
			return nil, err
		}
	}
	if req.Name != nil {
		if err := validateKeyName(*req.Name); err != nil {
			return nil, err
		}
	}
	if req.EndUser != nil {
		if err := validateCallKind("end_user", *req.EndUser); err != nil {
			return nil, err
		}
	}
	if req.Run != nil {
		if err := validateCallKind("run", *req.Run); err != nil {
			return nil, err
		}
	}
	return s.changeAPIKey(ctx, req.ID, func(k *ledger.APIKey) error {
		if req.Scopes != nil {
			k.Scopes = append([]string{}, *req.Scopes...)
		}
		if req.Access != nil {
			k.Access = *req.Access
		}
		if req.Name != nil {
			k.Name = *req.Name
		}
		if req.EndUser != nil {
			k.EndUser = *req.EndUser
		}
		if req.Run != nil {
			k.Run = *req.Run
		}
		return fits(*k)
	})
}

func (s *Service) apikeyDisable(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyIDRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	return s.changeAPIKey(ctx, req.ID, func(k *ledger.APIKey) error { k.Disabled = true; return nil })
}

func (s *Service) apikeyEnable(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyIDRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	return s.changeAPIKey(ctx, req.ID, func(k *ledger.APIKey) error { k.Disabled = false; return nil })
}

// lookupAPIKey returns key id, folding the stream first if this replica
// does not hold it (created through another replica a moment ago).
func (s *Service) lookupAPIKey(ctx context.Context, id string) (ledger.APIKey, error) {
	if err := events.ValidateKeyID(id); err != nil {
		return ledger.APIKey{}, err
	}
	k, ok := s.l.APIKey(id)
	if !ok {
		if err := s.l.Sync(ctx); err != nil {
			return ledger.APIKey{}, err
		}
		if k, ok = s.l.APIKey(id); !ok {
			return ledger.APIKey{}, events.Errorf(events.CodeUnknownKey, "no key has id %s", id)
		}
	}
	return k, nil
}

func (s *Service) apikeyGet(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyIDRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if err := refuseTenant(ctx); err != nil {
		return nil, err
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	k, err := s.lookupAPIKey(ctx, req.ID)
	if err != nil {
		return nil, err
	}
	return APIKeyView(k), nil
}

func (s *Service) apikeyList(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyListRequest
	if len(data) > 0 {
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
	}
	if err := refuseTenant(ctx); err != nil {
		return nil, err
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	ks := s.l.APIKeys()
	out := events.APIKeyListReply{Keys: make([]events.APIKeyView, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, APIKeyView(k))
	}
	return out, nil
}

// openKey returns key id if hash is its secret's and it is enabled.
// Errors: CodeUnknownKey (no such key, or another hash: not told apart),
// CodeKeyDisabled, lookupAPIKey's.
func (s *Service) openKey(ctx context.Context, id, hash string) (ledger.APIKey, error) {
	k, err := s.lookupAPIKey(ctx, id)
	if err != nil {
		return ledger.APIKey{}, err
	}
	if subtle.ConstantTimeCompare([]byte(k.Hash), []byte(hash)) != 1 {
		return ledger.APIKey{}, events.Errorf(events.CodeUnknownKey, "no key has id %s", id)
	}
	if k.Disabled {
		return ledger.APIKey{}, events.Errorf(events.CodeKeyDisabled, "key %s is disabled", id)
	}
	return k, nil
}

// apikeyResolve answers what the key a presented secret opens may do.
// Errors, in precedence order: CodeInvalidRequest (body), CodeInvalidIdentifier
// (id), CodeInvalidRequest (hash), CodeUnknownKey (no such key, or another
// hash: not told apart), CodeKeyDisabled, CodeLedgerUnavailable.
func (s *Service) apikeyResolve(ctx context.Context, data []byte) (any, error) {
	var req events.APIKeyResolveRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if err := refuseTenant(ctx); err != nil {
		return nil, err
	}
	if err := events.ValidateKeyID(req.ID); err != nil {
		return nil, err
	}
	if err := events.ValidateKeyHash(req.Hash); err != nil {
		return nil, err
	}
	k, err := s.openKey(ctx, req.ID, req.Hash)
	if err != nil {
		return nil, err
	}
	scopes := k.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return events.APIKeyResolveReply{ID: k.ID, Scopes: scopes, Tenant: k.Tenant, Access: k.Access, EndUser: k.EndUser, Run: k.Run, Version: k.Version}, nil
}
