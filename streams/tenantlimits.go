package streams

import "strings"

// Tenant limits kept in the ledger: each tenant's own limits live in the
// ledger bucket under "tenantlimits.<tenant>", one chained revision per
// change (events.TenantLimitsRevision), like a model's prices under
// "pricing.<model>".
const tenantLimitsFamily = "tenantlimits"

// TenantLimitsKey is "tenantlimits.<tenant>": the key of a tenant's own
// limits (a tenant's name is one subject token; see
// events.ValidateTenant).
func TenantLimitsKey(tenant string) string { return tenantLimitsFamily + "." + tenant }

// IsTenantLimitsKey reports whether key is a tenant limits key.
func IsTenantLimitsKey(key string) bool { return strings.HasPrefix(key, tenantLimitsFamily+".") }

// The tenant limits endpoints, under the prefix. Put and list are the
// deployment's administration's: they have no tenant subject, so a tenant
// never sets its own limits. Get is also a tenant's, for its own.
const (
	// EndpointTenantLimitsPut sets a tenant's own limits.
	EndpointTenantLimitsPut = "tenantlimits.put"
	// EndpointTenantLimitsGet and EndpointTenantLimitsList read them.
	EndpointTenantLimitsGet  = "tenantlimits.get"
	EndpointTenantLimitsList = "tenantlimits.list"
)

// TenantLimitsEndpoints are the tenant limits endpoints.
var TenantLimitsEndpoints = []string{EndpointTenantLimitsPut, EndpointTenantLimitsGet, EndpointTenantLimitsList}
