package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestExposure_DefaultCarriesCapAndLearn: a kind's default ("user:*")
// with an exposure cap and a learn rule creates, on a scope's first admit,
// a budget that carries both, and enforces them: a user's learned admits
// are refused exposure_cap once their exposure would pass the default's
// cap. A check of a fresh user (a budget the default would create, not
// written) answers under the same cap. The harness's audit (projector,
// in cleanup) checks that every budget created from the default is that
// default, cap and rule included. It fails if creation from a default
// dropped the cap (the third learned admit would be admitted and the
// view would show no cap) or the rule (every admit would reserve the
// maximum, with no exposure).
func TestExposure_DefaultCarriesCapAndLearn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	require.Nil(t, h.call(streams.EndpointPricingPut, events.PricingPutRequest{Model: expoModel, Input: "0", Output: "1000"}, nil))
	learn, expo := "p50", "1"
	put, e := h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "month", Limit: "100", Unit: "USD",
		ExposureCap: &expo, Learn: &learn, LearnWindow: 20, LearnMinSamples: 2})
	require.Nil(t, e)
	require.Equal(t, [3]string{"0", "1", "p50 of 20, cold 2, floor 0"}, [3]string{put.Exposure, put.ExposureCap, put.Learn}, "the default's view")

	// Two cold-start calls (each reserves the priced maximum, 0.5, with no
	// exposure) settle at 0.05: then each learned admit reserves 0.05 with
	// a ceiling of 0.5, 0.45 of exposure; two fit under the cap of 1.
	for i := range 2 {
		a, e := h.admit(expoPriced("cold-"+string(rune('a'+i)), "user:ana"))
		require.Nil(t, e)
		require.True(t, a.Admitted)
		require.Equal(t, "0.5", a.Budgets[0].Amount, "a cold start reserves the maximum")
		_, e = h.settle(a.ReservationID, "0.05")
		require.Nil(t, e)
	}
	for i := range 2 {
		a, e := h.admit(expoPriced("learned-"+string(rune('a'+i)), "user:ana"))
		require.Nil(t, e)
		require.True(t, a.Admitted)
		require.Equal(t, "0.05", a.Budgets[0].Amount, "learned from the default's rule")
	}
	a, e := h.admit(expoPriced("learned-c", "user:ana"))
	require.Nil(t, e)
	require.False(t, a.Admitted)
	require.Equal(t, events.ReasonExposureCap, a.Denial.Reason, "the default's cap: 0.9 + 0.45 > 1")

	v := h.budget("user:ana", "month")
	require.Equal(t, [3]string{"0.9", "1", "p50 of 20, cold 2, floor 0"}, [3]string{v.Exposure, v.ExposureCap, v.Learn}, "the created budget carries both")

	// A check of a user with no budget yet answers from the default, cap
	// and rule included (a cold start: the maximum, no exposure).
	c, e := h.admit(events.AdmitRequest{RequestID: "chk", Scopes: []string{"user:fresh"}, Model: expoModel, MaxOutputTokens: 500, Mode: events.ModeCheck})
	require.Nil(t, e)
	require.True(t, c.Admitted)
	require.Equal(t, "0.5", c.Budgets[0].Amount)

	// Changing the default changes no budget created from it; the put
	// says what it replaced.
	expo2, learn2 := "2", "p90"
	put, e = h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "month", ExposureCap: &expo2, Learn: &learn2})
	require.Nil(t, e)
	require.Equal(t, []string{"exposure_cap", "learn"}, put.Changed)
	require.Equal(t, &events.BudgetDefinition{Limit: "100", Unit: "USD", ExposureCap: "1", Learn: "p50 of 20, cold 2, floor 0"}, put.Previous)
	require.Equal(t, "1", h.budget("user:ana", "month").ExposureCap)
}

// TestBudgetPut_PreviousShowsCapAndLearn: a put that changes a budget's
// exposure cap or learn rule names them in changed, and previous states
// what they were (removed: previous holds them, the view no longer).
func TestBudgetPut_PreviousShowsCapAndLearn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	putExposureBudget(t, h, "team:prev", "10", "3")
	expo, learn := "4", "p90"
	v, e := h.putDef(events.BudgetPutRequest{Scope: "team:prev", Period: "month", ExposureCap: &expo, Learn: &learn})
	require.Nil(t, e)
	require.Equal(t, []string{"exposure_cap", "learn"}, v.Changed)
	require.Equal(t, &events.BudgetDefinition{Limit: "10", Unit: "USD", ExposureCap: "3", Learn: "p50 of 20, cold 5, floor 0"}, v.Previous)
	require.Equal(t, [2]string{"4", "p90 of 100, cold 20, floor 0"}, [2]string{v.ExposureCap, v.Learn})

	none := ""
	v, e = h.putDef(events.BudgetPutRequest{Scope: "team:prev", Period: "month", ExposureCap: &none, Learn: &none})
	require.Nil(t, e)
	require.Equal(t, []string{"exposure_cap", "learn"}, v.Changed)
	require.Equal(t, &events.BudgetDefinition{Limit: "10", Unit: "USD", ExposureCap: "4", Learn: "p90 of 100, cold 20, floor 0"}, v.Previous)
	require.Empty(t, v.ExposureCap)
	require.Empty(t, v.Learn)
}
