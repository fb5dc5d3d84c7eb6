package events

import "github.com/cockroachdb/apd/v3"

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
