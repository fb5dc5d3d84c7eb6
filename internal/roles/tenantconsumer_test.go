package roles_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/streams"
)

// ensureTenantConsumers creates each tenant's feed consumer as id (the
// operator's admin, spendgate feed consumer --tenant), waiting (bounded)
// for the replicas' relay to create the feed stream, and returns id's
// JetStream handle.
func ensureTenantConsumers(t *testing.T, id *ident, l streams.Layout, tenants ...string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(id.nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	for _, tenant := range tenants {
		for {
			created, err := feed.EnsureTenantConsumer(ctx, js, l, tenant)
			if err == nil {
				require.True(t, created)
				break
			}
			require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
			require.NoError(t, ctx.Err(), "no feed stream")
			time.Sleep(10 * time.Millisecond)
		}
	}
	return js
}

// pullTenantFeed pulls n events from cons, tenant's feed consumer as the
// tenant's client sees it, checking that each is the tenant's and acking
// it, and returns their types.
func pullTenantFeed(t *testing.T, ctx context.Context, cons jetstream.Consumer, tenant string, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		require.NoError(t, ctx.Err(), "%s's feed: %v", tenant, got)
		batch, err := cons.Fetch(n-len(got), jetstream.FetchMaxWait(time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			require.Contains(t, m.Subject(), ".t."+tenant+".")
			got = append(got, m.Headers().Get(streams.HeaderFeedType))
			require.NoError(t, m.Ack())
		}
	}
	return got
}

// TestTenants_FeedConsumersOnlyTheAdminChanges: a known attack and its
// relatives, with every shipped login of the operator's account against
// the tenants' feed consumers on a real nats-server with `spendgate roles
// --tenant acme --tenant globex`. The feed login re-creating t-acme with
// the whole feed as its filter (acme would then read globex's events),
// deleting t-globex, pulling from or acknowledging for t-acme, creating it
// by the subject without a name, pausing it: each is refused by the server
// (a permission violation, not an API error), and so is every other role
// but the admin; afterwards both consumers are the admin's, unchanged, and
// acme still reads only its own events. The admin may create, read and
// delete them, and the feed login still makes its own consumers. It fails
// on main: the feed role could publish CONSUMER.CREATE and CONSUMER.DELETE
// of every consumer on the feed (the first attempt below then succeeds).
func TestTenants_FeedConsumersOnlyTheAdminChanges(t *testing.T) {
	t.Parallel()
	l, s := tenantServer(t, "acme", "globex")
	ctx := context.Background()
	admin := dialRole(t, s, l, roles.Admin)
	for tenant, amount := range map[string]string{"acme": "1", "globex": "2"} {
		_, err := tenantAdmin(t, admin, l, tenant).PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "5", Unit: "USD"})
		require.NoError(t, err)
		_, err = newClient(t, dialTenant(t, s, tenant), l).Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: amount})
		require.NoError(t, err)
	}
	ajs := ensureTenantConsumers(t, admin, l, "acme", "globex")

	f := l.FeedStreamName()
	body := func(name, filter, deliver string) []byte {
		b, err := json.Marshal(map[string]any{"stream_name": f, "config": map[string]any{
			"durable_name": name, "name": name, "filter_subject": filter, "deliver_subject": deliver,
			"deliver_policy": "all", "ack_policy": "explicit"}})
		require.NoError(t, err)
		return b
	}
	api := "$JS.API."
	attacks := []struct {
		what, subject string
		body          []byte
	}{
		{"re-create t-acme with the whole feed", api + "CONSUMER.CREATE." + f + ".t-acme." + l.FeedFilter(), body("t-acme", l.FeedFilter(), "")},
		{"re-create t-acme with globex's filter", api + "CONSUMER.CREATE." + f + ".t-acme." + l.TenantFeedFilter("globex"), body("t-acme", l.TenantFeedFilter("globex"), "")},
		{"re-create t-acme without a filter", api + "CONSUMER.CREATE." + f + ".t-acme", body("t-acme", "", "")},
		{"re-create t-acme by the subject without a name", api + "CONSUMER.CREATE." + f, body("", l.FeedFilter(), "")},
		{"make t-acme a push consumer", api + "CONSUMER.CREATE." + f + ".t-acme." + l.TenantFeedFilter("acme"), body("t-acme", l.TenantFeedFilter("acme"), "x.acme")},
		{"delete t-globex", api + "CONSUMER.DELETE." + f + ".t-globex", nil},
		{"pull from t-acme", api + "CONSUMER.MSG.NEXT." + f + ".t-acme", []byte(`{"batch":1,"expires":100000000}`)},
		{"pause t-acme", api + "CONSUMER.PAUSE." + f + ".t-acme", []byte(`{"pause_until":"2999-01-01T00:00:00Z"}`)},
		{"ack for t-acme", "$JS.ACK." + f + ".t-acme.1.1.1.1.0", nil},
	}
	for _, role := range []string{roles.Feed, roles.Replica, roles.Service, roles.Finance} {
		id := dialRole(t, s, l, role)
		for _, a := range attacks {
			id.drainErrs()
			require.NoError(t, id.nc.PublishRequest(a.subject, id.nc.NewRespInbox(), a.body))
			require.NoError(t, id.nc.Flush())
			require.False(t, id.outcome(t, nil, "Publish", a.subject), "%s could %s", role, a.what)
		}
	}

	// Both consumers are the admin's, unchanged.
	cctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	for _, tenant := range []string{"acme", "globex"} {
		c, err := ajs.Consumer(cctx, f, streams.TenantFeedConsumer(tenant))
		require.NoError(t, err, tenant)
		cfg := c.CachedInfo().Config
		require.Empty(t, cfg.DeliverSubject)
		require.Equal(t, l.TenantFeedFilter(tenant), cfg.FilterSubject)
		require.Zero(t, c.CachedInfo().Delivered.Consumer, "nobody pulled from %s", tenant)
	}

	// acme reads its own events and no other.
	js, err := jetstream.NewWithAPIPrefix(dialTenant(t, s, "acme").nc, roles.TenantJSPrefix(l))
	require.NoError(t, err)
	cons, err := js.Consumer(cctx, f, streams.TenantFeedConsumer("acme"))
	require.NoError(t, err)
	require.Equal(t, []string{"budget.defined.v2", "reservation.opened.v1"}, pullTenantFeed(t, cctx, cons, "acme", 2))

	// The feed login keeps its own consumers.
	fjs, err := jetstream.New(dialRole(t, s, l, roles.Feed).nc)
	require.NoError(t, err)
	_, err = fjs.CreateOrUpdateConsumer(cctx, f, feed.ConsumerConfig(l, "billing"))
	require.NoError(t, err)
	require.NoError(t, fjs.DeleteConsumer(cctx, f, "billing"))

	// The admin repairs and deletes.
	created, replaced, err := feed.ReplaceTenantConsumer(cctx, ajs, l, "globex")
	require.NoError(t, err)
	require.False(t, created)
	require.False(t, replaced, "a right consumer is left as it is")
	require.NoError(t, ajs.DeleteConsumer(cctx, f, streams.TenantFeedConsumer("globex")))
}

