package events

import (
	"bytes"
	"encoding/json"
	"time"
)

// Denial records: a denied admit writes nothing to the ledger (a denial must
// stay cheap and never touch the book of record), so each replica records
// the admits it denies as messages on a stream of their own (see
// DenialStreamName in package streams). They are operational data that
// spend reports count; the audit never reads them.

// TypeAdmitDenied is the type of AdmitDenied.
const TypeAdmitDenied Type = "admit.denied.v1"

// AdmitDenied is one admit a replica denied (not a check or shadow answer).
// Tenant is the tenant the admit acted for ("" untenanted); Scopes,
// RequestID, Amount, Model (the model the admit asked to be priced from)
// and Metadata are as that tenant sent them; Unit is the unit the admit
// was in (the request's, its price's, or the default); Replica names the
// replica that denied it; Denial is the reply's denial (its reason, and
// the blocking budget when one blocked).
type AdmitDenied struct {
	Type      Type              `json:"type"`
	At        time.Time         `json:"at"`
	Replica   string            `json:"replica"`
	Tenant    string            `json:"tenant,omitempty"`
	RequestID string            `json:"request_id"`
	Scopes    []string          `json:"scopes"`
	Amount    string            `json:"amount,omitempty"`
	Model     string            `json:"model,omitempty"`
	Unit      string            `json:"unit,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Denial    Denial            `json:"denial"`
}

// EventType returns TypeAdmitDenied.
func (AdmitDenied) EventType() Type { return TypeAdmitDenied }

// StoredScopes returns the denial's scopes as the ledger stores them
// (TenantScope of its tenant).
func (d AdmitDenied) StoredScopes() []Scope {
	out := make([]Scope, len(d.Scopes))
	for i, s := range d.Scopes {
		out[i] = TenantScope(d.Tenant, Scope(s))
	}
	return out
}

// EncodeAdmitDenied encodes d with its Type set.
func EncodeAdmitDenied(d AdmitDenied) ([]byte, error) {
	d.Type = TypeAdmitDenied
	d.At = d.At.UTC()
	return json.Marshal(d)
}

// DecodeAdmitDenied decodes a denial record strictly (unknown fields and a
// type other than TypeAdmitDenied are refused). Errors: CodeInvalidRequest.
func DecodeAdmitDenied(data []byte) (AdmitDenied, error) {
	var d AdmitDenied
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return AdmitDenied{}, Errorf(CodeInvalidRequest, "denial record: %v", err)
	}
	if dec.More() {
		return AdmitDenied{}, Errorf(CodeInvalidRequest, "denial record: trailing data")
	}
	if d.Type != TypeAdmitDenied {
		return AdmitDenied{}, Errorf(CodeInvalidRequest, "denial record: type %q, want %q", d.Type, TypeAdmitDenied)
	}
	return d, nil
}
