package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Alert messages: what a budget's owners receive (the alert stream, see
// AlertStreamName in package streams, and the webhook sink). Two kinds:
//
//   - threshold: a ThresholdCrossed the ledger committed, one per threshold
//     per period instance per arm generation;
//   - blocking: the budget denied an admit for its limit (limit_reached)
//     for the first time in its period instance and arm generation - a
//     budget blocked at 98 % with every call denied crosses no 100 %
//     threshold, yet its owners must hear.
//
// Alerts are sent for budgets with alerts on (thresholds set). An alert's
// ID names exactly what it reports (AlertMsgID), so any number of replicas
// publishing it store it once.

// TypeAlert is the type of Alert.
const TypeAlert Type = "alert.v1"

// AlertKind is the kind of an Alert.
type AlertKind string

// The kinds of Alert.
const (
	AlertThreshold AlertKind = "threshold"
	AlertBlocking  AlertKind = "blocking"
)

// Alert is one alert message. Balance names the budget and its period
// instance as the ledger stores it (a tenant's scope carries its tenant,
// also given in Tenant); Limit and Used (spent + reserved) are the
// balance's at the alert. A threshold alert carries the Threshold crossed
// and the ReservationID whose admit or settle crossed it; a blocking alert
// the RequestID denied and what it Requested. Arm is the arm generation
// (ThresholdCrossed.Arm).
type Alert struct {
	Type          Type       `json:"type"`
	ID            string     `json:"id"`
	Kind          AlertKind  `json:"kind"`
	Tenant        string     `json:"tenant,omitempty"`
	Balance       BalanceRef `json:"balance"`
	Unit          string     `json:"unit"`
	Threshold     *Money     `json:"threshold,omitempty"`
	Limit         Money      `json:"limit"`
	Used          Money      `json:"used"`
	Requested     string     `json:"requested,omitempty"`
	ReservationID string     `json:"reservation_id,omitempty"`
	RequestID     string     `json:"request_id,omitempty"`
	Arm           uint64     `json:"arm,omitempty"`
	At            time.Time  `json:"at"`
}

// AlertMsgID is the id of an alert of kind in balance b: the balance, the
// threshold (for a threshold alert) or "blocking", and the arm generation
// when it is not 0. "org:acme/month/2026-12/0.8",
// "org:acme/month/2026-12/blocking/arm42".
func AlertMsgID(kind AlertKind, b BalanceRef, threshold Money, arm uint64) string {
	id := b.String() + "/"
	if kind == AlertBlocking {
		id += "blocking"
	} else {
		id += threshold.String()
	}
	if arm != 0 {
		id += "/arm" + strconv.FormatUint(arm, 10)
	}
	return id
}

// ThresholdAlert is the alert of crossing c.
func ThresholdAlert(c ThresholdCrossed) Alert {
	th := c.Threshold
	return Alert{Type: TypeAlert, ID: AlertMsgID(AlertThreshold, c.Balance, c.Threshold, c.Arm), Kind: AlertThreshold,
		Tenant: c.Balance.Scope.Tenant(), Balance: c.Balance, Unit: c.Unit, Threshold: &th, Limit: c.Limit, Used: c.Used,
		ReservationID: c.ReservationID, Arm: c.Arm, At: c.At.UTC()}
}

// BlockingAlert is the alert of balance b (limit, spent + reserved used,
// arm generation arm) denying request requestID for requested at at.
func BlockingAlert(b BalanceRef, unit string, limit, used Money, requested, requestID string, arm uint64, at time.Time) Alert {
	return Alert{Type: TypeAlert, ID: AlertMsgID(AlertBlocking, b, Money{}, arm), Kind: AlertBlocking,
		Tenant: b.Scope.Tenant(), Balance: b, Unit: unit, Limit: limit, Used: used, Requested: requested,
		RequestID: requestID, Arm: arm, At: at.UTC()}
}

// Summary is the alert in one line of text, for people (the webhook's
// "text"): "org:acme per month (2026-12): 80% of the limit reached - 8.2
// of 10 USD used".
func (a Alert) Summary() string {
	where := string(a.Balance.Scope.Local()) + " per " + string(a.Balance.Period) + " (" + a.Balance.Instance + ")"
	if a.Tenant != "" {
		where = "tenant " + a.Tenant + ": " + where
	}
	if a.Kind == AlertBlocking {
		msg := fmt.Sprintf("%s is blocking admits - %s of %s %s used", where, a.Used, a.Limit, a.Unit)
		if a.Requested != "" {
			msg += ", denied a request for " + a.Requested
		}
		return msg
	}
	pct := "?"
	if a.Threshold != nil {
		pct = a.Threshold.Mul(MoneyFromInt(100)).String() + "%"
	}
	return fmt.Sprintf("%s: %s of the limit reached - %s of %s %s used", where, pct, a.Used, a.Limit, a.Unit)
}

// EncodeAlert encodes a with its Type set.
func EncodeAlert(a Alert) ([]byte, error) {
	a.Type = TypeAlert
	a.At = a.At.UTC()
	return json.Marshal(a)
}

// DecodeAlert decodes an alert message strictly (unknown fields, a type
// other than TypeAlert, a kind not known, or no id are refused). Errors:
// CodeInvalidRequest.
func DecodeAlert(data []byte) (Alert, error) {
	var a Alert
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return Alert{}, Errorf(CodeInvalidRequest, "alert: %v", err)
	}
	if dec.More() {
		return Alert{}, Errorf(CodeInvalidRequest, "alert: trailing data")
	}
	switch {
	case a.Type != TypeAlert:
		return Alert{}, Errorf(CodeInvalidRequest, "alert: type %q, want %q", a.Type, TypeAlert)
	case a.Kind != AlertThreshold && a.Kind != AlertBlocking:
		return Alert{}, Errorf(CodeInvalidRequest, "alert: kind %q is neither %q nor %q", a.Kind, AlertThreshold, AlertBlocking)
	case a.ID == "":
		return Alert{}, Errorf(CodeInvalidRequest, "alert: no id")
	}
	return a, nil
}
