package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// countsBurst fires n admits of amount and count against scope at once and
// returns how many were admitted; it fails on any error reply.
func countsBurst(t *testing.T, nc *nats.Conn, n int, scope, amount string, count int64, idPrefix string) int {
	t.Helper()
	replies := make([]events.AdmitReply, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, err := json.Marshal(events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", idPrefix, i), Scopes: []string{scope},
				Amount: amount, Count: count, TTL: "10m"})
			if err != nil {
				errs[i] = err
				return
			}
			<-start
			msg, err := nc.Request(streams.DefaultPrefix+streams.EndpointAdmit, data, 30*time.Second)
			if err != nil {
				errs[i] = err
				return
			}
			var er events.ErrorReply
			if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
				errs[i] = er.Error
				return
			}
			errs[i] = json.Unmarshal(msg.Data, &replies[i])
		}()
	}
	close(start)
	wg.Wait()
	admitted := 0
	for i, err := range errs {
		require.NoError(t, err, "admit %d", i)
		if replies[i].Admitted {
			admitted++
		} else {
			require.Equal(t, events.ReasonLimitReached, replies[i].Denial.Reason)
		}
	}
	return admitted
}

// TestServe_TwoProcessesCountsAndMoney: a daily count budget (a quota of
// requests) and a monthly USD budget on one scope, 20 concurrent admits
// across two `serve` processes: each admit takes the cost in the USD
// budget and its count in the requests budget, and each budget is exact
// whichever binds. As in TestServe_TwoProcessesHotBudget, only the
// lane's compare-and-set keeps the two processes from both admitting into
// the last room; both budgets of a scope share its lane, so one write
// reserves in both or neither.
func TestServe_TwoProcessesCountsAndMoney(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for i := 0; i < 2; i++ {
		startProc(t, true, "serve", "--nats-url", env.URL(), "--replicas", "1", "--sweep-interval", "1m")
	}
	nc := connect(t, env.URL())
	testenv.WaitFor(t, 15*time.Second, "two spendgate instances", func() bool { return serviceCount(t, nc) == 2 })
	put := func(scope, period, limit, unit string) {
		require.Nil(t, e2eRequest(t, nc, streams.DefaultPrefix+streams.EndpointBudgetPut,
			events.BudgetPutRequest{Scope: scope, Period: period, Limit: limit, Unit: unit}, nil))
	}
	get := func(scope, period, unit string) events.BudgetView {
		var v events.BudgetView
		require.Nil(t, e2eRequest(t, nc, streams.DefaultPrefix+streams.EndpointBudgetGet,
			events.BudgetGetRequest{Scope: scope, Period: period, Unit: unit}, &v))
		require.Equal(t, unit, v.Unit)
		return v
	}
	for _, c := range []struct {
		scope              string
		quotaPeriod        string
		quota, cap, amount string
		count              int64
		admitted           int
		reserved, used     string
	}{
		// The count budget binds: 7 requests a day, room for 20 in USD.
		{"team:quota", "day", "7", "1.00", "0.05", 1, 7, "0.35", "7"},
		// The USD budget binds: 0.30 a month, room for 100 requests.
		{"team:cap", "day", "100", "0.30", "0.05", 1, 6, "0.3", "6"},
		// A batch counts 2: 3 of them fit a quota of 7.
		{"team:batch", "day", "7", "1.00", "0.05", 2, 3, "0.15", "6"},
		// Both in the same period: the requests budget is defined
		// alongside the USD one (its own key, the scope's lane).
		{"team:same", "month", "7", "1.00", "0.05", 1, 7, "0.35", "7"},
	} {
		put(c.scope, c.quotaPeriod, c.quota, "requests")
		put(c.scope, "month", c.cap, "USD")
		// A process admits against the budgets it has folded: wait until
		// checks (which land on either process at random) see both, 20 in
		// a row.
		testenv.WaitFor(t, 10*time.Second, c.scope+" folded by both processes", func() bool {
			for i := 0; i < 20; i++ {
				var r events.AdmitReply
				e := e2eRequest(t, nc, streams.DefaultPrefix+streams.EndpointAdmit, events.AdmitRequest{
					RequestID: "chk", Scopes: []string{c.scope}, Amount: c.amount, Mode: events.ModeCheck}, &r)
				require.Nil(t, e)
				if len(r.Budgets) != 2 {
					return false
				}
			}
			return true
		})
		require.Equal(t, c.admitted, countsBurst(t, nc, 20, c.scope, c.amount, c.count, c.scope[5:]), c.scope)
		testenv.WaitFor(t, 10*time.Second, c.scope+" exact in both budgets", func() bool {
			m, d := get(c.scope, "month", "USD"), get(c.scope, c.quotaPeriod, "requests")
			return m.Reserved == c.reserved && m.Open == int64(c.admitted) && d.Reserved == c.used && d.Open == int64(c.admitted)
		})
	}
	served := e2eAdmitsServed(t, nc, 2)
	t.Logf("admits served per process: %v", served)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), "invariant check: %s", rep)
}
