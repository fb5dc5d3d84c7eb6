package events

import (
	"sort"
	"strings"
	"time"

	// The IANA time zone database is linked into every binary that uses
	// events (about 450 KB), so that a budget's tz loads the same on a bare
	// machine or a scratch container, which have no /usr/share/zoneinfo,
	// as on a developer's laptop: a replica that could not load a zone
	// would compute another period instance than its peers.
	_ "time/tzdata"
)

// Limits on identifiers. Every identifier becomes part of a NATS subject or
// KV key, so only a conservative token alphabet is accepted.
const (
	MaxKindLen  = 32
	MaxIDLen    = 128
	MaxScopes   = 8 // scopes named in one admit
	MaxMetadata = 16
	MaxMetaLen  = 256
)

// ValidateToken reports whether s is a safe NATS subject / KV key token:
// 1..max characters of [A-Za-z0-9_-]. That excludes '.', '*', '>', ':',
// spaces, control characters and anything that is not ASCII (and so any
// invalid UTF-8).
func ValidateToken(what, s string, max int) error {
	if s == "" {
		return Errorf(CodeInvalidIdentifier, "%s is empty", what)
	}
	if len(s) > max {
		return Errorf(CodeInvalidIdentifier, "%s is longer than %d characters", what, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return Errorf(CodeInvalidIdentifier, "%s %q may hold only letters, digits, '_' and '-'", what, s)
		}
	}
	return nil
}

// Scope names what a budget applies to: "kind:id", e.g. "org:acme",
// "user:u-17", "key:k_9".
type Scope string

// ParseScope validates s: a kind of lower-case letters, digits, '_' or '-'
// starting with a letter, ':' and a token id.
func ParseScope(s string) (Scope, error) {
	kind, id, ok := strings.Cut(s, ":")
	if !ok {
		return "", Errorf(CodeInvalidIdentifier, "scope %q must be kind:id", s)
	}
	if err := ValidateToken("scope kind", kind, MaxKindLen); err != nil {
		return "", err
	}
	if kind[0] < 'a' || kind[0] > 'z' || strings.ToLower(kind) != kind {
		return "", Errorf(CodeInvalidIdentifier, "scope kind %q must be lower case and start with a letter", kind)
	}
	if err := ValidateToken("scope id", id, MaxIDLen); err != nil {
		return "", err
	}
	return Scope(s), nil
}

// Kind returns the part before ':'.
func (s Scope) Kind() string { k, _, _ := strings.Cut(string(s), ":"); return k }

// ID returns the part after ':'.
func (s Scope) ID() string { _, id, _ := strings.Cut(string(s), ":"); return id }

// Period is the calendar a budget resets on: in UTC, or in the budget's
// IANA time zone (see BudgetDefinedV2.TZ).
type Period string

// Periods.
const (
	PeriodMonth    Period = "month"
	PeriodWeek     Period = "week"
	PeriodDay      Period = "day"
	PeriodLifetime Period = "lifetime"
)

// Periods lists every period in a fixed order: the calendar periods from
// the longest, then lifetime.
var Periods = []Period{PeriodMonth, PeriodWeek, PeriodDay, PeriodHour, PeriodMinute, PeriodLifetime}

// ParsePeriod validates s: month, week, day, hour, minute or lifetime.
func ParsePeriod(s string) (Period, error) {
	switch p := Period(s); p {
	case PeriodMonth, PeriodWeek, PeriodDay, PeriodHour, PeriodMinute, PeriodLifetime:
		return p, nil
	}
	return "", Errorf(CodeInvalidPeriod, "period %q must be month, week, day, hour, minute or lifetime", s)
}

// Instance returns the period instance that t falls in, in UTC: "2026-11"
// for month, "2026-W49" for week (ISO 8601: weeks start on Monday, week 1
// holds the year's first Thursday, and the year is the ISO week-year),
// "2026-11-30" for day, "all" for lifetime. It is computed once per admit
// and stored with the reservation.
func (p Period) Instance(t time.Time) string { return p.InstanceIn(t, nil) }

