package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// Tenant limits kept in the ledger: the limits one tenant is held to in
// place of the deployment's common ones (spendgate serve's --tenant-*
// flags), one revision per change under the tenant's own key (see
// streams.TenantLimitsKey), chained like a pricing revision. Every replica
// folds them, so replicas of one ledger hold a tenant to the same limits,
// and the audit lists who changed them and when. Only the deployment's
// administration sets them (tenantlimits.put has no tenant subject).

// TypeTenantLimitsDefined is the type of TenantLimitsDefined.
const TypeTenantLimitsDefined Type = "tenant.limits.defined.v1"

// SchemaTenantLimits is the schema of a tenant limits revision.
const SchemaTenantLimits = "tenantlimits.v1"

// MaxTenantLimit bounds every tenant limit's value.
const MaxTenantLimit = 1 << 30

// TenantLimitValues are a tenant's own limits. A nil field keeps the
// deployment's common limit (the replica's flag); 0 is no limit for the
// tenant; a positive value is its limit. Burst is never 0: left out, it is
// a tenth of a second's worth of the tenant's rate (at least a full
// batch).
type TenantLimitValues struct {
	// MaxOpen is the reservations the tenant may hold open at once.
	MaxOpen *int64 `json:"max_open,omitempty"`
	// MaxDefaultBudgets is the budgets that may be created for it from
	// its scope kinds' defaults.
	MaxDefaultBudgets *int64 `json:"max_default_budgets,omitempty"`
	// MaxBudgets is the budgets it may have put for their scopes (not
	// created from defaults, not retired).
	MaxBudgets *int64 `json:"max_budgets,omitempty"`
	// Rate is the requests per second it may send one replica, Burst how
	// many at once after a pause.
	Rate  *int64 `json:"rate,omitempty"`
	Burst *int64 `json:"burst,omitempty"`
	// DenialBytes is the bytes per second of its denial records one
	// replica stores.
	DenialBytes *int64 `json:"denial_bytes,omitempty"`
}

// fields lists v's fields with their wire names, in order.
func (v *TenantLimitValues) fields() []struct {
	name string
	p    **int64
} {
	return []struct {
		name string
		p    **int64
	}{{"max_open", &v.MaxOpen}, {"max_default_budgets", &v.MaxDefaultBudgets}, {"max_budgets", &v.MaxBudgets}, {"rate", &v.Rate},
		{"burst", &v.Burst}, {"denial_bytes", &v.DenialBytes}}
}

// Validate checks every value: at least 0 (Burst at least 1) and at most
// MaxTenantLimit. Errors: *Error with CodeInvalidRequest naming the field.
func (v TenantLimitValues) Validate() error {
	for _, f := range v.fields() {
		if *f.p == nil {
			continue
		}
		n := **f.p
		switch {
		case f.name == "burst" && n < 1:
			return Errorf(CodeInvalidRequest, "burst %d: want at least 1 (left out: a tenth of a second's worth of the rate)", n)
		case n < 0:
			return Errorf(CodeInvalidRequest, "%s %d: want at least 0 (0: no limit for the tenant; left out: the replica's common limit)", f.name, n)
		case n > MaxTenantLimit:
			return Errorf(CodeInvalidRequest, "%s %d: at most %d", f.name, n, MaxTenantLimit)
		}
	}
	return nil
}

// Changes names the fields of v that differ from prev (set or cleared
// counts as a change), by their wire names, in field order.
func (v TenantLimitValues) Changes(prev TenantLimitValues) []string {
	out := []string{}
	pf := prev.fields()
	for i, f := range v.fields() {
		a, b := *f.p, *pf[i].p
		if (a == nil) != (b == nil) || a != nil && *a != *b {
			out = append(out, f.name)
		}
	}
	return out
}

// Empty reports whether v sets no limit: the tenant's limits are then
// none of the ledger's (a put of it removes them).
func (v TenantLimitValues) Empty() bool {
	for _, f := range v.fields() {
		if *f.p != nil {
			return false
		}
	}
	return true
}

// Clone returns a deep copy of v.
func (v TenantLimitValues) Clone() TenantLimitValues {
	for _, f := range v.fields() {
		if *f.p != nil {
			n := **f.p
			*f.p = &n
		}
	}
	return v
}

// TenantLimitsDefined sets a tenant's own limits: the whole set (a field
// left out is the common limit again). Changed names the fields that
// changed (max_open, max_default_budgets, max_budgets, rate, burst,
// denial_bytes),
// empty for a tenant's first definition.
type TenantLimitsDefined struct {
	Tenant string `json:"tenant"`
	TenantLimitValues
	Changed []string  `json:"changed,omitempty"`
	At      time.Time `json:"at"`
}

// EventType returns TypeTenantLimitsDefined.
func (TenantLimitsDefined) EventType() Type { return TypeTenantLimitsDefined }

