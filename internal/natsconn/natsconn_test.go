package natsconn_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/secret"
)

// roundTrip proves nc works: a request answered by a subscriber on the same
// connection.
func roundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.Subscribe("natsconn.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	msg, err := nc.Request("natsconn.echo", []byte("hi"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "hi", string(msg.Data))
}

func connect(t *testing.T, o natsconn.Options) *nats.Conn {
	t.Helper()
	nc, err := o.Connect("natsconn-test")
	require.NoError(t, err, o.Describe())
	t.Cleanup(nc.Close)
	roundTrip(t, nc)
	return nc
}

func tlsConf(cert, key, ca string, verify bool) string {
	return fmt.Sprintf("tls {\n cert_file: %q\n key_file: %q\n ca_file: %q\n verify: %v\n timeout: 5\n}\n", cert, key, ca, verify)
}

func TestConnect_TLSPrivateCA(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "private")
	other := newCA(t, dir, "other")
	cert, key := ca.Issue(t, dir, "server", false)
	s := startConf(t, tlsConf(cert, key, ca.File, false))
	url := s.ClientURL()

	connect(t, natsconn.Options{URL: url, TLSCA: ca.File})

	// No CA: the system roots do not know the private CA.
	_, err := (&natsconn.Options{URL: url}).Connect("no-ca")
	require.ErrorIs(t, err, natsconn.ErrTLSUnknownAuthority)
	require.Contains(t, err.Error(), "certificate signed by unknown authority: pass --tls-ca")

	// The wrong CA.
	_, err = (&natsconn.Options{URL: url, TLSCA: other.File}).Connect("wrong-ca")
	require.ErrorIs(t, err, natsconn.ErrTLSUnknownAuthority)

}

func TestConnect_TLSNotOffered(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "private")
	s := startConf(t, "")
	_, err := (&natsconn.Options{URL: s.ClientURL(), TLSCA: ca.File}).Connect("tls-wanted")
	require.ErrorIs(t, err, natsconn.ErrTLSRequired)
}

func TestConnect_TLSWrongHostname(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "private")
	cert, key := ca.Issue(t, dir, "server", false, "nats.example")
	s := startConf(t, tlsConf(cert, key, ca.File, false))
	_, err := (&natsconn.Options{URL: s.ClientURL(), TLSCA: ca.File}).Connect("wrong-host")
	require.ErrorIs(t, err, natsconn.ErrTLSHostname)
	require.Contains(t, err.Error(), "connect by a name or IP the certificate lists")
}

func TestConnect_MutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "private")
	other := newCA(t, dir, "other")
	cert, key := ca.Issue(t, dir, "server", false)
	s := startConf(t, tlsConf(cert, key, ca.File, true))
	url := s.ClientURL()

	ccert, ckey := ca.Issue(t, dir, "client", true)
	connect(t, natsconn.Options{URL: url, TLSCA: ca.File, TLSCert: ccert, TLSKey: ckey})

	_, err := (&natsconn.Options{URL: url, TLSCA: ca.File}).Connect("no-client-cert")
	require.ErrorIs(t, err, natsconn.ErrTLSClientCertRequired)
	require.Contains(t, err.Error(), "pass --tls-cert and --tls-key")

	bcert, bkey := other.Issue(t, dir, "stranger", true)
	_, err = (&natsconn.Options{URL: url, TLSCA: ca.File, TLSCert: bcert, TLSKey: bkey}).Connect("foreign-client-cert")
	require.ErrorIs(t, err, natsconn.ErrTLSClientCertRefused)
}

// env returns a getenv over m, for RegisterFlags without touching the
// process environment.
func parseWithEnv(t *testing.T, env map[string]string, args ...string) natsconn.Options {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var o natsconn.Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.RegisterFlags(fs)
	require.NoError(t, fs.Parse(args))
	return o
}

