package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var (
	tenantLimitsCommand = command{
		name:     "spendgate tenant-limits",
		synopsis: "put|get|list [flags]",
		about: `Manages the limits each tenant is held to in place of the replicas' common
ones (serve's --tenant-* flags), kept in the ledger as signed, chained
revisions: every replica folds them, so all hold a tenant to the same
limits, and the audit lists each change. A tenant's limits in the ledger
replace its --tenant-limits line. Only the deployment's administration
sets them; a tenant cannot set its own.

  put   set a tenant's own limits (the whole set)
  get   one tenant's own limits and version
  list  every tenant with limits in the ledger`,
	}
	tenantLimitsPutCommand = command{
		name:     "spendgate tenant-limits put",
		synopsis: "--tenant NAME [--max-open N] [--max-default-budgets N] [--max-budgets N] [--rate N] [--burst N] [--denial-bytes N]",
		about: `Sets a tenant's own limits. The put is the whole set: a flag left out is the
replicas' common limit (their --tenant-* flag), and 0 is no limit for the
tenant. A put with no limit flag removes the tenant's limits from the
ledger: each replica holds it to its --tenant-limits line again, or to
the common limits. --burst left out is a tenth of a second's worth of the tenant's
own --rate (at least a full batch), or without one the common burst. The
new limits apply on every replica as soon as it has folded the revision
(milliseconds). The reply says what changed and gives the new version.`,
	}
	tenantLimitsGetCommand = command{
		name:     "spendgate tenant-limits get",
		synopsis: "[--tenant NAME]",
		about: `Prints a tenant's own limits kept in the ledger and their version (none set
and version 0: the ledger does not name the tenant), then what the replica
that answered holds it to, each limit with where it comes from (held_to:
the ledger, the replica's --tenant-limits file or its flag; 0 is no
limit), and the tenant's open reservations, budgets from defaults and
budgets of its own in that replica's book (usage). The admin names the tenant; a tenant's own
login leaves --tenant out and reads its own.`,
	}
	tenantLimitsListCommand = command{
		name:     "spendgate tenant-limits list",
		synopsis: "",
		about:    "Prints every tenant with limits kept in the ledger, sorted by tenant.",
	}
)

// tenantLimitsCmd is spendgate tenant-limits put|get|list.
func tenantLimitsCmd(args []string) int {
	if len(args) == 0 || len(args[0]) > 0 && args[0][0] == '-' {
		fs := newFlagSet("tenant-limits")
		if code, ok := tenantLimitsCommand.parse(fs, args); !ok {
			return code
		}
		return tenantLimitsCommand.usageError(fs, "which tenant-limits command? (put, get or list)")
	}
	var c clientFlags
	fs := newFlagSet("tenant-limits " + args[0])
	c.register(fs)
	switch args[0] {
	case "put":
		var req events.TenantLimitsPutRequest
		const common = " (left out: the replicas' common limit; 0: no limit)"
		fs.StringVar(&req.Tenant, "tenant", "", "the tenant whose limits to set (required)")
		values := []struct {
			flag, about string
			p           **int64
		}{
			{"max-open", "`N` reservations the tenant may hold open at once" + common, &req.MaxOpen},
			{"max-default-budgets", "`N` budgets that may be created for the tenant from defaults" + common, &req.MaxDefaultBudgets},
			{"max-budgets", "`N` budgets the tenant may put for their scopes (not from defaults, not retired)" + common, &req.MaxBudgets},
			{"rate", "`N` requests per second the tenant may send one replica" + common, &req.Rate},
			{"burst", "`N` requests the tenant may send one replica at once after a pause, at least 1 (left out: a tenth of a second's worth of its own --rate, at least a full batch; without --rate, the common burst)", &req.Burst},
			{"denial-bytes", "`N` bytes per second of the tenant's denial records one replica stores" + common, &req.DenialBytes},
		}
		for _, v := range values {
			fs.Var(optInt{v.p}, v.flag, v.about)
		}
		if code, ok := tenantLimitsPutCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if code, ok := tenantLimitsPutCommand.require(fs, "tenant"); !ok {
			return code
		}
		return c.call(streams.EndpointTenantLimitsPut, req, nil)
	case "get":
		var req events.TenantLimitsGetRequest
		fs.StringVar(&req.Tenant, "tenant", "", "the tenant (the admin must name it; a tenant's own login leaves it out and reads its own)")
		if code, ok := tenantLimitsGetCommand.parse(fs, args[1:]); !ok {
			return code
		}
		// No --tenant is no tenant in the body: a tenant's own login reads
		// its own (the replica knows it from the subject); on the
		// deployment's plain subject the replica answers that a tenant is
		// needed.
		return c.call(streams.EndpointTenantLimitsGet, req, nil)
	case "list":
		if code, ok := tenantLimitsListCommand.parse(fs, args[1:]); !ok {
			return code
		}
		return c.call(streams.EndpointTenantLimitsList, events.TenantLimitsListRequest{}, nil)
	}
	return tenantLimitsCommand.usageError(nil, fmt.Sprintf("unknown tenant-limits command %q", args[0]))
}

// optInt is a flag of an optional whole number: nil until given.
type optInt struct{ p **int64 }

var _ flag.Value = optInt{}

func (o optInt) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return strconv.FormatInt(**o.p, 10)
}

func (o optInt) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number")
	}
	*o.p = &n
	return nil
}
