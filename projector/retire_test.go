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

// TestState_BudgetRetired: a retirement folds into the budget (Retired,
// its time, revision and reason) and keeps its definition; a revision that
// retires without saying so, or says so without retiring, is a mismatch;
// a second retirement and a definition after one are invalid transitions,
// as is retiring a budget never defined.
func TestState_BudgetRetired(t *testing.T) {
	ref := events.BudgetRef{Scope: "run:r1", Period: events.PeriodLifetime}
	key := streams.BudgetKey(ref)
	s := projector.NewState()
	v1 := budgetRev(t, ref, "1", "USD")
	require.NoError(t, s.Apply(1, key, v1))

	retire := func(prev []byte, prevSeq uint64, stated bool) []byte {
		rev := events.BudgetRevision{Schema: events.SchemaBudget, Chain: events.Chain{Prev: prevSeq, PrevHash: events.HashPayload(prev)},
			Budget: ref, Limit: m("1"), Unit: "USD", Retired: stated,
			Events: events.Events{events.BudgetRetired{Budget: ref, Reason: "run over", At: t0}}}
		data, err := json.Marshal(rev)
		require.NoError(t, err)
		return data
	}
	var me *projector.MismatchError
	err := s.Apply(2, key, retire(v1, 1, false))
	require.True(t, errors.As(err, &me), "%v", err)
	require.Equal(t, projector.MismatchError{Field: "retired", Stated: "false", Folded: "true"}, *me)

	r2 := retire(v1, 1, true)
	require.NoError(t, s.Apply(2, key, r2))
	got, ok := s.Budget(ref)
	require.True(t, ok)
	require.True(t, got.Retired)
	require.EqualValues(t, 2, got.RetiredRevision)
	require.Equal(t, "run over", got.RetiredReason)
	require.Equal(t, "1", got.Limit.String())

	require.ErrorIs(t, s.Apply(3, key, retire(r2, 2, true)), projector.ErrTransition, "retired twice")
	def := events.BudgetDefinedV2{Budget: ref, Limit: m("5"), Unit: "USD", Changed: []string{"limit"}, At: t0}
	again, err := json.Marshal(events.BudgetRevision{Schema: events.SchemaBudget, Chain: events.Chain{Prev: 2, PrevHash: events.HashPayload(r2)},
		Budget: ref, Limit: m("5"), Unit: "USD", Retired: true, Events: events.Events{def}})
	require.NoError(t, err)
	require.ErrorIs(t, s.Apply(3, key, again), projector.ErrTransition, "a definition after the retirement")

	other := events.BudgetRef{Scope: "run:never", Period: events.PeriodLifetime}
	never, err := json.Marshal(events.BudgetRevision{Schema: events.SchemaBudget, Budget: other, Limit: m("1"), Unit: "USD", Retired: true,
		Events: events.Events{events.BudgetRetired{Budget: other, At: t0}}})
	require.NoError(t, err)
	require.ErrorIs(t, s.Apply(3, streams.BudgetKey(other), never), projector.ErrTransition)
}
