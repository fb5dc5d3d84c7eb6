package roles_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// tenantServer starts a real nats-server with `spendgate roles --tenant
// ...`'s layout and a replica under the replica role.
func tenantServer(t *testing.T, tenants ...string) (streams.Layout, *server.Server) {
	t.Helper()
	l := streams.Default()
	account := ""
	if len(tenants) > 0 {
		account = roles.DefaultAccount
	}
	conf, err := roles.Config(l, account, tenants...)
	require.NoError(t, err)
	exportPasswords(t, append(append([]string{}, roles.Names...), tenants...)...)
	s := startConf(t, conf, true, nil)
	startReplica(t, dialRole(t, s, l, roles.Replica), l)
	return l, s
}

// dialTenant connects as tenant's user, in the tenant's own account, with
// the default inbox.
func dialTenant(t *testing.T, s *server.Server, tenant string) *ident {
	t.Helper()
	return dialWith(t, tenant, natsconn.Options{URL: s.ClientURL(), User: tenant, Password: password(tenant)})
}

// tenantAdmin is a client of the operator's admin role acting for tenant
// (spendgate budget put --tenant): its prefix is "spendgate.t.<tenant>.".
func tenantAdmin(t *testing.T, admin *ident, l streams.Layout, tenant string) *client.Client {
	t.Helper()
	c, err := client.New(admin.nc, client.WithPrefix(l.TenantEndpoint(tenant, "")), client.WithTimeout(time.Second), client.WithRetries(1))
	require.NoError(t, err)
	return c
}

