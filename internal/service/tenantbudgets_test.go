package service_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestTenantLimits_Budgets: 20 new budgets a tenant puts at once, with a
// limit of 5, create exactly 5 on one replica, and the others are refused
// tenant_limit naming the limit; at its limit the tenant still changes a
// budget it has and puts a default, but a new budget is refused and
// writes nothing, on its subject or through its admin API key (the HTTP
// API's keyed put); retiring one makes room for exactly one; globex and
// the untenanted deployment are not affected; the gauges and the counter
// say so.
//
// How we know it can fail: without the creations in flight counted with
// those the replica folded (ledger.creatingBudgets), every one of the 20
// puts reads a count of 0 and all 20 are created (tried: drop the count
// of the budgets being created); with no check at all, the 21st put of
// the test creates a sixth budget.
func TestTenantLimits_Budgets(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{})
	h := newHarness(t, harnessOpts{metrics: m, tenantLimits: service.TenantLimits{MaxBudgets: 5, Rate: -1}})
	put := func(tenant, scope, limit string) *events.Error {
		t.Helper()
		return h.tcall(tenant, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: scope, Period: "month", Limit: limit, Unit: "USD"}, nil)
	}

	const n = 20
	var wg sync.WaitGroup
	errs := make([]*events.Error, n)
	fails := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i], fails[i] = h.tcallE("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: fmt.Sprintf("team:t-%d", i),
				Period: "month", Limit: "10", Unit: "USD"}, nil)
		}()
	}
	close(start)
	wg.Wait()
	var created []int
	for i := range n {
		require.NoError(t, fails[i])
		if errs[i] != nil {
			require.Equal(t, events.CodeTenantLimit, errs[i].Code, errs[i].Message)
			require.Contains(t, errs[i].Message, "its limit (serve --tenant-max-budgets 5)")
			continue
		}
		created = append(created, i)
	}
	require.Len(t, created, 5, "exactly the limit of budgets is created")
	var list events.BudgetListReply
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetList, events.BudgetListRequest{}, &list))
	require.Len(t, list.Budgets, 5)
	require.Equal(t, 5, h.replicas[0].Ledger.TenantBudgets("acme"))

	// At the limit: a change of a budget it has and a default pass.
	require.Nil(t, put("acme", fmt.Sprintf("team:t-%d", created[0]), "20"), "a change is never refused")
	require.Nil(t, put("acme", "user:*", "1"), "a default is not a budget of its own")

	// A new budget is refused, on the tenant's subject and through its
	// admin key, and nothing is written.
	id, secret, err := events.NewAPIKey()
	require.NoError(t, err)
	require.Nil(t, h.call(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(secret),
		Access: events.AccessAdmin, Tenant: "acme"}, nil))
	keyed := func(scope string) *events.Error {
		t.Helper()
		body, err := json.Marshal(events.BudgetPutRequest{Scope: scope, Period: "month", Limit: "10", Unit: "USD"})
		require.NoError(t, err)
		return h.call(streams.EndpointKeyedBudgetPut, events.KeyedRequest{Key: secret, Request: body}, nil)
	}
	seq, msgs := h.streamState()
	e := put("acme", "team:new", "10")
	require.NotNil(t, e)
	require.Equal(t, events.CodeTenantLimit, e.Code)
	require.Equal(t, "tenant acme has 5 budgets of its own, its limit (serve --tenant-max-budgets 5): this put would define a new one; nothing was written; retire budgets it no longer needs first", e.Message)
	e = keyed("team:new")
	require.NotNil(t, e, "the HTTP API's put, with the tenant's admin key")
	require.Equal(t, events.CodeTenantLimit, e.Code)
	s2, m2 := h.streamState()
	require.Equal(t, seq, s2, "a refused put writes nothing")
	require.Equal(t, msgs, m2)

	// Others are not affected: globex has a count of its own, the
	// untenanted deployment none.
	for i := range 5 {
		require.Nil(t, put("globex", fmt.Sprintf("team:g-%d", i), "10"), "globex's own count")
	}
	for i := range 7 {
		h.putBudget(fmt.Sprintf("team:plain-%d", i), "month", "10", "USD")
	}

	// Retiring one makes room for exactly one.
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetRetire, events.BudgetRetireRequest{Scope: fmt.Sprintf("team:t-%d", created[1]), Period: "month"}, nil))
	require.Equal(t, 4, h.replicas[0].Ledger.TenantBudgets("acme"))
	require.Nil(t, keyed("team:new"), "room again, through the key")
	e = put("acme", "team:newer", "10")
	require.NotNil(t, e)
	require.Equal(t, events.CodeTenantLimit, e.Code)

	out := scrape(t, m)
	require.Contains(t, out, `spendgate_tenant_budgets{tenant="acme"} 5`)
	require.Contains(t, out, `spendgate_tenant_max_budgets{tenant="acme"} 5`)
	require.Contains(t, out, `spendgate_tenant_limited_total{limit="budgets",tenant="acme"} 18`)
}

// TestTenantLimits_BudgetsKeptInLedger: the limit of a tenant's budgets
// kept in the ledger (tenant-limits put max_budgets) replaces the flag's,
// on both replicas, and the refusal and tenant-limits get say where it
// comes from; 0 there is no limit for the tenant. How it can fail: a
// replica that read only the flag would refuse acme's sixth budget.
func TestTenantLimits_BudgetsKeptInLedger(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, tenantLimits: service.TenantLimits{MaxBudgets: 5, Rate: -1}})
	var put events.TenantLimitsPutReply
	require.Nil(t, h.call(streams.EndpointTenantLimitsPut, map[string]any{"tenant": "acme", "max_budgets": 7}, &put))
	require.Equal(t, int64(7), *put.MaxBudgets)
	for i, r := range h.replicas {
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("replica %d folded acme's limits", i), func() bool {
			l, ok := r.Ledger.TenantLimitsOf("acme")
			return ok && l.Version == put.Version
		})
	}
	for i := range 7 {
		h.tputBudget("acme", fmt.Sprintf("team:t-%d", i), "month", "10")
	}
	e := h.tcall("acme", streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:t-7", Period: "month", Limit: "10", Unit: "USD"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeTenantLimit, e.Code)
	require.Contains(t, e.Message, "its limit (its own, tenant-limits put max-budgets=7)")

	var got events.TenantLimitsView
	require.Nil(t, h.call(streams.EndpointTenantLimitsGet, events.TenantLimitsGetRequest{Tenant: "acme"}, &got))
	require.Equal(t, int64(7), got.HeldTo.MaxBudgets)
	require.Equal(t, "tenant-limits put", got.HeldTo.From["max_budgets"])
	require.Equal(t, 7, got.Usage.Budgets)
	require.Nil(t, h.call(streams.EndpointTenantLimitsGet, events.TenantLimitsGetRequest{Tenant: "globex"}, &got))
	require.Equal(t, int64(5), got.HeldTo.MaxBudgets)
	require.Equal(t, "serve --tenant-max-budgets", got.HeldTo.From["max_budgets"])

	require.Nil(t, h.call(streams.EndpointTenantLimitsPut, map[string]any{"tenant": "acme", "max_budgets": 0}, &put))
	for i, r := range h.replicas {
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("replica %d folded acme's limits", i), func() bool {
			l, ok := r.Ledger.TenantLimitsOf("acme")
			return ok && l.Version == put.Version
		})
	}
	h.tputBudget("acme", "team:t-7", "month", "10")
}
