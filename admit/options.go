package admit

import (
	"fmt"
	"time"

	"github.com/spendgate/spendgate/events"
)

type options struct {
	now                        func() time.Time
	defaultTTL, minTTL, maxTTL time.Duration
	defaultUnit                string
	alerts                     func([]events.ThresholdCrossed)
	tenants                    TenantLimits
	tenantOwn                  func(tenant string) (TenantLimits, bool)
	blocking                   func(events.Alert)
}

func defaultOptions() options {
	return options{
		now:         time.Now,
		defaultTTL:  events.DefaultTTL,
		minTTL:      events.MinTTL,
		maxTTL:      events.MaxTTL,
		defaultUnit: "USD",
		tenants:     TenantLimits{}.withDefaults(),
	}
}

// Option configures an Admitter.
type Option func(*options) error

// WithClock sets the clock that periods and expiries are computed from.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("admit: nil clock")
		}
		o.now = now
		return nil
	}
}

// WithTTL sets the default TTL and its bounds (min <= def <= max, within
// events.MinTTL..events.MaxTTL).
func WithTTL(def, min, max time.Duration) Option {
	return func(o *options) error {
		if min < events.MinTTL || max > events.MaxTTL || min > def || def > max {
			return fmt.Errorf("admit: ttl default %v must lie in [%v, %v] within [%v, %v]", def, min, max, events.MinTTL, events.MaxTTL)
		}
		o.defaultTTL, o.minTTL, o.maxTTL = def, min, max
		return nil
	}
}

// WithBlocking calls f with the blocking alert (events.BlockingAlert) of
// an admit a budget with alerts on denied for its limit (limit_reached),
// after the decision (never for a check or shadow admit). It is called for
// every such denial: deduplicating to the first of the period (and arm
// generation) is the receiver's (the alert's id names them). f must not
// block.
func WithBlocking(f func(events.Alert)) Option {
	return func(o *options) error {
		o.blocking = f
		return nil
	}
}

// WithAlerts calls f with the thresholds an admission crossed, after its
// revision was committed (so once per crossing, on the replica that
// committed it; never for a check or shadow admit). f must not block: the
// service publishes each on NATS.
func WithAlerts(f func([]events.ThresholdCrossed)) Option {
	return func(o *options) error {
		o.alerts = f
		return nil
	}
}