func codeOf(err error) events.Code {
	var e *events.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func scopesOf(r events.BudgetListReply) []string {
	var out []string
	for _, b := range r.Budgets {
		out = append(out, string(b.Scope)+"/"+string(b.Period)+"="+b.Limit)
	}
	return out
}

// TestTenants_Isolation runs two tenants on one deployment, on a real
// nats-server with the rendered accounts layout. Each tenant's identity
// lives in its own account and calls the plain subjects; the replica takes
// the tenant from the subject its account's import delivers on. Every
// cross-tenant call is refused with a stable code, each tenant lists only
// its own budgets, the lock attack (one tenant reserving the other's whole
// limit for a day) leaves the victim untouched, and no tenant can
// subscribe to or publish on another tenant's subjects. It fails if the
// replica took the tenant from anything the caller controls, or if a read
// path forgot to filter by tenant.
func TestTenants_Isolation(t *testing.T) {
	t.Parallel()
	l, s := tenantServer(t, "acme", "globex")
	ctx := context.Background()
	admin := dialRole(t, s, l, roles.Admin)
	op := newClient(t, admin, l)
	acmeID, globexID := dialTenant(t, s, "acme"), dialTenant(t, s, "globex")
	acme, globex := newClient(t, acmeID, l), newClient(t, globexID, l)

	// The operator defines each tenant's budget, and one of its own, all
	// under the same scope name.
	for tenant, limit := range map[string]string{"acme": "1", "globex": "5"} {
		_, err := tenantAdmin(t, admin, l, tenant).PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: limit, Unit: "USD"})
		require.NoError(t, err)
	}
	_, err := tenantAdmin(t, admin, l, "acme").PutBudget(ctx, events.BudgetPutRequest{Scope: "team:ads", Period: "day", Limit: "2", Unit: "USD"})
	require.NoError(t, err)
	_, err = op.PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "3", Unit: "USD"})
	require.NoError(t, err)

	// Each lists only its own budgets, named as it names them.
	list, err := acme.ListBudgets(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"team:ads/day=2", "team:search/month=1"}, scopesOf(list))
	list, err = globex.ListBudgets(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"team:search/month=5"}, scopesOf(list))
	list, err = globex.ListBudgets(ctx, "team")
	require.NoError(t, err)
	require.Equal(t, []string{"team:search/month=5"}, scopesOf(list))
	list, err = op.ListBudgets(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"team:search/month=3"}, scopesOf(list), "the untenanted listing holds no tenant's budget")
	_, err = globex.GetBudget(ctx, events.BudgetGetRequest{Scope: "team:ads", Period: "day"})
	require.Equal(t, events.CodeUnknownBudget, codeOf(err), "%v", err)

	// acme admits; the reply names its scope as acme does.
	res, err := acme.Admit(ctx, events.AdmitRequest{RequestID: "r1", Scopes: []string{"team:search"}, Amount: "0.25"})
	require.NoError(t, err)
	require.Equal(t, events.Scope("team:search"), res.Reply().Balances[0].Scope)

	// Cross-tenant settle and release: refused as unknown, nothing moves.
	_, err = globex.Settle(ctx, events.SettleRequest{ReservationID: res.ID(), Actual: "0.25"})
	require.Equal(t, events.CodeUnknownReservation, codeOf(err), "%v", err)
	_, err = globex.Release(ctx, events.ReleaseRequest{ReservationID: res.ID()})
	require.Equal(t, events.CodeUnknownReservation, codeOf(err), "%v", err)
	// Nor can the untenanted deployment's callers close it.
	_, err = op.Release(ctx, events.ReleaseRequest{ReservationID: res.ID()})
	require.Equal(t, events.CodeUnknownReservation, codeOf(err), "%v", err)
	v, err := acme.GetBudget(ctx, events.BudgetGetRequest{Scope: "team:search", Period: "month"})
	require.NoError(t, err)
	require.Equal(t, "0.25", v.Reserved)
	require.EqualValues(t, 1, v.Open)
	// A tenant reads its own limits and where it stands, never another's.
	mine, err := acme.GetTenantLimits(ctx, "")
	require.NoError(t, err)
	require.Equal(t, "acme", mine.Tenant)
	require.Equal(t, 1, mine.Usage.OpenReservations)
	require.Positive(t, mine.HeldTo.MaxOpen)
	_, err = acme.GetTenantLimits(ctx, "globex")
	require.Equal(t, events.CodeInvalidRequest, codeOf(err), "%v", err)

	// The same request id in another tenant is another request: no
	// replay of acme's admission, no idempotency_mismatch.
	g1, err := globex.Admit(ctx, events.AdmitRequest{RequestID: "r1", Scopes: []string{"team:search"}, Amount: "0.5"})
	require.NoError(t, err)
	require.False(t, g1.Reply().Replayed)
	require.NotEqual(t, res.ID(), g1.ID())
	_, err = g1.Release(ctx)
	require.NoError(t, err)

	// The lock attack: globex reserves acme's whole limit for a day. It
	// can only name its own budget (its own limit, 5); acme is untouched.
	lock, err := globex.Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "1", TTL: "24h"})
	require.NoError(t, err)
	require.Equal(t, events.Scope("team:search"), lock.Reply().Balances[0].Scope)
	// A tenant-qualified scope is not a caller's to spell.
	_, err = globex.Admit(ctx, events.AdmitRequest{Scopes: []string{"acme/team:search"}, Amount: "1", TTL: "24h"})
	require.Equal(t, events.CodeInvalidIdentifier, codeOf(err), "%v", err)
	// A scope only acme has is unknown to globex (fail closed).
	_, err = globex.Admit(ctx, events.AdmitRequest{Scopes: []string{"team:ads"}, Amount: "1"})
	var denied *client.DeniedError
	require.ErrorAs(t, err, &denied)
	require.Equal(t, events.ReasonUnknownBudget, denied.Denial.Reason)
	require.Equal(t, events.Scope("team:ads"), denied.Denial.Scope)
	// acme still has 0.75 left, and spends it.
	res2, err := acme.Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "0.75"})
	require.NoError(t, err)
	_, err = res2.Settle(ctx, "0.75")
	require.NoError(t, err)
	_, err = res.Settle(ctx, "0.25")
	require.NoError(t, err)
	v, err = op.GetBudget(ctx, events.BudgetGetRequest{Scope: "team:search", Period: "month"})
	require.NoError(t, err)
	require.Equal(t, "0", v.Reserved, "the untenanted budget of the same name is untouched")
	require.Equal(t, "0", v.Spent)
	v, err = tenantAdmin(t, admin, l, "globex").GetBudget(ctx, events.BudgetGetRequest{Scope: "team:search", Period: "month"})
	require.NoError(t, err)
	require.Equal(t, "1", v.Reserved)

	// The subjects: a tenant publishes only its imports and cannot
	// listen to the replica's subjects of another tenant (or its own).
	obs := dialRole(t, s, l, roles.Replica)
	for _, subj := range []string{l.TenantEndpoint("acme", streams.EndpointAdmit), l.TenantEndpoint("globex", streams.EndpointAdmit)} {
		acmeID.drainErrs()
		sub, msgs := probe(t, acmeID.nc, subj, false)
		require.NoError(t, acmeID.nc.Flush())
		require.NoError(t, obs.nc.Publish(subj, []byte("probe")))
		require.NoError(t, obs.nc.Flush())
		require.False(t, acmeID.outcome(t, msgs, "Subscription", subj), "acme subscribed to %s", subj)
		_ = sub.Unsubscribe()
	}
	for _, subj := range []string{l.TenantEndpoint("globex", streams.EndpointAdmit), l.Endpoint(streams.EndpointBudgetPut), l.KeyPrefix() + "lane.0",
		l.Endpoint(streams.EndpointTenantLimitsPut), l.TenantEndpoint("acme", streams.EndpointTenantLimitsPut), l.KeyPrefix() + streams.TenantLimitsKey("acme")} {
		acmeID.drainErrs()
		require.NoError(t, acmeID.nc.Publish(subj, []byte("{}")))
		require.NoError(t, acmeID.nc.Flush())
		require.False(t, acmeID.outcome(t, nil, "Publish", subj), "acme published to %s", subj)
	}
	// A tenant does not define its budgets: budget.put is not imported.
	_, err = acmeID.nc.Request(l.Endpoint(streams.EndpointBudgetPut), []byte(`{}`), 500*time.Millisecond)
	require.Error(t, err)
	// The operator's calling service cannot act for a tenant either.
	svc := dialRole(t, s, l, roles.Service)
	subj := l.TenantEndpoint("acme", streams.EndpointAdmit)
	require.NoError(t, svc.nc.Publish(subj, []byte("{}")))
	require.NoError(t, svc.nc.Flush())
	require.False(t, svc.outcome(t, nil, "Publish", subj))
	// A forged request-info header changes nothing: the tenant is the
	// subject's.
	msg := nats.NewMsg(l.Endpoint(streams.EndpointBudgetList))
	msg.Header.Set("Nats-Request-Info", `{"acc":"globex"}`)
	msg.Data = []byte(`{}`)
	reply, err := acmeID.nc.RequestMsg(msg, waitBound)
	require.NoError(t, err)
	require.Contains(t, string(reply.Data), `"limit":"1"`)
	require.NotContains(t, string(reply.Data), `"limit":"5"`)

	// The live feed carries the tenant in its subjects: acme's filter
	// holds acme's events only (two budgets, two opens, two settles).
	rjs, err := jetstream.New(obs.nc)
	require.NoError(t, err)
	feedStream, err := rjs.Stream(ctx, l.FeedStreamName())
	require.NoError(t, err)
	deadline := time.Now().Add(waitBound)
	for {
		info, err := feedStream.Info(ctx, jetstream.WithSubjectFilter(l.TenantFeedFilter("acme")))
		require.NoError(t, err)
		var n uint64
		for subj, c := range info.State.Subjects {
			require.Contains(t, subj, ".t.acme.", subj)
			n += c
		}
		if n == 6 {
			break
		}
		require.True(t, time.Now().Before(deadline), "acme's feed has %d events, want 6", n)
		time.Sleep(10 * time.Millisecond)
	}

	// Finance audits the whole ledger: every tenant's events fold.
	fin := dialRole(t, s, l, roles.Finance)
	js, err := jetstream.New(fin.nc)
	require.NoError(t, err)
	rep, err := projector.Check(ctx, js, l)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
}

