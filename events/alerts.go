package events

import (
	"sort"
	"time"
)

// Threshold alerts: a budget may set thresholds, fractions of its limit in
// (0, 1]. When an admit (or a settle) brings a balance's spent + reserved
// to or past a threshold not crossed before in that period instance, the
// lane revision that does it carries a ThresholdCrossed for the balance:
// the compare-and-set of that revision makes it exactly once per threshold
// per period, whatever the replicas racing it. The NATS alert is derived
// from the event (see AlertSubject in package streams).

// TypeThresholdCrossed is the type of ThresholdCrossed.
const TypeThresholdCrossed Type = "threshold.crossed.v1"

// MaxThresholds caps a budget's thresholds.
const MaxThresholds = 8

// DefaultThresholds are the thresholds of a budget that turns alerts on
// without naming its own: 50 %, 80 % and 100 % of the limit.
var DefaultThresholds = []Money{MustMoney("0.5"), MustMoney("0.8"), MustMoney("1")}

// ThresholdCrossed: the balance's Used (spent + reserved, after the change
// that crossed) reached Threshold x Limit for the first time in its period
// instance. ReservationID is the reservation whose admit or settle
// crossed it.
type ThresholdCrossed struct {
	Balance       BalanceRef `json:"balance"`
	Threshold     Money      `json:"threshold"`
	Limit         Money      `json:"limit"`
	Used          Money      `json:"used"`
	Unit          string     `json:"unit"`
	ReservationID string     `json:"reservation_id,omitempty"`
	At            time.Time  `json:"at"`
	// Arm is the arm generation the threshold was crossed in: 0 while the
	// budget keeps the limit, unit, zone and thresholds it was created
	// with, else the revision (stream sequence) of the definition that
	// last changed one of them (see ArmingChange). A change re-arms the
	// thresholds: each may be crossed again, once, in the new generation.
	Arm uint64 `json:"arm,omitempty"`
}

// ArmingChange reports whether a definition change that changed the named
// fields (ledger Budget.Changes: "limit", "unit", "tz", "disabled",
// "fixed_slot", "thresholds") re-arms the budget's thresholds: a new limit,
// unit, calendar zone or set of thresholds makes the old crossings
// meaningless, so each threshold (and the blocking alert) may fire again
// in the current period. Disabling or a fixed slot does not re-arm.
func ArmingChange(changed []string) bool {
	for _, c := range changed {
		switch c {
		case "limit", "unit", "tz", "thresholds":
			return true
		}
	}
	return false
}

// EventType returns TypeThresholdCrossed.
func (ThresholdCrossed) EventType() Type { return TypeThresholdCrossed }

// AlertID is the id of the alert of threshold t in balance b: unique, since
// a threshold is crossed at most once per balance (a budget in one period
// instance). Consumers dedupe NATS alerts by it.
func AlertID(b BalanceRef, t Money) string { return b.String() + "/" + t.String() }

// ParseThresholds validates thresholds: each a decimal in (0, 1], at most
// MaxThresholds, no two equal; it returns them sorted. Errors:
// CodeInvalidAmount naming "thresholds".
func ParseThresholds(in []string) ([]Money, error) {
	if len(in) > MaxThresholds {
		return nil, Errorf(CodeInvalidAmount, "thresholds: at most %d", MaxThresholds)
	}
	one := MoneyFromInt(1)
	out := make([]Money, 0, len(in))
	for _, s := range in {
		m, err := ParseMoney(s)
		if err != nil {
			return nil, Errorf(CodeInvalidAmount, "thresholds: %q is not a plain decimal like \"0.8\"", s)
		}
		if m.Sign() <= 0 || m.Cmp(one) > 0 {
			return nil, Errorf(CodeInvalidAmount, "thresholds: %s is not a fraction of the limit in (0, 1]", m)
		}
		for _, o := range out {
			if o.Cmp(m) == 0 {
				return nil, Errorf(CodeInvalidAmount, "thresholds: %s appears twice", m)
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cmp(out[j]) < 0 })
	return out, nil
}

// Crossed returns the thresholds (sorted ascending) that used reaches in a
// balance of limit and that alerted does not hold yet. A limit of 0 crosses
// nothing.
func Crossed(thresholds, alerted []Money, limit, used Money) []Money {
	if limit.Sign() <= 0 {
		return nil
	}
	var out []Money
	for _, t := range thresholds {
		if used.Cmp(t.Mul(limit)) < 0 {
			continue
		}
		seen := false
		for _, a := range alerted {
			seen = seen || a.Cmp(t) == 0
		}
		if !seen {
			out = append(out, t)
		}
	}
	return out
}
