package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Reasons a tenant's feed consumer fails CheckTenantConsumers. The values
// are stable: logs and metrics use them.
const (
	// TenantConsumerPush: the consumer delivers to a subject (a push
	// consumer), which JetStream does not check against anyone's
	// permissions.
	TenantConsumerPush = "push"
	// TenantConsumerFilter: the consumer's filter is not the tenant's
	// alone (streams.Layout.TenantFeedFilter): the tenant would read other
	// tenants' events, or miss its own.
	TenantConsumerFilter = "filter"
	// TenantConsumerSettings: a pull consumer of the tenant's filter whose
	// settings are not the ones spendgate makes (headers only, acks none,
	// a limit on deliveries, a later start, memory storage, paused...):
	// the tenant would miss events or stall.
	TenantConsumerSettings = "settings"
)

// TenantProblem is a tenant's feed consumer that is not what
// TenantConsumerConfig makes.
type TenantProblem struct {
	// Consumer is its name ("t-acme"), Tenant the tenant that reads it.
	Consumer, Tenant string
	// Reason is TenantConsumerPush, TenantConsumerFilter or
	// TenantConsumerSettings.
	Reason string
	// Detail says what the consumer has instead.
	Detail string
}

// CheckTenantConsumers lists the consumers of l's feed stream and returns
// every consumer named for a tenant (streams.TenantFeedConsumer: "t-" and a
// valid tenant name) that is not the one TenantConsumerConfig makes: a push
// consumer, another filter, or other settings (checkTenantConsumer, as
// EnsureTenantConsumer decides). A consumer named for a tenant the roles do
// not name yet is checked too: the feed role may have made it. It
// changes nothing. A feed stream that does not exist has no problem.
//
// Errors: the server's or the connection's (a role without
// $JS.API.CONSUMER.LIST.<feed> gets a timeout).
func CheckTenantConsumers(ctx context.Context, js jetstream.JetStream, l streams.Layout) ([]TenantProblem, error) {
	s, err := js.Stream(ctx, l.FeedStreamName())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("feed: tenant consumers: %w", err)
	}
	var out []TenantProblem
	list := s.ListConsumers(ctx)
	for info := range list.Info() {
		tenant, ok := strings.CutPrefix(info.Name, "t-")
		if !ok || events.ValidateTenant(tenant) != nil || streams.TenantFeedConsumer(tenant) != info.Name {
			continue
		}
		reason, err := checkTenantConsumer(info.Config, TenantConsumerConfig(l, tenant))
		if err == nil {
			continue
		}
		p := TenantProblem{Consumer: info.Name, Tenant: tenant, Reason: reason, Detail: err.Error()}
		out = append(out, p)
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("feed: tenant consumers: %w", err)
	}
	return out, nil
}

// DefaultTenantCheckEvery is how often a TenantCheck runs.
const DefaultTenantCheckEvery = time.Minute

// TenantCheck runs CheckTenantConsumers at start and then periodically in
// a replica. It repairs nothing: no shipped role but the operator's admin
// may change a tenant's consumer (package roles), the replica's included.
// It refuses to let a problem pass silently instead: each consumer found
// wrong is logged at error level with the command that repairs it
// (spendgate feed consumer --tenant NAME --replace, as the admin), again
// whenever what is wrong with it changes, counted (Problems), and kept in
// Bad until a check finds it right again (logged too).
type TenantCheck struct {
	js    jetstream.JetStream
	l     streams.Layout
	log   *slog.Logger
	every time.Duration

	problems atomic.Uint64
	bad      atomic.Int64
	checks   atomic.Uint64
	seen     map[string]string // consumer -> detail, as last logged; Run's alone
}

// TenantCheckOption configures a TenantCheck.
type TenantCheckOption func(*TenantCheck) error

// CheckLogger sets where a TenantCheck logs (default: slog.Default()).
func CheckLogger(log *slog.Logger) TenantCheckOption {
	return func(c *TenantCheck) error {
		if log == nil {
			return errors.New("feed: nil logger")
		}
		c.log = log
		return nil
	}
}

// CheckEvery sets the time between two checks (default
// DefaultTenantCheckEvery).
func CheckEvery(d time.Duration) TenantCheckOption {
	return func(c *TenantCheck) error {
		if d <= 0 {
			return fmt.Errorf("feed: check interval must be positive, got %s", d)
		}
		c.every = d
		return nil
	}
}

// NewTenantCheck returns a check of the tenants' consumers on l's feed
// stream.
func NewTenantCheck(js jetstream.JetStream, l streams.Layout, opts ...TenantCheckOption) (*TenantCheck, error) {
	c := &TenantCheck{js: js, l: l, log: slog.Default(), every: DefaultTenantCheckEvery, seen: map[string]string{}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Problems counts the wrong tenant consumers found: each one once, and
// again each time what is wrong with it changes.
func (c *TenantCheck) Problems() uint64 { return c.problems.Load() }

// Bad is the number of tenant consumers the last check found wrong.
func (c *TenantCheck) Bad() int64 { return c.bad.Load() }

// Checks counts the checks that completed.
func (c *TenantCheck) Checks() uint64 { return c.checks.Load() }

// Start runs Run in a goroutine and returns a channel closed when it
// returns (when ctx ends).
func (c *TenantCheck) Start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	return done
}

// Run checks at once and then every interval until ctx ends, and returns
// ctx's error. A check that fails (the server unreachable, the permission
// missing) is logged at warning level and tried again at the next one.
func (c *TenantCheck) Run(ctx context.Context) error {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		c.check(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (c *TenantCheck) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, min(c.every, 30*time.Second))
	defer cancel()
	problems, err := CheckTenantConsumers(cctx, c.js, c.l)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("feed: cannot check the tenants' feed consumers", "err", err)
		}
		return
	}
	now := map[string]string{}
	for _, p := range problems {
		now[p.Consumer] = p.Detail
		if c.seen[p.Consumer] == p.Detail {
			continue
		}
		c.problems.Add(1)
		c.log.Error("feed: a tenant's feed consumer is not the one spendgate makes; not repaired: fix it as the operator's admin with spendgate feed consumer --tenant "+p.Tenant+" --replace",
			"consumer", p.Consumer, "tenant", p.Tenant, "reason", p.Reason, "detail", p.Detail)
	}
	for name := range c.seen {
		if _, ok := now[name]; !ok {
			c.log.Info("feed: a tenant's feed consumer is no longer wrong (repaired or deleted)", "consumer", name)
		}
	}
	c.seen = now
	c.bad.Store(int64(len(now)))
	c.checks.Add(1)
}
