package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Type is an event's explicit, versioned type. It is written into every
// encoded event; decoding switches on it. A released type is frozen by the
// golden files in testdata/: a breaking change is a new version.
type Type string

// Event types.
const (
	TypeBudgetDefined       Type = "budget.defined.v1"
	TypeReservationOpened   Type = "reservation.opened.v1"
	TypeReservationSettled  Type = "reservation.settled.v1"
	TypeReservationReleased Type = "reservation.released.v1"
)

// Event is one past-tense fact in the book of record.
type Event interface{ EventType() Type }

// BudgetDefined: a budget's limit and unit were set (created or changed).
type BudgetDefined struct {
	Budget BudgetRef `json:"budget"`
	Limit  Money     `json:"limit"`
	Unit   string    `json:"unit"`
	At     time.Time `json:"at"`
}

// ReservationOpened: Amount was reserved in one balance. A reservation across
// several budgets is one ReservationOpened per balance, all committed in one
// atomic write and sharing ReservationID; Balances lists them all.
type ReservationOpened struct {
	ReservationID string            `json:"reservation_id"`
	RequestID     string            `json:"request_id"`
	RequestHash   string            `json:"request_hash"`
	Balance       BalanceRef        `json:"balance"`
	Amount        Money             `json:"amount"`
	Unit          string            `json:"unit"`
	Balances      []BalanceRef      `json:"balances"`
	ExpiresAt     time.Time         `json:"expires_at"`
	At            time.Time         `json:"at"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// ReservationSettled: the reservation closed with its actual cost. Spent
// grows by Actual. Reserved is the amount the reservation held in this
// balance; it leaves reserved now unless AfterExpiry, when the sweeper had
// already returned it. Overrun is the money spent beyond what was reserved,
// recorded in full, never clamped: max(0, Actual-Reserved), or all of Actual
// when AfterExpiry (nothing was reserved for it any more). Late is set when
// the settle arrived after ExpiresAt.
type ReservationSettled struct {
	ReservationID string     `json:"reservation_id"`
	Balance       BalanceRef `json:"balance"`
	Reserved      Money      `json:"reserved"`
	Actual        Money      `json:"actual"`
	Overrun       Money      `json:"overrun"`
	Late          bool       `json:"late,omitempty"`
	AfterExpiry   bool       `json:"after_expiry,omitempty"`
	At            time.Time  `json:"at"`
}

// Release reasons.
const (
	ReasonReleased = "released" // the caller gave it back
	ReasonExpired  = "expired"  // the sweeper released it after ExpiresAt
)

// ReservationReleased: the whole reservation went back to the budget.
type ReservationReleased struct {
	ReservationID string     `json:"reservation_id"`
	Balance       BalanceRef `json:"balance"`
	Reserved      Money      `json:"reserved"`
	Reason        string     `json:"reason"`
	At            time.Time  `json:"at"`
}

func (BudgetDefined) EventType() Type       { return TypeBudgetDefined }
func (ReservationOpened) EventType() Type   { return TypeReservationOpened }
func (ReservationSettled) EventType() Type  { return TypeReservationSettled }
func (ReservationReleased) EventType() Type { return TypeReservationReleased }

// EncodeEvent writes e as a JSON object with its "type" first.
func EncodeEvent(e Event) ([]byte, error) { return AppendEvent(nil, e) }

// DecodeEvent reads one encoded event. An unknown type is an error.
func DecodeEvent(b []byte) (Event, error) {
	var head struct {
		Type Type `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("event: %v", err), Err: err}
	}
	strict := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	var err error
	switch head.Type {
	case TypeBudgetDefined:
		var v struct {
			Type Type `json:"type"`
			BudgetDefined
		}
		if err = strict(&v); err == nil {
			return v.BudgetDefined, nil
		}
	case TypeReservationOpened:
		var v struct {
			Type Type `json:"type"`
			ReservationOpened
		}
		if err = strict(&v); err == nil {
			return v.ReservationOpened, nil
		}
	case TypeReservationSettled:
		var v struct {
			Type Type `json:"type"`
			ReservationSettled
		}
		if err = strict(&v); err == nil {
			return v.ReservationSettled, nil
		}
	case TypeReservationReleased:
		var v struct {
			Type Type `json:"type"`
			ReservationReleased
		}
		if err = strict(&v); err == nil {
			return v.ReservationReleased, nil
		}
	default:
		return nil, Errorf(CodeInvalidRequest, "unknown event type %q", head.Type)
	}
	return nil, &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("event %s: %v", head.Type, err), Err: err}
}

// Events is a list of events that encodes each with its type.
type Events []Event

// MarshalJSON encodes every event with EncodeEvent.
func (es Events) MarshalJSON() ([]byte, error) {
	if es == nil {
		return []byte("null"), nil
	}
	b := []byte{'['}
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendEvent(b, e); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// UnmarshalJSON decodes every event with DecodeEvent.
func (es *Events) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Events, len(raw))
	for i, r := range raw {
		e, err := DecodeEvent(r)
		if err != nil {
			return err
		}
		out[i] = e
	}
	*es = out
	return nil
}

// Revision schemas.
const (
	SchemaLane    = "lane.v1"
	SchemaBalance = "balance.v1"
	SchemaBudget  = "budget.v1"
)

// LaneRevision is the value of a lane key in the ledger bucket: every
// balance that this revision changed, each after the revision, with the
// events the revision applied to it, in balance key order. The KV stream
// keeps every revision, so the stream is the book of record: folding the
// events of all revisions in stream order yields exactly the numbers that
// the last revision naming each balance states.
type LaneRevision struct {
	Schema   string            `json:"schema"`
	Balances []BalanceRevision `json:"balances"`
}

// BalanceRevision is one balance in a LaneRevision: the balance after the
// revision and the events that the revision applied to it.
type BalanceRevision struct {
	Schema   string     `json:"schema"`
	Balance  BalanceRef `json:"balance"`
	Unit     string     `json:"unit"`
	Limit    Money      `json:"limit"`
	Spent    Money      `json:"spent"`
	Reserved Money      `json:"reserved"`
	Overrun  Money      `json:"overrun"`
	Open     int64      `json:"open"`
	Events   Events     `json:"events"`
}

// BudgetRevision is the value of a budget definition key.
type BudgetRevision struct {
	Schema string    `json:"schema"`
	Budget BudgetRef `json:"budget"`
	Limit  Money     `json:"limit"`
	Unit   string    `json:"unit"`
	Events Events    `json:"events"`
}
