package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// revisionsOf counts the revisions of one ledger key in the stream.
func (h *harness) revisionsOf(key string) uint64 {
	h.t.Helper()
	s, err := h.env.JS.Stream(ctxT(h.t), h.env.Layout.StreamName())
	require.NoError(h.t, err)
	subj := h.env.Layout.Subject(key)
	info, err := s.Info(ctxT(h.t), jetstream.WithSubjectFilter(subj))
	require.NoError(h.t, err)
	return info.State.Subjects[subj]
}

// TestDefaults_FirstUseAcrossReplicas: a kind's default budget applies to
// a scope of that kind with no budget of its own. Its first use, by 20
// concurrent admits split over two replicas, creates the scope's budget
// exactly once (one revision of its key: the create-only compare-and-set
// decides; with blind writes each racing replica would write its own
// revision, and the count below would be 2 or more), and the budget holds
// exactly: 10 of 20 admits of 1 under a limit of 10.
func TestDefaults_FirstUseAcrossReplicas(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	put, e := h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "month", Limit: "10", Unit: "USD"})
	require.Nil(t, e)
	require.True(t, put.Created)
	require.Equal(t, events.Scope("user:*"), put.Scope)
	_, e = h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "day", Limit: "100", Unit: "requests"})
	require.Nil(t, e)

	for round := 0; round < 3; round++ {
		scope := fmt.Sprintf("user:new%d", round)
		var wg sync.WaitGroup
		replies := make([]events.AdmitReply, 20)
		errs := make([]error, 20)
		for i := range replies {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				replies[i], errs[i] = h.replicas[i%2].Admitter.Admit(context.Background(), events.AdmitRequest{
					RequestID: fmt.Sprintf("r%d-%d", round, i), Scopes: []string{scope}, Amount: "1"})
			}(i)
		}
		wg.Wait()
		admitted := 0
		for i := range replies {
			require.NoError(t, errs[i])
			if replies[i].Admitted {
				admitted++
			} else {
				require.Equal(t, events.ReasonLimitReached, replies[i].Denial.Reason)
			}
		}
		require.Equal(t, 10, admitted, "round %d", round)
		require.EqualValues(t, 1, h.revisionsOf(streams.BudgetKey(events.BudgetRef{Scope: events.Scope(scope), Period: events.PeriodMonth})),
			"round %d: the budget from the default is written once", round)
		require.EqualValues(t, 1, h.revisionsOf(streams.BudgetKey(events.BudgetRef{Scope: events.Scope(scope), Period: events.PeriodDay})))
		b := h.budget(scope, "month")
		require.Equal(t, "10", b.Reserved)
		require.Equal(t, "10", b.Limit)
		d := h.budget(scope, "day")
		require.Equal(t, "requests", d.Unit)
		require.Equal(t, "10", d.Reserved)
	}

	// A check of a new id answers from the default and writes nothing.
	seq, _ := h.streamState()
	c, e := h.admit(events.AdmitRequest{RequestID: "chk", Scopes: []string{"user:fresh"}, Amount: "4", Mode: events.ModeCheck})
	require.Nil(t, e)
	require.True(t, c.Admitted)
	for _, u := range c.Budgets {
		want := map[events.Period]string{events.PeriodMonth: "6", events.PeriodDay: "99"}[u.Period]
		require.Equal(t, want, u.Available, "%s", u.Period)
	}
	seq2, _ := h.streamState()
	require.Equal(t, seq, seq2)

	// Defaults apply per period: a scope with a month budget of its own
	// keeps it (no month default) and still takes the day default (before,
	// any budget of its own meant no default at all: one budget here).
	h.putBudget("user:own", "month", "2", "USD")
	a, e := h.admit(events.AdmitRequest{RequestID: "own", Scopes: []string{"user:own"}, Amount: "1"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	require.Len(t, a.Budgets, 2)
	require.Equal(t, "2", h.budget("user:own", "month").Limit)
	require.EqualValues(t, 1, h.revisionsOf(streams.BudgetKey(events.BudgetRef{Scope: "user:own", Period: events.PeriodMonth})), "its own, untouched")
	day := h.budget("user:own", "day")
	require.Equal(t, "100", day.Limit)
	require.Equal(t, "requests", day.Unit)
	require.Equal(t, "1", day.Reserved)
	// And the other way round: a day budget of its own, the month default.
	h.putBudget("user:daily", "day", "3", "requests")
	a, e = h.admit(events.AdmitRequest{RequestID: "daily", Scopes: []string{"user:daily"}, Amount: "4"})
	require.Nil(t, e)
	require.True(t, a.Admitted)
	require.Equal(t, "10", h.budget("user:daily", "month").Limit)
	require.Equal(t, "4", h.budget("user:daily", "month").Reserved)
	require.Equal(t, "3", h.budget("user:daily", "day").Limit)
	a, e = h.admit(events.AdmitRequest{RequestID: "daily-2", Scopes: []string{"user:daily"}, Amount: "7"})
	require.Nil(t, e)
	require.False(t, a.Admitted, "the month default's 10 holds")
	require.Equal(t, events.PeriodMonth, a.Denial.Period)

	// A scope with neither a budget nor a default is denied unknown_budget.
	a, e = h.admit(events.AdmitRequest{RequestID: "none", Scopes: []string{"team:x"}, Amount: "1"})
	require.Nil(t, e)
	require.Equal(t, events.ReasonUnknownBudget, a.Denial.Reason)

	// The defaults read back; a changed default leaves created budgets.
	var l events.BudgetListReply
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "user:*"}, &l))
	require.Len(t, l.Budgets, 2)
	ch, e := h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "month", Limit: "20", Unit: "USD"})
	require.Nil(t, e)
	require.Equal(t, []string{"limit"}, ch.Changed)
	require.Equal(t, "10", h.budget("user:new0", "month").Limit)
	_, e = h.admit(events.AdmitRequest{RequestID: "later", Scopes: []string{"user:later"}, Amount: "1"})
	require.Nil(t, e)
	require.Equal(t, "20", h.budget("user:later", "month").Limit)

	e = h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "User:*", Period: "month", Limit: "1", Unit: "USD"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidIdentifier, e.Code)
}

