package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

func (h *harness) retire(req events.BudgetRetireRequest) (events.BudgetRetireReply, *events.Error) {
	h.t.Helper()
	var v events.BudgetRetireReply
	e := h.call(streams.EndpointBudgetRetire, req, &v)
	return v, e
}

// TestRetire_RunOver: an agent run's budget from a default, retired when
// the run is over, through another replica than the one admitting. Its
// call still open settles; every later admit naming the run is denied
// budget_retired on both replicas, and no default creates the budget again
// (its key holds two revisions: the creation and the retirement); a put of
// it is refused; it leaves the list (unless asked) and the tenant's count
// of budgets from defaults; a void naming it writes nothing to it; bad
// requests change nothing. The harness's audit (projector.Check) then
// replays the stream and agrees. It can fail: without the retirement in
// the admit's decision the admit after it is admitted, and without it in
// stays a tombstone in the book, a default would create the budget again.
func TestRetire_RunOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "1", Unit: "USD"})
	require.Nil(t, e)
	h.putBudget("team:search", "month", "100", "USD")
	a0, a1 := h.replicas[0].Admitter, h.replicas[1].Admitter
	admit := func(a interface {
		Admit(context.Context, events.AdmitRequest) (events.AdmitReply, error)
	}, rid string) events.AdmitReply {
		rep, err := a.Admit(ctxT(t), events.AdmitRequest{RequestID: rid, Scopes: []string{"run:r1", "team:search"}, Amount: "0.3"})
		require.NoError(t, err)
		return rep
	}
	first := admit(a0, "c1")
	require.True(t, first.Admitted)
	_, e = h.settle(first.ReservationID, "0.25")
	require.Nil(t, e)
	open := admit(a0, "c2")
	require.True(t, open.Admitted)
	require.Equal(t, 1, h.replicas[0].Ledger.TenantDefaultBudgets(""))

	got, e := h.retire(events.BudgetRetireRequest{Scope: "run:r1", Period: "lifetime", Reason: "run over"})
	require.Nil(t, e)
	require.True(t, got.Retired)
	require.False(t, got.Already)
	require.Equal(t, "0.25", got.Spent)
	require.Equal(t, "run over", got.RetiredReason)
	at, err := time.Parse(time.RFC3339Nano, got.RetiredAt)
	require.NoError(t, err, "retired_at %q", got.RetiredAt)
	require.False(t, at.IsZero())
	require.Equal(t, "0.3", got.Reserved, "the open call still holds its room")
	again, e := h.retire(events.BudgetRetireRequest{Scope: "run:r1", Period: "lifetime"})
	require.Nil(t, e)
	require.True(t, again.Already)

	runKey := streams.BudgetKey(events.BudgetRef{Scope: "run:r1", Period: events.PeriodLifetime})
	for i, a := range []interface {
		Admit(context.Context, events.AdmitRequest) (events.AdmitReply, error)
	}{a0, a1} {
		rep := admit(a, fmt.Sprintf("after-%d", i))
		require.False(t, rep.Admitted, "replica %d", i)
		require.Equal(t, events.ReasonBudgetRetired, rep.Denial.Reason, "replica %d", i)
		require.Equal(t, events.Scope("run:r1"), rep.Denial.Scope)
	}
	require.EqualValues(t, 2, h.revisionsOf(runKey), "created once, retired once: no default made it again")
	// The request id's own answers come first, as for any scope: a
	// retry of the call still open replays it, a reuse with another body
	// is a mismatch, and a voided id is voided.
	replay, err := a1.Admit(ctxT(t), events.AdmitRequest{RequestID: "c2", Scopes: []string{"run:r1", "team:search"}, Amount: "0.3"})
	require.NoError(t, err)
	require.True(t, replay.Admitted)
	require.True(t, replay.Replayed)
	require.Equal(t, open.ReservationID, replay.ReservationID)
	_, err = a1.Admit(ctxT(t), events.AdmitRequest{RequestID: "c2", Scopes: []string{"run:r1", "team:search"}, Amount: "0.4"})
	require.Equal(t, events.CodeIdempotencyMismatch, events.CodeOf(err))
	_, e = h.void("gone-1", "run:r1", "team:search")
	require.Nil(t, e)
	_, err = a1.Admit(ctxT(t), events.AdmitRequest{RequestID: "gone-1", Scopes: []string{"run:r1", "team:search"}, Amount: "0.1"})
	require.Equal(t, events.CodeRequestVoided, events.CodeOf(err))
	for _, r := range h.replicas {
		require.NoError(t, r.Ledger.Sync(ctxT(t)))
		require.Zero(t, r.Ledger.TenantDefaultBudgets(""), "a retired budget holds no room in the tenant's count")
	}

	// The call open at the retirement settles, in both budgets.
	closed, e := h.settle(open.ReservationID, "0.2")
	require.Nil(t, e)
	require.Equal(t, events.StatusSettled, closed.Status)
	require.Equal(t, "0.45", h.budget("team:search", "month").Spent)

	_, e = h.putDef(events.BudgetPutRequest{Scope: "run:r1", Period: "lifetime", Limit: "5"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeBudgetRetired, e.Code)
	require.Contains(t, e.Message, "run:r1 per lifetime was retired")
	// Nor a new budget of the scope: it could never be used.
	_, e = h.putDef(events.BudgetPutRequest{Scope: "run:r1", Period: "month", Limit: "5", Unit: "USD"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeBudgetRetired, e.Code)

	var list events.BudgetListReply
	require.Nil(t, h.call(streams.EndpointBudgetList, events.BudgetListRequest{Kind: "run"}, &list))
	require.Empty(t, list.Budgets, "a list leaves retired budgets out")
	require.Nil(t, h.call(streams.EndpointBudgetList, events.BudgetListRequest{Kind: "run", Retired: true}, &list))
	require.Len(t, list.Budgets, 1)
	require.True(t, list.Budgets[0].Retired)
	require.True(t, h.budget("run:r1", "lifetime").Retired)

	// A void naming the run and the team writes its tombstone in the
	// team's balance only.
	before := h.revisionsOf(h.env.Layout.LaneKey(events.BalanceRef{Scope: "run:r1", Period: events.PeriodLifetime, Instance: events.InstanceLifetime}))
	_, e = h.void("v1", "run:r1", "team:search")
	require.Nil(t, e)
	if h.env.Layout.LaneKey(events.BalanceRef{Scope: "run:r1", Period: events.PeriodLifetime, Instance: events.InstanceLifetime}) !=
		h.env.Layout.LaneKey(events.BalanceRef{Scope: "team:search", Period: events.PeriodMonth, Instance: "2026-11"}) {
		require.Equal(t, before, h.revisionsOf(h.env.Layout.LaneKey(events.BalanceRef{Scope: "run:r1", Period: events.PeriodLifetime, Instance: events.InstanceLifetime})))
	}

	// A snapshot carries the tombstone: a replica's restart and the
	// audit from the snapshot (which compares its definitions with the
	// replay's) agree with the stream.
	_, err = h.replicas[1].Ledger.Snapshot(ctxT(t))
	require.NoError(t, err)
	chk, err := projector.Check(ctxT(t), h.env.JS, h.env.Layout, projector.WithFromSnapshot())
	require.NoError(t, err)
	require.True(t, chk.OK(), "audit from the snapshot: %s", chk)

	// Bad requests change nothing.
	seq, _ := h.streamState()
	for _, c := range []struct {
		req  events.BudgetRetireRequest
		code events.Code
	}{
		{events.BudgetRetireRequest{Scope: "run:never", Period: "lifetime"}, events.CodeUnknownBudget},
		{events.BudgetRetireRequest{Scope: "run", Period: "lifetime"}, events.CodeInvalidIdentifier},
		{events.BudgetRetireRequest{Scope: "team:search", Period: "fortnight"}, events.CodeInvalidPeriod},
		{events.BudgetRetireRequest{Scope: "team:search", Period: "month", Reason: strings.Repeat("x", events.MaxRetireReasonLen+1)}, events.CodeInvalidRequest},
		{events.BudgetRetireRequest{Scope: "team:search", Period: "month", Reason: "two\nlines"}, events.CodeInvalidRequest},
		{events.BudgetRetireRequest{Scope: "team:search", Period: "month", Reason: "bell\x07"}, events.CodeInvalidRequest},
		// Another currency than the budget's: never the budget in USD
		// (a retirement cannot be undone); nor a count budget it lacks.
		{events.BudgetRetireRequest{Scope: "team:search", Period: "month", Unit: "EUR"}, events.CodeUnknownBudget},
		{events.BudgetRetireRequest{Scope: "team:search", Period: "month", Unit: "requests"}, events.CodeUnknownBudget},
		// A default is not a budget: said so, with what to do instead.
		{events.BudgetRetireRequest{Scope: "run:*", Period: "lifetime"}, events.CodeInvalidIdentifier},
	} {
		_, e := h.retire(c.req)
		require.NotNil(t, e, "%+v", c.req)
		require.Equal(t, c.code, e.Code, "%+v", c.req)
		if c.req.Scope == "run:*" {
			require.Contains(t, e.Message, "run:* is a default, not a budget")
		}
	}
	after, _ := h.streamState()
	require.Equal(t, seq, after)
	require.False(t, h.budget("team:search", "month").Retired)
}

// TestRetire_RacingAdmits: 40 admits of a run race its retirement over two
// replicas. An admit decided before the retirement was folded may land
// (its reservation is then open in the retired budget and settles there);
// none lands after, and none over-admits: the run's budget of 1 holds at
// most 10 calls of 0.1, which the harness's audit replays. Every admitted
// call settles.
func TestRetire_RacingAdmits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "1", Unit: "USD"})
	require.Nil(t, e)
	warm, err := h.replicas[0].Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: "warm", Scopes: []string{"run:race"}, Amount: "0.1"})
	require.NoError(t, err)
	require.True(t, warm.Admitted)
	var wg sync.WaitGroup
	replies := make([]events.AdmitReply, 40)
	errs := make([]error, 40)
	for i := range replies {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			replies[i], errs[i] = h.replicas[i%2].Admitter.Admit(context.Background(), events.AdmitRequest{
				RequestID: fmt.Sprintf("race-%d", i), Scopes: []string{"run:race"}, Amount: "0.1"})
		}(i)
	}
	_, re := h.retire(events.BudgetRetireRequest{Scope: "run:race", Period: "lifetime"})
	wg.Wait()
	require.Nil(t, re)
	admitted := 1
	for i := range replies {
		require.NoError(t, errs[i])
		if !replies[i].Admitted {
			require.Contains(t, []events.Code{events.ReasonBudgetRetired, events.ReasonLimitReached}, replies[i].Denial.Reason)
			continue
		}
		admitted++
		_, e := h.settle(replies[i].ReservationID, "0.1")
		require.Nil(t, e, "an admitted call settles")
	}
	require.LessOrEqual(t, admitted, 10)
	_, e = h.settle(warm.ReservationID, "0.1")
	require.Nil(t, e)
	rep, err := h.replicas[1].Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: "late", Scopes: []string{"run:race"}, Amount: "0.1"})
	require.NoError(t, err)
	require.False(t, rep.Admitted)
	require.Equal(t, events.ReasonBudgetRetired, rep.Denial.Reason)
}

