package roles_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/natsconn"
	"github.com/spendgate/spendgate/roles"
	"github.com/spendgate/spendgate/streams"
)

// TestRoles_OperatorMode runs the scenario in operator/JWT mode: an
// operator, a system account and a spendgate account with JetStream,
// preloaded in a memory resolver, and one user per role whose JWT carries
// Role.JWTPermissions; every identity connects with a creds file.
func TestRoles_OperatorMode(t *testing.T) {
	l := streams.Default()
	dir := t.TempDir()
	okp, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, _ := okp.PublicKey()
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	require.NoError(t, err)
	opath := filepath.Join(dir, "operator.jwt")
	require.NoError(t, os.WriteFile(opath, []byte(ojwt), 0o600))

	account := func(js bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		enc, err := ac.Encode(okp)
		require.NoError(t, err)
		return kp, pub, enc
	}
	_, sysPub, sysJWT := account(false)
	akp, apub, ajwt := account(true)

	conf := fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n %s: %q\n %s: %q\n}\n",
		opath, sysPub, sysPub, sysJWT, apub, ajwt)
	s := startConf(t, conf, true, nil)

	ids := map[string]*ident{}
	for _, name := range roles.Names {
		r, err := roles.ByName(l, name)
		require.NoError(t, err)
		ukp, err := nkeys.CreateUser()
		require.NoError(t, err)
		upub, _ := ukp.PublicKey()
		useed, _ := ukp.Seed()
		uc := jwt.NewUserClaims(upub)
		uc.Name = name
		uc.Permissions = r.JWTPermissions()
		ujwt, err := uc.Encode(akp)
		require.NoError(t, err)
		creds, err := jwt.FormatUserConfig(ujwt, useed)
		require.NoError(t, err)
		path := filepath.Join(dir, name+".creds")
		require.NoError(t, os.WriteFile(path, creds, 0o600))
		ids[name] = dialWith(t, name, natsconn.Options{URL: s.ClientURL(), Creds: path, InboxPrefix: r.InboxPrefix})
	}
	startReplica(t, ids[roles.Replica], l)
	scenario(t, l, ids)
	for _, n := range roles.Names {
		select {
		case err := <-ids[n].errs:
			t.Fatalf("%s: unexpected asynchronous error in a permitted run: %v", n, err)
		default:
		}
	}
	refused(t, ids[roles.Service], l.Endpoint(streams.EndpointBudgetPut))
	for _, n := range []string{roles.Service, roles.Admin, roles.Finance} {
		refused(t, ids[n], l.Subject("budget.org.acme.lifetime"))
		refused(t, ids[n], "$JS.API.STREAM.DELETE."+l.StreamName())
	}
	refused(t, ids[roles.Replica], "$JS.API.STREAM.PURGE."+l.StreamName())
}

func TestRole_NSCFlags(t *testing.T) {
	r, err := roles.ByName(streams.Default(), roles.Replica)
	require.NoError(t, err)
	f := r.NSCFlags()
	require.Contains(t, f, "--allow-pub '$KV.spendgate.>'")
	// A deny that no allow can match changes nothing and is left out, as
	// in JWTPermissions: the JWT travels in the 4 KB CONNECT line.
	require.NotContains(t, f, "--deny-pub '$JS.API.STREAM.DELETE.KV_spendgate'")
	require.Empty(t, r.JWTPermissions().Pub.Deny)
	require.NotContains(t, f, "--deny-pub")
	require.Contains(t, f, "--allow-sub 'spendgate.>'")
	require.Contains(t, f, "--allow-pub-response 1")
}