// TestTenants_Feed: a tenant follows its own live events from its own
// account, through the JetStream API the replicas' account exports to it
// alone (roles.TenantFeedImports): its one durable pull consumer, which
// the operator created (feed.EnsureTenantConsumer, as the feed role), read,
// pulled and acknowledged. Every message is its own. Creating or changing
// a consumer (its own included, with exactly its own filter), deleting
// it, another tenant's consumer, a message get and stream info are refused;
// the create subject is refused to the tenant's user by its permissions,
// not only for want of an import. It fails if the layout let a tenant's
// account create or update any consumer (the earlier layout imported the
// create of its own, with its filter: the "its own consumer" refusal below
// then succeeds), or reach another tenant's consumer.
func TestTenants_Feed(t *testing.T) {
	t.Parallel()
	l, s := tenantServer(t, "acme", "globex")
	ctx := context.Background()
	admin := dialRole(t, s, l, roles.Admin)
	acmeID, globexID := dialTenant(t, s, "acme"), dialTenant(t, s, "globex")
	for _, tenant := range []string{"acme", "globex"} {
		_, err := tenantAdmin(t, admin, l, tenant).PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "5", Unit: "USD"})
		require.NoError(t, err)
	}
	res, err := newClient(t, acmeID, l).Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "1"})
	require.NoError(t, err)
	_, err = res.Settle(ctx, "0.5")
	require.NoError(t, err)
	_, err = newClient(t, globexID, l).Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "2"})
	require.NoError(t, err)

	// The operator creates each tenant's consumer once the replicas' relay
	// has created the feed stream (spendgate feed consumer --tenant), as
	// the admin role.
	fjs := ensureTenantConsumers(t, admin, l, "acme", "globex")
	cctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()

	js, err := jetstream.NewWithAPIPrefix(acmeID.nc, roles.TenantJSPrefix(l))
	require.NoError(t, err)
	// Binding reads the consumer's info.
	cons, err := js.Consumer(cctx, l.FeedStreamName(), streams.TenantFeedConsumer("acme"))
	require.NoError(t, err)
	// acme's three events: its budget, its open, its settle.
	var got []string
	deadline := time.Now().Add(waitBound)
	for len(got) < 3 {
		require.True(t, time.Now().Before(deadline), "acme's feed: %v", got)
		batch, err := cons.Fetch(3-len(got), jetstream.FetchMaxWait(time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			got = append(got, m.Headers().Get(streams.HeaderFeedType))
			require.Contains(t, m.Subject(), ".t.acme.", m.Subject())
			require.NotContains(t, string(m.Data()), "globex")
			require.NoError(t, m.Ack())
		}
	}
	require.ElementsMatch(t, []string{"budget.defined.v2", "reservation.opened.v1", "reservation.settled.v1"}, got)
	_, err = cons.Info(cctx)
	require.NoError(t, err)

	// Everything else of the feed is out of reach: each is refused by
	// the server (no reply within the bound; the wait ends early on the
	// permission violation of the request's publish).
	refused := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		acmeID.refusedRequest(t, what, "Publish", roles.TenantJSPrefix(l)+".", 500*time.Millisecond, f)
	}
	create := func(cfg jetstream.ConsumerConfig) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, l.FeedStreamName(), cfg)
			return err
		}
	}
	refused("its own consumer, as created", create(feed.TenantConsumerConfig(l, "acme")))
	refused("its own consumer, as a push consumer", func(ctx context.Context) error {
		_, err := js.CreateOrUpdatePushConsumer(ctx, l.FeedStreamName(), jetstream.ConsumerConfig{
			Durable: streams.TenantFeedConsumer("acme"), FilterSubject: l.TenantFeedFilter("acme"), DeliverSubject: "_INBOX.acme"})
		return err
	})
	refused("the whole feed", create(jetstream.ConsumerConfig{Durable: streams.TenantFeedConsumer("acme"), FilterSubject: l.FeedFilter()}))
	refused("globex's filter", create(jetstream.ConsumerConfig{Durable: streams.TenantFeedConsumer("acme"), FilterSubject: l.TenantFeedFilter("globex")}))
	refused("an unfiltered consumer", create(jetstream.ConsumerConfig{Durable: streams.TenantFeedConsumer("acme")}))
	refused("an ephemeral consumer", create(jetstream.ConsumerConfig{FilterSubject: l.TenantFeedFilter("acme")}))
	refused("deleting its consumer", func(ctx context.Context) error {
		return js.DeleteConsumer(ctx, l.FeedStreamName(), streams.TenantFeedConsumer("acme"))
	})
	refused("globex's consumer", func(ctx context.Context) error {
		_, err := js.Consumer(ctx, l.FeedStreamName(), streams.TenantFeedConsumer("globex"))
		return err
	})
	refused("stream info", func(ctx context.Context) error {
		_, err := js.Stream(ctx, l.FeedStreamName())
		return err
	})
	refused("a direct get", func(ctx context.Context) error {
		_, err := acmeID.nc.RequestWithContext(ctx, roles.TenantJSPrefix(l)+".DIRECT.GET."+l.FeedStreamName(), []byte(`{"seq":1}`))
		return err
	})
	refused("the ledger", func(ctx context.Context) error {
		_, err := acmeID.nc.RequestWithContext(ctx, roles.TenantJSPrefix(l)+".STREAM.INFO."+l.StreamName(), nil)
		return err
	})

	// The tenant's user may not even publish a create or delete in its
	// own account: the server answers each with a permission violation.
	api := roles.TenantJSPrefix(l) + "."
	c := streams.TenantFeedConsumer("acme")
	for _, subj := range []string{
		api + "CONSUMER.CREATE." + l.FeedStreamName() + "." + c + "." + l.TenantFeedFilter("acme"),
		api + "CONSUMER.CREATE." + l.FeedStreamName() + "." + c,
		api + "CONSUMER.CREATE." + l.FeedStreamName(),
		api + "CONSUMER.DURABLE.CREATE." + l.FeedStreamName() + "." + c,
		api + "CONSUMER.DELETE." + l.FeedStreamName() + "." + c,
	} {
		acmeID.drainErrs()
		require.NoError(t, acmeID.nc.Publish(subj, []byte("{}")))
		require.NoError(t, acmeID.nc.Flush())
		require.False(t, acmeID.outcome(t, nil, "Publish", subj), "acme published to %s", subj)
	}

	// After all of it, acme's consumer is still the operator's: a pull
	// consumer of acme's events.
	ictx, icancel := context.WithTimeout(ctx, waitBound)
	defer icancel()
	info, err := fjs.Consumer(ictx, l.FeedStreamName(), c)
	require.NoError(t, err, "a pull consumer")
	require.Empty(t, info.CachedInfo().Config.DeliverSubject)
	require.Equal(t, l.TenantFeedFilter("acme"), info.CachedInfo().Config.FilterSubject)
}
