package service_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// foldedKey waits until every replica has folded key id's revision
// version: a change of a key takes effect on each replica as it folds it
// (a resolve does not wait for the stream on a key it holds).
func (h *harness) foldedKey(id string, version uint64) {
	h.t.Helper()
	for _, r := range h.replicas {
		testenv.WaitFor(h.t, 10*time.Second, "every replica folded the key's change", func() bool {
			k, ok := r.Ledger.APIKey(id)
			return ok && k.Version >= version
		})
	}
}

// TestAPIKeys_Lifecycle: a key is created with the hash of its secret,
// resolved to its scopes by that hash only, disabled, enabled and rotated
// (the old secret stops working); listings never show a hash; a key made
// through one replica resolves at once through another.
func TestAPIKeys_Lifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	id, secret, err := events.NewAPIKey()
	require.NoError(t, err)
	hash := events.HashAPIKey(secret)

	var created events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: hash,
		Scopes: []string{"team:search", "user:u-17"}, Name: "search"}, &created))
	require.True(t, created.Created)
	require.Equal(t, events.APIKeyPrefix+id+"_", created.Prefix)
	require.Equal(t, []string{"team:search", "user:u-17"}, created.Scopes)
	e := h.call(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: hash, Scopes: []string{"team:x"}}, nil)
	require.Equal(t, events.CodeKeyExists, e.Code)

	// Both replicas answer (queue group): every resolve right after the
	// create succeeds, whichever takes it.
	for range 6 {
		var r events.APIKeyResolveReply
		require.Nil(t, h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: hash}, &r))
		require.Equal(t, []string{"team:search", "user:u-17"}, r.Scopes)
		require.Equal(t, created.Version, r.Version)
	}
	e = h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: events.HashAPIKey(secret + "x")}, nil)
	require.Equal(t, events.CodeUnknownKey, e.Code, "a wrong secret is not told apart from a missing key")
	e = h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: "000000000000", Hash: hash}, nil)
	require.Equal(t, events.CodeUnknownKey, e.Code)

	var d events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyDisable, events.APIKeyIDRequest{ID: id}, &d))
	require.True(t, d.Disabled)
	require.Equal(t, []string{"disabled"}, d.Changed)
	h.foldedKey(id, d.Version)
	e = h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: hash}, nil)
	require.Equal(t, events.CodeKeyDisabled, e.Code)
	var en events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyEnable, events.APIKeyIDRequest{ID: id}, &en))
	require.False(t, en.Disabled)
	require.Equal(t, []string{"disabled"}, en.Changed)
	h.foldedKey(id, en.Version)

	_, secret2, err := events.NewAPIKey()
	require.NoError(t, err)
	secret2 = events.APIKeyPrefix + id + secret2[len(events.APIKeyPrefix)+events.APIKeyIDLen:]
	var rot events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyRotate, events.APIKeyRotateRequest{ID: id, Hash: events.HashAPIKey(secret2)}, &rot))
	require.Equal(t, []string{"hash"}, rot.Changed)
	require.NotNil(t, rot.RotatedAt)
	h.foldedKey(id, rot.Version)
	e = h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: hash}, nil)
	require.Equal(t, events.CodeUnknownKey, e.Code, "the old secret stops working")
	require.Nil(t, h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: events.HashAPIKey(secret2)}, nil))

	var list events.APIKeyListReply
	require.Nil(t, h.call(streams.EndpointAPIKeyList, events.APIKeyListRequest{}, &list))
	require.Len(t, list.Keys, 1)
	var raw json.RawMessage
	require.Nil(t, h.call(streams.EndpointAPIKeyList, []byte(`{}`), &raw))
	require.NotContains(t, string(raw), events.HashAPIKey(secret2), "a listing never shows a hash")
	require.NotContains(t, string(raw), `"hash"`)
	var got events.APIKeyView
	require.Nil(t, h.call(streams.EndpointAPIKeyGet, events.APIKeyIDRequest{ID: id}, &got))
	require.Equal(t, list.Keys[0], got)
}