func clearEnv(t *testing.T) {
	for _, k := range []string{natsconn.EnvSpendgateURL, natsconn.EnvURL, natsconn.EnvCreds, natsconn.EnvNKey, natsconn.EnvUser,
		natsconn.EnvPassword, natsconn.EnvToken, natsconn.EnvCA, natsconn.EnvCert, natsconn.EnvKey, natsconn.EnvInboxPrefix} {
		t.Setenv(k, "")
	}
}

func TestConnect_UserPasswordFromEnv(t *testing.T) {
	clearEnv(t)
	s := startConf(t, "authorization { users = [ {user: alice, password: \"s3cret-pw\"} ] }\n")
	o := parseWithEnv(t, map[string]string{natsconn.EnvURL: s.ClientURL(), natsconn.EnvUser: "alice", natsconn.EnvPassword: "s3cret-pw"})
	connect(t, o)
	require.NotContains(t, o.Describe(), "s3cret-pw")

	o.Password = "wrong"
	_, err := o.Connect("bad-password")
	require.ErrorIs(t, err, natsconn.ErrAuthorization)
	require.NotContains(t, err.Error(), "wrong")
}

func TestConnect_Token(t *testing.T) {
	clearEnv(t)
	s := startConf(t, "authorization { token: \"t0ken-value\" }\n")
	o := parseWithEnv(t, map[string]string{natsconn.EnvSpendgateURL: s.ClientURL(), natsconn.EnvToken: "t0ken-value"})
	connect(t, o)
	require.NotContains(t, o.Describe(), "t0ken-value")
	_, err := (&natsconn.Options{URL: s.ClientURL()}).Connect("no-token")
	require.ErrorIs(t, err, natsconn.ErrAuthorization)
}

func TestConnect_NKeySeedFile(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	path := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(path, seed, 0o600))
	s := startConf(t, fmt.Sprintf("authorization { users = [ {nkey: %s} ] }\n", pub))
	connect(t, natsconn.Options{URL: s.ClientURL(), NKey: path})

	other, _ := nkeys.CreateUser()
	oseed, _ := other.Seed()
	opath := filepath.Join(t.TempDir(), "other.nk")
	require.NoError(t, os.WriteFile(opath, oseed, 0o600))
	_, err = (&natsconn.Options{URL: s.ClientURL(), NKey: opath}).Connect("unknown-nkey")
	require.ErrorIs(t, err, natsconn.ErrAuthorization)
}

