package roles_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/streams"
)

// TestRoles_OperatorMode runs the scenario in operator/JWT mode: an
// operator, a system account and a spendgate account with JetStream,
// preloaded in a memory resolver, and one user per role whose JWT carries
// Role.JWTPermissions; every identity connects with a creds file.
func TestRoles_OperatorMode(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestTenants_OperatorMode runs tenants in operator/JWT mode from what
// `spendgate roles --nsc --tenant acme --tenant globex` prints, applied
// command by command as nsc applies them (nscStore), on a real server: the
// replica and the operator's roles in SPENDGATE, acme and globex in
// accounts of their own that import their subjects with activation tokens.
// The admin defines each tenant's budget; each tenant admits and lists on
// the plain subjects and sees only its own; globex cannot settle acme's
// reservation; acme pulls its events from the feed consumer the operator
// creates, and cannot create one. An account that imports acme's subjects
// without a token (the exports are private) reaches nothing. It fails if
// the rendering leaves out an export, an activation or an import (a call
// finds no responder), if the exports were public (the third account would
// be acme), or if the tenant's user lacked a subject it needs.
func TestTenants_OperatorMode(t *testing.T) {
	t.Parallel()
	l := streams.Default()
	out, err := roles.NSC(l, roles.DefaultAccount, "acme", "globex")
	require.NoError(t, err)
	st := newNSCStore(t, roles.DefaultAccount)
	st.apply(out)
	// mallory imports acme's admit as acme's account does, but holds no
	// activation token for it.
	sg := st.account(roles.DefaultAccount).claims.Subject
	mallory := st.addAccount("mallory")
	mallory.claims.Imports.Add(&jwt.Import{Name: "admit", Type: jwt.Service, Account: sg,
		Subject: jwt.Subject(l.TenantEndpoint("acme", streams.EndpointAdmit)), LocalSubject: jwt.RenamingSubject(l.Endpoint(streams.EndpointAdmit))})
	st.apply("nsc add user --account mallory --name mallory --allow-pub '>' --allow-sub '>'")
	s := startConf(t, st.serverConf(), true, nil)

	ids := map[string]*ident{}
	for _, name := range roles.Names {
		r, err := roles.ByName(l, name)
		require.NoError(t, err)
		ids[name] = dialWith(t, name, natsconn.Options{URL: s.ClientURL(), Creds: st.creds[name], InboxPrefix: r.InboxPrefix})
	}
	for _, name := range []string{"acme", "globex", "mallory"} {
		ids[name] = dialWith(t, name, natsconn.Options{URL: s.ClientURL(), Creds: st.creds[name]})
	}
	startReplica(t, ids[roles.Replica], l)
	ctx := context.Background()
	for tenant, limit := range map[string]string{"acme": "1", "globex": "5"} {
		_, err := tenantAdmin(t, ids[roles.Admin], l, tenant).PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: limit, Unit: "USD"})
		require.NoError(t, err)
	}
	acme, globex := newClient(t, ids["acme"], l), newClient(t, ids["globex"], l)
	res, err := acme.Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "0.25"})
	require.NoError(t, err)
	list, err := acme.ListBudgets(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"team:search/month=1"}, scopesOf(list))
	list, err = globex.ListBudgets(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"team:search/month=5"}, scopesOf(list))
	_, err = globex.Settle(ctx, events.SettleRequest{ReservationID: res.ID(), Actual: "0.25"})
	require.Equal(t, events.CodeUnknownReservation, codeOf(err), "%v", err)
	_, err = res.Settle(ctx, "0.25")
	require.NoError(t, err)

	// The private export: mallory's import is not authorized, so its
	// request finds no responder.
	_, err = ids["mallory"].nc.Request(l.Endpoint(streams.EndpointAdmit), []byte(`{"scopes":["team:search"],"amount":"1"}`), time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders)

	// acme's feed: the operator creates its consumer as the admin role
	// once the relay made the stream; acme pulls its three events.
	fjs, err := jetstream.New(ids[roles.Admin].nc)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	for {
		_, err := feed.EnsureTenantConsumer(cctx, fjs, l, "acme")
		if err == nil {
			break
		}
		require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
		require.NoError(t, cctx.Err(), "no feed stream")
		time.Sleep(10 * time.Millisecond)
	}
	js, err := jetstream.NewWithAPIPrefix(ids["acme"].nc, roles.TenantJSPrefix(l))
	require.NoError(t, err)
	cons, err := js.Consumer(cctx, l.FeedStreamName(), streams.TenantFeedConsumer("acme"))
	require.NoError(t, err)
	require.Equal(t, []string{"budget.defined.v2", "reservation.opened.v1", "reservation.settled.v1"}, pullTenantFeed(t, cctx, cons, "acme", 3))
	subj := roles.TenantJSPrefix(l) + ".CONSUMER.CREATE." + l.FeedStreamName() + "." + streams.TenantFeedConsumer("acme") + "." + l.TenantFeedFilter("acme")
	ids["acme"].drainErrs()
	require.NoError(t, ids["acme"].nc.Publish(subj, []byte("{}")))
	require.NoError(t, ids["acme"].nc.Flush())
	require.False(t, ids["acme"].outcome(t, nil, "Publish", subj), "acme may not create its consumer")
}

