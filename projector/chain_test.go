package projector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// chained is a lane.v2 revision naming bals that follows revision prev,
// whose payload was prevData (nil for the first).
func chained(t testing.TB, prev uint64, prevData []byte, bals ...events.BalanceRevision) []byte {
	t.Helper()
	c := events.Chain{Prev: prev}
	if prevData != nil {
		c.PrevHash = events.HashPayload(prevData)
	}
	b, err := json.Marshal(events.LaneRevision{Schema: events.SchemaLane, Chain: c, Balances: bals})
	require.NoError(t, err)
	return b
}

// TestState_Apply_chain: a lane.v2 revision must name the last revision of
// its lane that was applied, by sequence and payload hash. A gap (a
// revision never applied) and a fork (another payload at that sequence) stop
// the fold with ErrChain naming the sequence, and leave the State as it
// was. The chain starts at the first v2 revision after v1 ones. How we know
// it can fail: each bad case is a revision that folds cleanly on its own
// numbers, so only the chain check can refuse it.
func TestState_Apply_chain(t *testing.T) {
	l := lane(acme)
	r1 := chained(t, 0, nil, bal(acme, usd("0", "1", "0", 1), opened("a", acme, "1")))
	r2 := chained(t, 1, r1, bal(acme, usd("0", "2", "0", 2), opened("b", acme, "1")))
	next := bal(acme, usd("0", "3", "0", 3), opened("c", acme, "1"))

	t.Run("follows", func(t *testing.T) {
		s := projector.NewState()
		require.NoError(t, s.Apply(1, l, r1))
		require.NoError(t, s.Apply(2, l, r2))
		require.NoError(t, s.Apply(5, l, chained(t, 2, r2, next)))
	})
	bad := map[string][]byte{
		// Revision 5 names 1: revision 2 was skipped by its writer (a gap
		// seen from the writer's side, a fork from ours).
		"names an older revision": chained(t, 1, r1, next),
		// Revision 5 names 3, which this fold never applied: a gap.
		"names a revision never applied": chained(t, 3, r2, next),
		// Revision 5 names 2 with another payload's hash: a fork.
		"names another payload": chained(t, 2, []byte("another history"), next),
		// A v2 revision claiming to be the first while the lane has two.
		"claims to be first": chained(t, 0, nil, next),
	}
	for name, data := range bad {
		t.Run(name, func(t *testing.T) {
			s := projector.NewState()
			require.NoError(t, s.Apply(1, l, r1))
			require.NoError(t, s.Apply(2, l, r2))
			before, _ := s.Balance(acme)
			err := s.Apply(5, l, data)
			require.ErrorIs(t, err, projector.ErrChain)
			var ce *events.ChainError
			require.ErrorAs(t, err, &ce)
			require.EqualValues(t, 5, ce.Seq)
			require.Contains(t, err.Error(), "revision 5 of "+l)
			require.EqualValues(t, 2, s.Position())
			after, _ := s.Balance(acme)
			require.Equal(t, before, after)
		})
	}
	t.Run("v1 then v2", func(t *testing.T) {
		s := projector.NewState()
		v1 := balanceRev(t, acme, usd("0", "1", "0", 1), opened("a", acme, "1"))
		require.NoError(t, s.Apply(1, l, v1))
		// A v1 revision is not checked; the first v2 names the last v1.
		require.NoError(t, s.Apply(2, l, balanceRev(t, acme, usd("0", "2", "0", 2), opened("b", acme, "1"))))
		err := s.Apply(3, l, chained(t, 1, v1, next))
		require.ErrorIs(t, err, projector.ErrChain, "names revision 1, but 2 was the last")
	})
}

// TestCheck_StopsOnFork: Check over a real stream in which a writer without
// compare-and-set forked a lane skips the forked revision, as a replica's
// gate does, and lists it with its sequence. How we know it can fail: the
// forked revision changes only a balance the other branch never named, so
// its numbers are consistent on either branch; only the chain shows that
// it follows revision 1 while revision 2 was the last.
func TestCheck_StopsOnFork(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l := env.Layout.LaneKey(acme)
	r1 := chained(t, 0, nil, bal(acme, usd("0", "1", "0", 1), opened("a", acme, "1")))
	ack1, err := env.JS.Publish(ctx, env.Layout.Subject(l), r1)
	require.NoError(t, err)
	r2 := chained(t, ack1.Sequence, r1, bal(acme, usd("0", "2", "0", 2), opened("b", acme, "1")))
	_, err = env.JS.Publish(ctx, env.Layout.Subject(l), r2)
	require.NoError(t, err)
	// A second writer decided on revision 1 too, and wrote blindly. It
	// changed another balance of the lane, so its numbers agree with the
	// fold whichever history it is folded on.
	day := events.BalanceRef{Scope: acme.Scope, Period: events.PeriodDay, Instance: "2026-11-30"}
	fork := chained(t, ack1.Sequence, r1, bal(day, usd("0", "1", "0", 1), opened("c", day, "1")))
	ack3, err := env.JS.Publish(ctx, env.Layout.Subject(l), fork)
	require.NoError(t, err)

	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Len(t, rep.Skipped, 1, rep.String())
	require.Equal(t, ack3.Sequence, rep.Skipped[0].Seq)
	require.Contains(t, []signing.Reason{signing.ReasonChain, signing.ReasonReplay}, rep.Skipped[0].Reason)
	require.Contains(t, rep.String(), fmt.Sprintf("seq %d %s: skipped", ack3.Sequence, l))
	_, ok := mustState(t, ctx, env).Reservation("c")
	require.False(t, ok, "nothing of the fork is folded")
}

func mustState(t *testing.T, ctx context.Context, env *testenv.Env) *projector.State {
	t.Helper()
	st, err := projector.New(env.JS, env.Layout).CatchUp(ctx)
	require.NoError(t, err)
	return st
}
