package feed

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TenantConsumerConfig is tenant's one consumer of the feed,
// streams.TenantFeedConsumer(tenant) ("t-acme"): ConsumerConfig filtered to
// the tenant's events (streams.Layout.TenantFeedFilter), a pull consumer
// (no deliver subject).
//
// The operator's admin creates it (EnsureTenantConsumer; spendgate feed
// consumer --tenant), never the tenant nor the feed role: JetStream checks
// no permission on a push consumer's deliver subject, so a tenant that
// could create its consumer could make it deliver into the replicas'
// account, and a feed client that could would widen its filter to every
// tenant's events. The tenant's account may only read its info, pull from
// it and acknowledge (package roles); replicas check it (TenantCheck).
func TenantConsumerConfig(l streams.Layout, tenant string) jetstream.ConsumerConfig {
	c := ConsumerConfig(l, streams.TenantFeedConsumer(tenant), l.TenantFeedFilter(tenant))
	c.Description = "spendgate feed.v1 consumer of tenant " + tenant
	return c
}

// ErrTenantConsumerMismatch: a consumer of the tenant's name exists on the
// feed stream but is not a pull consumer of exactly the tenant's filter (a
// push consumer a tenant made for itself under an earlier layout, or an
// operator's consumer of a "t-" name). EnsureTenantConsumer leaves it
// alone; delete it (nats consumer rm <bucket>_feed t-<tenant>) and ensure
// again.
var ErrTenantConsumerMismatch = errors.New("feed: the tenant's consumer name is taken by another kind of consumer")

// EnsureTenantConsumer creates tenant's feed consumer (TenantConsumerConfig)
// on the feed stream of l, and reports whether it created it. A pull
// consumer of that name with exactly the tenant's filter is left as it is,
// so the tenant keeps its place (and whatever it configured for itself when
// it could still create it).
//
// Errors, in this order: events.ValidateTenant's for a bad tenant name;
// jetstream.ErrStreamNotFound (wrapped) if the feed stream does not exist
// yet (replicas create it when they start with serve --feed);
// ErrTenantConsumerMismatch; the server's or the connection's otherwise.
func EnsureTenantConsumer(ctx context.Context, js jetstream.JetStream, l streams.Layout, tenant string) (created bool, err error) {
	if err := events.ValidateTenant(tenant); err != nil {
		return false, err
	}
	cfg := TenantConsumerConfig(l, tenant)
	stream := l.FeedStreamName()
	for range 2 {
		c, err := js.Consumer(ctx, stream, cfg.Durable)
		switch {
		case err == nil:
			return false, checkTenantConsumer(c.CachedInfo().Config, cfg)
		case errors.Is(err, jetstream.ErrNotPullConsumer):
			return false, fmt.Errorf("%w: %s on %s is a push consumer", ErrTenantConsumerMismatch, cfg.Durable, stream)
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return false, fmt.Errorf("feed: stream %s: %w (replicas create it when they start with --feed)", stream, err)
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return false, fmt.Errorf("feed: consumer %s on %s: %w", cfg.Durable, stream, err)
		}
		_, err = js.CreateConsumer(ctx, stream, cfg)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return false, fmt.Errorf("feed: stream %s: %w (replicas create it when they start with --feed)", stream, err)
		case !errors.Is(err, jetstream.ErrConsumerExists):
			return false, fmt.Errorf("feed: create consumer %s on %s: %w", cfg.Durable, stream, err)
		}
		// Someone else created it between the read and the create:
		// read it again.
	}
	return false, fmt.Errorf("feed: consumer %s on %s keeps changing", cfg.Durable, stream)
}

// ReplaceTenantConsumer is EnsureTenantConsumer, but a consumer of the
// tenant's name that is not a pull consumer of exactly the tenant's filter
// (ErrTenantConsumerMismatch: one a tenant or the feed role made under an
// earlier layout, or one TenantCheck reports) is deleted first and made
// again; replaced reports whether it was. The tenant then reads its feed
// from the start of what the feed keeps.
//
// Errors: EnsureTenantConsumer's, and the server's for the delete.
func ReplaceTenantConsumer(ctx context.Context, js jetstream.JetStream, l streams.Layout, tenant string) (created, replaced bool, err error) {
	created, err = EnsureTenantConsumer(ctx, js, l, tenant)
	if !errors.Is(err, ErrTenantConsumerMismatch) {
		return created, false, err
	}
	name := streams.TenantFeedConsumer(tenant)
	if err := js.DeleteConsumer(ctx, l.FeedStreamName(), name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, false, fmt.Errorf("feed: delete consumer %s on %s: %w", name, l.FeedStreamName(), err)
	}
	created, err = EnsureTenantConsumer(ctx, js, l, tenant)
	return created, err == nil, err
}

// checkTenantConsumer says whether got, an existing consumer of want's
// name, is a pull consumer of want's filter alone.
func checkTenantConsumer(got, want jetstream.ConsumerConfig) error {
	filters := got.FilterSubjects
	if got.FilterSubject != "" {
		filters = append([]string{got.FilterSubject}, filters...)
	}
	if got.DeliverSubject != "" {
		return fmt.Errorf("%w: %s is a push consumer (deliver subject %q)", ErrTenantConsumerMismatch, want.Durable, got.DeliverSubject)
	}
	if !slices.Equal(filters, []string{want.FilterSubject}) {
		return fmt.Errorf("%w: %s filters %q, not %q", ErrTenantConsumerMismatch, want.Durable, filters, want.FilterSubject)
	}
	return nil
}
