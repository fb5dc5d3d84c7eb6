package events

import (
	"bytes"

	"github.com/cockroachdb/apd/v3"
)

// Compact returns m as coef × 10^exp, for a store that keeps many amounts
// (the ledger's idempotency window) in 9 bytes instead of an apd.Decimal.
// ok is false when m does not fit: a coefficient beyond int64, an exponent
// beyond int8, or a negative zero. MoneyFromCompact(coef, exp) is then m,
// digit for digit (String gives the same text).
func (m Money) Compact() (coef int64, exp int8, ok bool) {
	if m.d.Form != apd.Finite || !m.d.Coeff.IsInt64() || m.d.Exponent < -128 || m.d.Exponent > 127 {
		return 0, 0, false
	}
	coef = m.d.Coeff.Int64()
	if m.d.Negative {
		if coef == 0 {
			return 0, 0, false
		}
		coef = -coef
	}
	return coef, int8(m.d.Exponent), true
}

// MoneyFromCompact returns coef × 10^exp: the Money that Compact split.
func MoneyFromCompact(coef int64, exp int8) Money {
	if coef == 0 && exp == 0 {
		return Zero
	}
	var m Money
	m.d.Set(apd.New(coef, int32(exp)))
	return m
}

// sniffType reads the type of an encoded event written as AppendEvent
// writes it, "type" first ({"type":"reservation.opened.v1",...}), without
// decoding the rest: the strict decode that follows reads the whole
// object anyway. ok is false for anything else (another key order, an
// escape, a second "type" key anywhere), which is then read the slow way.
func sniffType(b []byte) (Type, bool) {
	const pre = `{"type":"`
	if len(b) < len(pre) || string(b[:len(pre)]) != pre {
		return "", false
	}
	for i := len(pre); i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			if i+1 >= len(b) || (b[i+1] != ',' && b[i+1] != '}') || bytes.Count(b, []byte(`"type"`)) != 1 {
				return "", false
			}
			return Type(b[len(pre):i]), true
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return "", false
		}
	}
	return "", false
}
