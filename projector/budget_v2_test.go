package projector_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// TestState_BudgetDefinedV2: a v1 definition, then a v2 one that sets a
// zone, disables the budget and sets a fixed slot, fold to the v2
// definition; a revision stating another zone, disabled flag or slot than
// its event is a mismatch.
func TestState_BudgetDefinedV2(t *testing.T) {
	ref := events.BudgetRef{Scope: "org:acme", Period: events.PeriodWeek}
	key := streams.BudgetKey(ref)
	s := projector.NewState()
	v1 := budgetRev(t, ref, "10", "USD")
	require.NoError(t, s.Apply(1, key, v1))

	slot := m("1")
	ev := events.BudgetDefinedV2{Budget: ref, Limit: m("10"), Unit: "USD", TZ: "Europe/Berlin", Disabled: true,
		FixedSlot: &slot, Changed: []string{"tz", "disabled", "fixed_slot"}, At: t0}
	rev := events.BudgetRevision{Schema: events.SchemaBudget, Chain: events.Chain{Prev: 1, PrevHash: events.HashPayload(v1)},
		Budget: ref, Limit: ev.Limit, Unit: ev.Unit, TZ: ev.TZ, Disabled: true, FixedSlot: &slot, Events: events.Events{ev}}
	data, err := json.Marshal(rev)
	require.NoError(t, err)

	for _, tc := range []struct {
		field, stated, folded string
		mod                   func(*events.BudgetRevision)
	}{
		{"tz", "", "Europe/Berlin", func(r *events.BudgetRevision) { r.TZ = "" }},
		{"disabled", "false", "true", func(r *events.BudgetRevision) { r.Disabled = false }},
		{"fixed_slot", "", "1", func(r *events.BudgetRevision) { r.FixedSlot = nil }},
	} {
		bad := rev
		tc.mod(&bad)
		b, err := json.Marshal(bad)
		require.NoError(t, err)
		err = s.Apply(2, key, b)
		var me *projector.MismatchError
		require.True(t, errors.As(err, &me), "%v", err)
		require.Equal(t, projector.MismatchError{Field: tc.field, Stated: tc.stated, Folded: tc.folded}, *me)
	}
	// An unknown zone in the event is malformed.
	badZone := rev
	badZone.TZ = "Mars/Olympus"
	badZone.Events = events.Events{func() events.BudgetDefinedV2 { e := ev; e.TZ = "Mars/Olympus"; return e }()}
	b, err := json.Marshal(badZone)
	require.NoError(t, err)
	require.ErrorIs(t, s.Apply(2, key, b), projector.ErrMalformed)

	require.NoError(t, s.Apply(2, key, data))
	got, ok := s.Budget(ref)
	require.True(t, ok)
	require.Equal(t, "Europe/Berlin", got.TZ)
	require.True(t, got.Disabled)
	require.Equal(t, "1", got.FixedSlot.String())
	require.EqualValues(t, 2, got.Definitions)
}
