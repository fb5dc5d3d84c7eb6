package roles_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// nscStore applies the nsc commands `spendgate roles --nsc` prints the way
// nsc applies them (nsc's cmd/adduser.go, addexport.go, addaccount.go,
// generateactivation.go, addimport.go), with github.com/nats-io/jwt/v2, the
// library nsc signs with: no nsc binary is needed. A command or flag it
// does not know fails the test, so the rendering cannot drift into
// something this store (and these tests) silently skip.
type nscStore struct {
	t        *testing.T
	dir      string
	operator nkeys.KeyPair
	current  string // nsc's current account: the one a command without --account is for
	accounts map[string]*nscAccount
	files    map[string]string // activation token files, by name
	creds    map[string]string // creds file of each user, by name
	users    map[string]*nscUser
}

// nscUser is a user as nsc keeps it: its key and claims, signed again by
// its account on each edit.
type nscUser struct {
	account *nscAccount
	kp      nkeys.KeyPair
	claims  *jwt.UserClaims
}

// writeCreds signs u's claims with its account and writes its creds file.
func (st *nscStore) writeCreds(u *nscUser) {
	t := st.t
	t.Helper()
	ujwt, err := u.claims.Encode(u.account.kp)
	require.NoError(t, err)
	useed, _ := u.kp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	require.NoError(t, err)
	path := filepath.Join(st.dir, u.claims.Name+".creds")
	require.NoError(t, os.WriteFile(path, creds, 0o600))
	st.creds[u.claims.Name] = path
}

type nscAccount struct {
	kp     nkeys.KeyPair
	claims *jwt.AccountClaims
}

// newNSCStore is an operator with a system account and account, which has
// JetStream and is nsc's current account.
func newNSCStore(t *testing.T, account string) *nscStore {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	require.NoError(t, err)
	st := &nscStore{t: t, dir: t.TempDir(), operator: okp, current: account,
		accounts: map[string]*nscAccount{}, files: map[string]string{}, creds: map[string]string{}, users: map[string]*nscUser{}}
	st.addAccount("SYS")
	st.addAccount(account).claims.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	return st
}

func (st *nscStore) addAccount(name string) *nscAccount {
	st.t.Helper()
	require.NotContains(st.t, st.accounts, name, "nsc add account: %s exists", name)
	kp, err := nkeys.CreateAccount()
	require.NoError(st.t, err)
	pub, _ := kp.PublicKey()
	c := jwt.NewAccountClaims(pub)
	c.Name = name
	a := &nscAccount{kp: kp, claims: c}
	st.accounts[name] = a
	return a
}

func (st *nscStore) account(name string) *nscAccount {
	st.t.Helper()
	if name == "" {
		name = st.current
	}
	a, ok := st.accounts[name]
	require.True(st.t, ok, "no account %q", name)
	return a
}