// TestAPIKeys_Update: apikey.update replaces the fields it is given
// (scopes as a whole list, access, name) and leaves the others, the
// secret included; the new scopes are what the key resolves to on every
// replica once folded; an update that changes nothing writes nothing; bad
// input, an unknown key, or a key left with neither scopes nor access is
// refused and writes nothing. How it can fail: without the endpoint every
// call answers no responder, and a partial update that dropped the fields
// it was not given would resolve to no scopes.
func TestAPIKeys_Update(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	id, secret, err := events.NewAPIKey()
	require.NoError(t, err)
	hash := events.HashAPIKey(secret)
	var created events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: hash,
		Scopes: []string{"team:search"}, Name: "search"}, &created))

	var up events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","scopes":["team:search","key:`+id+`"]}`), &up))
	require.Equal(t, []string{"scopes"}, up.Changed)
	require.Equal(t, []string{"team:search", "key:" + id}, up.Scopes)
	require.Equal(t, "search", up.Name, "a field left out stays")
	h.foldedKey(id, up.Version)
	for range 4 { // either replica
		var r events.APIKeyResolveReply
		require.Nil(t, h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: hash}, &r), "the secret stays")
		require.Equal(t, []string{"team:search", "key:" + id}, r.Scopes)
	}

	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","access":"service","name":"search v2"}`), &up))
	require.Equal(t, []string{"access", "name"}, up.Changed)
	require.Equal(t, events.AccessService, up.Access)
	seq, _ := h.streamState()
	var same events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","name":"search v2"}`), &same))
	require.Empty(t, same.Changed)
	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","scopes":[]}`), &up), "HTTP API access only")
	require.Empty(t, up.Scopes)
	after, _ := h.streamState()
	require.Equal(t, seq+1, after, "the update that changed nothing wrote nothing")

	for body, code := range map[string]events.Code{
		`{"id":"` + id + `"}`:                        events.CodeInvalidRequest,    // nothing to change
		`{"id":"` + id + `","access":""}`:            events.CodeInvalidRequest,    // no scopes and no access left
		`{"id":"` + id + `","scopes":["team*"]}`:     events.CodeInvalidIdentifier, // a bad scope
		`{"id":"` + id + `","scopes":["a:b","a:b"]}`: events.CodeInvalidRequest,
		`{"id":"` + id + `","access":"root"}`:        events.CodeInvalidRequest,
		`{"id":"` + id + `","tenant":"acme"}`:        events.CodeInvalidRequest, // not a field: a key's tenant stays
		`{"id":"` + id + `","end_user":"No Kind"}`:   events.CodeInvalidIdentifier,
		`{"id":"` + id + `","end_user":"user"}`:      events.CodeInvalidRequest, // an end-user scope beside none of its own
		`{"id":"000000000000","name":"x"}`:           events.CodeUnknownKey,
		`{"id":"a.b","name":"x"}`:                    events.CodeInvalidIdentifier,
		`{"id":"` + id + `","scopes":"team:search"}`: events.CodeInvalidRequest,
	} {
		e := h.call(streams.EndpointAPIKeyUpdate, []byte(body), nil)
		require.NotNil(t, e, body)
		require.Equal(t, code, e.Code, "%s: %s", body, e.Message)
	}
	end, _ := h.streamState()
	require.Equal(t, after, end, "bad input wrote nothing")
}

// TestAPIKeys_BadInput: every malformed key request is refused with its
// code and changes nothing.
func TestAPIKeys_BadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	hash := events.HashAPIKey("s")
	for _, c := range []struct {
		endpoint string
		body     string
		code     events.Code
	}{
		{streams.EndpointAPIKeyCreate, `{"id":"AB","hash":"` + hash + `","scopes":["team:a"]}`, events.CodeInvalidIdentifier},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"xyz","scopes":["team:a"]}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team*"]}`, events.CodeInvalidIdentifier},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a","team:a"]}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","access":"root"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","access":"admin","tenant":"Acme"}`, events.CodeInvalidIdentifier},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"secret":"x"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"name":"` + strings.Repeat("n", events.MaxKeyNameLen+1) + `"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"end_user":"key"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["user:a"],"end_user":"user"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"end_user":"User"}`, events.CodeInvalidIdentifier},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"run":"key"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["run:a"],"run":"run"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"run":"Run"}`, events.CodeInvalidIdentifier},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"run":1}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","access":"service","run":"run"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyCreate, `{"id":"ab","hash":"` + hash + `","scopes":["team:a"],"end_user":"user","run":"user"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyRotate, `{"id":"ab","hash":"` + hash + `"}`, events.CodeUnknownKey},
		{streams.EndpointAPIKeyDisable, `{"id":"ab"}`, events.CodeUnknownKey},
		{streams.EndpointAPIKeyResolve, `{"id":"ab","hash":"short"}`, events.CodeInvalidRequest},
		{streams.EndpointAPIKeyGet, `{"id":"a.b"}`, events.CodeInvalidIdentifier},
	} {
		e := h.call(c.endpoint, []byte(c.body), nil)
		require.NotNil(t, e, "%s %s", c.endpoint, c.body)
		require.Equal(t, c.code, e.Code, "%s %s: %s", c.endpoint, c.body, e.Message)
	}
	var list events.APIKeyListReply
	require.Nil(t, h.call(streams.EndpointAPIKeyList, []byte{}, &list))
	require.Empty(t, list.Keys, "nothing was stored")
	seq, _ := h.streamState()
	require.Zero(t, seq, "nothing was written")
}

