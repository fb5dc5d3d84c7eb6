package events_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestAPIKeyDefined_Golden freezes apikey.defined.v1 and its apikey.v1
// revision.
func TestAPIKeyDefined_Golden(t *testing.T) {
	ev := events.APIKeyDefined{ID: "3f9a0c1d2e4b", Hash: events.HashAPIKey("sgk_3f9a0c1d2e4b_00"),
		Scopes: []string{"team:search", "user:u-17"}, Tenant: "acme", Access: events.AccessService, Name: "search backend",
		Disabled: true, Changed: []string{"disabled"}, At: fixedAt}
	got, err := events.EncodeEvent(ev)
	require.NoError(t, err)
	b := golden(t, string(events.TypeAPIKeyDefined)+".json", got)
	back, err := events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(ev), back)

	created := fixedAt.Add(-events.DefaultTTL)
	rev := events.APIKeyRevision{Schema: events.SchemaAPIKey, Chain: events.Chain{Prev: 9, PrevHash: events.HashPayload([]byte("revision 9"))},
		ID: ev.ID, Hash: ev.Hash, Scopes: ev.Scopes, Tenant: ev.Tenant, Access: ev.Access, Name: ev.Name, Disabled: true,
		CreatedAt: created, RotatedAt: &fixedAt, Events: events.Events{ev}}
	got, err = json.Marshal(rev)
	require.NoError(t, err)
	b = golden(t, events.SchemaAPIKey+".json", got)
	backRev, err := events.DecodeAPIKeyRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, backRev)

	_, err = events.DecodeAPIKeyRevision([]byte(`{"schema":"pricing.v1"}`))
	require.Error(t, err)
}

// TestAPIKey_Format: a new key's secret names its id, hashes to 64 hex
// digits, and only the exact format parses.
func TestAPIKey_Format(t *testing.T) {
	id, secret, err := events.NewAPIKey()
	require.NoError(t, err)
	require.Len(t, id, events.APIKeyIDLen)
	require.True(t, strings.HasPrefix(secret, events.APIKeyPrefix+id+"_"), secret)
	got, ok := events.ParseAPIKey(secret)
	require.True(t, ok)
	require.Equal(t, id, got)
	require.NoError(t, events.ValidateKeyHash(events.HashAPIKey(secret)))
	id2, secret2, err := events.NewAPIKey()
	require.NoError(t, err)
	require.NotEqual(t, id, id2)
	require.NotEqual(t, events.HashAPIKey(secret), events.HashAPIKey(secret2))

	for _, bad := range []string{"", "sk-abc", "sgk_", "sgk_abc", "sgk_abc_", "sgk__abc", "sgk_AB_x", "sgk_a.b_x", "Bearer sgk_ab_x"} {
		_, ok := events.ParseAPIKey(bad)
		require.False(t, ok, bad)
	}
	for _, bad := range []string{"", "ABC", "a_b", "a.b", "a*", strings.Repeat("a", events.MaxKeyIDLen+1)} {
		require.Equal(t, events.CodeInvalidIdentifier, events.CodeOf(events.ValidateKeyID(bad)), bad)
	}
	for _, bad := range []string{"", "00", strings.Repeat("G", 64), strings.Repeat("A", 64)} {
		require.Equal(t, events.CodeInvalidRequest, events.CodeOf(events.ValidateKeyHash(bad)), bad)
	}
	require.Error(t, events.ValidateAccess("root"))
	require.NoError(t, events.ValidateAccess(events.AccessAdmin))
}