// TestConnect_CredsOperatorMode runs a server in operator/JWT mode: an
// operator, an account signed by it and preloaded in a memory resolver, and a
// user signed by the account whose creds file the client uses.
func TestConnect_CredsOperatorMode(t *testing.T) {
	dir := t.TempDir()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	require.NoError(t, err)
	opath := filepath.Join(dir, "op.jwt")
	require.NoError(t, os.WriteFile(opath, []byte(ojwt), 0o600))

	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	require.NoError(t, err)

	creds := func(name string, signer nkeys.KeyPair) string {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		useed, _ := ukp.Seed()
		uc := jwt.NewUserClaims(upub)
		uc.IssuerAccount = apub
		ujwt, err := uc.Encode(signer)
		require.NoError(t, err)
		data, err := jwt.FormatUserConfig(ujwt, useed)
		require.NoError(t, err)
		path := filepath.Join(dir, name+".creds")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	s := startConf(t, fmt.Sprintf("operator: %q\nresolver: MEMORY\nresolver_preload: { %s: %q }\n", opath, apub, ajwt))

	o := natsconn.Options{URL: s.ClientURL(), Creds: creds("good", akp)}
	connect(t, o)
	require.Contains(t, o.Describe(), "auth=creds:")

	// A user signed by an account the operator does not know.
	rogue, _ := nkeys.CreateAccount()
	_, err = (&natsconn.Options{URL: s.ClientURL(), Creds: creds("rogue", rogue)}).Connect("rogue")
	require.ErrorIs(t, err, natsconn.ErrAuthorization)
}

func TestConnect_SeveralURLs(t *testing.T) {
	s := startConf(t, "")
	dead := startConf(t, "")
	deadURL := dead.ClientURL()
	dead.Shutdown()
	dead.WaitForShutdown()
	nc := connect(t, natsconn.Options{URL: deadURL + ", " + s.ClientURL()})
	require.Equal(t, s.ClientURL(), nc.ConnectedUrl())

	_, err := (&natsconn.Options{URL: deadURL, MaxReconnects: -1}).Connect("unreachable")
	require.ErrorIs(t, err, natsconn.ErrUnreachable)
}

func TestConnect_InboxPrefix(t *testing.T) {
	s := startConf(t, "authorization { users = [ {user: svc, password: pw, permissions: {publish: [\"natsconn.>\", \"_INBOX_svc.>\"], subscribe: [\"natsconn.>\", \"_INBOX_svc.>\"]}} ] }\n")
	nc := connect(t, natsconn.Options{URL: s.ClientURL(), User: "svc", Password: "pw", InboxPrefix: "_INBOX_svc"})
	require.True(t, strings.HasPrefix(nc.NewInbox(), "_INBOX_svc."))
}

func TestOptions_RegisterFlags(t *testing.T) {
	clearEnv(t)
	env := map[string]string{
		natsconn.EnvSpendgateURL: "nats://a:4222", natsconn.EnvURL: "nats://ignored:4222",
		natsconn.EnvUser: "bob", natsconn.EnvPassword: "hunter2-secret", natsconn.EnvToken: "tok-secret",
		natsconn.EnvCA: "/ca.pem", natsconn.EnvCert: "/c.pem", natsconn.EnvKey: "/k.pem",
		natsconn.EnvCreds: "/u.creds", natsconn.EnvNKey: "/u.nk", natsconn.EnvInboxPrefix: "_INBOX_x",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var o natsconn.Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.RegisterFlags(fs)
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	require.NotContains(t, help.String(), "hunter2-secret")
	require.NotContains(t, help.String(), "tok-secret")
	require.Contains(t, help.String(), "$NATS_PASSWORD")
	require.Equal(t, natsconn.Options{URL: "nats://a:4222", User: "bob", Password: "hunter2-secret", Token: "tok-secret",
		TLSCA: "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem", Creds: "/u.creds", NKey: "/u.nk", InboxPrefix: "_INBOX_x"}, o)

	// Flags override the environment.
	require.NoError(t, fs.Parse([]string{"--nats-url", "nats://b:4222,nats://c:4222", "--password", "flagpw"}))
	require.Equal(t, []string{"nats://b:4222", "nats://c:4222"}, o.URLs())
	require.Equal(t, "flagpw", o.Password)

	// NATS_URL when SPENDGATE_NATS_URL is unset; empty means the default.
	t.Setenv(natsconn.EnvSpendgateURL, "")
	require.Equal(t, "nats://ignored:4222", natsconn.FromEnv().URL)
	require.Equal(t, []string{natsconn.DefaultURL}, (&natsconn.Options{}).URLs())
}

func TestOptions_Validate(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "ca")
	cert, key := ca.Issue(t, dir, "client", true)
	_, key2 := ca.Issue(t, dir, "client2", true)
	junk := filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(junk, []byte("not a pem"), 0o600))
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	akp, _ := nkeys.CreateAccount()
	aseed, _ := akp.Seed()
	accFile := filepath.Join(dir, "acc.nk")
	require.NoError(t, os.WriteFile(accFile, aseed, 0o600))
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name string
		o    natsconn.Options
		want string // "" = valid
	}{
		{"zero", natsconn.Options{}, ""},
		{"urls", natsconn.Options{URL: "nats://a:1, tls://b:2,c:3"}, ""},
		{"bad scheme", natsconn.Options{URL: "http://a:1"}, "scheme \"http\""},
		{"url password redacted", natsconn.Options{URL: "http://u:topsecret@a:1"}, "u:xxxxx@a:1"},
		{"creds and nkey", natsconn.Options{Creds: junk, NKey: seedFile}, "choose one authentication method, got --creds and --nkey"},
		{"user and token", natsconn.Options{User: "u", Password: "p", Token: "t"}, "--user/--password and --token"},
		{"password without user", natsconn.Options{Password: "p"}, "--password (or $NATS_PASSWORD) needs --user"},
		{"user without password", natsconn.Options{User: "u"}, "needs a password"},
		{"creds unreadable", natsconn.Options{Creds: missing}, "--creds: stat " + missing + ": no such file"},
		{"creds junk", natsconn.Options{Creds: junk}, "not a NATS credentials file"},
		{"nkey unreadable", natsconn.Options{NKey: missing}, "--nkey: stat " + missing + ": no such file"},
		{"nkey junk", natsconn.Options{NKey: junk}, "holds no nkey seed"},
		{"nkey account seed", natsconn.Options{NKey: accFile}, "not a user seed"},
		{"nkey ok", natsconn.Options{NKey: seedFile}, ""},
		{"ca unreadable", natsconn.Options{TLSCA: missing}, "--tls-ca: open"},
		{"ca junk", natsconn.Options{TLSCA: junk}, "holds no PEM certificate"},
		{"cert without key", natsconn.Options{TLSCert: cert}, "--tls-cert needs --tls-key"},
		{"key without cert", natsconn.Options{TLSKey: key}, "--tls-key needs --tls-cert"},
		{"cert key mismatch", natsconn.Options{TLSCert: cert, TLSKey: key2}, "private key does not match"},
		{"cert unreadable", natsconn.Options{TLSCert: missing, TLSKey: key}, "--tls-cert: open"},
		{"mtls ok", natsconn.Options{TLSCA: ca.File, TLSCert: cert, TLSKey: key}, ""},
		{"inbox wildcard", natsconn.Options{InboxPrefix: "_INBOX.>"}, "--inbox-prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, natsconn.ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "topsecret")
		})
	}
}

