package service_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// admitBurst sends n concurrent admits of tenant (request ids prefix-i)
// and returns how many were admitted and the messages of the refusals.
func (h *harness) admitBurst(tenant, prefix string, n int) (admitted int, refusals []string) {
	h.t.Helper()
	var wg sync.WaitGroup
	replies := make([]events.AdmitReply, n)
	errs := make([]*events.Error, n)
	fails := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i], fails[i] = h.tcallE(tenant, streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint(prefix, i),
				Scopes: []string{"team:search"}, Amount: "0.01", TTL: "1h"}, &replies[i])
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(h.t, fails[i])
		switch {
		case errs[i] != nil:
			require.Equal(h.t, events.CodeTenantLimit, errs[i].Code, errs[i].Message)
			refusals = append(refusals, errs[i].Message)
		case replies[i].Admitted:
			admitted++
		default:
			h.t.Fatalf("admit %d denied: %+v", i, replies[i].Denial)
		}
	}
	return admitted, refusals
}

// TestTenantLimits_KeptInLedger: the operator puts a tenant's limits on
// the plain subject; both replicas fold them and hold the tenant to them
// exactly, in place of its --tenant-limits line, while a tenant the ledger
// does not name keeps its line; a put of nothing removes the tenant's
// limits, so it is held to its line again; a tenant cannot reach the
// endpoint; bad input changes nothing.
//
// How it can fail: a replica that ignored the ledger's limits would admit
// acme up to its file's 10 (the burst of 30 would see 10, not 5); one that
// read them only where they were written would admit past 5 on the other
// replica; a put that did not replace the whole set would keep max_open 5
// after the empty put, and one that left an empty entry in force would
// hold acme to the common 20 instead of its line's 10.
func TestTenantLimits_KeptInLedger(t *testing.T) {
	file := service.NewTenantTable(map[string]service.TenantLimits{"acme": {MaxOpen: 10}, "globex": {MaxOpen: 3}})
	h := newHarness(t, harnessOpts{replicas: 2, tenantLimits: service.TenantLimits{MaxOpen: 20, Rate: -1}, tenantOwn: file})
	h.tputBudget("acme", "team:search", "month", "1000")
	h.tputBudget("globex", "team:search", "month", "1000")

	var put events.TenantLimitsPutReply
	require.Nil(t, h.call(streams.EndpointTenantLimitsPut, map[string]any{"tenant": "acme", "max_open": 5, "rate": 1000}, &put))
	require.True(t, put.Created)
	require.Equal(t, int64(5), *put.MaxOpen)
	for i, r := range h.replicas {
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("replica %d folded acme's limits", i), func() bool {
			l, ok := r.Ledger.TenantLimitsOf("acme")
			return ok && l.Version == put.Version
		})
	}

	admitted, refusals := h.admitBurst("acme", "a-", 30)
	require.Equal(t, 5, admitted, "exactly the ledger's limit, across two replicas")
	require.Len(t, refusals, 25)
	require.Contains(t, refusals[0], "its own, tenant-limits put max-open=5")

	// globex, which the ledger does not name, keeps its file line.
	admitted, refusals = h.admitBurst("globex", "g-", 6)
	require.Equal(t, 3, admitted)
	require.Contains(t, refusals[0], "its own, --tenant-limits max-open=3")

	// get: the ledger's limits, and what the answering replica holds the
	// tenant to, field by field with its source, and where it stands.
	var got events.TenantLimitsView
	require.Nil(t, h.call(streams.EndpointTenantLimitsGet, events.TenantLimitsGetRequest{Tenant: "acme"}, &got))
	require.Equal(t, put.TenantLimitValues, got.TenantLimitValues)
	require.Equal(t, put.Version, got.Version)
	require.NotEmpty(t, got.HeldTo.Replica, "names the replica that answered")
	ids := []string{}
	for _, r := range h.replicas {
		ids = append(ids, r.Service.Info().ID)
	}
	require.Contains(t, ids, got.HeldTo.Replica)
	got.HeldTo.Replica = ""
	require.Equal(t, &events.TenantHeldTo{MaxOpen: 5, MaxDefaultBudgets: 10000, MaxBudgets: 5000, Rate: 1000, Burst: 256, DenialBytes: 16384,
		From: map[string]string{"max_open": "tenant-limits put", "max_default_budgets": "serve --tenant-max-default-budgets",
			"max_budgets": "serve --tenant-max-budgets", "rate": "tenant-limits put", "burst": "tenant-limits put",
			"denial_bytes": "serve --tenant-denial-bytes"}}, got.HeldTo)
	require.Equal(t, &events.TenantUsage{OpenReservations: 5, Budgets: 1}, got.Usage)
	var none events.TenantLimitsView
	require.Nil(t, h.call(streams.EndpointTenantLimitsGet, events.TenantLimitsGetRequest{Tenant: "globex"}, &none))
	require.Equal(t, uint64(0), none.Version, "no limits in the ledger: version 0")
	require.Equal(t, events.TenantLimitValues{}, none.TenantLimitValues, "and none set")
	require.Equal(t, int64(3), none.HeldTo.MaxOpen)
	require.Equal(t, "--tenant-limits", none.HeldTo.From["max_open"], "the file's line")
	require.Equal(t, int64(0), none.HeldTo.Rate, "the common rate is off here")
	require.Equal(t, "serve --tenant-rate", none.HeldTo.From["rate"])
	require.Equal(t, 3, none.Usage.OpenReservations)

	// A tenant reads its own limits on its subject, never another's.
	var own events.TenantLimitsView
	require.Nil(t, h.tcall("acme", streams.EndpointTenantLimitsGet, events.TenantLimitsGetRequest{}, &own))
	require.Equal(t, "acme", own.Tenant)
	require.Equal(t, int64(5), own.HeldTo.MaxOpen)
	e := h.tcall("acme", streams.EndpointTenantLimitsGet, events.TenantLimitsGetRequest{Tenant: "globex"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidRequest, e.Code)

	// A tenant cannot set its own limits: the endpoint has no tenant
	// subject.
	_, err := h.nc.Request(h.env.Layout.TenantEndpoint("acme", streams.EndpointTenantLimitsPut), []byte(`{"tenant":"acme"}`), 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "a tenant's put: %v", err)

	// Bad input: a structured error, nothing written.
	seq, msgs := h.streamState()
	for _, c := range []struct {
		req  string
		code events.Code
	}{
		{`{"tenant":"acme","max_open":-1}`, events.CodeInvalidRequest},
		{`{"tenant":"acme","burst":0}`, events.CodeInvalidRequest},
		{`{"tenant":"acme","rate":1073741825}`, events.CodeInvalidRequest},
		{`{"tenant":"acme","rate":"5"}`, events.CodeInvalidRequest},
		{`{"tenant":"acme","max_opn":5}`, events.CodeInvalidRequest},
		{`{"tenant":"Bad.x","max_open":5}`, events.CodeInvalidIdentifier},
		{`{"max_open":5}`, events.CodeInvalidIdentifier},
	} {
		e := h.call(streams.EndpointTenantLimitsPut, []byte(c.req), nil)
		require.NotNil(t, e, c.req)
		require.Equal(t, c.code, e.Code, "%s: %s", c.req, e.Message)
	}
	s2, m2 := h.streamState()
	require.Equal(t, seq, s2, "bad input wrote nothing")
	require.Equal(t, msgs, m2)

	// A put of nothing removes acme's limits from the ledger: it is held
	// to its file line (10) again.
	var cleared events.TenantLimitsPutReply
	require.Nil(t, h.call(streams.EndpointTenantLimitsPut, events.TenantLimitsPutRequest{Tenant: "acme"}, &cleared))
	require.Equal(t, []string{"max_open", "rate"}, cleared.Changed)
	require.False(t, cleared.Created)
	for i, r := range h.replicas {
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("replica %d folded the clear", i), func() bool {
			l, ok := r.Ledger.TenantLimitsOf("acme")
			return ok && l.Version == cleared.Version
		})
	}
	admitted, refusals = h.admitBurst("acme", "b-", 20)
	require.Equal(t, 5, admitted, "5 open + 5 more: the file's 10 again")
	require.Contains(t, refusals[0], "its own, --tenant-limits max-open=10")

	var list events.TenantLimitsListReply
	require.Nil(t, h.call(streams.EndpointTenantLimitsList, events.TenantLimitsListRequest{}, &list))
	require.Empty(t, list.Tenants, "removed limits are not listed")
	// globex has none in the ledger: a put of nothing writes nothing.
	seq, _ = h.streamState()
	var nothing events.TenantLimitsPutReply
	require.Nil(t, h.call(streams.EndpointTenantLimitsPut, events.TenantLimitsPutRequest{Tenant: "globex"}, &nothing))
	require.False(t, nothing.Created)
	require.Equal(t, uint64(0), nothing.Version)
	s3, _ := h.streamState()
	require.Equal(t, seq, s3, "nothing to remove: nothing written")
}
