package projector_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// FuzzState_Apply folds any message on top of base: Apply must not panic,
// and must either advance the position or fail with an *ApplyError of
// exactly one category, leaving the State unchanged.
func FuzzState_Apply(f *testing.F) {
	both := []events.BalanceRef{acmeDay, acme}
	f.Add(lane(acme), laneRev(f,
		bal(acmeDay, usd("0", "1", "0", 1), opened("r9", acmeDay, "1", both...)),
		bal(acme, usd("1", "3", "0", 2), opened("r9", acme, "1", both...))))
	f.Add(lane(acme), balanceRev(f, acme, usd("2", "0", "0", 0), settled("r1", acme, "2", "2", "0")))
	f.Add(lane(u17), balanceRev(f, u17, usd("0", "0", "0", 0), released("r5", u17, "0.5", events.ReasonExpired)))
	f.Add(lane(acme), []byte(`{"schema":"lane.v1","balances":[]}`))
	f.Add(key(acme), []byte(`{"schema":"balance.v1"}`))
	f.Add(streams.BudgetKey(acme.Budget()), budgetRev(f, acme.Budget(), "10", "USD"))
	f.Add("idem.req-1", []byte("{"))
	categories := []error{projector.ErrMalformed, projector.ErrTransition, projector.ErrMismatch, projector.ErrInvariant}
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		s := base(t)
		before := s.Clone()
		err := s.Apply(4, key, data)
		if err == nil {
			require.Equal(t, uint64(4), s.Position())
			return
		}
		require.Equal(t, before, s)
		var ae *projector.ApplyError
		require.ErrorAs(t, err, &ae)
		n := 0
		for _, c := range categories {
			if errors.Is(err, c) {
				n++
			}
		}
		require.Equal(t, 1, n, "%v", err)
	})
}