// TestDefaults_PerTenant: a tenant's default applies to its own scopes
// only; the untenanted deployment's scope of the same name has neither a
// budget nor a default. A tenant cannot change the shared pricing table,
// and its alerts carry its tenant in the subject.
func TestDefaults_PerTenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	var v events.BudgetPutReply
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "user:*", Period: "month", Limit: "10", Unit: "USD", Alerts: new(true)}, &v))
	require.Equal(t, events.Scope("user:*"), v.Scope)

	var a events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "r1", Scopes: []string{"user:u1"}, Amount: "6"}, &a))
	require.True(t, a.Admitted, "%+v", a.Denial)
	require.Equal(t, events.Scope("user:u1"), a.Budgets[0].Scope)
	require.EqualValues(t, 1, h.revisionsOf(streams.BudgetKey(events.BudgetRef{Scope: "acme/user:u1", Period: events.PeriodMonth})))
	require.EqualValues(t, 1, h.revisionsOf(streams.DefaultKey("acme/user", events.PeriodMonth)))

	u, e := h.admit(events.AdmitRequest{RequestID: "r2", Scopes: []string{"user:u1"}, Amount: "1"})
	require.Nil(t, e)
	require.Equal(t, events.ReasonUnknownBudget, u.Denial.Reason, "the tenant's default does not reach other tenants")
	require.Nil(t, h.tcall("globex", streams.EndpointAdmit, events.AdmitRequest{RequestID: "r3", Scopes: []string{"user:u1"}, Amount: "1"}, &a))
	require.Equal(t, events.ReasonUnknownBudget, a.Denial.Reason)

	var l events.BudgetListReply
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "user:*"}, &l))
	require.Len(t, l.Budgets, 1)
	require.NotNil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "user:*"}, nil))

	e = h.tcall("acme", streams.EndpointPricingPut, events.PricingPutRequest{Model: "m", Input: "1", Output: "1"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidRequest, e.Code)
	require.Equal(t, "spendgate.alert.v1.t.acme.user.u1", h.env.Layout.AlertSubject("acme/user:u1"))
}