// TestRetire_BalancesLeaveMemory: 50 agent runs, each a budget from a
// default, with two calls in it and its team's budget; then every run is
// retired. With the retentions at 1 and 2 seconds, and traffic on the
// team going on (the follower's stamps move with the server's clock), both
// replicas drop every run's balance and keep the team's, and each run's
// budget still reads what it spent. It can fail: a retirement that left
// the balances in the book keeps 51, and the wait times out; a dropped
// balance that forgot its numbers reads 0.
func TestRetire_BalancesLeaveMemory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2, ledgerOpts: []ledger.Option{ledger.WithRetention(time.Second, 2*time.Second)}})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "1", Unit: "USD"})
	require.Nil(t, e)
	h.putBudget("team:agents", "month", "1000", "USD")
	const runs = 50
	call := func(rid string, scopes ...string) {
		rep, err := h.replicas[0].Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: rid, Scopes: scopes, Amount: "0.1"})
		require.NoError(t, err)
		require.True(t, rep.Admitted, rid)
		_, e := h.settle(rep.ReservationID, "0.05")
		require.Nil(t, e)
	}
	for i := range runs {
		run := fmt.Sprintf("run:r-%d", i)
		call(fmt.Sprintf("r%d-a", i), run, "team:agents")
		call(fmt.Sprintf("r%d-b", i), run, "team:agents")
	}
	for _, r := range h.replicas {
		require.NoError(t, r.Ledger.Sync(ctxT(t)))
		require.Equal(t, runs+1, r.Ledger.Stats().Balances)
	}
	for i := range runs {
		_, e := h.retire(events.BudgetRetireRequest{Scope: fmt.Sprintf("run:r-%d", i), Period: "lifetime", Reason: "run over"})
		require.Nil(t, e)
	}
	n := 0
	testenv.WaitFor(t, 30*time.Second, "every run's balance dropped on both replicas", func() bool {
		n++
		call(fmt.Sprintf("team-%d", n), "team:agents")
		for _, r := range h.replicas {
			if err := r.Ledger.Sync(ctxT(t)); err != nil || r.Ledger.Stats().Balances != 1 {
				return false
			}
		}
		return true
	})
	for _, r := range h.replicas {
		require.GreaterOrEqual(t, r.Ledger.Stats().Pruned, int64(runs))
	}
	// What a finished run spent still reads in its budget, on both
	// replicas, with when and why it was retired.
	for i, r := range h.replicas {
		v, err := r.Service.BudgetView(events.BudgetRef{Scope: "run:r-3", Period: events.PeriodLifetime})
		require.NoError(t, err)
		require.Equal(t, "0.1", v.Spent, "replica %d: the run's two calls, not zero", i)
		require.True(t, v.Retired)
		require.Equal(t, "run over", v.RetiredReason)
		require.NotEmpty(t, v.RetiredAt)
	}
	// Nothing may write to a balance that left memory: its revision would
	// state its totals from zero (the audit above would refuse them).
	seq, _ := h.streamState()
	gone := events.BalanceRef{Scope: "run:r-0", Period: events.PeriodLifetime, Instance: events.InstanceLifetime}
	err := h.replicas[0].Ledger.Submit(ctxT(t), voidInto{gone})
	require.Equal(t, events.CodeBudgetRetired, events.CodeOf(err), "%v", err)
	after, _ := h.streamState()
	require.Equal(t, seq, after, "nothing was written")

	// A snapshot without the dropped balances: the audit, which checks
	// every snapshot against its replay, accepts it (a retired budget's
	// balance with nothing open may be left out, as a past minute's).
	_, err = h.replicas[1].Ledger.Snapshot(ctxT(t))
	require.NoError(t, err)
	chk, err := projector.Check(ctxT(t), h.env.JS, h.env.Layout)
	require.NoError(t, err)
	require.True(t, chk.OK(), "audit: %s", chk)
	want := events.Zero
	for range 2*runs + n {
		want = want.Add(events.MustMoney("0.05"))
	}
	require.Equal(t, want.String(), h.budget("team:agents", "month").Spent, "the team's budget holds every call")
}

