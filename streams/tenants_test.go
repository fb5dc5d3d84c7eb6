package streams_test

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestLayout_Tenants: the tenant endpoints and the tenant's token, and a
// feed subject that carries the tenant so that a tenant's filter matches
// its events and no other tenant's or untenanted event (checked with
// nats-server's own subject matching).
func TestLayout_Tenants(t *testing.T) {
	l := streams.Default()
	require.Equal(t, "spendgate.t.acme.budget.list", l.TenantEndpoint("acme", streams.EndpointBudgetList))
	require.Equal(t, "spendgate.t.*.admit", l.TenantEndpoints(streams.EndpointAdmit))
	require.Equal(t, "spendgate.t.acme.>", l.TenantPrefix("acme"))
	for subject, want := range map[string]string{
		"spendgate.t.acme.admit":       "acme",
		"spendgate.t.acme.budget.list": "acme",
		"spendgate.admit":              "",
		"spendgate.t.acme":             "",
		"spendgate.tx.acme.admit":      "",
	} {
		got, ok := l.TenantOf(subject)
		require.Equal(t, want, got, subject)
		require.Equal(t, want != "", ok, subject)
	}

	typ := events.Type("reservation.opened.v1")
	acme := l.FeedSubject(typ, events.TenantScope("acme", "team:search"))
	require.Equal(t, "spendgate.feed.v1.reservation.opened.v1.t.acme.team.search", acme)
	globex := l.FeedSubject(typ, events.TenantScope("globex", "team:search"))
	plain := l.FeedSubject(typ, "team:search")
	require.Equal(t, "spendgate.feed.v1.reservation.opened.v1.team.search", plain, "untenanted subjects are unchanged")
	// An untenanted scope that looks like a tenant's tokens.
	lookalike := l.FeedSubject(typ, "t:acme")
	f := l.TenantFeedFilter("acme")
	require.True(t, server.SubjectMatchesFilter(acme, f))
	require.False(t, server.SubjectMatchesFilter(globex, f))
	require.False(t, server.SubjectMatchesFilter(plain, f))
	require.False(t, server.SubjectMatchesFilter(lookalike, f))
	require.True(t, server.SubjectMatchesFilter(acme, l.FeedFilter()))
}
