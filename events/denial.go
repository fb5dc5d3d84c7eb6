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

// TypeAdmitChecked is the type of AdmitChecked.
const TypeAdmitChecked Type = "admit.checked.v1"

// AdmitChecked is one admit a replica answered without reserving: mode
// ModeCheck or ModeShadow (shadow or evaluation traffic). Like a denial it
// writes nothing to the ledger, so the replica records it on the denial
// stream (the same subjects, streams.CheckMsgID), where reports read it:
// the decision the budgets would have made, apart from real spend. Admitted
// tells which; Amount is what it would have reserved (admitted) or asked
// (denied), in Unit; Denial is set when it would have been denied (its
// reason and blocking budget). Tenant, RequestID, Scopes, Model and
// Metadata are as that tenant sent them; Replica names the replica.
type AdmitChecked struct {
	Type      Type              `json:"type"`
	At        time.Time         `json:"at"`
	Replica   string            `json:"replica"`
	Tenant    string            `json:"tenant,omitempty"`
	Mode      string            `json:"mode"`
	RequestID string            `json:"request_id"`
	Scopes    []string          `json:"scopes"`
	Admitted  bool              `json:"admitted"`
	Amount    string            `json:"amount,omitempty"`
	Model     string            `json:"model,omitempty"`
	Unit      string            `json:"unit,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Denial    *Denial           `json:"denial,omitempty"`
}

// EventType returns TypeAdmitChecked.
func (AdmitChecked) EventType() Type { return TypeAdmitChecked }

// Reason is the reason it would have been denied ("" when admitted).
func (c AdmitChecked) Reason() Code {
	if c.Denial == nil {
		return ""
	}
	return c.Denial.Reason
}

// EncodeAdmitChecked encodes c with its Type set.
func EncodeAdmitChecked(c AdmitChecked) ([]byte, error) {
	c.Type = TypeAdmitChecked
	c.At = c.At.UTC()
	return json.Marshal(c)
}

// DecodeAdmitChecked decodes a check record strictly (unknown fields, a
// type other than TypeAdmitChecked and a mode other than ModeCheck or
// ModeShadow are refused). Errors: CodeInvalidRequest.
func DecodeAdmitChecked(data []byte) (AdmitChecked, error) {
	var c AdmitChecked
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return AdmitChecked{}, Errorf(CodeInvalidRequest, "check record: %v", err)
	}
	if dec.More() {
		return AdmitChecked{}, Errorf(CodeInvalidRequest, "check record: trailing data")
	}
	if c.Type != TypeAdmitChecked {
		return AdmitChecked{}, Errorf(CodeInvalidRequest, "check record: type %q, want %q", c.Type, TypeAdmitChecked)
	}
	if c.Mode != ModeCheck && c.Mode != ModeShadow {
		return AdmitChecked{}, Errorf(CodeInvalidRequest, "check record: mode %q, want %q or %q", c.Mode, ModeCheck, ModeShadow)
	}
	return c, nil
}