// TestDefaults_DeniedAdmitCreatesNone: an admit denied anyway (here by
// its key's own spent budget) creates no budget from a default for its
// new scope: a gateway key whose every call was denied, naming a new end
// user each time, made one user:* budget per call, for good (50,000 in a
// minute in the untenanted deployment, which has no limit of them). The
// denial is the same as before, named by the spent budget. An admit that
// fits creates the scope's budget as before; a denial by a budget with
// alerts creates none, and publishes its blocking alert. Without the
// check first, the user budgets below exist after the denials.
func TestDefaults_DeniedAdmitCreatesNone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "user:*", Period: "day", Limit: "1", Unit: "USD"})
	require.Nil(t, e)
	require.Nil(t, h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "key:k1", Period: "lifetime", Limit: "0.5", Unit: "USD"}, nil))
	a, err := h.replicas[0].Admitter.Admit(context.Background(), events.AdmitRequest{RequestID: "fill", Scopes: []string{"key:k1", "user:first"}, Amount: "0.5"})
	require.NoError(t, err)
	require.True(t, a.Admitted, "%+v", a.Denial)
	for i := range 5 {
		r, err := h.replicas[0].Admitter.Admit(context.Background(), events.AdmitRequest{RequestID: fmt.Sprint("d", i),
			Scopes: []string{"key:k1", fmt.Sprintf("user:u%d", i)}, Amount: "0.1"})
		require.NoError(t, err)
		require.False(t, r.Admitted)
		require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
		require.Equal(t, events.Scope("key:k1"), r.Denial.Scope)
		require.Empty(t, r.Mode, "an admit's denial, not a check's")
	}
	var list events.BudgetListReply
	require.Nil(t, h.call(streams.EndpointBudgetList, events.BudgetListRequest{Kind: "user"}, &list))
	var users []string
	for _, b := range list.Budgets {
		users = append(users, string(b.Scope))
	}
	require.Equal(t, []string{"user:first"}, users, "the denied admits created no budget")

	// A denial by a budget with alerts creates none either, and its
	// blocking alert is published all the same. How it can fail: such a
	// denial went the real way, creating user:alerted (and one user
	// budget per denied call, which --retire-idle did not retire).
	require.Nil(t, h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "key:k2", Period: "lifetime", Limit: "0.1", Unit: "USD", Thresholds: []string{"0.5"}}, nil))
	a, err = h.replicas[0].Admitter.Admit(context.Background(), events.AdmitRequest{RequestID: "fill2", Scopes: []string{"key:k2", "user:first"}, Amount: "0.1"})
	require.NoError(t, err)
	require.True(t, a.Admitted, "%+v", a.Denial)
	r, err := h.replicas[0].Admitter.Admit(context.Background(), events.AdmitRequest{RequestID: "al", Scopes: []string{"key:k2", "user:alerted"}, Amount: "0.1"})
	require.NoError(t, err)
	require.False(t, r.Admitted)
	require.Equal(t, events.Scope("key:k2"), r.Denial.Scope)
	require.Nil(t, h.call(streams.EndpointBudgetList, events.BudgetListRequest{Kind: "user"}, &list))
	require.Len(t, list.Budgets, 1, "user:first only: %+v", list.Budgets)
	s, err := h.env.JS.Stream(ctxT(t), h.env.Layout.AlertStreamName())
	require.NoError(t, err)
	var al events.Alert
	testenv.WaitFor(t, 10*time.Second, "the blocking alert of key:k2", func() bool {
		m, err := s.GetLastMsgForSubject(ctxT(t), "spendgate.alert.v1.key.k2.lifetime.all._.blocking.0")
		if err != nil {
			return false
		}
		al, err = events.DecodeAlert(m.Data)
		require.NoError(t, err)
		return true
	})
	require.Equal(t, events.AlertBlocking, al.Kind)
	require.Equal(t, "0.1", al.Used.String())
	require.Equal(t, "0.1", al.Requested)
}

// A kind has one default per period: a put of the other kind of unit
// (requests after USD) is refused unless it says replace, instead of
// taking the money default's place and leaving the kind's new scopes
// without their money cap. And a scope with a requests budget of its own
// still takes the kind's money default for the period, alongside it.
func TestDefaults_OtherUnitRefusedAndAlongside(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, e := h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "1.00", Unit: "USD"})
	require.Nil(t, e)
	for _, unit := range []string{"requests", "EUR"} {
		_, e = h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "20", Unit: unit})
		require.NotNil(t, e, unit)
		require.Equal(t, events.CodeUnitChangeRefused, e.Code, e.Message)
	}
	var got events.BudgetView
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "run:*", Period: "lifetime"}, &got))
	require.Equal(t, []string{"1", "USD"}, []string{got.Limit, got.Unit}, "the refused puts changed nothing")

	// A run with a count budget of its own: 2 requests and 1.00 USD.
	require.Nil(t, h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "run:r1", Period: "lifetime", Limit: "2", Unit: "requests"}, nil))
	a, err := h.replicas[0].Admitter.Admit(context.Background(), events.AdmitRequest{RequestID: "a1", Scopes: []string{"run:r1"}, Amount: "0.8"})
	require.NoError(t, err)
	require.True(t, a.Admitted, "%+v", a.Denial)
	r, err := h.replicas[0].Admitter.Admit(context.Background(), events.AdmitRequest{RequestID: "a2", Scopes: []string{"run:r1"}, Amount: "0.3"})
	require.NoError(t, err)
	require.False(t, r.Admitted, "0.8 + 0.3 passes the money default's 1.00: the count budget of its own must not hide it")
	require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
	require.Equal(t, "USD", r.Denial.Unit)
	var list events.BudgetListReply
	require.Nil(t, h.call(streams.EndpointBudgetList, events.BudgetListRequest{Kind: "run"}, &list))
	require.Len(t, list.Budgets, 2, "%+v", list.Budgets)
	units := []string{list.Budgets[0].Unit, list.Budgets[1].Unit}
	require.ElementsMatch(t, []string{"requests", "USD"}, units)

	// With replace, the default's unit changes (for scopes created from now on).
	_, e = h.putDef(events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "20", Unit: "requests", Replace: true})
	require.Nil(t, e)
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "run:*", Period: "lifetime"}, &got))
	require.Equal(t, []string{"20", "requests"}, []string{got.Limit, got.Unit})
}