// TestTenants_FeedLoginSquatsATenantNotYetNamed: a consumer name cannot be
// denied by prefix, so the feed login may create the feed consumer of a
// tenant the roles do not name yet ("t-initech"), with the tenant's filter
// and settings that lose its events: headers only, no acks, one delivery.
// The server accepts it (this is what the roles cannot close); the
// replica's check, as the replica login, reports it as a settings problem,
// and once the roles name the tenant the admin's ensure refuses it and
// --replace makes the right one (TestEnsureTenantConsumer). It fails if
// the check compared only push and filter: this consumer has both right.
func TestTenants_FeedLoginSquatsATenantNotYetNamed(t *testing.T) {
	t.Parallel()
	l, s := tenantServer(t, "acme", "globex")
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	ensureTenantConsumers(t, dialRole(t, s, l, roles.Admin), l, "acme")

	fjs, err := jetstream.New(dialRole(t, s, l, roles.Feed).nc)
	require.NoError(t, err)
	_, err = fjs.CreateConsumer(ctx, l.FeedStreamName(), jetstream.ConsumerConfig{
		Durable: streams.TenantFeedConsumer("initech"), FilterSubject: l.TenantFeedFilter("initech"),
		AckPolicy: jetstream.AckNonePolicy, MaxDeliver: 1, HeadersOnly: true,
	})
	require.NoError(t, err, "the feed login may create a consumer of a tenant the roles do not name")

	rjs, err := jetstream.New(dialRole(t, s, l, roles.Replica).nc)
	require.NoError(t, err)
	problems, err := feed.CheckTenantConsumers(ctx, rjs, l)
	require.NoError(t, err)
	require.Len(t, problems, 1, "acme's is right; initech's is not")
	p := problems[0]
	require.Equal(t, "t-initech", p.Consumer)
	require.Equal(t, feed.TenantConsumerSettings, p.Reason)
	for _, field := range []string{"ack_policy", "max_deliver", "headers_only"} {
		require.Contains(t, p.Detail, field)
	}
}
