package codec

import (
	"encoding/json"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
)

// The append encoders below write exactly the bytes encoding/json writes for
// the same values (TestGoldens_AppendReproduces and
// TestAppend_MatchesEncodingJSON hold them to that), without reflection: a group commit encodes every event
// of a revision on the hot path.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json does
// (including its HTML-safe escapes and U+FFFD for invalid UTF-8).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendKey appends ,"key": (every key here follows the leading "type").
func appendKey(b []byte, key string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendMoney(b []byte, m events.Money) []byte {
	return appendString(b, m.String())
}

func appendRef(b []byte, r events.BalanceRef) []byte {
	b = append(b, `{"scope":`...)
	b = appendString(b, string(r.Scope))
	b = append(b, `,"period":`...)
	b = appendString(b, string(r.Period))
	b = append(b, `,"instance":`...)
	b = appendString(b, r.Instance)
	if r.Unit != "" {
		b = append(b, `,"unit":`...)
		b = appendString(b, r.Unit)
	}
	return append(b, '}')
}

func appendBudgetRef(b []byte, r events.BudgetRef) []byte {
	b = append(b, `{"scope":`...)
	b = appendString(b, string(r.Scope))
	b = append(b, `,"period":`...)
	b = appendString(b, string(r.Period))
	if r.Unit != "" {
		b = append(b, `,"unit":`...)
		b = appendString(b, r.Unit)
	}
	return append(b, '}')
}

func appendStringMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

// appendReservationHead opens a reservation event: its type and id.
func appendReservationHead(b []byte, t events.Type, id string) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, t...)
	b = append(b, '"')
	b = appendKey(b, "reservation_id")
	return appendString(b, id)
}

// AppendEvent appends e encoded as events.EncodeEvent encodes it: the
// events of the hot path (a reservation opened, settled or released, and
// budget.defined.v1) without reflection.
func AppendEvent(b []byte, e events.Event) ([]byte, error) {
	switch e := e.(type) {
	case events.BudgetDefined:
		b = append(b, `{"type":"`+string(events.TypeBudgetDefined)+`"`...)
		b = appendKey(b, "budget")
		b = appendBudgetRef(b, e.Budget)
		b = appendKey(b, "limit")
		b = appendMoney(b, e.Limit)
		b = appendKey(b, "unit")
		b = appendString(b, e.Unit)
		b = appendKey(b, "at")
		b = appendTime(b, e.At)
	case events.ReservationOpened:
		b = appendReservationHead(b, events.TypeReservationOpened, e.ReservationID)
		b = appendKey(b, "request_id")
		b = appendString(b, e.RequestID)
		b = appendKey(b, "request_hash")
		b = appendString(b, e.RequestHash)
		b = appendKey(b, "balance")
		b = appendRef(b, e.Balance)
		b = appendKey(b, "amount")
		b = appendMoney(b, e.Amount)
		b = appendKey(b, "unit")
		b = appendString(b, e.Unit)
		b = appendKey(b, "balances")
		if e.Balances == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, r := range e.Balances {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendRef(b, r)
			}
			b = append(b, ']')
		}
		b = appendKey(b, "expires_at")
		b = appendTime(b, e.ExpiresAt)
		b = appendKey(b, "at")
		b = appendTime(b, e.At)
		if len(e.Metadata) > 0 {
			b = appendKey(b, "metadata")
			b = appendStringMap(b, e.Metadata)
		}
		if e.Pricing != nil {
			data, err := json.Marshal(e.Pricing)
			if err != nil {
				return b, &events.Error{Code: events.CodeInternal, Message: "encoding price quote", Err: err}
			}
			b = appendKey(b, "pricing")
			b = append(b, data...)
		}
		if e.Ceiling != nil {
			b = appendKey(b, "ceiling")
			b = appendMoney(b, *e.Ceiling)
		}
	case events.ReservationSettled:
		b = appendReservationHead(b, events.TypeReservationSettled, e.ReservationID)
		b = appendKey(b, "balance")
		b = appendRef(b, e.Balance)
		b = appendKey(b, "reserved")
		b = appendMoney(b, e.Reserved)
		b = appendKey(b, "actual")
		b = appendMoney(b, e.Actual)
		b = appendKey(b, "overrun")
		b = appendMoney(b, e.Overrun)
		if e.Late {
			b = append(b, `,"late":true`...)
		}
		if e.AfterExpiry {
			b = append(b, `,"after_expiry":true`...)
		}
		b = appendKey(b, "at")
		b = appendTime(b, e.At)
		if e.Usage != nil {
			data, err := json.Marshal(e.Usage)
			if err != nil {
				return b, &events.Error{Code: events.CodeInternal, Message: "encoding usage", Err: err}
			}
			b = appendKey(b, "usage")
			b = append(b, data...)
		}
		if e.Excess != nil {
			b = appendKey(b, "excess")
			b = appendMoney(b, *e.Excess)
		}
		if e.Note != "" {
			b = appendKey(b, "note")
			b = appendString(b, e.Note)
		}
	case events.ReservationReleased:
		b = appendReservationHead(b, events.TypeReservationReleased, e.ReservationID)
		b = appendKey(b, "balance")
		b = appendRef(b, e.Balance)
		b = appendKey(b, "reserved")
		b = appendMoney(b, e.Reserved)
		b = appendKey(b, "reason")
		b = appendString(b, e.Reason)
		b = appendKey(b, "at")
		b = appendTime(b, e.At)
	default:
		// The other events are off the hot path: encoding/json writes
		// them, as events does.
		data, err := events.EncodeEvent(e)
		return append(b, data...), err
	}
	return append(b, '}'), nil
}

// AppendLane appends r encoded exactly as json.Marshal encodes it.
func AppendLane(b []byte, r *events.LaneRevision) ([]byte, error) {
	b = append(b, `{"schema":`...)
	b = appendString(b, r.Schema)
	b = appendKey(b, "prev")
	b = strconv.AppendUint(b, r.Prev, 10)
	b = appendKey(b, "prev_hash")
	b = appendString(b, r.PrevHash)
	b = appendKey(b, "balances")
	if r.Balances == nil {
		return append(b, "null}"...), nil
	}
	b = append(b, '[')
	for i := range r.Balances {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendBalance(b, &r.Balances[i]); err != nil {
			return b, err
		}
	}
	return append(b, "]}"...), nil
}

// AppendBalance appends r encoded exactly as json.Marshal encodes it.
func AppendBalance(b []byte, r *events.BalanceRevision) ([]byte, error) {
	b = append(b, `{"schema":`...)
	b = appendString(b, r.Schema)
	b = appendKey(b, "balance")
	b = appendRef(b, r.Balance)
	b = appendKey(b, "unit")
	b = appendString(b, r.Unit)
	b = appendKey(b, "limit")
	b = appendMoney(b, r.Limit)
	b = appendKey(b, "spent")
	b = appendMoney(b, r.Spent)
	b = appendKey(b, "reserved")
	b = appendMoney(b, r.Reserved)
	b = appendKey(b, "overrun")
	b = appendMoney(b, r.Overrun)
	b = appendKey(b, "open")
	b = strconv.AppendInt(b, r.Open, 10)
	if r.Exposure != nil {
		b = appendKey(b, "exposure")
		b = appendMoney(b, *r.Exposure)
	}
	b = appendKey(b, "events")
	if r.Events == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, e := range r.Events {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = AppendEvent(b, e); err != nil {
				return b, err
			}
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}