// TenantLimitsRevision is the value of a tenant's limits key: its limits
// after the revision, chained to the key's previous revision, and the
// event that made them.
type TenantLimitsRevision struct {
	Schema string `json:"schema"`
	Chain
	Tenant string `json:"tenant"`
	TenantLimitValues
	Events Events `json:"events"`
}

// DecodeTenantLimitsRevision decodes a tenant limits revision (schema
// tenantlimits.v1) and checks its tenant and values.
func DecodeTenantLimitsRevision(data []byte) (TenantLimitsRevision, error) {
	var r TenantLimitsRevision
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	if r.Schema != SchemaTenantLimits {
		return r, fmt.Errorf("events: schema %q under a tenant limits key, want %q", r.Schema, SchemaTenantLimits)
	}
	if err := ValidateTenant(r.Tenant); err != nil {
		return r, err
	}
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

// TenantLimitsPutRequest sets a tenant's own limits (tenantlimits.put):
// the whole set, as TenantLimitValues says. A put with no field removes
// them: the tenant is held to the replica's own limits again (its
// --tenant-limits line, or the common ones).
// Its fields are TenantLimitValues' (a request is flat on the wire).
type TenantLimitsPutRequest struct {
	Tenant            string `json:"tenant"`
	MaxOpen           *int64 `json:"max_open,omitempty"`
	MaxDefaultBudgets *int64 `json:"max_default_budgets,omitempty"`
	MaxBudgets        *int64 `json:"max_budgets,omitempty"`
	Rate              *int64 `json:"rate,omitempty"`
	Burst             *int64 `json:"burst,omitempty"`
	DenialBytes       *int64 `json:"denial_bytes,omitempty"`
}

// Values returns the limits the request puts.
func (r TenantLimitsPutRequest) Values() TenantLimitValues {
	return TenantLimitValues{MaxOpen: r.MaxOpen, MaxDefaultBudgets: r.MaxDefaultBudgets, MaxBudgets: r.MaxBudgets, Rate: r.Rate,
		Burst: r.Burst, DenialBytes: r.DenialBytes}
}

// TenantLimitsGetRequest reads one tenant's own limits
// (tenantlimits.get). On a tenant's subject Tenant may be left out (or be
// that tenant): a tenant reads its own limits only.
type TenantLimitsGetRequest struct {
	Tenant string `json:"tenant,omitempty"`
}

// TenantLimitsListRequest lists every tenant with limits in the ledger
// (tenantlimits.list); it has no fields.
type TenantLimitsListRequest struct{}

// TenantLimitsView is a tenant's own limits as the ledger keeps them.
// Version is the stream sequence of the revision (0: the tenant has never
// had limits of its own in the ledger).
type TenantLimitsView struct {
	Tenant string `json:"tenant"`
	TenantLimitValues
	Version uint64 `json:"version"`
	// HeldTo and Usage (tenantlimits.get only) are what the tenant is
	// held to on the replica that answered, the ledger's limits merged
	// with the replica's own (its flags and --tenant-limits file), and
	// where it stands against them in that replica's book.
	HeldTo *TenantHeldTo `json:"held_to,omitempty"`
	Usage  *TenantUsage  `json:"usage,omitempty"`
}

// TenantHeldTo is every limit a tenant is held to (0: no limit), and by
// field name where each comes from: "tenant-limits put" (the ledger),
// "--tenant-limits" (the replica's file) or the replica's flag ("serve
// --tenant-max-open").
type TenantHeldTo struct {
	// Replica is the answering replica's service instance id (as `nats
	// micro info spendgate` lists it).
	Replica           string            `json:"replica"`
	MaxOpen           int64             `json:"max_open"`
	MaxDefaultBudgets int64             `json:"max_default_budgets"`
	MaxBudgets        int64             `json:"max_budgets"`
	Rate              int64             `json:"rate"`
	Burst             int64             `json:"burst"`
	DenialBytes       int64             `json:"denial_bytes"`
	From              map[string]string `json:"from"`
}

// TenantUsage is where a tenant stands against its counted limits, in
// the answering replica's book.
type TenantUsage struct {
	OpenReservations int `json:"open_reservations"`
	DefaultBudgets   int `json:"default_budgets"`
	// Budgets are those it has put for their scopes (not retired).
	Budgets int `json:"budgets"`
}

// TenantLimitsPutReply is a tenant's limits after a put and what changed.
type TenantLimitsPutReply struct {
	TenantLimitsView
	Created  bool              `json:"created,omitempty"`
	Changed  []string          `json:"changed"`
	Previous *TenantLimitsView `json:"previous,omitempty"`
}

// TenantLimitsListReply lists every tenant with limits in the ledger,
// sorted by tenant.
type TenantLimitsListReply struct {
	Tenants []TenantLimitsView `json:"tenants"`
}
