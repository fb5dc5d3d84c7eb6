package events_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestTenant_Names: a tenant-qualified scope or id is the engine's, never a
// caller's: ParseScope refuses it, ParseStoredScope accepts it only with a
// valid tenant and scope; Local and LocalRequestID undo the qualification,
// and tenant "" changes nothing.
func TestTenant_Names(t *testing.T) {
	for _, bad := range []string{"", "Acme", "9x", "a.b", "a/b", "a*", "x-very-long-tenant-name-beyond-the-bound"} {
		require.Error(t, events.ValidateTenant(bad), bad)
	}
	for _, ok := range []string{"acme", "a", "acme_eu-2"} {
		require.NoError(t, events.ValidateTenant(ok), ok)
	}

	s := events.TenantScope("acme", "team:search")
	require.Equal(t, events.Scope("acme/team:search"), s)
	require.Equal(t, "acme", s.Tenant())
	require.Equal(t, events.Scope("team:search"), s.Local())
	require.Equal(t, events.Scope("team:search"), events.TenantScope("", "team:search"))
	require.Equal(t, "", events.Scope("team:search").Tenant())
	require.Equal(t, events.Scope("team:search"), events.Scope("team:search").Local())

	_, err := events.ParseScope("acme/team:search")
	require.Error(t, err, "a caller cannot spell a tenant's scope")
	got, err := events.ParseStoredScope("acme/team:search")
	require.NoError(t, err)
	require.Equal(t, s, got)
	for _, bad := range []string{"ACME/team:search", "acme/team", "acme/a/team:x", "/team:x", "acme/team:a/b"} {
		_, err := events.ParseStoredScope(bad)
		require.Error(t, err, bad)
	}

	require.Equal(t, "acme/r1", events.TenantRequestID("acme", "r1"))
	require.Equal(t, "r1", events.TenantRequestID("", "r1"))
	require.Equal(t, "r1", events.LocalRequestID("acme/r1"))
	require.Equal(t, "r1", events.LocalRequestID("r1"))

	refs := []events.BalanceRef{{Scope: s, Period: events.PeriodDay, Instance: "2026-11-30"}}
	local := events.LocalBalances(refs)
	require.Equal(t, events.Scope("team:search"), local[0].Scope)
	require.Equal(t, s, refs[0].Scope, "LocalBalances copies")
	require.Nil(t, events.LocalBalances(nil))

	ctx := context.Background()
	require.Equal(t, "", events.TenantFromContext(ctx))
	require.Equal(t, "acme", events.TenantFromContext(events.ContextWithTenant(ctx, "acme")))
}
