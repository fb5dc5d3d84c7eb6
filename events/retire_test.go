package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestBudgetRetired_Golden freezes budget.retired.v1 and the budget.v2
// revision that carries it (its last definition, "retired": true).
func TestBudgetRetired_Golden(t *testing.T) {
	ref := events.BudgetRef{Scope: "run:r-1", Period: events.PeriodLifetime}
	ev := events.BudgetRetired{Budget: ref, Reason: "run finished", At: fixedAt}
	got, err := events.EncodeEvent(ev)
	require.NoError(t, err)
	b := golden(t, string(events.TypeBudgetRetired)+".json", got)
	back, err := events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(ev), back)

	rev := events.BudgetRevision{Schema: events.SchemaBudget, Chain: events.Chain{Prev: 3, PrevHash: events.HashPayload([]byte("revision 3"))},
		Budget: ref, Limit: events.MustMoney("1"), Unit: "USD", FromDefault: 2, Retired: true, Events: events.Events{ev}}
	got, err = json.Marshal(rev)
	require.NoError(t, err)
	b = golden(t, "budget.v2.retired.json", got)
	backRev, err := events.DecodeBudgetRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, backRev)
}