// TestAPIKeys_KeyedPuts: keyed.budget.put and keyed.pricing.put (what the
// gateway's HTTP API sends, the only puts its login may publish) change a
// budget or a price only for an enabled key with admin access, in the
// key's tenant; a service key, a disabled key, a wrong secret and a made-up
// one are refused with their codes, and nothing changes. How it can fail:
// a keyed put that ran its request without checking the key would let the
// gateway's login alone set any limit (the service key's put below would
// raise org:acme to 1000000).
func TestAPIKeys_KeyedPuts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("org:acme", "month", "10", "USD")
	newKey := func(access, tenant string) string {
		id, secret, err := events.NewAPIKey()
		require.NoError(t, err)
		require.Nil(t, h.call(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(secret),
			Access: access, Tenant: tenant}, nil))
		return secret
	}
	admin, service, disabled, acmeAdmin := newKey(events.AccessAdmin, ""), newKey(events.AccessService, ""), newKey(events.AccessAdmin, ""), newKey(events.AccessAdmin, "acme")
	disabledID, _ := events.ParseAPIKey(disabled)
	require.Nil(t, h.call(streams.EndpointAPIKeyDisable, events.APIKeyIDRequest{ID: disabledID}, nil))
	put := func(endpoint, secret string, req any) *events.Error {
		t.Helper()
		body, err := json.Marshal(req)
		require.NoError(t, err)
		return h.call(endpoint, events.KeyedRequest{Key: secret, Request: body}, nil)
	}
	raise := events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1000000"}
	free := events.PricingPutRequest{Model: "gpt-x", Input: "0", Output: "0"}
	for _, c := range []struct {
		secret string
		code   events.Code
	}{
		{service, events.CodeKeyForbidden},
		{disabled, events.CodeKeyDisabled},
		{admin + "x", events.CodeUnknownKey},
		{"sgk_000000000000_00", events.CodeUnknownKey},
		{"not a key", events.CodeUnknownKey},
	} {
		e := put(streams.EndpointKeyedBudgetPut, c.secret, raise)
		require.NotNil(t, e, c.secret)
		require.Equal(t, c.code, e.Code, "%s: %s", c.secret, e.Message)
		e = put(streams.EndpointKeyedPricingPut, c.secret, free)
		require.NotNil(t, e, c.secret)
		require.Equal(t, c.code, e.Code, "%s: %s", c.secret, e.Message)
	}
	require.Equal(t, "10", h.budget("org:acme", "month").Limit)
	e := h.call(streams.EndpointPricingGet, events.PricingGetRequest{Model: "gpt-x"}, nil)
	require.NotNil(t, e, "no price was set")

	// The admin key: the put runs; a tenant's admin key puts in its tenant.
	require.Nil(t, put(streams.EndpointKeyedBudgetPut, admin, raise))
	require.Equal(t, "1000000", h.budget("org:acme", "month").Limit)
	require.Nil(t, put(streams.EndpointKeyedPricingPut, admin, free))
	require.Nil(t, put(streams.EndpointKeyedBudgetPut, acmeAdmin, events.BudgetPutRequest{Scope: "team:t", Period: "month", Limit: "5", Unit: "USD"}))
	var v events.BudgetView
	e, _, err := h.requestE(h.env.Layout.TenantEndpoint("acme", streams.EndpointBudgetGet), events.BudgetGetRequest{Scope: "team:t", Period: "month"}, &v)
	require.NoError(t, err)
	require.Nil(t, e)
	require.Equal(t, "5", v.Limit)
	e = h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:t", Period: "month"}, nil)
	require.NotNil(t, e, "not in the deployment's own budgets")
	require.Equal(t, events.CodeUnknownBudget, e.Code)
	// A body that is not a keyed request is refused.
	e = h.call(streams.EndpointKeyedBudgetPut, raise, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidRequest, e.Code)
}

