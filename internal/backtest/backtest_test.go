package backtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/backtest"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// skewClock is the real clock plus an offset that only grows: the
// replicas' clock (admits, settles, the sweeper, denial records) never
// runs behind the server's (the stored time of every revision), and a
// jump makes reservations due without waiting for their TTL.
type skewClock struct{ off atomic.Int64 }

func (c *skewClock) now() time.Time       { return time.Now().Add(time.Duration(c.off.Load())).UTC() }
func (c *skewClock) jump(d time.Duration) { c.off.Add(int64(d)) }

// recorded is what a recorded history holds, as the test made it.
type recorded struct {
	admitted, denied, settled, released, expired, late, overruns atomic.Int64
}

// record makes a history on two replicas behind one NATS server: callers
// admit at once in team:search (a month budget and a day budget, both
// tight enough to deny), a third of the admits in org:acme too, and
// settle (a fifth of them above their reservation), release, or leave
// their reservation to expire, some settling it late after it expired.
func record(t *testing.T, env *testenv.Env) *recorded {
	t.Helper()
	clk := &skewClock{}
	a := replicatest.Start(t, env, replica.Config{Now: clk.now, SweepInterval: -1, Name: "a"})
	b := replicatest.Start(t, env, replica.Config{Now: clk.now, SweepInterval: -1, Name: "b"})
	ctx := ctxFor(t)
	for _, def := range []struct {
		scope  string
		period events.Period
		limit  string
	}{{"team:search", events.PeriodMonth, "12"}, {"team:search", events.PeriodDay, "14"}, {"org:acme", events.PeriodMonth, "1000"}} {
		_, err := a.Ledger.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(def.scope), Period: def.period},
			events.MustMoney(def.limit), "USD", clk.now())
		require.NoError(t, err)
	}
	c, err := client.New(env.Conn)
	require.NoError(t, err)
	rec := &recorded{}
	var mu sync.Mutex
	var late []*client.Reservation
	round := func(round, callers, each int) {
		var wg sync.WaitGroup
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := range each {
					scopes := []string{"team:search"}
					if i%3 == 0 {
						scopes = append(scopes, "org:acme")
					}
					cents := 5 + rng.IntN(26)
					res, err := c.Admit(ctx, events.AdmitRequest{Scopes: scopes, Amount: fmt.Sprintf("0.%02d", cents), TTL: "1s",
						Metadata: map[string]string{"user": fmt.Sprintf("u%d", w%4), "feature": []string{"chat", "search"}[i%2]}})
					var denied *client.DeniedError
					if errors.As(err, &denied) && denied.Denial.Reason == events.ReasonLimitReached {
						rec.denied.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("admit: %v", err)
						return
					}
					rec.admitted.Add(1)
					switch k := rng.IntN(10); {
					case k < 4:
						_, err = res.Settle(ctx, fmt.Sprintf("0.%02d", cents/2))
						rec.settled.Add(1)
					case k < 6:
						_, err = res.Settle(ctx, fmt.Sprintf("0.%02d", cents+cents/3)) // an overrun
						rec.settled.Add(1)
						rec.overruns.Add(1)
					case k < 8:
						_, err = res.Release(ctx)
						rec.released.Add(1)
					case k < 9:
						rec.expired.Add(1) // left to expire
					default:
						rec.expired.Add(1)
						mu.Lock()
						late = append(late, res) // settled after it expired
						mu.Unlock()
					}
					if err != nil {
						t.Errorf("close: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	sweep := func() {
		clk.jump(2 * time.Second)
		for _, r := range []*replica.Replica{a, b} {
			require.NoError(t, r.Ledger.Sync(ctx))
		}
		_, err := a.Sweeper.Pass(ctx)
		require.NoError(t, err)
		for _, res := range late {
			_, err := res.Settle(ctx, "0.07")
			require.NoError(t, err)
			rec.late.Add(1)
		}
		late = nil
	}
	round(1, 12, 12)
	sweep()
	round(2, 12, 12)
	sweep()
	for _, r := range []*replica.Replica{a, b} {
		require.NoError(t, r.Denials.Flush(ctx))
	}
	return rec
}

// TestReplay_ExactOnARecordedHistory records a history with concurrent
// callers on two replicas (denials, expiries, releases, overruns, late
// settles), reads it through the gate, and replays it under its own
// budgets: every admit is admitted again, every denial denied by the same
// balance, and every balance after every revision has the numbers the
// revision stated. It can fail: the perturbed replays below (a close moved
// after a later admit, a dropped release, a dropped denial placement
// replaced by time order) each differ from the record, and a replay
// under a lower limit denies calls that were admitted.
func TestReplay_ExactOnARecordedHistory(t *testing.T) {
	env := testenv.New(t)
	rec := record(t, env)
	require.Positive(t, rec.denied.Load(), "the history has denials")
	require.Positive(t, rec.expired.Load(), "and expiries")
	require.Positive(t, rec.released.Load(), "and releases")
	require.Positive(t, rec.overruns.Load(), "and overruns")
	require.Positive(t, rec.late.Load(), "and late settles")

	rd := report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout))
	h, err := backtest.Load(ctxFor(t), rd, "team:search")
	require.NoError(t, err)

	res, err := backtest.Replay(ctxFor(t), h, backtest.Policy{Period: events.PeriodMonth}, backtest.Options{})
	require.NoError(t, err)
	require.True(t, res.Exact.Checked)
	require.Zero(t, res.Exact.Mismatches, "%v", res.Exact.Examples)
	require.True(t, res.Exact.Same)
	require.Equal(t, rec.admitted.Load(), res.Recorded.Admitted)
	require.Equal(t, rec.admitted.Load(), res.Replayed.Admitted)
	require.Equal(t, rec.denied.Load(), res.Recorded.Denied, "every denial record was read")
	require.Equal(t, rec.denied.Load(), res.Replayed.Denied)
	require.Zero(t, res.PlacedByTime, "every denial found the numbers it was decided on")
	require.Zero(t, res.NewlyDenied.Calls)
	require.Zero(t, res.NewlyAdmitted.Calls)
	require.Len(t, res.Balances, 1)
	require.Equal(t, *res.Balances[0].Recorded, res.Balances[0].Replayed)
	require.Positive(t, res.Balances[0].Recorded.Overrun.Sign())

	t.Run("a wrong order differs", func(t *testing.T) {
		steps := clone(h.Steps)
		// Move the first settle before the admit that opened its
		// reservation. (Moving it past a later admit need not change a
		// decision or a final balance: the history's budget may have had
		// room either way, which made this control pass by chance.)
		i := index(steps, 0, backtest.KindSettle)
		k := 0
		for steps[k].Kind != backtest.KindAdmit || steps[k].ReservationID != steps[i].ReservationID {
			k++
		}
		moved := steps[i]
		copy(steps[k+1:i+1], steps[k:i])
		steps[k] = moved
		requireDiffers(t, h, steps)
	})
	t.Run("a dropped release differs", func(t *testing.T) {
		steps := clone(h.Steps)
		i := index(steps, 0, backtest.KindRelease)
		requireDiffers(t, h, append(steps[:i], steps[i+1:]...))
	})
	t.Run("a dropped expiry differs", func(t *testing.T) {
		steps := clone(h.Steps)
		i := index(steps, 0, backtest.KindExpire)
		requireDiffers(t, h, append(steps[:i], steps[i+1:]...))
	})
	t.Run("a denial moved to the start differs", func(t *testing.T) {
		steps := clone(h.Steps)
		i := index(steps, 0, backtest.KindDenial)
		d := steps[i]
		steps = append(steps[:i], steps[i+1:]...)
		// Right after the budgets are defined, nothing is spent: the
		// denial is admitted.
		k := index(steps, 0, backtest.KindAdmit)
		steps = append(steps[:k], append([]backtest.Step{d}, steps[k:]...)...)
		requireDiffers(t, h, steps)
	})
	t.Run("a limit redefined after the last admit is the recorded limit", func(t *testing.T) {
		// The budget's limit lowered with no admit since: no lane
		// revision states it, yet it is the ledger's limit at the end (as
		// budget get and audit balances say). Before, RECORDED showed the
		// last lane revision's stale limit under "exact".
		steps := clone(h.Steps)
		def := *steps[index(steps, 0, backtest.KindBudget)].Budget
		for i := range steps {
			if steps[i].Kind == backtest.KindBudget && steps[i].Budget.Ref.Scope == "team:search" && steps[i].Budget.Ref.Period == events.PeriodMonth {
				def = *steps[i].Budget
			}
		}
		require.EqualValues(t, "team:search", def.Ref.Scope)
		def.Limit = events.MustMoney("0.5")
		last := steps[len(steps)-1]
		steps = append(steps, backtest.Step{Kind: backtest.KindBudget, Seq: last.Seq + 1, At: last.At, Budget: &def})
		res, err := backtest.Replay(ctxFor(t), &backtest.History{Scope: h.Scope, Position: h.Position, Steps: steps},
			backtest.Policy{Period: events.PeriodMonth}, backtest.Options{})
		require.NoError(t, err)
		require.Len(t, res.Balances, 1)
		require.Equal(t, "0.5", res.Balances[0].Recorded.Limit.String())
		require.Equal(t, "0.5", res.Balances[0].Replayed.Limit.String())
	})
	t.Run("a lower limit denies more", func(t *testing.T) {
		low := events.MustMoney("3")
		res, err := backtest.Replay(ctxFor(t), h, backtest.Policy{Period: events.PeriodMonth, Limit: &low},
			backtest.Options{By: []string{"user"}})
		require.NoError(t, err)
		var out strings.Builder
		require.NoError(t, res.Write(&out, backtest.FormatTable))
		t.Log("\n" + out.String())
		// CSV with a decimal comma: the same cells, semicolons between
		// them, a comma in each amount.
		var point, comma strings.Builder
		require.NoError(t, res.Write(&point, backtest.FormatCSV))
		require.NoError(t, res.WriteCSV(&comma, report.DecimalComma))
		pl, cl := strings.Split(point.String(), "\n"), strings.Split(comma.String(), "\n")
		require.Len(t, cl, len(pl))
		changed := 0
		for i := range pl {
			want := strings.Split(pl[i], ",")
			for j, cell := range want {
				if events.PlainDecimal(cell) && strings.Contains(cell, ".") {
					want[j] = strings.Replace(cell, ".", ",", 1)
					changed++
				}
			}
			require.Equal(t, strings.Join(want, ";"), cl[i], "line %d", i)
		}
		require.Positive(t, changed, "some amount has a point")
		require.False(t, res.Exact.Checked)
		require.Positive(t, res.NewlyDenied.Calls)
		require.Positive(t, res.NewlyDenied.Spent.Sign())
		require.Greater(t, res.Replayed.Denied, res.Recorded.Denied)
		require.Equal(t, res.Recorded.Admitted+res.Recorded.Denied, res.Replayed.Admitted+res.Replayed.Denied, "every call decided once")
		require.Len(t, res.RanOut, 1)
		require.True(t, res.RanOut[0].Replayed.Before(*res.RanOut[0].Recorded), "the budget runs out sooner")
		require.Equal(t, "3", res.Balances[0].Replayed.Limit.String())
		// The replay's balance stays within the limit but for overruns.
		b := res.Balances[0].Replayed
		require.LessOrEqual(t, b.Spent.Add(b.Reserved).Sub(b.Overrun).Cmp(low), 0)
		require.NotEmpty(t, res.Groups)
		var blocked int64
		for _, g := range res.Groups {
			require.Equal(t, "user", g.Key)
			blocked += g.NewlyDenied
		}
		require.Equal(t, res.NewlyDenied.Calls, blocked)
	})
	t.Run("a reservation rule reserves what it says", func(t *testing.T) {
		// Reserve a third of what each admit asked: calls denied for
		// want of room in the reservations fit, and the calls that cost
		// more than a third overrun their reservation.
		third := func(s backtest.Step) events.Money {
			return s.Amount.Mul(events.MustMoney("0.34"))
		}
		res, err := backtest.Replay(ctxFor(t), h, backtest.Policy{Period: events.PeriodMonth, Reserve: third}, backtest.Options{})
		require.NoError(t, err)
		require.True(t, res.Reserve)
		require.False(t, res.Exact.Checked)
		require.Positive(t, res.NewlyAdmitted.Calls)
		b := res.Balances[0].Replayed
		require.Positive(t, b.Overrun.Cmp(res.Balances[0].Recorded.Overrun), "smaller reservations overrun more")
	})
	t.Run("learned reservations reserve the observed cost", func(t *testing.T) {
		// The median of the last 50 settled calls (the maximum until 5
		// are known): smaller reservations than asked, so calls denied for
		// want of room fit, and the calls above the median overrun.
		rule := events.LearnRule{Percentile: 50, Window: 50, MinSamples: 5}
		res, err := backtest.Replay(ctxFor(t), h, backtest.Policy{Period: events.PeriodMonth, Learn: &rule}, backtest.Options{})
		require.NoError(t, err)
		require.Equal(t, rule.String(), res.Learn)
		require.False(t, res.Exact.Checked)
		require.Positive(t, res.NewlyAdmitted.Calls)
		require.Positive(t, res.Balances[0].Replayed.Overrun.Cmp(res.Balances[0].Recorded.Overrun))
		bad := events.LearnRule{Percentile: 0, Window: 50, MinSamples: 5}
		_, err = backtest.Replay(ctxFor(t), h, backtest.Policy{Period: events.PeriodMonth, Learn: &bad}, backtest.Options{})
		var e *events.Error
		require.ErrorAs(t, err, &e)
	})
	t.Run("a higher limit admits recorded denials", func(t *testing.T) {
		high := events.MustMoney("100")
		res, err := backtest.Replay(ctxFor(t), h, backtest.Policy{Period: events.PeriodMonth, Limit: &high}, backtest.Options{})
		require.NoError(t, err)
		// The month budget's denials come back (the day budget still
		// denies some, and the calls it admits now spend the day budget:
		// a few recorded admits may be denied by it in their turn).
		require.Positive(t, res.NewlyAdmitted.Calls)
		require.Less(t, res.Replayed.Denied, res.Recorded.Denied)
		require.Empty(t, res.RanOut[0].Replayed, "the month budget never runs out")
	})
}