// TestRetire_IdleRunsBySweeper: a replica run with --retire-idle run=1h
// retires, at its sweeper's idle pass, the run budgets from the default
// with nothing open and no call for an hour: not the run whose call is
// open, not the one called half an hour ago, not a run budget put for its
// scope. The other replica (no rule) sees the retirement as any other;
// an admit naming the retired run is denied; a second pass retires
// nothing more. It can fail: a pass that ignored the open call or the
// latest call's time retires those runs too.
func TestRetire_IdleRunsBySweeper(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2, retireIdle: map[string]time.Duration{"run": time.Hour}})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "1", Unit: "USD"})
	require.Nil(t, e)
	h.putBudget("run:manual", "lifetime", "1", "USD")
	admit := func(rid, run string) events.AdmitReply {
		rep, err := h.replicas[0].Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: rid, Scopes: []string{run}, Amount: "0.1", TTL: "24h"})
		require.NoError(t, err)
		require.True(t, rep.Admitted, rid)
		return rep
	}
	for _, run := range []string{"run:done", "run:open", "run:recent", "run:manual"} {
		rep := admit(strings.ReplaceAll(run, ":", "-")+"-1", run)
		_, e := h.settle(rep.ReservationID, "0.05")
		require.Nil(t, e)
	}
	open := admit("open-2", "run:open")
	t0 := h.clock.now.Load()
	h.clock.now.Store(t0.Add(90 * time.Minute))
	recent := admit("recent-2", "run:recent")
	_, e = h.settle(recent.ReservationID, "0.05")
	require.Nil(t, e)
	h.clock.now.Store(t0.Add(2 * time.Hour))

	sw := h.replicas[0].Sweeper
	require.Equal(t, 1, sw.IdlePass(ctxT(t)))
	require.Zero(t, sw.IdlePass(ctxT(t)), "nothing more is idle")
	require.NoError(t, h.replicas[1].Ledger.Sync(ctxT(t)))
	for _, c := range []struct {
		run     string
		retired bool
	}{{"run:done", true}, {"run:open", false}, {"run:recent", false}, {"run:manual", false}} {
		b, ok := h.replicas[1].Ledger.Budget(events.BudgetRef{Scope: events.Scope(c.run), Period: events.PeriodLifetime})
		require.True(t, ok)
		require.Equal(t, c.retired, b.Retired, c.run)
	}
	rep, err := h.replicas[1].Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: "done-3", Scopes: []string{"run:done"}, Amount: "0.1"})
	require.NoError(t, err)
	require.False(t, rep.Admitted)
	require.Equal(t, events.ReasonBudgetRetired, rep.Denial.Reason)

	// The open call closes; an hour later the run is idle too.
	_, e = h.settle(open.ReservationID, "0.05")
	require.Nil(t, e)
	h.clock.now.Store(t0.Add(4 * time.Hour))
	require.Equal(t, 2, sw.IdlePass(ctxT(t)), "the run whose call closed, and the recent one")
}

