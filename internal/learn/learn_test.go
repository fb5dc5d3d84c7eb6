package learn_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
)

func m(s string) events.Money { return events.MustMoney(s) }

func TestReserve(t *testing.T) {
	rule := events.LearnRule{Percentile: 95, Window: 100, MinSamples: 20}
	max := m("0.5")
	var w learn.Window
	// Cold start: the priced maximum until 20 calls are known.
	for i := 1; i <= 19; i++ {
		w.Observe(m(fmt.Sprintf("0.0%02d", i)))
	}
	d := learn.Reserve(rule, &w, max)
	require.Equal(t, learn.Decision{Amount: max, Ceiling: max}, d)
	require.Equal(t, d, learn.Reserve(rule, nil, max))

	// 0.001 .. 0.100: p95 by nearest rank is the 95th smallest, 0.095.
	for i := 20; i <= 100; i++ {
		w.Observe(m(fmt.Sprintf("0.%03d", i)))
	}
	d = learn.Reserve(rule, &w, max)
	require.True(t, d.Learned)
	require.Equal(t, 100, d.Samples)
	require.Equal(t, "0.095", d.Amount.String())
	require.Equal(t, "0.5", d.Ceiling.String())

	// The ceiling cuts it; the floor raises it.
	require.Equal(t, "0.05", learn.Reserve(rule, &w, m("0.05")).Amount.String())
	floored := rule
	floored.Floor = m("0.2")
	require.Equal(t, "0.2", learn.Reserve(floored, &w, max).Amount.String())

	// The window keeps the last 100: 100 calls of 0.3 replace them all.
	for i := 0; i < events.MaxLearnWindow; i++ {
		w.Observe(m("0.3"))
	}
	require.Equal(t, events.MaxLearnWindow, w.Len())
	require.Equal(t, "0.3", learn.Reserve(rule, &w, max).Amount.String())

	// A smaller rule window looks at the most recent calls only.
	w.Observe(m("0.01"))
	w.Observe(m("0.02"))
	small := events.LearnRule{Percentile: 50, Window: 2, MinSamples: 2}
	require.Equal(t, "0.01", learn.Reserve(small, &w, max).Amount.String())

	// Every call cost nothing and no floor: the maximum, not zero.
	var zero learn.Window
	for i := 0; i < 20; i++ {
		zero.Observe(m("0"))
	}
	require.Equal(t, learn.Decision{Amount: max, Ceiling: max}, learn.Reserve(rule, &zero, max))
}

func TestWindow_CostsAndRestore(t *testing.T) {
	var w learn.Window
	for i := 0; i < 130; i++ {
		w.Observe(events.MoneyFromInt(int64(i)))
	}
	costs := w.Costs()
	require.Len(t, costs, events.MaxLearnWindow)
	require.Equal(t, "30", costs[0].String())
	require.Equal(t, "129", costs[len(costs)-1].String())
	r := learn.WindowOf(costs)
	require.Equal(t, costs, r.Costs())
	r.Observe(m("7"))
	require.Equal(t, costs, w.Costs(), "a restored window is independent")

	var s learn.State
	s.Observe(learn.Key{Scope: "team:b", Model: "m"}, m("1"))
	s.Observe(learn.Key{Scope: "team:a", Model: "z"}, m("1"))
	s.Observe(learn.Key{Scope: "team:a", Model: "m"}, m("1"))
	require.Equal(t, []learn.Key{{"team:a", "m"}, {"team:a", "z"}, {"team:b", "m"}}, s.Keys())
}

func TestLearnRule_Validate(t *testing.T) {
	require.NoError(t, events.DefaultLearnRule().Validate())
	for _, bad := range []events.LearnRule{
		{Percentile: 0, Window: 10, MinSamples: 1},
		{Percentile: 101, Window: 10, MinSamples: 1},
		{Percentile: 95, Window: 0, MinSamples: 1},
		{Percentile: 95, Window: events.MaxLearnWindow + 1, MinSamples: 1},
		{Percentile: 95, Window: 10, MinSamples: 11},
		{Percentile: 95, Window: 10, MinSamples: 0},
		{Percentile: 95, Window: 10, MinSamples: 1, Floor: m("0").Sub(m("1"))},
	} {
		require.Error(t, bad.Validate(), bad.String())
	}
}

// TestState_Forget: a scope's windows go together, the others stay, and
// Len follows every change (the book's gauge reads it). It can fail: a
// Forget that left a model's window, or a Len that counted a window set
// twice.
func TestState_Forget(t *testing.T) {
	var s learn.State
	one := events.MustMoney("1")
	s.Observe(learn.Key{Scope: "run:a", Model: "m1"}, one)
	s.Observe(learn.Key{Scope: "run:a", Model: "m2"}, one)
	s.Observe(learn.Key{Scope: "run:a", Model: "m2"}, one)
	s.Observe(learn.Key{Scope: "team:t", Model: "m1"}, one)
	s.Set(learn.Key{Scope: "team:t", Model: "m1"}, learn.WindowOf([]events.Money{one}))
	require.Equal(t, 3, s.Len())
	require.Equal(t, 2, s.Forget("run:a"))
	require.Equal(t, 0, s.Forget("run:a"))
	require.Nil(t, s.Window(learn.Key{Scope: "run:a", Model: "m2"}))
	require.Equal(t, 1, s.Len())
	require.Equal(t, []learn.Key{{Scope: "team:t", Model: "m1"}}, s.Keys())
}
