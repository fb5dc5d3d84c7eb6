package events

import (
	"context"
	"strings"
)

// Tenants. One deployment serves many tenants; each sees only its own
// budgets and reservations. A tenant never names itself: the service takes
// it from the subject a request arrived on (see streams.Layout.TenantEndpoint),
// which the NATS server fixes for each tenant account by its service import,
// and hands it to the engine in the request's context (ContextWithTenant).
//
// Inside the ledger a tenant's budgets are ordinary budgets whose scope
// carries the tenant: "<tenant>/<kind>:<id>" (TenantScope), and its request
// ids are "<tenant>/<request id>" (TenantRequestID). A caller can never
// spell either: every scope and id a request carries is checked with
// ParseScope / ValidateToken first, which refuse '/'. The untenanted
// deployment is tenant "": its scopes and ids are unchanged.
const (
	// MaxTenantLen bounds a tenant name.
	MaxTenantLen = 32
	// TenantSep separates the tenant from the scope or id it qualifies.
	TenantSep = "/"
)

// ValidateTenant reports whether t is a valid tenant name: 1..MaxTenantLen
// characters of lower case letters, digits, '_' and '-', starting with a
// letter. Errors: CodeInvalidIdentifier.
func ValidateTenant(t string) error {
	if err := ValidateToken("tenant", t, MaxTenantLen); err != nil {
		return err
	}
	if t[0] < 'a' || t[0] > 'z' || strings.ToLower(t) != t {
		return Errorf(CodeInvalidIdentifier, "tenant %q must be lower case and start with a letter", t)
	}
	return nil
}

// TenantScope is scope s of tenant t as the ledger stores it:
// "<t>/<s>", or s itself for tenant "".
func TenantScope(t string, s Scope) Scope {
	if t == "" {
		return s
	}
	return Scope(t + TenantSep + string(s))
}

// Tenant returns the tenant of a stored scope ("" for an untenanted one).
func (s Scope) Tenant() string {
	t, _, ok := strings.Cut(string(s), TenantSep)
	if !ok {
		return ""
	}
	return t
}

// Local returns the scope as its tenant names it: s without its tenant.
func (s Scope) Local() Scope {
	_, l, ok := strings.Cut(string(s), TenantSep)
	if !ok {
		return s
	}
	return Scope(l)
}

// ParseStoredScope parses a scope as the ledger stores it: ParseScope's
// "kind:id", optionally qualified by a tenant ("<tenant>/kind:id"). Only
// the engine and readers of the stream use it; every scope a caller sends
// goes through ParseScope. Errors: CodeInvalidIdentifier.
func ParseStoredScope(s string) (Scope, error) {
	t, rest, ok := strings.Cut(s, TenantSep)
	if !ok {
		return ParseScope(s)
	}
	if err := ValidateTenant(t); err != nil {
		return "", err
	}
	if _, err := ParseScope(rest); err != nil {
		return "", err
	}
	return Scope(s), nil
}

// TenantRequestID is request id id of tenant t as the ledger stores it:
// "<t>/<id>", or id itself for tenant "".
func TenantRequestID(t, id string) string {
	if t == "" {
		return id
	}
	return t + TenantSep + id
}

// LocalRequestID returns a stored request id as its tenant sent it.
func LocalRequestID(id string) string {
	_, l, ok := strings.Cut(id, TenantSep)
	if !ok {
		return id
	}
	return l
}

// LocalBalance returns b with its scope as its tenant names it.
func LocalBalance(b BalanceRef) BalanceRef {
	b.Scope = b.Scope.Local()
	return b
}

// LocalBalances returns bs with every scope as its tenant names it, in a
// new slice (nil for nil).
func LocalBalances(bs []BalanceRef) []BalanceRef {
	if bs == nil {
		return nil
	}
	out := make([]BalanceRef, len(bs))
	for i, b := range bs {
		out[i] = LocalBalance(b)
	}
	return out
}

type tenantKey struct{}

// ContextWithTenant returns ctx carrying tenant t: the tenant every
// engine call made with it acts for. The service sets it from the subject
// a request arrived on; "" is the untenanted deployment.
func ContextWithTenant(ctx context.Context, t string) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantFromContext returns the tenant ctx carries ("" if none).
func TenantFromContext(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// The per-tenant limits (TenantLimited.Limit, and the limit label of the
// spendgate_tenant_limited_total metric).
const (
	// LimitOpenReservations: reservations a tenant holds open at once.
	LimitOpenReservations = "open_reservations"
	// LimitRequestRate: requests per second a tenant sends one replica.
	LimitRequestRate = "request_rate"
	// LimitDefaultBudgets: budgets created for a tenant from its kinds'
	// defaults.
	LimitDefaultBudgets = "default_budgets"
	// LimitBudgets: budgets a tenant has put for their scopes (not
	// created from defaults, not retired).
	LimitBudgets = "budgets"
	// LimitDenialBytes: bytes per second of a tenant's denial records one
	// replica stores (past it a denial is answered as ever, and counted
	// instead of recorded: no refusal).
	LimitDenialBytes = "denial_bytes"
)

// TenantLimited is the cause (Error.Err, never on the wire) of a
// CodeTenantLimit refusal: which tenant, which limit (LimitOpenReservations,
// LimitRequestRate or LimitDefaultBudgets) and its value.
type TenantLimited struct {
	Tenant string
	Limit  string
	Max    int64
}

func (t *TenantLimited) Error() string {
	return "tenant " + t.Tenant + " is at its " + t.Limit + " limit"
}

// TenantLimitError returns the CodeTenantLimit refusal of a request of
// tenant past limit (whose value is max), with message msg.
func TenantLimitError(tenant, limit string, max int64, msg string) *Error {
	return &Error{Code: CodeTenantLimit, Message: msg, Err: &TenantLimited{Tenant: tenant, Limit: limit, Max: max}}
}