// voidInto is a Tx that writes a void's tombstone into one balance, as a
// void naming its scope would.
type voidInto struct{ ref events.BalanceRef }

func (v voidInto) Balances() []events.BalanceRef { return []events.BalanceRef{v.ref} }

func (v voidInto) Decide(ledger.View) (events.Events, error) {
	return events.Events{events.RequestVoided{RequestID: "into-gone", Balance: v.ref, Scopes: []events.Scope{v.ref.Scope}, At: time.Now().UTC()}}, nil
}

// TestRetire_ViewsAfterwards: a retired budget of a calendar period reads
// the instance it was retired in, with what it spent there, once its
// period has rolled over (not a new instance with nothing spent); and the
// other budgets of a retired scope show nothing available, and a change
// of one is refused (every admit naming the scope is denied, so it would
// have no effect). It can fail: a view of the current instance reads
// spent 0 after the minute; a view of the scope's other budget reads its
// limit available; the put is accepted.
func TestRetire_ViewsAfterwards(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("job:m-1", "minute", "5", "USD")
	h.putBudget("job:m-1", "lifetime", "50", "USD")
	rep, err := h.replicas[0].Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: "m1", Scopes: []string{"job:m-1"}, Amount: "1"})
	require.NoError(t, err)
	require.True(t, rep.Admitted)
	_, e := h.settle(rep.ReservationID, "0.7")
	require.Nil(t, e)
	got, e := h.retire(events.BudgetRetireRequest{Scope: "job:m-1", Period: "minute", Reason: "job done"})
	require.Nil(t, e)
	require.Equal(t, "0.7", got.Spent)
	instance := got.Instance

	h.clock.now.Store(h.clock.now.Load().Add(3 * time.Minute))
	v := h.budget("job:m-1", "minute")
	require.Equal(t, [3]string{instance, "0.7", "0"}, [3]string{v.Instance, v.Spent, v.Available}, "the minute it was retired in")
	life := h.budget("job:m-1", "lifetime")
	require.False(t, life.Retired)
	require.Equal(t, [2]string{"0.7", "0"}, [2]string{life.Spent, life.Available}, "its scope's other budget: nothing available")

	seq, _ := h.streamState()
	_, e = h.putDef(events.BudgetPutRequest{Scope: "job:m-1", Period: "lifetime", Limit: "500", Unit: "USD"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeBudgetRetired, e.Code)
	require.Contains(t, e.Message, "would have no effect")
	after, _ := h.streamState()
	require.Equal(t, seq, after, "nothing was written")
}
