package report_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/stretchr/testify/require"
)

// The fixtures below are the projector's tests' own (projector/projector_test.go):
// the report's folds read the same revisions.
var (
	acme = events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	// acmeDay shares acme's scope, hence its lane, and sorts before it.
	acmeDay = events.BalanceRef{Scope: "org:acme", Period: events.PeriodDay, Instance: "2026-11-30"}
	u17     = events.BalanceRef{Scope: "user:u-17", Period: events.PeriodDay, Instance: "2026-11-30"}
	t0      = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	// lanes2 is a layout of two lanes that puts acme (and acmeDay) in
	// lane.1 and u17 in lane.0.
	lanes2 = func() streams.Layout {
		c := streams.DefaultConfig()
		c.Lanes = 2
		l, err := streams.New(c)
		if err != nil {
			panic(err)
		}
		return l
	}()
)

func m(s string) events.Money { return events.MustMoney(s) }
func budgetRev(t testing.TB, ref events.BudgetRef, limit, unit string) []byte {
	t.Helper()
	b, err := json.Marshal(events.BudgetRevision{
		Schema: events.SchemaBudgetV1, Budget: ref, Limit: m(limit), Unit: unit,
		Events: events.Events{events.BudgetDefined{Budget: ref, Limit: m(limit), Unit: unit, At: t0}},
	})
	require.NoError(t, err)
	return b
}
