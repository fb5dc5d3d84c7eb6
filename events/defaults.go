package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Defaults per scope kind: a default budget of a kind and period applies to
// every scope of that kind that has no budget of its own in that period. It is kept under
// its own key (see streams.DefaultKey), one revision per change, chained
// like a budget revision. On a scope's first admit the ledger creates the
// scope's budget from the default: a BudgetDefinedV2 with FromDefault set,
// written with a create-only compare-and-set, so replicas admitting the
// first use concurrently create it once.

// TypeDefaultDefined is the type of DefaultDefined.
const TypeDefaultDefined Type = "default.defined.v1"

// SchemaDefault is the schema of a default revision.
const SchemaDefault = "default.v1"

// DefaultScopeID is the id that names a kind's default in a scope on the
// wire: "user:*" is the default budget of every user scope. It is never a
// valid scope id, so it cannot name a scope.
const DefaultScopeID = "*"

// ParseDefaultScope reports whether s names a kind's default ("kind:*")
// and returns the kind, validated as ParseScope validates a kind.
func ParseDefaultScope(s string) (kind string, ok bool, err error) {
	k, id, found := strings.Cut(s, ":")
	if !found || id != DefaultScopeID {
		return "", false, nil
	}
	if _, err := ParseScope(k + ":x"); err != nil {
		return "", true, err
	}
	return k, true, nil
}

// DefaultDefined: the default budget of a scope kind for a period was set
// (created or changed). Its fields mean what BudgetDefinedV2's do.
type DefaultDefined struct {
	Kind       string  `json:"kind"`
	Period     Period  `json:"period"`
	Limit      Money   `json:"limit"`
	Unit       string  `json:"unit"`
	TZ         string  `json:"tz,omitempty"`
	Disabled   bool    `json:"disabled,omitempty"`
	FixedSlot  *Money  `json:"fixed_slot,omitempty"`
	Thresholds []Money `json:"thresholds,omitempty"`
	// ExposureCap and Learn are carried into every budget created from
	// the default, as BudgetDefinedV2's.
	ExposureCap *Money     `json:"exposure_cap,omitempty"`
	Learn       *LearnRule `json:"learn,omitempty"`
	// Changed names the fields this definition changed from the previous
	// one (see BudgetDefinedV2.Changed); empty for a new default.
	Changed []string  `json:"changed,omitempty"`
	At      time.Time `json:"at"`
}

// EventType returns TypeDefaultDefined.
func (DefaultDefined) EventType() Type { return TypeDefaultDefined }

// DefaultRevision is the value of a default key: the definition after the
// revision, chained to the key's previous revision, and its event.
type DefaultRevision struct {
	Schema string `json:"schema"`
	Chain
	Kind       string  `json:"kind"`
	Period     Period  `json:"period"`
	Limit      Money   `json:"limit"`
	Unit       string  `json:"unit"`
	TZ         string  `json:"tz,omitempty"`
	Disabled   bool    `json:"disabled,omitempty"`
	FixedSlot  *Money  `json:"fixed_slot,omitempty"`
	Thresholds []Money `json:"thresholds,omitempty"`
	// ExposureCap and Learn: see DefaultDefined.
	ExposureCap *Money     `json:"exposure_cap,omitempty"`
	Learn       *LearnRule `json:"learn,omitempty"`
	Events      Events     `json:"events"`
}

// DecodeDefaultRevision decodes a default revision (schema default.v1).
func DecodeDefaultRevision(data []byte) (DefaultRevision, error) {
	var r DefaultRevision
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	if r.Schema != SchemaDefault {
		return r, fmt.Errorf("events: schema %q under a default key, want %q", r.Schema, SchemaDefault)
	}
	return r, nil
}
