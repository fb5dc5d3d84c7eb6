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
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// TestTenants_FeedPushIntoReplicas is a tenant's attack through its feed
// consumer: make t-acme a push consumer delivering into the replicas' own
// account, on the untenanted spendgate.admit in the replicas' queue group,
// with explicit acks and a short ack wait. JetStream checks no permission
// on a push consumer's deliver subject, and the create subject fixes only
// a consumer's name and filter, so every event of acme's would arrive there
// as a request the tenant cannot make itself, and again at every ack wait;
// the replicas' $SRV discovery subjects (answered by the NATS micro
// library, not by spendgate's endpoints) would answer each. The tenant's
// account imports no consumer create any more: the create is refused
// before the operator made the consumer (nothing is created) and after (the
// operator's pull consumer is unchanged). It fails if the tenant's account
// imported CONSUMER.CREATE again: the earlier layout imported the create of
// t-acme with acme's filter, and the server then accepted exactly this
// request (this test asserted so).
func TestTenants_FeedPushIntoReplicas(t *testing.T) {
	t.Parallel()
	l, s := tenantServer(t, "acme")
	ctx := context.Background()
	admin := dialRole(t, s, l, roles.Admin)
	_, err := tenantAdmin(t, admin, l, "acme").PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "5", Unit: "USD"})
	require.NoError(t, err)
	acme := dialTenant(t, s, "acme")
	_, err = newClient(t, acme, l).Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "1"})
	require.NoError(t, err)

	fjs, err := jetstream.New(dialRole(t, s, l, roles.Feed).nc)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	for {
		if st, err := fjs.Stream(cctx, l.FeedStreamName()); err == nil && st.CachedInfo().State.Msgs >= 2 {
			break
		}
		require.NoError(t, cctx.Err(), "acme's events not in the feed")
		time.Sleep(10 * time.Millisecond)
	}

	js, err := jetstream.NewWithAPIPrefix(acme.nc, roles.TenantJSPrefix(l))
	require.NoError(t, err)
	push := func() error {
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := js.CreateOrUpdatePushConsumer(ctx, l.FeedStreamName(), jetstream.ConsumerConfig{
			Durable: streams.TenantFeedConsumer("acme"), FilterSubject: l.TenantFeedFilter("acme"),
			DeliverSubject: l.Endpoint(streams.EndpointAdmit), DeliverGroup: service.QueueGroup,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 50 * time.Millisecond, MaxDeliver: -1,
		})
		return err
	}
	// Before the operator created t-acme: refused, and nothing created.
	ajs, err := jetstream.New(admin.nc)
	require.NoError(t, err)
	require.Error(t, push())
	_, err = ajs.Consumer(cctx, l.FeedStreamName(), streams.TenantFeedConsumer("acme"))
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)

	// After (the operator's admin creates it): refused, and the
	// operator's pull consumer is unchanged.
	created, err := feed.EnsureTenantConsumer(cctx, ajs, l, "acme")
	require.NoError(t, err)
	require.True(t, created)
	require.Error(t, push())
	c, err := ajs.Consumer(cctx, l.FeedStreamName(), streams.TenantFeedConsumer("acme"))
	require.NoError(t, err, "still a pull consumer")
	require.Empty(t, c.CachedInfo().Config.DeliverSubject)
	require.Equal(t, l.TenantFeedFilter("acme"), c.CachedInfo().Config.FilterSubject)
	require.Zero(t, c.CachedInfo().Delivered.Consumer, "delivered to no one")
}