func budget(scope events.Scope, p events.Period) *ledger.Budget {
	return &ledger.Budget{Ref: events.BudgetRef{Scope: scope, Period: p}, Limit: events.MustMoney("10"), Unit: "USD"}
}

func clone(s []backtest.Step) []backtest.Step { return append([]backtest.Step(nil), s...) }

// index is the index of the first step of kind at or after from.
func index(steps []backtest.Step, from int, kind backtest.Kind) int {
	for i := from; i < len(steps); i++ {
		if steps[i].Kind == kind {
			return i
		}
	}
	panic(fmt.Sprintf("no %s step after %d", kind, from))
}

func requireDiffers(t *testing.T, h *backtest.History, steps []backtest.Step) {
	t.Helper()
	res, err := backtest.Replay(ctxFor(t), &backtest.History{Scope: h.Scope, Position: h.Position, Steps: steps},
		backtest.Policy{Period: events.PeriodMonth}, backtest.Options{})
	require.NoError(t, err)
	require.True(t, res.Exact.Checked)
	require.False(t, res.Exact.Same, "a perturbed replay must differ from the record")
	require.Positive(t, res.Exact.Mismatches)
}

// TestReplay_BadInput: an unknown scope, a period the scope has no budget
// in, an ambiguous budget, a negative limit and a zero slot are refused
// with stable codes before anything is replayed.
func TestReplay_BadInput(t *testing.T) {
	h := &backtest.History{Scope: "team:x", Steps: []backtest.Step{
		{Kind: backtest.KindBudget, Budget: budget("team:x", events.PeriodMonth)},
		{Kind: backtest.KindBudget, Budget: budget("team:x", events.PeriodDay)},
	}}
	zero := events.MustMoney("0")
	neg := zero.Sub(events.MustMoney("1"))
	for _, tc := range []struct {
		name string
		pol  backtest.Policy
		code events.Code
	}{
		{"ambiguous", backtest.Policy{}, events.CodeInvalidPeriod},
		{"no such period", backtest.Policy{Period: events.PeriodWeek}, events.CodeUnknownBudget},
		{"negative limit", backtest.Policy{Period: events.PeriodMonth, Limit: &neg}, events.CodeInvalidAmount},
		{"zero slot", backtest.Policy{Period: events.PeriodMonth, FixedSlot: &zero}, events.CodeInvalidAmount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := backtest.Replay(ctxFor(t), h, tc.pol, backtest.Options{})
			var e *events.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tc.code, e.Code)
		})
	}
	env := testenv.New(t)
	_, err := backtest.Load(ctxFor(t), report.NewReader(env.JS, env.Layout, projector.New(env.JS, env.Layout)), "team:nobody")
	var e *events.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, events.CodeUnknownBudget, e.Code)
}