// TestOptions_KeyFiles: a --creds or --nkey file that its group or others
// may read is refused, as ssh refuses such a private key, unless
// InsecureKeyPermissions (--insecure-key-permissions); a seed given where
// the file name belongs (NATS_NKEY=SU...) shows in no error and in no
// Describe. On main both files were read whatever their mode, and the
// seed-as-path error printed the whole seed ("open SU...: no such file").
func TestOptions_KeyFiles(t *testing.T) {
	dir := t.TempDir()
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o644))
	akp, _ := nkeys.CreateAccount()
	ujwt, err := jwt.NewUserClaims(mustPub(kp)).Encode(akp)
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	require.NoError(t, err)
	credsFile := filepath.Join(dir, "user.creds")
	require.NoError(t, os.WriteFile(credsFile, creds, 0o640))

	for _, o := range []natsconn.Options{{NKey: seedFile}, {Creds: credsFile}} {
		err := o.Validate()
		require.ErrorIs(t, err, natsconn.ErrInvalid)
		require.ErrorIs(t, err, secret.ErrTooOpen)
		require.Contains(t, err.Error(), "chmod 600 ")
		require.Contains(t, err.Error(), "--insecure-key-permissions")
		o.InsecureKeyPermissions = true
		require.NoError(t, o.Validate())
	}
	require.NoError(t, os.Chmod(seedFile, 0o600))
	require.NoError(t, (&natsconn.Options{NKey: seedFile}).Validate())

	// The flag sets it; it is off by default.
	var o natsconn.Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.RegisterFlags(fs)
	require.False(t, o.InsecureKeyPermissions)
	require.NoError(t, fs.Parse([]string{"--insecure-key-permissions"}))
	require.True(t, o.InsecureKeyPermissions)

	// The seed itself where its file belongs.
	for _, o := range []natsconn.Options{{NKey: string(seed)}, {Creds: string(seed)}, {NKey: string(seed), InsecureKeyPermissions: true}} {
		err := o.Validate()
		require.ErrorIs(t, err, natsconn.ErrInvalid)
		require.Contains(t, err.Error(), "is an nkey seed, not a file name")
		require.NotContains(t, err.Error(), string(seed[2:]))
		require.NotContains(t, o.Describe(), string(seed[2:]))
		_, err = o.Connect("x")
		require.Error(t, err)
		require.NotContains(t, err.Error(), string(seed[2:]))
	}
}