// TestNSC_Render: without tenants --nsc prints each role's user (in the
// account, if one is named); with tenants each gets its private exports,
// its account, an activation and an import per subject, and its user. A
// bad account or tenant is refused.
func TestNSC_Render(t *testing.T) {
	t.Parallel()
	l := streams.Default()
	out, err := roles.NSC(l, "")
	require.NoError(t, err)
	require.Contains(t, out, "nsc add user --name replica --allow-pub ")
	require.NotContains(t, out, "--account")
	out, err = roles.NSC(l, "OPS")
	require.NoError(t, err)
	require.Contains(t, out, "nsc add user --account OPS --name admin ")
	_, err = roles.NSC(l, "", "acme")
	require.ErrorIs(t, err, roles.ErrNeedsAccount, "the roles' users and their ledger stay in their account")
	out, err = roles.NSC(l, roles.DefaultAccount, "acme")
	require.NoError(t, err)
	for _, want := range []string{
		"nsc add user --account SPENDGATE --name finance ",
		"nsc add export --account SPENDGATE --service --private --subject 'spendgate.t.acme.>'\n",
		"nsc add export --account SPENDGATE --service --private --response-type Stream --subject '$JS.API.CONSUMER.MSG.NEXT.spendgate_feed.t-acme'\n",
		"nsc add account --name acme\n",
		"nsc generate activation --account SPENDGATE --target-account acme --subject 'spendgate.t.acme.budget.list' --output-file 'acme.spendgate.budget.list.jwt'\n",
		"nsc add import --account acme --token 'acme.spendgate.budget.list.jwt' --local-subject 'spendgate.budget.list'\n",
		"nsc add user --account acme --name acme --allow-pub 'spendgate.admit' ",
	} {
		require.Contains(t, out, want)
	}
	require.Contains(t, out, "nsc edit user --account SPENDGATE --name admin --allow-pub '$JS.API.CONSUMER.INFO.spendgate_feed.t-acme' --allow-pub '$JS.API.CONSUMER.CREATE.spendgate_feed.t-acme.spendgate.feed.v1.*.*.*.t.acme.>' --allow-pub '$JS.API.CONSUMER.DELETE.spendgate_feed.t-acme'\n")
	require.Contains(t, out, "nsc edit user --account SPENDGATE --name feed --deny-pub '$JS.API.CONSUMER.*.spendgate_feed.t-acme' ")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "nsc add user --account acme ") {
			require.NotContains(t, line, "CONSUMER.CREATE", "the tenant's user creates no consumer")
		}
	}
	require.NotContains(t, out, "spendgate.t.acme.budget.put")
	_, err = roles.NSC(l, "bad account")
	require.ErrorIs(t, err, roles.ErrRender)
	_, err = roles.NSC(l, "OPS", "acme", "acme")
	require.ErrorIs(t, err, roles.ErrRender)
}