// replayOneDenial replays a history of one month budget of scope in
// budgetUnit and one recorded denial by it of reason, of an admit of 1 in
// unit.
func replayOneDenial(t *testing.T, scope events.Scope, budgetUnit, unit string, reason events.Code) *backtest.Result {
	t.Helper()
	def := budget(scope, events.PeriodMonth)
	def.Unit = budgetUnit
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	h := &backtest.History{Scope: scope, Steps: []backtest.Step{
		{Kind: backtest.KindBudget, Seq: 1, At: at, Budget: def},
		{Kind: backtest.KindDenial, At: at.Add(time.Minute), RequestID: "denied-1", Unit: unit, Count: 1, Amount: events.MustMoney("10.305"),
			Denial: &events.Denial{Reason: reason, Scope: scope, Period: events.PeriodMonth, Instance: "2026-12", Unit: budgetUnit}},
	}}
	res, err := backtest.Replay(ctxFor(t), h, backtest.Policy{Period: events.PeriodMonth}, backtest.Options{})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Recorded.Denied)
	return res
}

// A denial of an admit in another currency than the scope's budget
// (unit_mismatch) is this scope's, for a reason no limit changes: denied
// again, and its amount, in dollars, is not added to a table in euros.
// How it can fail: denied_amount read 10.305 "EUR" for a USD admit.
func TestReplay_OtherCurrencyNotSummed(t *testing.T) {
	res := replayOneDenial(t, "team:eu", "EUR", "USD", events.ReasonUnitMismatch)
	require.EqualValues(t, 1, res.Replayed.Denied)
	require.EqualValues(t, 1, res.DeniedElsewhere)
	require.True(t, res.Recorded.DeniedAmount.IsZero(), res.Recorded.DeniedAmount.String())
	require.True(t, res.Replayed.DeniedAmount.IsZero(), res.Replayed.DeniedAmount.String())
}

// A recorded exposure_cap denial by the budget is counted as recorded
// (the table's exposure_cap_denied read 0 against the replay's 1).
func TestReplay_RecordedExposureCapDenialCounted(t *testing.T) {
	res := replayOneDenial(t, "team:capped", "USD", "USD", events.ReasonExposureCap)
	require.EqualValues(t, 1, res.Recorded.ExposureCapDenied)
}
