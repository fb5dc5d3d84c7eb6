package feed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
// feed stream but is not the one TenantConsumerConfig makes (a push
// consumer a tenant made for itself under an earlier layout, an operator's
// consumer of a "t-" name, or one the feed role made before the roles named
// the tenant: headers only, acks none, one delivery...). EnsureTenantConsumer
// leaves it alone; ReplaceTenantConsumer (spendgate feed consumer --tenant
// NAME --replace) deletes it and makes it again.
var ErrTenantConsumerMismatch = errors.New("feed: the tenant's consumer name is taken by another kind of consumer")

// EnsureTenantConsumer creates tenant's feed consumer (TenantConsumerConfig)
// on the feed stream of l, and reports whether it created it. A consumer
// of that name that is what TenantConsumerConfig makes (checkTenantConsumer:
// up to the server's defaults, description and metadata) is left as it is,
// so the tenant keeps its place; any other is ErrTenantConsumerMismatch.
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
			_, err := checkTenantConsumer(c.CachedInfo().Config, cfg)
			return false, err
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
// tenant's name that is not the one TenantConsumerConfig makes
// (ErrTenantConsumerMismatch: one a tenant or the feed role made, or one
// TenantCheck reports) is deleted first and made
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
// name, is what want (TenantConsumerConfig) makes, up to the server's
// defaults: a pull consumer of want's filter alone, and nothing in it that
// changes what the tenant reads or whether it can. Its description,
// metadata and sample frequency may differ.
//
// Every difference is named, push and filter first; reason is the
// TenantCheck reason (TenantConsumerPush, TenantConsumerFilter,
// TenantConsumerSettings). Compared whole because
// the feed role may create a consumer of a tenant's name before the roles
// name the tenant (a consumer name cannot be denied by prefix): one that
// drops payloads (headers only), forgets events (acks none, one delivery,
// a later start), loses its place (memory storage, an inactive threshold)
// or stalls (paused, pinned, tiny pulls) would otherwise be kept as the
// tenant's.
func checkTenantConsumer(got, want jetstream.ConsumerConfig) (reason string, err error) {
	filters := got.FilterSubjects
	if got.FilterSubject != "" {
		filters = append([]string{got.FilterSubject}, filters...)
	}
	if got.DeliverSubject != "" {
		return TenantConsumerPush, fmt.Errorf("%w: %s is a push consumer (deliver subject %q)", ErrTenantConsumerMismatch, want.Durable, got.DeliverSubject)
	}
	if !slices.Equal(filters, []string{want.FilterSubject}) {
		return TenantConsumerFilter, fmt.Errorf("%w: %s filters %q, not %q", ErrTenantConsumerMismatch, want.Durable, filters, want.FilterSubject)
	}
	var diff []string
	check := func(ok bool, field string, got, want any) {
		if !ok {
			diff = append(diff, fmt.Sprintf("%s %v (want %v)", field, got, want))
		}
	}
	check(got.DeliverPolicy == want.DeliverPolicy, "deliver_policy", got.DeliverPolicy, want.DeliverPolicy)
	check(got.OptStartSeq == 0, "opt_start_seq", got.OptStartSeq, 0)
	check(got.OptStartTime == nil, "opt_start_time", got.OptStartTime, "none")
	check(got.AckPolicy == want.AckPolicy, "ack_policy", got.AckPolicy, want.AckPolicy)
	check(got.AckWait == want.AckWait, "ack_wait", got.AckWait, want.AckWait)
	check(got.MaxDeliver <= 0, "max_deliver", got.MaxDeliver, "unlimited")
	check(len(got.BackOff) == 0, "backoff", got.BackOff, "none")
	check(got.MaxAckPending == want.MaxAckPending, "max_ack_pending", got.MaxAckPending, want.MaxAckPending)
	check(got.ReplayPolicy == jetstream.ReplayInstantPolicy, "replay_policy", got.ReplayPolicy, jetstream.ReplayInstantPolicy)
	check(!got.HeadersOnly, "headers_only", got.HeadersOnly, false)
	check(got.MaxWaiting == 0 || got.MaxWaiting == serverMaxWaiting, "max_waiting", got.MaxWaiting, serverMaxWaiting)
	check(got.MaxRequestBatch == 0, "max_batch", got.MaxRequestBatch, "unlimited")
	check(got.MaxRequestExpires == 0, "max_expires", got.MaxRequestExpires, "unlimited")
	check(got.MaxRequestMaxBytes == 0, "max_bytes", got.MaxRequestMaxBytes, "unlimited")
	check(got.InactiveThreshold == 0, "inactive_threshold", got.InactiveThreshold, "none (durable)")
	check(got.Replicas == want.Replicas, "num_replicas", got.Replicas, "the stream's")
	check(!got.MemoryStorage, "mem_storage", got.MemoryStorage, false)
	check(got.PauseUntil == nil || !got.PauseUntil.After(time.Now()), "pause_until", got.PauseUntil, "not paused")
	check(got.PriorityPolicy == jetstream.PriorityPolicyNone && len(got.PriorityGroups) == 0, "priority_policy", got.PriorityPolicy, jetstream.PriorityPolicyNone)
	if len(diff) > 0 {
		return TenantConsumerSettings, fmt.Errorf("%w: %s is not the consumer spendgate makes: %s", ErrTenantConsumerMismatch, want.Durable, strings.Join(diff, ", "))
	}
	return "", nil
}

// serverMaxWaiting is the pull requests a consumer made without
// max_waiting may hold waiting (nats-server's default).
const serverMaxWaiting = 512
