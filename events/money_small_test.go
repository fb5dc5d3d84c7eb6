package events

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// apdAdd and apdParse are Add/Sub and ParseMoney as they were before
// their int64 paths: apd all the way.
func apdAdd(a, b Money, sub bool) Money {
	var r Money
	var err error
	if sub {
		_, err = Context.Sub(&r.d, &a.d, &b.d)
	} else {
		_, err = Context.Add(&r.d, &a.d, &b.d)
	}
	if err != nil {
		panic(err)
	}
	r.d.Reduce(&r.d)
	return r
}

func apdParse(s string) Money {
	var m Money
	if _, _, err := m.d.SetString(s); err != nil {
		panic(err)
	}
	m.d.Reduce(&m.d)
	return m
}

// TestMoney_SmallPathsAreApd: the int64 paths of Add, Sub and ParseMoney
// give what apd gives, to the representation (reflect.DeepEqual of the
// decimals, not only the same value: a Money is compared, printed and
// hashed as its decimal), for amounts of every size a ledger stores or
// sums, at the edges of an int64 (where the path must hand over to apd)
// and for zero from every side. How it can fail: an alignment that
// overflows unnoticed, a sum whose sign flipped past MaxInt64, trailing
// zeros left where Reduce strips them, or a zero of another exponent or
// sign.
func TestMoney_SmallPathsAreApd(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	digits := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		return b.String()
	}
	var amounts []string
	for i := 0; i < 400; i++ {
		s := digits(1 + rng.IntN(MaxIntegerDigits))
		if rng.IntN(3) > 0 {
			s += "." + digits(1+rng.IntN(MaxFractionDigits))
		}
		amounts = append(amounts, s)
	}
	amounts = append(amounts, "0", "0.0", "000", "0.000000000000", "1", "10", "100.00", "0.5", "0.50",
		"999999999999999999", "999999999999999999.999999999999", "922337203685477580.7", "9223372036854775807",
		"1000000000000000000", "0.000000000001", "123456789012345678.000000000001")
	parsed := make([]Money, len(amounts))
	for i, s := range amounts {
		m, err := ParseSum(s)
		require.NoError(t, err, s)
		want := apdParse(s)
		require.True(t, reflect.DeepEqual(want.d, m.d), "parse %s: %s (%#v), apd %s (%#v)", s, m, m.d, want, want.d)
		parsed[i] = m
	}
	// Sums far past an int64, and negative values, as differences make.
	big := apdAdd(parsed[len(parsed)-3], parsed[len(parsed)-3], false)
	for range 8 {
		big = apdAdd(big, big, false)
	}
	parsed = append(parsed, big, apdAdd(Zero, big, true), MoneyFromInt(math.MaxInt64), MoneyFromInt(math.MinInt64+1), MoneyFromInt(-1))
	n := 0
	for i, a := range parsed {
		for j, b := range parsed {
			if (i+j)%7 != 0 && i > 20 && j > 20 {
				continue // a sample of the pairs, every pair of the edges
			}
			for _, sub := range []bool{false, true} {
				want := apdAdd(a, b, sub)
				got := a.Add(b)
				if sub {
					got = a.Sub(b)
				}
				require.True(t, reflect.DeepEqual(want.d, got.d), "%s %s %s = %s (%#v), apd %s (%#v)", a, map[bool]string{false: "+", true: "-"}[sub], b, got, got.d, want, want.d)
				n++
			}
		}
	}
	require.Greater(t, n, 10_000)
	t.Logf("%d sums and differences", n)
}

// BenchmarkMoney_SmallPaths: Add and ParseMoney of a report's sums and an
// event's amounts, on their int64 paths and (apd) as before them, side by
// side. Run it with
//
//	go test -run '^$' -bench BenchmarkMoney_SmallPaths ./events/
func BenchmarkMoney_SmallPaths(b *testing.B) {
	sum, amt := MustMoney("1234.567891"), MustMoney("0.0127")
	b.Run("add", func(b *testing.B) {
		for range b.N {
			sum = sum.Add(amt)
		}
	})
	b.Run("add-apd", func(b *testing.B) {
		for range b.N {
			sum = apdAdd(sum, amt, false)
		}
	})
	b.Run("parse", func(b *testing.B) {
		for range b.N {
			amt, _ = ParseMoney("0.0127")
		}
	})
	b.Run("parse-apd", func(b *testing.B) {
		for range b.N {
			amt = apdParse("0.0127")
		}
	})
}
