package main

import (
	"flag"
	"fmt"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// tenantLimitFlags are serve's per-tenant limits and the denial stream's
// byte cap (docs/tenant-limits.md).
type tenantLimitFlags struct {
	maxOpen, maxDefaults, rate, burst, denialBytes *int
	denialMaxBytes                                 *int64
}

func addTenantLimitFlags(fs *flag.FlagSet) tenantLimitFlags {
	return tenantLimitFlags{
		maxOpen: fs.Int("tenant-max-open", admit.DefaultTenantMaxOpen,
			"reservations one tenant may hold open at once; past it its admits are answered tenant_limit (0: no limit)"),
		maxDefaults: fs.Int("tenant-max-default-budgets", admit.DefaultTenantMaxDefaultBudgets,
			"budgets that may be created for one tenant from its scope kinds' defaults; past it an admit that would create one is answered tenant_limit (0: no limit)"),
		rate: fs.Int("tenant-rate", service.DefaultTenantRate,
			"requests per second one tenant may send this replica (each batch item counts; burst: --tenant-burst); past it a request is answered tenant_limit at once (0: no limit)"),
		burst: fs.Int("tenant-burst", 0,
			fmt.Sprintf("requests one tenant may send this replica at once after a pause (0: a tenth of a second's worth of --tenant-rate, at least %d, a full batch)", events.MaxBatchItems)),
		denialBytes: fs.Int("tenant-denial-bytes", service.DefaultTenantDenialBytes,
			"bytes per second of denial records this replica stores for one tenant (burst: 16 seconds' worth); past it a denial is answered as ever but counted, not recorded (0: no limit)"),
		denialMaxBytes: fs.Int64("denial-max-bytes", streams.DefaultDenialMaxBytes,
			"cap of the denial stream in bytes; past it the oldest records go first (0: no cap; give every replica the same value)"),
	}
}

// limits returns the flags as the replica's config: a flag's 0 (no
// limit) is the config's negative.
func (f tenantLimitFlags) limits() (service.TenantLimits, int64, error) {
	off := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"--tenant-max-open", *f.maxOpen}, {"--tenant-max-default-budgets", *f.maxDefaults}, {"--tenant-rate", *f.rate}, {"--tenant-denial-bytes", *f.denialBytes}} {
		if v.n < 0 {
			return service.TenantLimits{}, 0, fmt.Errorf("%s must not be negative (0: no limit)", v.name)
		}
	}
	if *f.burst < 0 {
		return service.TenantLimits{}, 0, fmt.Errorf("--tenant-burst must not be negative (0: a tenth of a second's worth of --tenant-rate)")
	}
	if *f.rate > service.MaxTenantRate || *f.burst > service.MaxTenantRate || *f.denialBytes > service.MaxTenantRate {
		return service.TenantLimits{}, 0, fmt.Errorf("--tenant-rate, --tenant-burst and --tenant-denial-bytes must be at most %d", service.MaxTenantRate)
	}
	if *f.denialMaxBytes < 0 {
		return service.TenantLimits{}, 0, fmt.Errorf("--denial-max-bytes must not be negative (0: no cap)")
	}
	maxBytes := *f.denialMaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	return service.TenantLimits{MaxOpen: off(*f.maxOpen), MaxDefaultBudgets: off(*f.maxDefaults), Rate: off(*f.rate),
		Burst: *f.burst, DenialBytes: off(*f.denialBytes)}, maxBytes, nil
}
