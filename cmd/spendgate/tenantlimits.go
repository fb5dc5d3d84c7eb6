package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// tenantLimitFlags are serve's per-tenant limits and the denial stream's
// byte cap (docs/tenant-limits.md).
type tenantLimitFlags struct {
	maxOpen, maxDefaults, maxBudgets, rate, burst, denialBytes *int
	denialMaxBytes                                             *int64
	// own is the --tenant-limits file ("": none).
	own *string
	fs  *flag.FlagSet
}

func addTenantLimitFlags(fs *flag.FlagSet) tenantLimitFlags {
	return tenantLimitFlags{
		fs: fs,
		maxOpen: fs.Int("tenant-max-open", admit.DefaultTenantMaxOpen,
			"reservations one tenant may hold open at once; past it its admits are answered tenant_limit (0: no limit)"),
		maxDefaults: fs.Int("tenant-max-default-budgets", admit.DefaultTenantMaxDefaultBudgets,
			"budgets that may be created for one tenant from its scope kinds' defaults; past it an admit that would create one is answered tenant_limit (0: no limit)"),
		maxBudgets: fs.Int("tenant-max-budgets", service.DefaultTenantMaxBudgets,
			"budgets one tenant may put for their scopes (not from defaults, not retired); past it a budget.put of a new one is answered tenant_limit (0: no limit)"),
		rate: fs.Int("tenant-rate", service.DefaultTenantRate,
			"requests per second one tenant may send this replica (each batch item counts; burst: --tenant-burst); past it a request is answered tenant_limit at once (0: no limit)"),
		burst: fs.Int("tenant-burst", 0,
			fmt.Sprintf("requests one tenant may send this replica at once after a pause (0: a tenth of a second's worth of --tenant-rate, at least %d, a full batch)", events.MaxBatchItems)),
		denialBytes: fs.Int("tenant-denial-bytes", service.DefaultTenantDenialBytes,
			"bytes per second of denial records this replica stores for one tenant (burst: 16 seconds' worth); past it a denial is answered as ever but counted, not recorded (0: no limit)"),
		own: fs.String("tenant-limits", "",
			"`FILE` of the tenants with limits of their own: one per line, its name and key=value pairs (max-open, max-default-budgets, max-budgets, rate, burst, denial-bytes; 0: no limit); read again on SIGHUP. A tenant with limits in the ledger (spendgate tenant-limits put) is held to those instead"),
		denialMaxBytes: fs.Int64("denial-max-bytes", streams.DefaultDenialMaxBytes,
			"cap of the denial stream in bytes; past it the oldest records go first (0: no cap; give every replica the same value). "+
				"Left unset, a server whose storage has no room for the default gets a smaller cap, with a warning"),
	}
}

// off maps a flag's (or a --tenant-limits value's) 0, no limit, to the
// config's negative.
func off(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// limits returns the flags as the replica's config: a flag's 0 (no
// limit) is the config's negative.
func (f tenantLimitFlags) limits() (service.TenantLimits, int64, error) {
	for _, v := range []struct {
		name string
		n    int
	}{{"--tenant-max-open", *f.maxOpen}, {"--tenant-max-default-budgets", *f.maxDefaults}, {"--tenant-max-budgets", *f.maxBudgets},
		{"--tenant-rate", *f.rate}, {"--tenant-denial-bytes", *f.denialBytes}} {
		if v.n < 0 {
			return service.TenantLimits{}, 0, fmt.Errorf("%s must not be negative (0: no limit)", v.name)
		}
	}
	if *f.burst < 0 {
		return service.TenantLimits{}, 0, fmt.Errorf("--tenant-burst must not be negative (0: a tenth of a second's worth of --tenant-rate)")
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"--tenant-max-open", *f.maxOpen}, {"--tenant-max-default-budgets", *f.maxDefaults}, {"--tenant-max-budgets", *f.maxBudgets},
		{"--tenant-rate", *f.rate}, {"--tenant-burst", *f.burst}, {"--tenant-denial-bytes", *f.denialBytes}} {
		if v.n > events.MaxTenantLimit {
			return service.TenantLimits{}, 0, fmt.Errorf("%s %d: at most %d, as tenant-limits put takes", v.name, v.n, events.MaxTenantLimit)
		}
	}
	if *f.denialMaxBytes < 0 {
		return service.TenantLimits{}, 0, fmt.Errorf("--denial-max-bytes must not be negative (0: no cap)")
	}
	maxBytes := *f.denialMaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "denial-max-bytes" })
	if !set {
		// The default, which EnsureDenials may lower to fit the server.
		maxBytes = 0
	}
	return service.TenantLimits{MaxOpen: off(*f.maxOpen), MaxDefaultBudgets: off(*f.maxDefaults), MaxBudgets: off(*f.maxBudgets), Rate: off(*f.rate),
		Burst: *f.burst, DenialBytes: off(*f.denialBytes)}, maxBytes, nil
}

// readTenantLimits reads a --tenant-limits file: the tenants with limits
// of their own. Each line is a tenant's name and its limits as key=value
// pairs, the keys those of serve's flags without "tenant-" (max-open,
// max-default-budgets, max-budgets, rate, burst, denial-bytes), the values as the
// flags take them (0: no limit for that tenant); a key left out keeps the
// flag's value. '#' starts a comment line. A tenant named twice, an
// unknown key or a bad value is an error naming its line.
func readTenantLimits(path string) (map[string]service.TenantLimits, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tenant-limits: %w", err)
	}
	out := map[string]service.TenantLimits{}
	for i, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		where := fmt.Sprintf("--tenant-limits %s:%d", path, i+1)
		tenant := fields[0]
		if err := events.ValidateTenant(tenant); err != nil {
			var ee *events.Error
			if errors.As(err, &ee) {
				err = errors.New(ee.Message)
			}
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		if _, dup := out[tenant]; dup {
			return nil, fmt.Errorf("%s: tenant %s is named twice", where, tenant)
		}
		if len(fields) == 1 {
			return nil, fmt.Errorf("%s: tenant %s has no limits: give key=value pairs (max-open, max-default-budgets, max-budgets, rate, burst, denial-bytes)", where, tenant)
		}
		var l service.TenantLimits
		seen := map[string]bool{}
		for _, kv := range fields[1:] {
			key, value, ok := strings.Cut(kv, "=")
			n, err := strconv.Atoi(value)
			switch {
			case !ok:
				return nil, fmt.Errorf("%s: %q is not key=value", where, kv)
			case seen[key]:
				return nil, fmt.Errorf("%s: %s is given twice", where, key)
			case err != nil || n < 0:
				return nil, fmt.Errorf("%s: %s=%s: want a number, at least 0 (0: no limit)", where, key, value)
			case n > events.MaxTenantLimit:
				return nil, fmt.Errorf("%s: %s=%s: at most %d", where, key, value, events.MaxTenantLimit)
			}
			seen[key] = true
			switch key {
			case "max-open":
				l.MaxOpen = off(n)
			case "max-default-budgets":
				l.MaxDefaultBudgets = off(n)
			case "max-budgets":
				l.MaxBudgets = off(n)
			case "rate":
				l.Rate = off(n)
			case "burst":
				if n == 0 {
					return nil, fmt.Errorf("%s: burst=0: leave burst out for a tenth of a second's worth of the rate", where)
				}
				l.Burst = n
			case "denial-bytes":
				l.DenialBytes = off(n)
			default:
				return nil, fmt.Errorf("%s: unknown key %q (max-open, max-default-budgets, max-budgets, rate, burst, denial-bytes)", where, key)
			}
		}
		out[tenant] = l
	}
	return out, nil
}