func mustPub(kp nkeys.KeyPair) string {
	pub, err := kp.PublicKey()
	if err != nil {
		panic(err)
	}
	return pub
}

func TestOptions_Describe(t *testing.T) {
	o := natsconn.Options{URL: "nats://u:pw-secret@a:4222,nats://tok-secret@b:4222", User: "u", Password: "pw2-secret", TLSCA: "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem"}
	d := o.Describe()
	require.Equal(t, "servers=nats://u:xxxxx@a:4222,nats://xxxxx@b:4222 auth=user:u tls=ca:/ca.pem,client-cert:/c.pem", d)
	o = natsconn.Options{Token: "tok-secret"}
	require.Equal(t, "servers="+natsconn.DefaultURL+" auth=token tls=off", o.Describe())
}

// TestConnect_ReconnectsToAnotherServer: a long-running client whose server
// goes away carries on with the next URL of its list.
func TestConnect_ReconnectsToAnotherServer(t *testing.T) {
	a, b := startConf(t, ""), startConf(t, "")
	reconnected := make(chan struct{}, 1)
	o := natsconn.Options{URL: a.ClientURL() + "," + b.ClientURL()}
	nc, err := o.Connect("reconnect", nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}))
	require.NoError(t, err)
	defer nc.Close()
	first, other := a, b
	if nc.ConnectedUrl() == b.ClientURL() {
		first, other = b, a
	}
	first.Shutdown()
	first.WaitForShutdown()
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect to the other server within 10s")
	}
	require.Equal(t, other.ClientURL(), nc.ConnectedUrl())
	roundTrip(t, nc)
}

// recorder is a slog.Handler that keeps the messages it receives, each
// after its level ("WARN nats disconnected err=EOF").
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	r.mu.Lock()
	r.msgs = append(r.msgs, line)
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) waitFor(t *testing.T, substr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		found := slices.ContainsFunc(r.msgs, func(m string) bool { return strings.Contains(m, substr) })
		r.mu.Unlock()
		if found {
			return
		}
		require.True(t, time.Now().Before(deadline), "no log containing %q", substr)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOptions_Log: permission violations and disconnects reach the logger.
func TestOptions_Log(t *testing.T) {
	s := startConf(t, "authorization { users = [ {user: u, password: pw, permissions: {publish: \"ok\"}} ] }\n")
	rec := &recorder{}
	nc, err := (&natsconn.Options{URL: s.ClientURL(), User: "u", Password: "pw", Log: slog.New(rec)}).Connect("log")
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Publish("forbidden", nil))
	require.NoError(t, nc.Flush())
	rec.waitFor(t, `Permissions Violation for Publish to "forbidden"`)
	s.Shutdown()
	rec.waitFor(t, "WARN nats disconnected")
}

// A connection the program closes (Close or Drain, as serve does when it
// stops) logs nothing at WARN or above: in an earlier build every clean
// stop of serve --nats-url ended on "WARN nats disconnected err=<nil>".
func TestOptions_LogCleanClose(t *testing.T) {
	s := startConf(t, "")
	for _, how := range []string{"close", "drain"} {
		t.Run(how, func(t *testing.T) {
			rec := &recorder{}
			closed := make(chan struct{})
			nc, err := (&natsconn.Options{URL: s.ClientURL(), Log: slog.New(rec)}).Connect("clean-"+how,
				nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
			require.NoError(t, err)
			roundTrip(t, nc)
			if how == "close" {
				nc.Close()
			} else {
				require.NoError(t, nc.Drain())
			}
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not close within 10s")
			}
			// The client runs its callbacks in order, one at a time: the
			// disconnect callback has run before the closed one.
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, m := range rec.msgs {
				require.False(t, strings.HasPrefix(m, "WARN") || strings.HasPrefix(m, "ERROR"), "a clean close logged %q", m)
			}
			require.Contains(t, rec.msgs, "DEBUG nats connection closed")
		})
	}
}