// TestAPIKeys_RunKind: a key's run scope kind is stored with the key
// (apikey.create "run"), shown by get, list and resolve, set and cleared
// by apikey.update (changed "run"), and counted against the admit's
// scope limit with the end user's: a key with both kinds names at most
// events.MaxScopes-2 scopes of its own. How it can fail: a replica that
// drops the field resolves the key without its run kind, and the gateway
// then admits its calls against no run's budget; a limit that counts
// only the end user lets a key whose every call names 9 scopes, which
// every admit refuses.
func TestAPIKeys_RunKind(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	id, secret, err := events.NewAPIKey()
	require.NoError(t, err)
	hash := events.HashAPIKey(secret)
	own := make([]string, events.MaxScopes-1)
	for i := range own {
		own[i] = fmt.Sprintf("team:t%d", i)
	}
	e := h.call(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: hash, Scopes: own, EndUser: "user", Run: "run"}, nil)
	require.NotNil(t, e, "7 scopes of its own, an end user's and a run's: 9 in each call")
	require.Equal(t, events.CodeInvalidRequest, e.Code)
	require.Contains(t, e.Message, fmt.Sprintf("at most %d scopes of its own", events.MaxScopes-2))
	var created events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: hash,
		Scopes: own[:events.MaxScopes-2], EndUser: "user", Run: "run"}, &created))
	require.Equal(t, "run", created.Run)
	require.Equal(t, "user", created.EndUser)
	var r events.APIKeyResolveReply
	require.Nil(t, h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: hash}, &r))
	require.Equal(t, "run", r.Run)
	var raw json.RawMessage
	require.Nil(t, h.call(streams.EndpointAPIKeyList, events.APIKeyListRequest{}, &raw))
	require.Contains(t, string(raw), `"end_user":"user","run":"run"`)
	var got events.APIKeyView
	require.Nil(t, h.call(streams.EndpointAPIKeyGet, events.APIKeyIDRequest{ID: id}, &got))
	require.Equal(t, "run", got.Run)

	// A seventh scope of its own fits once the end user's is gone.
	e = h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","scopes":["team:a","team:b","team:c","team:d","team:e","team:f","team:g"]}`), nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidRequest, e.Code)
	var up events.APIKeyPutReply
	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","scopes":["team:a","team:b","team:c","team:d","team:e","team:f","team:g"],"end_user":""}`), &up))
	require.Equal(t, []string{"scopes", "end_user"}, up.Changed)
	require.Equal(t, "run", up.Run, "a field left out stays")

	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","run":"job"}`), &up))
	require.Equal(t, []string{"run"}, up.Changed)
	require.Equal(t, "job", up.Run)
	up = events.APIKeyPutReply{} // a cleared run is left out of the reply
	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","run":""}`), &up))
	require.Equal(t, []string{"run"}, up.Changed)
	require.Empty(t, up.Run)
	h.foldedKey(id, up.Version)
	for range 4 { // either replica
		r = events.APIKeyResolveReply{}
		require.Nil(t, h.call(streams.EndpointAPIKeyResolve, events.APIKeyResolveRequest{ID: id, Hash: hash}, &r))
		require.Empty(t, r.Run, "cleared on every replica")
		require.Equal(t, up.Version, r.Version)
	}
	seq, _ := h.streamState()
	for body, code := range map[string]events.Code{
		`{"id":"` + id + `","run":"No Kind"}`:               events.CodeInvalidIdentifier,
		`{"id":"` + id + `","run":"team"}`:                  events.CodeInvalidRequest, // the kind of its own scopes
		`{"id":"` + id + `","run":"key"}`:                   events.CodeInvalidRequest,
		`{"id":"` + id + `","run":"run","end_user":"user"}`: events.CodeInvalidRequest, // 7 of its own, and 2: 9 scopes
	} {
		e := h.call(streams.EndpointAPIKeyUpdate, []byte(body), nil)
		require.NotNil(t, e, body)
		require.Equal(t, code, e.Code, "%s: %s", body, e.Message)
	}
	after, _ := h.streamState()
	require.Equal(t, seq, after, "refused updates wrote nothing")
	require.Nil(t, h.call(streams.EndpointAPIKeyUpdate, []byte(`{"id":"`+id+`","run":"run"}`), &up), "7 of its own and a run's: 8")
	require.Equal(t, "run", up.Run)
}
