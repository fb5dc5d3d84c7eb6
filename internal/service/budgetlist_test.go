package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/streams"
)

// listPage requests one budget.list page; data nil sends no body.
func (h *harness) listPage(req any) (events.BudgetListReply, *events.Error, int) {
	h.t.Helper()
	var data []byte
	if req != nil {
		var err error
		data, err = json.Marshal(req)
		require.NoError(h.t, err)
	}
	msg, err := h.nc.Request(h.env.Layout.Endpoint(streams.EndpointBudgetList), data, 20*time.Second)
	require.NoError(h.t, err)
	var er events.ErrorReply
	require.NoError(h.t, json.Unmarshal(msg.Data, &er))
	if er.Error != nil {
		return events.BudgetListReply{}, er.Error, len(msg.Data)
	}
	var out events.BudgetListReply
	require.NoError(h.t, json.Unmarshal(msg.Data, &out))
	return out, nil, len(msg.Data)
}

// listAll pages through budget.list with req's kind, sort and page size.
func (h *harness) listAll(req events.BudgetListRequest) []events.BudgetView {
	h.t.Helper()
	var all []events.BudgetView
	for pages := 0; ; pages++ {
		require.Less(h.t, pages, 100_000, "the cursor does not advance")
		page, e, _ := h.listPage(req)
		require.Nil(h.t, e)
		if req.Limit > 0 {
			require.LessOrEqual(h.t, len(page.Budgets), req.Limit)
		}
		all = append(all, page.Budgets...)
		if page.NextCursor == "" {
			return all
		}
		require.NotEmpty(h.t, page.Budgets, "a page with a cursor but no budgets")
		req.Cursor = page.NextCursor
	}
}

// TestService_BudgetListPaged: 2,500 budgets are listed page by page, each
// exactly once, in order; by kind; and by utilization, most used first. An
// empty request is the first page of the default size (1,000). Bad sort,
// limit and cursors are refused with invalid_request.
//
// The pages are what the paging is checked over, not the budgets: 2,500
// budgets in pages of 500 by scope, 377 by kind and 499 by utilization are
// the 5 full pages, 4 pages with a partial last one and 6 pages with a last
// one of 5 that the former 5,000 budgets made in pages of 1,000, 777 and 999
// (each budget costs a ledger write, a place in every listing, in the
// invariant check's replay and in the stopping replica's snapshot: half as
// many halve the test).
func TestService_BudgetListPaged(t *testing.T) {
	t.Parallel() // its own harness (server, replicas, clock)
	h := newHarness(t, harnessOpts{})
	// .ci/run's soak step lists the former 5,000 in the former pages.
	perKind, pages := 1_250, []int{500, 377, 499}
	if soak.Long() {
		perKind, pages = 2_500, []int{1000, 777, 999}
	}
	l := h.replicas[0].Ledger
	now := h.clock.now.Load()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(2*perKind) {
					return
				}
				kind := "org"
				if i%2 == 1 {
					kind = "user"
				}
				scope, err := events.ParseScope(fmt.Sprintf("%s:s%05d", kind, i/2))
				if err == nil {
					_, err = l.PutBudget(context.Background(), events.BudgetRef{Scope: scope, Period: events.PeriodMonth}, events.MoneyFromInt(100), "USD", now)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Utilization: user:s00007 90 %, user:s00003 and org:s00005 50 % (a
	// tie: scope order), org:s00009 10 %; every other budget 0 %.
	for i, a := range []struct{ scope, amount string }{
		{"user:s00007", "90"}, {"org:s00005", "50"}, {"user:s00003", "50"}, {"org:s00009", "10"},
	} {
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("u%d", i), Scopes: []string{a.scope}, Amount: a.amount, TTL: "1h"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
	}

	// The old request shape: no body, and {} — the first page.
	for _, req := range []any{nil, events.BudgetListRequest{}} {
		page, e, size := h.listPage(req)
		require.Nil(t, e)
		require.Len(t, page.Budgets, events.DefaultBudgetPage)
		require.NotEmpty(t, page.NextCursor)
		require.Less(t, size, 1<<20, "a page stays under the default max payload")
		require.Equal(t, events.Scope("org:s00000"), page.Budgets[0].Scope)
	}

	// By scope, every budget exactly once, in order.
	all := h.listAll(events.BudgetListRequest{Limit: pages[0]})
	require.Len(t, all, 2*perKind)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i-1].Scope, all[i].Scope, "order at %d", i)
	}
	require.Equal(t, "90", func() string {
		for _, v := range all {
			if v.Scope == "user:s00007" {
				return v.Reserved
			}
		}
		return ""
	}())

	// By kind, with an odd page size.
	users := h.listAll(events.BudgetListRequest{Kind: "user", Limit: pages[1]})
	require.Len(t, users, perKind)
	for _, v := range users {
		require.Equal(t, "user", v.Scope.Kind())
	}

	// By utilization: the most used first, then by scope; every budget once.
	top, e, _ := h.listPage(events.BudgetListRequest{Sort: events.SortUtilization, Limit: 4})
	require.Nil(t, e)
	var got []events.Scope
	for _, v := range top.Budgets {
		got = append(got, v.Scope)
	}
	require.Equal(t, []events.Scope{"user:s00007", "org:s00005", "user:s00003", "org:s00009"}, got)
	byUtil := h.listAll(events.BudgetListRequest{Sort: events.SortUtilization, Limit: pages[2]})
	require.Len(t, byUtil, 2*perKind)
	seen := map[events.Scope]bool{}
	for _, v := range byUtil {
		require.False(t, seen[v.Scope], "%s listed twice", v.Scope)
		seen[v.Scope] = true
	}
	require.Equal(t, events.Scope("org:s00000"), byUtil[4].Scope, "the unused budgets follow, by scope")

	// Refusals.
	for name, req := range map[string]events.BudgetListRequest{
		"sort":          {Sort: "spent"},
		"limit":         {Limit: events.MaxBudgetPage + 1},
		"negative":      {Limit: -1},
		"cursor":        {Cursor: "not-a-cursor"},
		"other sort":    {Cursor: top.NextCursor},
		"other kind":    {Sort: events.SortUtilization, Kind: "org", Cursor: top.NextCursor},
		"cursor base64": {Cursor: "eyJ2IjoyfQ"},
	} {
		_, e, _ := h.listPage(req)
		require.NotNil(t, e, name)
		require.Equal(t, events.CodeInvalidRequest, e.Code, name)
	}
}