// TestRoles_FeedPushIntoReplicas: the same push, from the identity that may
// still make it. The feed role creates consumers on the feed stream (a
// tenant no longer may, TestTenants_FeedPushIntoReplicas), in the
// replicas' own account, and JetStream checks no permission on the deliver
// subject: a push consumer delivering the feed on spendgate.admit in the
// replicas' queue group, explicit acks, a short ack wait. The replica must
// end each such delivery (+TERM) without serving it. It fails without the
// replica's check (service.fromJetStream): the replica then answers the
// delivery with an error, which JetStream does not take for an ack, so the
// deliveries come back at every ack wait.
func TestRoles_FeedPushIntoReplicas(t *testing.T) {
	t.Parallel()
	l, s := tenantServer(t)
	ctx := context.Background()
	_, err := newClient(t, dialRole(t, s, l, roles.Admin), l).PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "5", Unit: "USD"})
	require.NoError(t, err)
	_, err = newClient(t, dialRole(t, s, l, roles.Service), l).Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "1"})
	require.NoError(t, err)

	fid := dialRole(t, s, l, roles.Feed)
	js, err := jetstream.New(fid.nc)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	for {
		if st, err := js.Stream(cctx, l.FeedStreamName()); err == nil && st.CachedInfo().State.Msgs >= 2 {
			break
		}
		require.NoError(t, cctx.Err(), "the events not in the feed")
		time.Sleep(10 * time.Millisecond)
	}
	// The server accepts it: nothing in the layout can refuse a body.
	const name = "push"
	_, err = js.CreateOrUpdatePushConsumer(cctx, l.FeedStreamName(), jetstream.ConsumerConfig{
		Durable: name, FilterSubject: l.FeedFilter(),
		DeliverSubject: l.Endpoint(streams.EndpointAdmit), DeliverGroup: service.QueueGroup,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 50 * time.Millisecond, MaxDeliver: -1,
	})
	require.NoError(t, err)

	var info struct {
		Delivered struct {
			Consumer uint64 `json:"consumer_seq"`
		} `json:"delivered"`
		AckPending  int `json:"num_ack_pending"`
		Redelivered int `json:"num_redelivered"`
		Pending     int `json:"num_pending"`
	}
	read := func() {
		m, err := fid.nc.Request("$JS.API.CONSUMER.INFO."+l.FeedStreamName()+"."+name, nil, time.Second)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(m.Data, &info))
	}
	// Both events are delivered into the endpoint...
	for read(); info.Delivered.Consumer < 2 || info.Pending > 0; read() {
		require.NoError(t, cctx.Err(), "no delivery: %+v", info)
		time.Sleep(10 * time.Millisecond)
	}
	// ...and the replica ends each one: nothing stays pending, so nothing
	// comes back at the next ack wait (four of them here).
	for read(); info.AckPending > 0; read() {
		require.NoError(t, cctx.Err(), "deliveries left pending, redelivered %d times: %+v", info.Redelivered, info)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // four ack waits: a redelivery would show
	read()
	require.Zero(t, info.AckPending, "%+v", info)
	require.Equal(t, uint64(2), info.Delivered.Consumer, "redelivered: %+v", info)
}

// TestRoles_ReplicaNeedsNoStreamUpdate: the replica role may not update the
// ledger stream's configuration (an update can shorten its history: a
// max_msgs_per_subject of 1 drops every older revision), and a replica
// starting on a stream that already has the layout's configuration does
// not ask to. A second replica starts, and the stream keeps every
// revision. It fails if the role allowed the update (the replica's own
// attempt below would land), or if streams.Ensure updated a stream that
// needs no change (the second replica, refused, would not start).
func TestRoles_ReplicaNeedsNoStreamUpdate(t *testing.T) {
	t.Parallel()
	l, s := tenantServer(t)
	ctx := context.Background()
	admin := newClient(t, dialRole(t, s, l, roles.Admin), l)
	for _, limit := range []string{"5", "6", "7"} {
		_, err := admin.PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: limit, Unit: "USD"})
		require.NoError(t, err)
	}
	startReplica(t, dialRole(t, s, l, roles.Replica), l)

	js, err := jetstream.New(dialRole(t, s, l, roles.Replica).nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, l.StreamName())
	require.NoError(t, err)
	before := st.CachedInfo().State.Msgs
	require.GreaterOrEqual(t, before, uint64(3))
	cfg := st.CachedInfo().Config
	cfg.MaxMsgsPerSubject = 1
	uctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = js.UpdateStream(uctx, cfg)
	require.Error(t, err, "the replica role updated the ledger stream")
	st, err = js.Stream(ctx, l.StreamName())
	require.NoError(t, err)
	require.Equal(t, before, st.CachedInfo().State.Msgs)
}
