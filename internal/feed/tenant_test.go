package feed_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestEnsureTenantConsumer: the operator's creation of a tenant's feed
// consumer is a pull consumer of the tenant's events alone, idempotent, and
// refuses (leaving it alone) a consumer of that name that a tenant could
// have made for itself under the earlier layout: a push consumer, or one
// with another filter. Before the feed stream exists it says so. It fails
// if EnsureTenantConsumer accepted an existing push consumer as the
// tenant's (the attack package roles now closes would stay open on a
// deployment upgraded in place) or created anything but a pull consumer.
func TestEnsureTenantConsumer(t *testing.T) {
	env := testenv.New(t)
	ctx, l := ctxT(t), env.Layout

	_, err := feed.EnsureTenantConsumer(ctx, env.JS, l, "acme")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	_, err = feed.EnsureTenantConsumer(ctx, env.JS, l, "Acme")
	require.Error(t, err, "an invalid tenant name")

	_, err = streams.EnsureFeed(ctx, env.JS, l)
	require.NoError(t, err)
	created, err := feed.EnsureTenantConsumer(ctx, env.JS, l, "acme")
	require.NoError(t, err)
	require.True(t, created)
	c, err := env.JS.Consumer(ctx, l.FeedStreamName(), streams.TenantFeedConsumer("acme"))
	require.NoError(t, err, "a pull consumer")
	cfg := c.CachedInfo().Config
	require.Empty(t, cfg.DeliverSubject)
	require.Equal(t, l.TenantFeedFilter("acme"), cfg.FilterSubject)
	require.Equal(t, jetstream.AckExplicitPolicy, cfg.AckPolicy)
	created, err = feed.EnsureTenantConsumer(ctx, env.JS, l, "acme")
	require.NoError(t, err)
	require.False(t, created, "the second run finds it")

	// What a tenant could make under the earlier layout: a push consumer
	// of its name (with its own filter), and, standing in for one whose
	// filter is not the tenant's, an operator's consumer of a "t-" name.
	_, err = env.JS.CreatePushConsumer(ctx, l.FeedStreamName(), jetstream.ConsumerConfig{
		Durable: streams.TenantFeedConsumer("globex"), FilterSubject: l.TenantFeedFilter("globex"),
		DeliverSubject: l.Endpoint(streams.EndpointAdmit), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	_, err = feed.EnsureTenantConsumer(ctx, env.JS, l, "globex")
	require.ErrorIs(t, err, feed.ErrTenantConsumerMismatch)
	require.ErrorContains(t, err, "push consumer")
	_, err = env.JS.CreateConsumer(ctx, l.FeedStreamName(), jetstream.ConsumerConfig{
		Durable: streams.TenantFeedConsumer("initech"), FilterSubject: l.FeedFilter(), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	_, err = feed.EnsureTenantConsumer(ctx, env.JS, l, "initech")
	require.ErrorIs(t, err, feed.ErrTenantConsumerMismatch)
	c, err = env.JS.Consumer(ctx, l.FeedStreamName(), streams.TenantFeedConsumer("initech"))
	require.NoError(t, err)
	require.Equal(t, l.FeedFilter(), c.CachedInfo().Config.FilterSubject, "left alone")

	// What the feed role can make before the roles name the tenant: the
	// tenant's filter, pull, but settings that lose its events. Refused,
	// every setting named, left alone; --replace makes the right one.
	squat := streams.TenantFeedConsumer("hooli")
	for _, cfg := range []jetstream.ConsumerConfig{
		{Durable: squat, FilterSubject: l.TenantFeedFilter("hooli"), AckPolicy: jetstream.AckNonePolicy, MaxDeliver: 1, HeadersOnly: true},
		{Durable: squat, FilterSubject: l.TenantFeedFilter("hooli"), AckPolicy: jetstream.AckExplicitPolicy, AckWait: feed.DefaultAckWait, MaxAckPending: 1,
			DeliverPolicy: jetstream.DeliverNewPolicy, MemoryStorage: true, InactiveThreshold: time.Minute},
	} {
		_, err = env.JS.CreateOrUpdateConsumer(ctx, l.FeedStreamName(), cfg)
		if err != nil {
			require.NoError(t, env.JS.DeleteConsumer(ctx, l.FeedStreamName(), squat))
			_, err = env.JS.CreateConsumer(ctx, l.FeedStreamName(), cfg)
		}
		require.NoError(t, err)
		_, err = feed.EnsureTenantConsumer(ctx, env.JS, l, "hooli")
		require.ErrorIs(t, err, feed.ErrTenantConsumerMismatch)
		if cfg.HeadersOnly {
			for _, field := range []string{"ack_policy", "ack_wait", "max_deliver", "max_ack_pending", "headers_only"} {
				require.ErrorContains(t, err, field)
			}
		} else {
			for _, field := range []string{"deliver_policy", "mem_storage", "inactive_threshold"} {
				require.ErrorContains(t, err, field)
			}
			require.NotContains(t, err.Error(), "ack_wait")
		}
		c, err = env.JS.Consumer(ctx, l.FeedStreamName(), squat)
		require.NoError(t, err)
		require.Equal(t, cfg.HeadersOnly, c.CachedInfo().Config.HeadersOnly, "left alone")
	}
	created, replaced, err := feed.ReplaceTenantConsumer(ctx, env.JS, l, "hooli")
	require.NoError(t, err)
	require.True(t, created)
	require.True(t, replaced)
	_, err = feed.EnsureTenantConsumer(ctx, env.JS, l, "hooli")
	require.NoError(t, err, "the replacement is the right one")
}
