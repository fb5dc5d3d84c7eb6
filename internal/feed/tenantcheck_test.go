package feed_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestTenantCheck: a replica's check of the tenants' feed consumers. One
// made with the whole feed as its filter before the check starts (what the
// feed login could do on main) is found at start; a push consumer made
// while it runs is found at the next check; each is logged at error level
// with the command that repairs it, and counted; a right consumer and a
// consumer of another name are left alone. The admin's --replace repairs
// both (ReplaceTenantConsumer), after which the check counts none and logs
// that. It fails if the check missed a widened filter or a push consumer,
// or took a non-tenant consumer for a tenant's.
func TestTenantCheck(t *testing.T) {
	env := testenv.New(t)
	ctx, l := ctxT(t), env.Layout
	js := env.JS

	// No feed stream: nothing to check, and no error.
	problems, err := feed.CheckTenantConsumers(ctx, js, l)
	require.NoError(t, err)
	require.Empty(t, problems)

	_, err = streams.EnsureFeed(ctx, js, l)
	require.NoError(t, err)
	_, err = feed.EnsureTenantConsumer(ctx, js, l, "globex")
	require.NoError(t, err)
	_, err = js.CreateOrUpdateConsumer(ctx, l.FeedStreamName(), feed.ConsumerConfig(l, "billing"))
	require.NoError(t, err)
	wide := feed.TenantConsumerConfig(l, "acme")
	wide.FilterSubject = l.FeedFilter()
	_, err = js.CreateOrUpdateConsumer(ctx, l.FeedStreamName(), wide)
	require.NoError(t, err)

	var out testenv.LogBuffer
	check, err := feed.NewTenantCheck(js, l, feed.CheckLogger(slog.New(slog.NewTextHandler(&out, nil))), feed.CheckEvery(50*time.Millisecond))
	require.NoError(t, err)
	_, err = feed.NewTenantCheck(js, l, feed.CheckEvery(0))
	require.Error(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := check.Start(runCtx)
	testenv.WaitFor(t, 10*time.Second, "the widened consumer found at start", func() bool { return check.Bad() == 1 })
	require.EqualValues(t, 1, check.Problems())
	require.Contains(t, out.String(), "level=ERROR")
	require.Contains(t, out.String(), "consumer=t-acme tenant=acme reason=filter")
	require.Contains(t, out.String(), "spendgate feed consumer --tenant acme --replace")

	// A push consumer made while the check runs.
	_, err = js.CreateOrUpdatePushConsumer(ctx, l.FeedStreamName(), jetstream.ConsumerConfig{
		Durable: streams.TenantFeedConsumer("initech"), FilterSubject: l.TenantFeedFilter("initech"),
		DeliverSubject: "elsewhere", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "the push consumer found periodically", func() bool { return check.Bad() == 2 })
	require.EqualValues(t, 2, check.Problems())
	require.Contains(t, out.String(), "consumer=t-initech tenant=initech reason=push")
	// Found again and again, but counted and logged once.
	n := check.Checks()
	testenv.WaitFor(t, 10*time.Second, "two more checks", func() bool { return check.Checks() >= n+2 })
	require.EqualValues(t, 2, check.Problems())
	require.Equal(t, 2, strings.Count(out.String(), "level=ERROR"))

	// The admin repairs both.
	for _, tenant := range []string{"acme", "initech"} {
		created, replaced, err := feed.ReplaceTenantConsumer(ctx, js, l, tenant)
		require.NoError(t, err)
		require.True(t, created)
		require.True(t, replaced)
	}
	testenv.WaitFor(t, 10*time.Second, "none wrong", func() bool { return check.Bad() == 0 })
	require.Contains(t, out.String(), "no longer wrong")
	problems, err = feed.CheckTenantConsumers(ctx, js, l)
	require.NoError(t, err)
	require.Empty(t, problems)
	stop()
	<-done
}
