package roles_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/internal/testcert"
	"github.com/spendgate/spendgate/streams"
)

// TestRoles_MutualTLS runs the layout `spendgate roles --tls-cert
// --tls-key --tls-ca` renders on a real nats-server, with certificates made
// by crypto/x509 for this test: the replica, the admin and two tenants each
// log in with their own certificate and nothing else, and serve, define
// and admit as their roles. A tenant's certificate logs in as the tenant,
// and sent with the replica's user name and a password it is refused (the
// certificate is bound to its user: verify_and_map); no certificate, one
// from another CA naming "CN=replica", and a plain connection are refused.
// It fails on main, where the server's tls block was not rendered and a
// client certificate was not bound to its user: acme's certificate with the
// replica's password logged in as the replica.
func TestRoles_MutualTLS(t *testing.T) {
	t.Parallel()
	l := streams.Default()
	dir := t.TempDir()
	ca, other := testcert.NewCA(t, dir, "spendgate"), testcert.NewCA(t, dir, "other")
	scert, skey := ca.Issue(t, dir, "server", false)
	certs := map[string][2]string{}
	for _, u := range []string{roles.Replica, roles.Admin, roles.Service, "acme", "globex"} {
		c, k := ca.Issue(t, dir, u, true)
		certs[u] = [2]string{c, k}
	}
	conf, err := roles.Render(l, roles.Options{Account: roles.DefaultAccount, Tenants: []string{"acme", "globex"},
		TLS: roles.TLS{Cert: scert, Key: skey, CA: ca.File}})
	require.NoError(t, err)
	require.NotContains(t, conf, "password")
	s := startConf(t, conf, true, nil)
	url := s.ClientURL()
	require.True(t, strings.HasPrefix(url, "tls://"), url)
	plain := "nats://" + strings.TrimPrefix(url, "tls://")
	as := func(user string, extra natsconn.Options) *natsconn.Options {
		extra.URL, extra.TLSCA, extra.TLSCert, extra.TLSKey = url, ca.File, certs[user][0], certs[user][1]
		if r, err := roles.ByName(l, user); err == nil {
			extra.InboxPrefix = r.InboxPrefix
		}
		return &extra
	}

	startReplica(t, dialWith(t, roles.Replica, *as(roles.Replica, natsconn.Options{})), l)
	ctx := context.Background()
	admin := dialWith(t, roles.Admin, *as(roles.Admin, natsconn.Options{}))
	for tenant, limit := range map[string]string{"acme": "1", "globex": "5"} {
		_, err := tenantAdmin(t, admin, l, tenant).PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: limit, Unit: "USD"})
		require.NoError(t, err)
	}
	acme := dialWith(t, "acme", *as("acme", natsconn.Options{}))
	_, err = newClient(t, acme, l).Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "0.25"})
	require.NoError(t, err)

	// acme's certificate logs in as acme: acme's budgets, and none of the
	// replica's subjects.
	list, err := newClient(t, acme, l).ListBudgets(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"team:search/month=1"}, scopesOf(list))
	for _, subj := range []string{l.Subject("lane.0"), "$JS.API.STREAM.INFO." + l.StreamName()} {
		acme.drainErrs()
		require.NoError(t, acme.nc.Publish(subj, []byte("x")))
		require.NoError(t, acme.nc.Flush())
		require.False(t, acme.outcome(t, nil, "Publish", subj), "acme's certificate published %s", subj)
	}
	// With the replica's user name and a password it is refused: the
	// certificate names the user, and that user has no password.
	_, err = as("acme", natsconn.Options{User: roles.Replica, Password: password(roles.Replica)}).Connect("acme-as-replica")
	require.ErrorIs(t, err, natsconn.ErrAuthorization)

	// Refused: no certificate, a certificate of another CA that names the
	// replica, a plain connection.
	_, err = (&natsconn.Options{URL: url, TLSCA: ca.File, User: roles.Replica, Password: password(roles.Replica)}).Connect("no-cert")
	require.ErrorIs(t, err, natsconn.ErrTLSClientCertRequired)
	oc, ok := other.Issue(t, t.TempDir(), roles.Replica, true)
	_, err = (&natsconn.Options{URL: url, TLSCA: ca.File, TLSCert: oc, TLSKey: ok}).Connect("foreign-cert")
	require.ErrorIs(t, err, natsconn.ErrTLSClientCertRefused)
	_, err = (&natsconn.Options{URL: plain, User: roles.Replica, Password: password(roles.Replica), MaxReconnects: -1}).Connect("plain")
	require.Error(t, err)
}

// TestRoles_TLS: TLS without client certificates (--tls-cert and --tls-key
// alone): clients log in with their passwords over tls://, and a plain
// connection is refused.
func TestRoles_TLS(t *testing.T) {
	t.Parallel()
	l := streams.Default()
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "spendgate")
	scert, skey := ca.Issue(t, dir, "server", false)
	conf, err := roles.Render(l, roles.Options{TLS: roles.TLS{Cert: scert, Key: skey}})
	require.NoError(t, err)
	exportPasswords(t, roles.Names...)
	s := startConf(t, conf, false, nil)
	url := s.ClientURL()
	require.True(t, strings.HasPrefix(url, "tls://"), url)
	plain := "nats://" + strings.TrimPrefix(url, "tls://")
	r, err := roles.ByName(l, roles.Admin)
	require.NoError(t, err)
	dialWith(t, roles.Admin, natsconn.Options{URL: url, TLSCA: ca.File, User: roles.Admin, Password: password(roles.Admin), InboxPrefix: r.InboxPrefix})
	_, err = (&natsconn.Options{URL: plain, User: roles.Admin, Password: password(roles.Admin), MaxReconnects: -1}).Connect("plain")
	require.Error(t, err)
}
