package roles_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/roles"
	"github.com/spendgate/spendgate/service"
	"github.com/spendgate/spendgate/streams"
)

// TestTenants_FeedPushIntoReplicas is a tenant's attack through its feed
// consumer. The create subject fixes the consumer's name and filter but
// not the rest of its body, and JetStream checks no permission on a push
// consumer's deliver subject: acme creates t-acme as a push consumer
// delivering into the replicas' own account, on the untenanted
// spendgate.admit in the replicas' queue group, with explicit acks and a
// short ack wait. Every event of acme's would arrive there as a request the
// tenant cannot make itself (its account reaches the replicas only through
// its imports), and, left unacknowledged, again at every ack wait: a flood
// the tenant controls into every replica's in-flight limit. The replica
// must end each such delivery (+TERM) without serving it. It fails without
// the replica's check (service.fromJetStream): the replica then answers the
// delivery with an error, which JetStream does not take for an ack, so
// the deliveries come back at every ack wait.
func TestTenants_FeedPushIntoReplicas(t *testing.T) {
	l, s := tenantServer(t, "acme")
	ctx := context.Background()
	admin := dialRole(t, s, l, roles.Admin)
	_, err := tenantAdmin(t, admin, l, "acme").PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "5", Unit: "USD"})
	require.NoError(t, err)
	acme := dialTenant(t, s, "acme")
	_, err = newClient(t, acme, l).Admit(ctx, events.AdmitRequest{Scopes: []string{"team:search"}, Amount: "1"})
	require.NoError(t, err)

	rjs, err := jetstream.New(dialRole(t, s, l, roles.Replica).nc)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	for {
		if st, err := rjs.Stream(cctx, l.FeedStreamName()); err == nil && st.CachedInfo().State.Msgs >= 2 {
			break
		}
		require.NoError(t, cctx.Err(), "acme's events not in the feed")
		time.Sleep(10 * time.Millisecond)
	}

	js, err := jetstream.NewWithAPIPrefix(acme.nc, roles.TenantJSPrefix(l))
	require.NoError(t, err)
	// The server accepts it: nothing in the layout can refuse a body.
	_, err = js.CreateOrUpdatePushConsumer(cctx, l.FeedStreamName(), jetstream.ConsumerConfig{
		Durable: streams.TenantFeedConsumer("acme"), FilterSubject: l.TenantFeedFilter("acme"),
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
		m, err := acme.nc.Request(roles.TenantJSPrefix(l)+".CONSUMER.INFO."+l.FeedStreamName()+"."+streams.TenantFeedConsumer("acme"), nil, time.Second)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(m.Data, &info))
	}
	// Both of acme's events are delivered into the replicas' account...
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
