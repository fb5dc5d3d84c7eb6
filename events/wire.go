package events

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"time"
)

// MaxPayloadBytes caps every request body, checked before decoding.
const MaxPayloadBytes = 16 << 10

// TTL bounds and default.
const (
	MinTTL     = time.Second
	MaxTTL     = 24 * time.Hour
	DefaultTTL = 5 * time.Minute
)

// AdmitRequest asks to reserve Amount in every budget of every named scope,
// atomically: in all of them or in none.
type AdmitRequest struct {
	// RequestID is the caller's idempotency key: a retry with the same id
	// and body gets the original answer and reserves once.
	RequestID string `json:"request_id"`
	// Scopes are "kind:id" strings, at most MaxScopes.
	Scopes []string `json:"scopes"`
	// Amount is a positive decimal string, the maximum the call may cost.
	Amount string `json:"amount"`
	// Unit is the currency of Amount; default USD. Budgets counted in
	// "requests" reserve 1 whatever the unit.
	Unit string `json:"unit,omitempty"`
	// TTL is a Go duration ("30s", "5m"); default DefaultTTL, bounds
	// [MinTTL, MaxTTL]. The reservation expires TTL after admission.
	TTL string `json:"ttl,omitempty"`
	// Metadata is copied into the ReservationOpened events.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// AdmitReply answers an admit. Exactly one of the admission fields or
// Denial is set.
type AdmitReply struct {
	Admitted      bool         `json:"admitted"`
	RequestID     string       `json:"request_id"`
	ReservationID string       `json:"reservation_id,omitempty"`
	Amount        string       `json:"amount,omitempty"`
	Unit          string       `json:"unit,omitempty"`
	Balances      []BalanceRef `json:"balances,omitempty"`
	ExpiresAt     *time.Time   `json:"expires_at,omitempty"`
	// Replayed is true when this is the stored answer to an earlier
	// request with the same id.
	Replayed bool    `json:"replayed,omitempty"`
	Denial   *Denial `json:"denial,omitempty"`
}

// Denial says which budget blocked an admit, and why.
type Denial struct {
	Reason    Code   `json:"reason"`
	Message   string `json:"message"`
	Scope     Scope  `json:"scope"`
	Period    Period `json:"period,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Unit      string `json:"unit,omitempty"`
	Limit     string `json:"limit,omitempty"`
	Spent     string `json:"spent,omitempty"`
	Reserved  string `json:"reserved,omitempty"`
	Requested string `json:"requested,omitempty"`
}

// SettleRequest closes a reservation with its actual cost.
type SettleRequest struct {
	ReservationID string `json:"reservation_id"`
	// Actual is a decimal string >= 0, in the reservation's unit.
	Actual string `json:"actual"`
}

// ReleaseRequest gives a whole reservation back.
type ReleaseRequest struct {
	ReservationID string `json:"reservation_id"`
}

// Reservation statuses.
const (
	StatusOpen     = "open"
	StatusSettled  = "settled"
	StatusReleased = "released"
	StatusExpired  = "expired"
)

// CloseReply answers settle and release.
type CloseReply struct {
	ReservationID string `json:"reservation_id"`
	// Status is settled, released or expired.
	Status   string `json:"status"`
	Reserved string `json:"reserved"`
	Actual   string `json:"actual,omitempty"`
	// Overrun is actual - reserved when positive (money spent beyond the
	// reservation, recorded in full).
	Overrun  string       `json:"overrun,omitempty"`
	Late     bool         `json:"late,omitempty"`
	Balances []BalanceRef `json:"balances"`
	// Replayed is true when the reservation was already in this state and
	// nothing changed now.
	Replayed bool `json:"replayed,omitempty"`
}

// BudgetPutRequest defines or changes a budget.
type BudgetPutRequest struct {
	Scope  string `json:"scope"`
	Period string `json:"period"`
	Limit  string `json:"limit"`
	Unit   string `json:"unit"`
}

// BudgetGetRequest reads one budget and its current balance.
type BudgetGetRequest struct {
	Scope  string `json:"scope"`
	Period string `json:"period"`
}

// BudgetListRequest lists budgets, optionally of one scope kind.
type BudgetListRequest struct {
	Kind string `json:"kind,omitempty"`
}

// BudgetView is a budget and its balance in the current period instance.
type BudgetView struct {
	Scope     Scope  `json:"scope"`
	Period    Period `json:"period"`
	Limit     string `json:"limit"`
	Unit      string `json:"unit"`
	Instance  string `json:"instance"`
	Spent     string `json:"spent"`
	Reserved  string `json:"reserved"`
	Overrun   string `json:"overrun"`
	Available string `json:"available"`
	Open      int64  `json:"open"`
}

// BudgetListReply lists budgets sorted by scope and period.
type BudgetListReply struct {
	Budgets []BudgetView `json:"budgets"`
}

// ErrorReply is the body of every failed request.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// DecodeRequest strictly decodes a request body into v: at most
// MaxPayloadBytes, one JSON object, no unknown fields, no trailing data.
func DecodeRequest(data []byte, v any) error {
	if len(data) > MaxPayloadBytes {
		return Errorf(CodePayloadTooLarge, "request is %d bytes; the limit is %d", len(data), MaxPayloadBytes)
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return Errorf(CodeInvalidRequest, "request body must be a JSON object")
	}
	// checkKeys enforces exact, unique, known top-level field names (the
	// request types are flat: their only nested value is a string map), and
	// json.Unmarshal rejects malformed JSON, wrong types and trailing data.
	if err := checkKeys(data, v); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &Error{Code: CodeInvalidRequest, Message: "request body: " + err.Error(), Err: err}
	}
	return nil
}

// checkKeys rejects top-level keys that encoding/json would accept but a
// strict reader must not: a key that matches a field only case-insensitively
// ("AMOUNT") and a key given twice. It scans the bytes once without
// decoding values; malformed JSON is left for the decoder to report.
func checkKeys(data []byte, v any) error {
	allowed := fieldNames(reflect.TypeOf(v))
	var seen [16]string
	keys := seen[:0]
	depth, inStr, esc := 0, false, false
	expectKey := false
	keyStart := -1
	for i, c := range data {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
				if keyStart >= 0 {
					key := string(data[keyStart:i])
					keyStart = -1
					for _, k := range keys {
						if k == key {
							return Errorf(CodeInvalidRequest, "request body: field %q appears twice", key)
						}
					}
					keys = append(keys, key)
					if allowed != nil && !allowed[key] {
						return Errorf(CodeInvalidRequest, "request body: unknown field %q", key)
					}
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
			if depth == 1 && expectKey {
				keyStart = i + 1
				expectKey = false
			}
		case '{', '[':
			depth++
			if depth == 1 && c == '{' {
				expectKey = true
			}
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				expectKey = true
			}
		}
	}
	return nil
}

var fieldCache sync.Map // reflect.Type -> map[string]bool

// fieldNames returns the exact JSON names of a struct type's fields, or nil
// for a type that is not a struct.
func fieldNames(t reflect.Type) map[string]bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = true
	}
	fieldCache.Store(t, m)
	return m
}