// shellWords splits a command line into words: bare words and
// single-quoted strings, which is all the rendering uses.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			require.GreaterOrEqual(t, j, 0, "unterminated quote: %s", line)
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
			in, quoted = true, true
		case c == ' ':
			if in {
				words = append(words, w.String())
				w.Reset()
			}
			in, quoted = false, false
		default:
			require.False(t, strings.ContainsRune(`"\$*?;&|<>()`+"`", rune(c)) && !quoted,
				"an unquoted %q the shell would interpret: %s", c, line)
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// nscFlags parses the flags of one command: boolean ones (bools) and ones
// with a value, each possibly repeated; any other flag fails the test.
func nscFlags(t *testing.T, words []string, bools []string, values ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for i := 0; i < len(words); i++ {
		f := words[i]
		switch {
		case contains(bools, f):
			out[f] = append(out[f], "true")
		case contains(values, f):
			require.Less(t, i+1, len(words), "%s needs a value", f)
			out[f] = append(out[f], words[i+1])
			i++
		default:
			t.Fatalf("nsc: unknown flag or argument %q in %q", f, words)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func one(t *testing.T, f map[string][]string, name string) string {
	t.Helper()
	require.Len(t, f[name], 1, "%s, once", name)
	return f[name][0]
}

// apply runs every command of out, in order; comment lines are skipped.
func (st *nscStore) apply(out string) {
	t := st.t
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := shellWords(t, line)
		require.GreaterOrEqual(t, len(w), 3, line)
		require.Equal(t, "nsc", w[0], line)
		switch cmd, args := w[1]+" "+w[2], w[3:]; cmd {
		case "add account":
			st.addAccount(one(t, nscFlags(t, args, nil, "--name"), "--name"))
		case "add user":
			f := nscFlags(t, args, nil, "--account", "--name", "--allow-pub", "--deny-pub", "--allow-sub", "--deny-sub", "--allow-pub-response")
			a := st.account(strings.Join(f["--account"], ""))
			ukp, err := nkeys.CreateUser()
			require.NoError(t, err)
			upub, _ := ukp.PublicKey()
			uc := jwt.NewUserClaims(upub)
			uc.Name = one(t, f, "--name")
			uc.Pub.Allow, uc.Pub.Deny = f["--allow-pub"], f["--deny-pub"]
			uc.Sub.Allow, uc.Sub.Deny = f["--allow-sub"], f["--deny-sub"]
			if r := f["--allow-pub-response"]; len(r) > 0 {
				n, err := strconv.Atoi(r[0])
				require.NoError(t, err)
				uc.Resp = &jwt.ResponsePermission{MaxMsgs: n}
			}
			require.NotContains(t, st.users, uc.Name, "nsc add user: %s exists", uc.Name)
			u := &nscUser{account: a, kp: ukp, claims: uc}
			st.users[uc.Name] = u
			st.writeCreds(u)
		case "edit user":
			// nsc edit user adds the subjects given to the user's
			// lists (nsc's cmd/edituser.go).
			f := nscFlags(t, args, nil, "--account", "--name", "--allow-pub", "--deny-pub", "--allow-sub", "--deny-sub")
			u, ok := st.users[one(t, f, "--name")]
			require.True(t, ok, "nsc edit user: no user %v", f["--name"])
			require.Same(t, st.account(strings.Join(f["--account"], "")), u.account, "nsc edit user: %s is in another account", line)
			u.claims.Pub.Allow.Add(f["--allow-pub"]...)
			u.claims.Pub.Deny.Add(f["--deny-pub"]...)
			u.claims.Sub.Allow.Add(f["--allow-sub"]...)
			u.claims.Sub.Deny.Add(f["--deny-sub"]...)
			st.writeCreds(u)
		case "add export":
			f := nscFlags(t, args, []string{"--service", "--private"}, "--account", "--subject", "--response-type")
			require.NotEmpty(t, f["--service"], "only service exports are rendered: %s", line)
			e := &jwt.Export{Type: jwt.Service, Subject: jwt.Subject(one(t, f, "--subject")), TokenReq: len(f["--private"]) > 0,
				ResponseType: jwt.ResponseTypeSingleton}
			e.Name = string(e.Subject)
			if rt := f["--response-type"]; len(rt) > 0 {
				e.ResponseType = jwt.ResponseType(rt[0])
			}
			a := st.account(one(t, f, "--account"))
			a.claims.Exports.Add(e)
		case "generate activation":
			f := nscFlags(t, args, nil, "--account", "--target-account", "--subject", "--output-file")
			a := st.account(one(t, f, "--account"))
			subject := jwt.Subject(one(t, f, "--subject"))
			var export *jwt.Export
			for _, e := range a.claims.Exports {
				if e.TokenReq && subject.IsContainedIn(e.Subject) {
					export = e
					break
				}
			}
			require.NotNil(t, export, "nsc: a private export for %q was not found", subject)
			target, _ := st.account(one(t, f, "--target-account")).kp.PublicKey()
			act := jwt.NewActivationClaims(target)
			act.Name = string(subject)
			act.ImportSubject = subject
			act.ImportType = export.Type
			tok, err := act.Encode(a.kp)
			require.NoError(t, err)
			st.files[one(t, f, "--output-file")] = tok
		case "add import":
			f := nscFlags(t, args, nil, "--account", "--token", "--local-subject")
			tok, ok := st.files[one(t, f, "--token")]
			require.True(t, ok, "no token file %s", f["--token"])
			act, err := jwt.DecodeActivationClaims(tok)
			require.NoError(t, err)
			a := st.account(one(t, f, "--account"))
			require.Equal(t, act.Subject, a.claims.Subject, "nsc: activation is not intended for this account")
			a.claims.Imports.Add(&jwt.Import{Name: act.Name, Subject: act.ImportSubject, LocalSubject: jwt.RenamingSubject(one(t, f, "--local-subject")),
				Account: act.Issuer, Type: act.ImportType, Token: tok})
		default:
			t.Fatalf("nsc: unknown command %q: %s", cmd, line)
		}
	}
}

// serverConf is the operator-mode server configuration of the store: every
// account preloaded in a memory resolver, each validated as nsc validates
// it before storing it.
func (st *nscStore) serverConf() string {
	t := st.t
	t.Helper()
	ojwt, err := jwt.NewOperatorClaims(mustPub(t, st.operator)).Encode(st.operator)
	require.NoError(t, err)
	opath := filepath.Join(st.dir, "operator.jwt")
	require.NoError(t, os.WriteFile(opath, []byte(ojwt), 0o600))
	names := make([]string, 0, len(st.accounts))
	for n := range st.accounts {
		names = append(names, n)
	}
	sort.Strings(names)
	var preload strings.Builder
	for _, n := range names {
		a := st.accounts[n]
		vr := jwt.CreateValidationResults()
		a.claims.Validate(vr)
		require.Empty(t, vr.Errors(), "account %s", n)
		enc, err := a.claims.Encode(st.operator)
		require.NoError(t, err)
		fmt.Fprintf(&preload, " %s: %q\n", a.claims.Subject, enc)
	}
	return fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n%s}\n",
		opath, st.accounts["SYS"].claims.Subject, preload.String())
}

func mustPub(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return pub
}