// InstanceIn is Instance with the calendar of loc (nil means UTC): the
// instance is the local date's month, ISO week or day in that zone (see
// Calendar).
func (p Period) InstanceIn(t time.Time, loc *time.Location) string {
	return CalendarOf(p, loc).Instance(t)
}

// MaxTZLen caps the length of a time zone name.
const MaxTZLen = 64

// LoadZone validates an IANA time zone name and loads it: "" and "UTC" are
// UTC. A name that is not a zone of the embedded database (package
// time/tzdata is linked in, so a bare machine knows every zone) or that is
// "Local" is refused with CodeInvalidTZ.
func LoadZone(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if len(tz) > MaxTZLen || tz == "Local" || strings.ContainsAny(tz, " \\") {
		return nil, Errorf(CodeInvalidTZ, "tz %q must be an IANA time zone name like \"Europe/Berlin\"", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, Errorf(CodeInvalidTZ, "tz %q is not an IANA time zone name like \"Europe/Berlin\"", tz)
	}
	return loc, nil
}

// Units. A currency unit reserves the request's amount; a count unit
// reserves 1 per admitted request.
const UnitRequests = "requests"

var currencies = map[string]bool{
	"USD": true, "EUR": true, "GBP": true, "JPY": true, "CHF": true, "CAD": true,
	"AUD": true, "NZD": true, "CNY": true, "INR": true, "SEK": true, "NOK": true,
	"DKK": true, "PLN": true, "BRL": true, "MXN": true, "SGD": true, "HKD": true,
	"KRW": true, "ZAR": true, "CREDITS": true,
}

// ValidateUnit accepts a known ISO 4217 currency code (plus CREDITS, for
// platforms that bill in their own credits) or the count unit "requests".
func ValidateUnit(u string) error {
	if u == UnitRequests || currencies[u] {
		return nil
	}
	return Errorf(CodeInvalidUnit, "unit %q is not a known currency or count unit (%s)", u, UnitRequests)
}

// IsCount reports whether u counts requests rather than money.
func IsCount(u string) bool { return u == UnitRequests }

// BudgetRef names one budget: a scope in a period. A scope may hold a
// money budget and a count budget in the same period: the first defined
// has no Unit here (its key and events are as they always were); the
// other, defined alongside it, is named with its unit in Unit.
type BudgetRef struct {
	Scope  Scope  `json:"scope"`
	Period Period `json:"period"`
	// Unit is set only on a budget defined alongside another of the
	// other kind (count or money) in the same scope and period.
	Unit string `json:"unit,omitempty"`
}

// BalanceRef names the balance of one budget in one period instance.
type BalanceRef struct {
	Scope    Scope  `json:"scope"`
	Period   Period `json:"period"`
	Instance string `json:"instance"`
	// Unit is the BudgetRef's Unit: set only for a budget alongside
	// another in the same period.
	Unit string `json:"unit,omitempty"`
}

// Budget returns the budget the balance belongs to.
func (b BalanceRef) Budget() BudgetRef {
	return BudgetRef{Scope: b.Scope, Period: b.Period, Unit: b.Unit}
}

// Validate checks every part of b as a stored reference: its scope, its
// period, its instance and, when set, its unit.
func (b BalanceRef) Validate() error {
	if _, err := ParseStoredScope(string(b.Scope)); err != nil {
		return err
	}
	if _, err := ParsePeriod(string(b.Period)); err != nil {
		return err
	}
	if b.Unit != "" {
		if err := ValidateUnit(b.Unit); err != nil {
			return err
		}
	}
	return ValidateInstance(b.Instance)
}

// String is "scope/period/instance", with "/unit" for a budget alongside
// another.
func (b BalanceRef) String() string {
	s := string(b.Scope) + "/" + string(b.Period) + "/" + b.Instance
	if b.Unit != "" {
		s += "/" + b.Unit
	}
	return s
}

// SortScopes returns a sorted copy without duplicates.
func SortScopes(in []Scope) []Scope {
	out := append([]Scope(nil), in...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	j := 0
	for i := range out {
		if i == 0 || out[i] != out[i-1] {
			out[j] = out[i]
			j++
		}
	}
	return out[:j]
}
