package events

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMoney_Compact: an amount that compacts comes back with the same
// text and value; one beyond an int64 coefficient does not compact.
func TestMoney_Compact(t *testing.T) {
	for _, s := range []string{"0", "0.05", "0.2", "1", "100", "0.000000000001", "123456789012345678"} {
		m := MustMoney(s)
		coef, exp, ok := m.Compact()
		require.True(t, ok, s)
		back := MoneyFromCompact(coef, exp)
		require.Equal(t, m.String(), back.String(), s)
		require.Zero(t, m.Cmp(back), s)
	}
	neg := MustMoney("1").Sub(MustMoney("2.5"))
	coef, exp, ok := neg.Compact()
	require.True(t, ok)
	require.Equal(t, "-1.5", MoneyFromCompact(coef, exp).String())
	_, _, ok = MustMoney("123456789012345678.000000000001").Compact()
	require.False(t, ok, "30 digits do not fit an int64 coefficient")
}
