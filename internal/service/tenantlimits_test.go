package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// tcallE is tcall for goroutines other than the test's: it never calls
// require.
func (h *harness) tcallE(tenant, endpoint string, req any, out any) (*events.Error, error) {
	e, msg, err := h.requestE(h.env.Layout.TenantEndpoint(tenant, endpoint), req, out)
	if e != nil {
		if got := msg.Header.Get("Nats-Service-Error"); got != string(e.Code) {
			return nil, fmt.Errorf("error header %q, body code %q", got, e.Code)
		}
	}
	return e, err
}

// tputBudget defines tenant's budget of scope (or default, "kind:*").
func (h *harness) tputBudget(tenant, scope, period, limit string) {
	h.t.Helper()
	require.Nil(h.t, h.tcall(tenant, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: scope, Period: period, Limit: limit, Unit: "USD"}, nil))
}

// scrape returns m's exposition, as /metrics serves it in the text format
// (labels sorted by name).
func scrape(t *testing.T, m *metrics.Set) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

// TestTenantLimits_OpenReservationsExact: acme's admits past its limit of
// open reservations are refused tenant_limit, exactly at the limit, under
// 100 concurrent admits spread over two replicas; globex is untouched; a
// refused admit writes nothing; a settle makes room for exactly one more.
//
// How we know it can fail: the limit is decided in the admit's Tx against
// the ledger's count (ledger.View.TenantOpen). With only the pre-check
// against the replica's book (admit's preCheckOpen) the concurrent admits
// all read a count below 20 and all 100 are admitted (tried: remove
// checkOpen from admitTx.Decide).
func TestTenantLimits_OpenReservationsExact(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{})
	h := newHarness(t, harnessOpts{replicas: 2, metrics: m, tenantLimits: service.TenantLimits{MaxOpen: 20, Rate: -1}})
	h.tputBudget("acme", "team:search", "month", "1000")
	h.tputBudget("globex", "team:search", "month", "1000")

	const n = 100
	var wg sync.WaitGroup
	replies := make([]events.AdmitReply, n)
	errs := make([]*events.Error, n)
	fails := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i], fails[i] = h.tcallE("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("a-", i),
				Scopes: []string{"team:search"}, Amount: "0.01", TTL: "24h"}, &replies[i])
		}()
	}
	close(start)
	wg.Wait()
	admitted, refused := 0, 0
	var ids []string
	for i := range n {
		require.NoError(t, fails[i])
		switch {
		case errs[i] != nil:
			require.Equal(t, events.CodeTenantLimit, errs[i].Code, errs[i].Message)
			require.Contains(t, errs[i].Message, "--tenant-max-open 20")
			refused++
		case replies[i].Admitted:
			admitted++
			ids = append(ids, replies[i].ReservationID)
		default:
			t.Fatalf("admit %d denied: %+v", i, replies[i].Denial)
		}
	}
	require.Equal(t, 20, admitted, "exactly the limit is admitted, across two replicas")
	require.Equal(t, n-20, refused)
	for _, r := range h.replicas {
		require.NoError(t, r.Ledger.Sync(ctxT(t)))
		require.Equal(t, 20, r.Ledger.TenantOpen("acme"), "every replica's book counts acme's open reservations")
	}
	var v events.BudgetView
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search", Period: "month"}, &v))
	require.Equal(t, "0.2", v.Reserved)

	// A refused admit changes nothing in the ledger; globex is served.
	seq, msgs := h.streamState()
	e := h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "a-more", Scopes: []string{"team:search"}, Amount: "0.01"}, nil)
	require.Equal(t, events.CodeTenantLimit, e.Code)
	s2, m2 := h.streamState()
	require.Equal(t, seq, s2)
	require.Equal(t, msgs, m2)
	var g events.AdmitReply
	require.Nil(t, h.tcall("globex", streams.EndpointAdmit, events.AdmitRequest{RequestID: "g-1", Scopes: []string{"team:search"}, Amount: "0.01"}, &g))
	require.True(t, g.Admitted)

	// A replay of an admitted request is answered at the limit; a check
	// is refused as the admit would be.
	first := slices.IndexFunc(replies, func(r events.AdmitReply) bool { return r.Admitted })
	var again events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("a-", first), Scopes: []string{"team:search"}, Amount: "0.01", TTL: "24h"}, &again))
	require.True(t, again.Replayed)
	require.Equal(t, replies[first].ReservationID, again.ReservationID)
	e = h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "a-check", Scopes: []string{"team:search"}, Amount: "0.01", Mode: events.ModeCheck}, nil)
	require.Equal(t, events.CodeTenantLimit, e.Code)
	// A retry past the limit: its outcome may be unknown (an earlier
	// attempt may still commit), so ledger_unavailable, not a refusal.
	e = h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "a-retry", Scopes: []string{"team:search"}, Amount: "0.01", Retry: true}, nil)
	require.Equal(t, events.CodeLedgerUnavailable, e.Code)
	require.Contains(t, e.Message, "--tenant-max-open 20")

	// A settle makes room for exactly one, on every replica once it has
	// folded the settle (a replica's pre-check reads its own book: until
	// then it may still refuse, for the follower's lag).
	require.Nil(t, h.tcall("acme", streams.EndpointSettle, events.SettleRequest{ReservationID: ids[0], Actual: "0.01"}, nil))
	for _, r := range h.replicas {
		require.NoError(t, r.Ledger.Sync(ctxT(t)))
	}
	var one events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "a-after-1", Scopes: []string{"team:search"}, Amount: "0.01"}, &one))
	require.True(t, one.Admitted)
	e = h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "a-after-2", Scopes: []string{"team:search"}, Amount: "0.01"}, nil)
	require.Equal(t, events.CodeTenantLimit, e.Code)

	require.NoError(t, h.replicas[0].Ledger.Sync(ctxT(t))) // its gauges read its book
	out := scrape(t, m)
	require.Contains(t, out, `spendgate_tenant_open_reservations{tenant="acme"} 20`)
	require.Contains(t, out, `spendgate_tenant_open_reservations{tenant="globex"} 1`)
	require.Contains(t, out, `spendgate_tenant_max_open_reservations{tenant="acme"} 20`, "the limit beside the count, for a ratio alert")
	require.Contains(t, out, `spendgate_tenant_max_default_budgets{tenant="acme"} 10000`)
	require.Contains(t, out, `spendgate_tenant_limited_total{limit="open_reservations",tenant="acme"}`)
	require.NotRegexp(t, `spendgate_tenant_limited_total\{[^}]*tenant="globex"`, out)
}

// TestTenantLimits_DefaultBudgets: a "user:*" default creates budgets for
// acme only up to its limit: of 20 new users admitted at once, 5 get a
// budget and are admitted, 15 are refused tenant_limit and create nothing;
// a user that has its budget goes on being served, a check of a new user
// is refused as its admit would be, and the untenanted deployment's
// default is not limited. How we know it can fail: without the count
// (admit's reserveDefault) all 20 budgets are created (the test's first
// assertion); without the creations in flight in that count, concurrent
// first admits all read 0 and pass it (tried: 19 budgets).
func TestTenantLimits_DefaultBudgets(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{})
	h := newHarness(t, harnessOpts{metrics: m, tenantLimits: service.TenantLimits{MaxDefaultBudgets: 5, Rate: -1}})
	h.tputBudget("acme", "user:*", "day", "1")
	h.putBudget("user:*", "day", "1", "USD")

	const n = 20
	var wg sync.WaitGroup
	errs := make([]*events.Error, n)
	fails := make([]error, n)
	replies := make([]events.AdmitReply, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i], fails[i] = h.tcallE("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("u-", i),
				Scopes: []string{fmt.Sprintf("user:u-%d", i)}, Amount: "0.5", TTL: "24h"}, &replies[i])
		}()
	}
	close(start)
	wg.Wait()
	var served []int
	for i := range n {
		require.NoError(t, fails[i])
		if errs[i] != nil {
			require.Equal(t, events.CodeTenantLimit, errs[i].Code, errs[i].Message)
			require.Contains(t, errs[i].Message, "--tenant-max-default-budgets 5")
			continue
		}
		require.True(t, replies[i].Admitted, "%+v", replies[i].Denial)
		served = append(served, i)
	}
	require.Len(t, served, 5, "exactly the limit of budgets is created")
	var list events.BudgetListReply
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetList, events.BudgetListRequest{}, &list))
	require.Len(t, list.Budgets, 5)
	require.Equal(t, 5, h.replicas[0].Ledger.TenantDefaultBudgets("acme"))

	// A served user goes on; a new one is refused, as is its check, and
	// nothing is written.
	var r events.AdmitReply
	require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "again", Scopes: []string{fmt.Sprintf("user:u-%d", served[0])}, Amount: "0.25"}, &r))
	require.True(t, r.Admitted)
	seq, msgs := h.streamState()
	for _, mode := range []string{events.ModeAdmit, events.ModeCheck} {
		e := h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "new-" + mode, Scopes: []string{"user:new"}, Amount: "0.25", Mode: mode}, nil)
		require.Equal(t, events.CodeTenantLimit, e.Code, mode)
	}
	s2, m2 := h.streamState()
	require.Equal(t, seq, s2)
	require.Equal(t, msgs, m2)

	// The untenanted deployment has no such limit.
	for i := range 7 {
		u, e := h.admit(events.AdmitRequest{Scopes: []string{fmt.Sprintf("user:plain-%d", i)}, Amount: "0.5", RequestID: fmt.Sprint("p-", i)})
		require.Nil(t, e)
		require.True(t, u.Admitted)
	}
	out := scrape(t, m)
	require.Contains(t, out, `spendgate_tenant_default_budgets{tenant="acme"} 5`)
	require.Contains(t, out, `spendgate_tenant_limited_total{limit="default_budgets",tenant="acme"} 17`)
}

// TestTenantLimits_RequestRate: past its rate on a replica, a tenant's
// requests are answered tenant_limit at once (status 429), each item of a
// batch counted; a retried admit past it is ledger_unavailable (its first
// attempt may still commit); another tenant is served meanwhile; and once
// the bucket refills the tenant is served again. How we know it can fail:
// with no rate (Rate -1) every one of the 20 admits is admitted.
func TestTenantLimits_RequestRate(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{})
	h := newHarness(t, harnessOpts{metrics: m, tenantLimits: service.TenantLimits{Rate: 5, Burst: 5}})
	h.tputBudget("acme", "team:search", "month", "1000")
	h.tputBudget("globex", "team:search", "month", "1000")
	// The budget puts took tokens of the buckets: let them refill.
	h.waitRate("acme")
	h.waitRate("globex")

	t0 := time.Now()
	admitted, refused := 0, 0
	for i := range 20 {
		var r events.AdmitReply
		e := h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("r-", i), Scopes: []string{"team:search"}, Amount: "0.01"}, &r)
		if e != nil {
			require.Equal(t, events.CodeTenantLimit, e.Code)
			require.Contains(t, e.Message, "--tenant-rate 5")
			refused++
			continue
		}
		require.True(t, r.Admitted)
		admitted++
	}
	// A burst of 5, plus what came back while the 20 were sent.
	require.LessOrEqual(t, admitted, 5+int(time.Since(t0).Seconds()*5)+1)
	require.Positive(t, refused)
	require.Positive(t, admitted)

	// Another tenant is served; a retry past the rate is
	// ledger_unavailable; a batch's items are counted one by one.
	var g events.AdmitReply
	require.Nil(t, h.tcall("globex", streams.EndpointAdmit, events.AdmitRequest{RequestID: "g", Scopes: []string{"team:search"}, Amount: "0.01"}, &g))
	require.True(t, g.Admitted)
	e := h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: "retry", Scopes: []string{"team:search"}, Amount: "0.01", Retry: true}, nil)
	require.Equal(t, events.CodeLedgerUnavailable, e.Code)
	require.Contains(t, e.Message, "--tenant-rate 5")
	h.waitRate("globex")
	items := make([]json.RawMessage, 8)
	for i := range items {
		items[i], _ = json.Marshal(events.AdmitRequest{RequestID: fmt.Sprint("b-", i), Scopes: []string{"team:search"}, Amount: "0.01"})
	}
	var batch struct {
		Items []json.RawMessage `json:"items"`
	}
	require.Nil(t, h.tcall("globex", streams.EndpointAdmitBatch, events.BatchRequest{Items: items}, &batch))
	limitedItems := 0
	for _, it := range batch.Items {
		if strings.Contains(string(it), `"tenant_limit"`) {
			limitedItems++
		}
	}
	require.GreaterOrEqual(t, limitedItems, 2, "a burst of 5 serves at most 6 of 8 items: %s", batch.Items)

	// Refilled, acme is served again.
	h.waitRate("acme")
	out := scrape(t, m)
	require.Contains(t, out, `spendgate_tenant_limited_total{limit="request_rate",tenant="acme"}`)
	require.Contains(t, out, `spendgate_requests_total{code="tenant_limit",endpoint="admit"}`)
}

// waitRate waits (bounded) until tenant's budget.list is served again:
// its rate's bucket has refilled enough to be served.
func (h *harness) waitRate(tenant string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		e, err := h.tcallE(tenant, streams.EndpointBudgetList, events.BudgetListRequest{}, nil)
		return err == nil && e == nil
	}, 10*time.Second, 50*time.Millisecond, "tenant %s served again", tenant)
}

// TestTenantLimits_DenialRecords: a tenant's denials for scopes it has no
// budget for are counted, never recorded; its other denials are recorded
// up to its bytes per second, and past them counted instead. How we know
// it can fail: an earlier build recorded every one of the 60 denials,
// with its 4 KB of metadata.
func TestTenantLimits_DenialRecords(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{})
	h := newHarness(t, harnessOpts{metrics: m, tenantLimits: service.TenantLimits{DenialBytes: 1000, Rate: -1}})
	h.tputBudget("acme", "team:tight", "day", "1")
	rec := h.replicas[0].Denials
	meta := map[string]string{}
	for i := range events.MaxMetadata {
		meta[fmt.Sprintf("k%02d", i)] = strings.Repeat("x", 250)
	}

	// Unknown scopes: denied, counted, not recorded.
	for i := range 30 {
		var r events.AdmitReply
		require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("u-", i),
			Scopes: []string{fmt.Sprintf("user:made-up-%d", i)}, Amount: "2", Metadata: meta}, &r))
		require.Equal(t, events.ReasonUnknownBudget, r.Denial.Reason)
	}
	// Limit reached: recorded up to 1000 B/s with a burst of 16,000 B,
	// about 3 records of 4.5 KB; the rest counted.
	t0 := time.Now()
	for i := range 30 {
		var r events.AdmitReply
		require.Nil(t, h.tcall("acme", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("l-", i),
			Scopes: []string{"team:tight"}, Amount: "2", Metadata: meta}, &r))
		require.Equal(t, events.ReasonLimitReached, r.Denial.Reason)
	}
	elapsed := time.Since(t0)
	require.NoError(t, rec.Flush(ctxT(t)))
	recorded := rec.Recorded()
	require.Positive(t, recorded)
	require.LessOrEqual(t, recorded, uint64(16000+elapsed.Seconds()*1000)/4000+1, "records past the tenant's bytes per second")
	require.Equal(t, uint64(30), recorded+rec.Limited())
	require.Zero(t, rec.Dropped())

	s, err := h.env.JS.Stream(ctxT(t), h.env.Layout.DenialStreamName())
	require.NoError(t, err)
	info, err := s.Info(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, recorded, info.State.Msgs, "only the recorded denials are on the stream")

	out := scrape(t, m)
	require.Contains(t, out, `spendgate_tenant_unknown_scope_denials_total{tenant="acme"} 30`)
	require.Contains(t, out, fmt.Sprintf(`spendgate_tenant_limited_total{limit="denial_bytes",tenant="acme"} %d`, rec.Limited()))
	// The replica's recent denials keep no metadata of an unknown scope.
	for _, d := range h.replicas[0].Service.RecentDenials() {
		if d.Denial.Reason == events.ReasonUnknownBudget {
			require.Nil(t, d.Metadata)
		}
	}
}

// floodSetup is what TestTenantLimits_FloodKeepsOtherTenantsP99 floods
// with: the limits, acme's offered requests per second, and globex's pace.
// SPENDGATE_FLOOD_NO_LIMITS=1 turns every limit off (the test's negative
// control, which must fail it). For measuring: SPENDGATE_FLOOD_RATE,
// SPENDGATE_FLOOD_OFFER, SPENDGATE_FLOOD_PACE and SPENDGATE_FLOOD_ROUNDS
// set the rate limit, the offered rate, the probe's pace and the number of
// quiet+flooded rounds; SPENDGATE_FLOOD_KINDS (digits 0-3, e.g. "13")
// floods with those kinds of request only.
func floodSetup() (l service.TenantLimits, offer int, pace time.Duration) {
	// Smaller than the defaults, so that the flood reaches each limit
	// within the test; the rate is the default.
	l = service.TenantLimits{MaxOpen: 200, MaxDefaultBudgets: 20}
	offer = 1500 // docs/tenant-limits.md's attack: 29,714 admits in 20 s
	pace = 10 * time.Millisecond
	if os.Getenv("SPENDGATE_FLOOD_NO_LIMITS") != "" {
		l = service.TenantLimits{MaxOpen: -1, MaxDefaultBudgets: -1, MaxBudgets: -1, Rate: -1, DenialBytes: -1}
	}
	if r, err := strconv.Atoi(os.Getenv("SPENDGATE_FLOOD_RATE")); err == nil {
		l.Rate = r
	}
	if o, err := strconv.Atoi(os.Getenv("SPENDGATE_FLOOD_OFFER")); err == nil {
		offer = o
	}
	if p, err := time.ParseDuration(os.Getenv("SPENDGATE_FLOOD_PACE")); err == nil {
		pace = p
	}
	return l, offer, pace
}

// p99 is the 99th percentile of ds (sorted in place), 0 for none.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*99/100)]
}

// TestTenantLimits_FloodKeepsOtherTenantsP99: acme floods at its limits
// as the attack in docs/tenant-limits.md did, 1,500 requests per second
// offered (open loop, as a client elsewhere would send them whatever the
// answers): admits of 0.000001 with a 24 h TTL and 4 KB of metadata on a
// $1 budget, first admits of ever new users under a "user:*" default, and
// denied admits with 4 KB of metadata for scopes it has no budget for and
// for a budget it has spent. Meanwhile globex runs admit+settle cycles at
// a steady pace. Globex's admit p99 while acme floods stays within 2x of
// its p99 while acme is quiet, measured in the same test on the same
// replica, and acme's state stays within its limits.
//
// Quiet and flooded windows alternate, the first quiet one before any
// flood, each quiet one once acme's requests are all answered: a change in
// the load other processes put on the machine falls alike on both p99s.
// Acme's client is a process of its own (floodChild), as it would be: its
// encoding and counting are not charged to the replica's process.
//
// The p99 bound is asserted with SPENDGATE_TENANT_FLOOD=1 without -race
// (.ci/run's step of its own, on an otherwise idle machine): under the
// race detector, or next to other processes' builds and tests on 2 cores,
// a p99 measures them. Otherwise the flood runs shorter, its p99s are
// logged, and the limits are checked.
//
// How we know it can fail: with the limits off (SPENDGATE_FLOOD_NO_LIMITS=1)
// the same flood makes globex's p99 several times its quiet value; see
// docs/tenant-limits.md for the numbers.
func TestTenantLimits_FloodKeepsOtherTenantsP99(t *testing.T) {
	limits, offer, pace := floodSetup()
	assertP99 := os.Getenv("SPENDGATE_TENANT_FLOOD") != "" && !raceEnabled
	rounds, window := 1, time.Second
	if assertP99 {
		rounds = 10 // about 1,000 admits each side: a p99 that a few stalls do not make
	}
	if r, err := strconv.Atoi(os.Getenv("SPENDGATE_FLOOD_ROUNDS")); err == nil {
		rounds = r
	}
	h := newHarness(t, harnessOpts{tenantLimits: limits})
	h.tputBudget("acme", "team:search", "month", "1")
	h.tputBudget("acme", "team:spent", "month", "0.000001")
	h.tputBudget("acme", "user:*", "day", "1")
	h.tputBudget("globex", "team:search", "month", "1000000")
	meta := map[string]string{}
	for i := range events.MaxMetadata {
		meta[fmt.Sprintf("k%02d", i)] = strings.Repeat("x", 250)
	}
	metaJSON, err := json.Marshal(meta)
	require.NoError(t, err)
	gnc := h.env.Connect(t)
	var flooding atomic.Bool

	// globex: an admit+settle cycle started every pace, each admit timed
	// and filed under the window it started and ended in.
	var mu sync.Mutex
	var quiet, flooded []time.Duration
	var probing, skipped atomic.Int64
	probeCtx, stopProbe := context.WithCancel(context.Background())
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-probeCtx.Done():
				return
			case <-tick.C:
			}
			// globex has acme's limits: on a machine so slow that its
			// cycles pile up towards its open-reservation limit, a tick
			// is skipped and counted (an asserted run requires none,
			// since skipping would hide the slowest cycles).
			if probing.Load() >= int64(limits.MaxOpen)/2 && limits.MaxOpen > 0 {
				skipped.Add(1)
				continue
			}
			probing.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer probing.Add(-1)
				during := flooding.Load()
				data, _ := json.Marshal(events.AdmitRequest{RequestID: fmt.Sprint("g-", i), Scopes: []string{"team:search"}, Amount: "0.01", TTL: "1m"})
				t0 := time.Now()
				msg, err := gnc.Request(h.env.Layout.TenantEndpoint("globex", streams.EndpointAdmit), data, 10*time.Second)
				took := time.Since(t0)
				var r events.AdmitReply
				if err != nil || json.Unmarshal(msg.Data, &r) != nil || !r.Admitted {
					t.Errorf("globex admit failed: %v %s", err, msg.Data)
					return
				}
				if during == flooding.Load() {
					mu.Lock()
					if during {
						flooded = append(flooded, took)
					} else {
						quiet = append(quiet, took)
					}
					mu.Unlock()
				}
				data, _ = json.Marshal(events.SettleRequest{ReservationID: r.ReservationID, Actual: "0.01"})
				if _, err := gnc.Request(h.env.Layout.TenantEndpoint("globex", streams.EndpointSettle), data, 10*time.Second); err != nil {
					t.Errorf("globex settle failed: %v", err)
				}
			}()
		}
	}()

	// acme: another process (floodChild) offers requests while flooding,
	// open loop, as a client elsewhere would send them whatever the
	// answers: its encoding, sending and counting are not this process's.
	child := startFloodChild(t, h.env.URL(), h.env.Layout.TenantEndpoint("acme", streams.EndpointAdmit), offer, string(metaJSON))
	var sent, answered, limited atomic.Int64
	flood := func(d time.Duration) {
		s, a, l := child.flood(t, d)
		sent.Store(s)
		answered.Store(a)
		limited.Store(l)
	}
	// The process's CPU time in each kind of window (the server, the
	// replica, globex's client): what the flood costs, logged.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// One measurement: rounds of a quiet and a flooded window, then a last
	// quiet one; globex's p99 in each kind of window.
	measure := func() (pq, pf time.Duration, nq, nf int) {
		mu.Lock()
		quiet, flooded = quiet[:0], flooded[:0]
		mu.Unlock()
		var cpuQuiet, cpuFlood time.Duration
		// The ledger's commit path in each kind of window: what the flood
		// made it do (logged, for a run that fails).
		var ledQuiet, ledFlood ledgerWork
		l := h.replicas[0].Ledger
		for range rounds {
			// A quiet window: acme sends nothing and has nothing in flight
			// (flood returns once every request is answered).
			c0, s0 := cpu(), l.Stats()
			<-time.After(window)
			c1, s1 := cpu(), l.Stats()
			cpuQuiet += c1 - c0
			ledQuiet.add(s0, s1)
			flooding.Store(true)
			flood(window)
			flooding.Store(false)
			cpuFlood += cpu() - c1
			ledFlood.add(s1, l.Stats())
		}
		<-time.After(window) // a last quiet window
		mu.Lock()
		defer mu.Unlock()
		pq, pf, nq, nf = p99(quiet), p99(flooded), len(quiet), len(flooded)
		per := func(d time.Duration) float64 { return float64(d) / float64(time.Duration(rounds)*window) * 100 }
		t.Logf("globex admit p99 %v quiet (%d admits), %v while acme floods (%d admits, %d ticks skipped, %.2fx); acme sent %d, %d answered tenant_limit; CPU of this process (server, replica, globex's client): %.0f%% of a core quiet, %.0f%% while acme floods",
			pq, nq, pf, nf, skipped.Load(), float64(pf)/float64(pq), sent.Load(), limited.Load(), per(cpuQuiet), per(cpuFlood))
		t.Logf("the ledger's commit path: quiet %s; while acme floods %s", ledQuiet, ledFlood)
		return pq, pf, nq, nf
	}
	// A p99 ratio is measured up to attempts times, each a fresh set of
	// windows, and holds if one measurement holds it: a stall of the
	// machine (another VM's burst, a page-cache flush) that happens to fall
	// in flooded windows moves a p99 of a thousand admits by itself. A
	// flood that does degrade globex fails every attempt: the negative
	// control (SPENDGATE_FLOOD_NO_LIMITS=1) does.
	attempts := 1
	if assertP99 {
		attempts = 3
	}
	if a, err := strconv.Atoi(os.Getenv("SPENDGATE_FLOOD_ATTEMPTS")); err == nil && a > 0 {
		attempts = a
	}
	var ok bool
	for a := 1; a <= attempts && !ok; a++ {
		pq, pf, nq, nf := measure()
		if !assertP99 {
			break
		}
		require.Zero(t, skipped.Load(), "globex's probe kept its pace")
		require.GreaterOrEqual(t, nq, 100*rounds/2, "globex's admits while acme is quiet")
		require.GreaterOrEqual(t, nf, 100*rounds/2, "globex's admits while acme floods")
		ok = pf <= 2*pq
		if !ok {
			t.Logf("attempt %d of %d: globex's admit p99 while acme floods is not within 2x of its p99 while acme is quiet", a, attempts)
		}
	}
	stopProbe()
	pwg.Wait()

	r := h.replicas[0]
	require.NoError(t, r.Ledger.Sync(ctxT(t)))
	t.Logf("acme: %d open reservations, %d budgets from defaults; denial records: %d recorded, %d limited",
		r.Ledger.TenantOpen("acme"), r.Ledger.TenantDefaultBudgets("acme"), r.Denials.Recorded(), r.Denials.Limited())
	if limits.MaxOpen > 0 {
		require.LessOrEqual(t, r.Ledger.TenantOpen("acme"), limits.MaxOpen)
		require.LessOrEqual(t, r.Ledger.TenantDefaultBudgets("acme"), limits.MaxDefaultBudgets)
		require.Positive(t, limited.Load(), "the flood reached acme's limits")
	}
	if assertP99 {
		require.True(t, ok, "globex's admit p99 while acme floods is within 2x of its p99 while acme is quiet, in one of %d measurements", attempts)
	}
}

// floodChild is acme's flood generator in a process of its own (this test
// binary run as TestTenantLimits_FloodChild), driven over its stdin and
// stdout: "flood <duration>" floods for that long, waits until every
// request is answered, and prints the totals sent, answered and answered
// tenant_limit.
type floodChild struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

func startFloodChild(t *testing.T, url, subject string, offer int, meta string) *floodChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTenantLimits_FloodChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SPENDGATE_FLOOD_CHILD_URL="+url, "SPENDGATE_FLOOD_CHILD_SUBJECT="+subject,
		"SPENDGATE_FLOOD_CHILD_OFFER="+strconv.Itoa(offer), "SPENDGATE_FLOOD_CHILD_META="+meta)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = in.Close() // the child exits at the end of its input
		_ = cmd.Wait()
	})
	c := &floodChild{in: in, out: bufio.NewScanner(out)}
	c.expect(t, "ready")
	return c
}

// expect reads the child's lines up to one that starts with prefix (the
// test framework's own lines come first) and returns its fields.
func (c *floodChild) expect(t *testing.T, prefix string) []string {
	t.Helper()
	for c.out.Scan() {
		if f := strings.Fields(c.out.Text()); len(f) > 0 && f[0] == prefix {
			return f[1:]
		}
	}
	require.FailNow(t, "the flood process ended before "+prefix, "%v", c.out.Err())
	return nil
}

func (c *floodChild) flood(t *testing.T, d time.Duration) (sent, answered, limited int64) {
	t.Helper()
	_, err := fmt.Fprintf(c.in, "flood %s\n", d)
	require.NoError(t, err)
	f := c.expect(t, "flooded")
	require.Len(t, f, 3)
	n := make([]int64, 3)
	for i := range f {
		n[i], err = strconv.ParseInt(f[i], 10, 64)
		require.NoError(t, err)
	}
	return n[0], n[1], n[2]
}

// TestTenantLimits_FloodChild is floodChild's process; run by itself it
// skips.
func TestTenantLimits_FloodChild(t *testing.T) {
	url := os.Getenv("SPENDGATE_FLOOD_CHILD_URL")
	if url == "" {
		t.Skip("acme's flood generator for TestTenantLimits_FloodKeepsOtherTenantsP99, run by it")
	}
	subject, meta := os.Getenv("SPENDGATE_FLOOD_CHILD_SUBJECT"), os.Getenv("SPENDGATE_FLOOD_CHILD_META")
	offer, err := strconv.Atoi(os.Getenv("SPENDGATE_FLOOD_CHILD_OFFER"))
	require.NoError(t, err)
	nc, err := nats.Connect(url, nats.Name("acme-flood"))
	require.NoError(t, err)
	defer nc.Close()
	var sent, answered, limited atomic.Int64
	inbox := nats.NewInbox()
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		answered.Add(1)
		if m.Header.Get("Nats-Service-Error") == string(events.CodeTenantLimit) {
			limited.Add(1)
		}
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.Flush())
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		require.Len(t, f, 2)
		d, err := time.ParseDuration(f[1])
		require.NoError(t, err)
		const tick = 5 * time.Millisecond
		per := offer * int(tick) / int(time.Second)
		tk := time.NewTicker(tick)
		for end := time.Now().Add(d); time.Now().Before(end); {
			<-tk.C
			for range per {
				i := sent.Add(1)
				k := i % 4
				if ks := os.Getenv("SPENDGATE_FLOOD_KINDS"); ks != "" {
					k = int64(ks[i%int64(len(ks))] - '0')
				}
				scope, amount := "team:search", "0.000001"
				switch k {
				case 1:
					scope = fmt.Sprint("user:u-", i)
				case 2:
					scope = fmt.Sprint("team:none-", i)
				case 3:
					scope, amount = "team:spent", "1"
				}
				data := fmt.Appendf(nil, `{"request_id":"a-%d","scopes":[%q],"amount":%q,"ttl":"24h","metadata":%s}`, i, scope, amount, meta)
				require.NoError(t, nc.PublishRequest(subject, fmt.Sprint(inbox, ".", i), data))
			}
		}
		tk.Stop()
		require.NoError(t, nc.Flush())
		testenv.WaitFor(t, time.Minute, "acme's requests answered", func() bool { return answered.Load() == sent.Load() })
		fmt.Println("flooded", sent.Load(), answered.Load(), limited.Load())
	}
}

// ledgerWork sums what a ledger's commit path did between Stats readings.
type ledgerWork struct {
	commits, txs, conflicts int64
	attempt, write          time.Duration
}

func (w *ledgerWork) add(a, b ledger.Stats) {
	w.commits += b.Commits - a.Commits
	w.txs += b.Txs - a.Txs
	w.conflicts += b.Conflicts - a.Conflicts
	w.attempt += b.AttemptTime - a.AttemptTime
	w.write += b.WriteTime - a.WriteTime
}

func (w ledgerWork) String() string {
	return fmt.Sprintf("%d commits of %d txs, %d conflicts, %v in attempts (%v writing)",
		w.commits, w.txs, w.conflicts, w.attempt.Round(time.Millisecond), w.write.Round(time.Millisecond))
}

// TestTenantLimits_SettlesPastTheRate: a tenant that spent its burst on
// admits still settles them: a settle, release or void may run its bucket
// a burst into debt, and the next admit is refused instead. How we know it
// can fail: with settles taking tokens as admits do, the first settle
// after the burst was refused tenant_limit, and its call's cost went
// unrecorded when the reservation expired.
func TestTenantLimits_SettlesPastTheRate(t *testing.T) {
	h := newHarness(t, harnessOpts{tenantLimits: service.TenantLimits{Rate: 1, Burst: 10}})
	h.tputBudget("initech", "team:search", "month", "1000") // one token of the ten
	var ids []string
	for i := range 30 {
		var r events.AdmitReply
		e := h.tcall("initech", streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprint("s-", i), Scopes: []string{"team:search"}, Amount: "0.01"}, &r)
		if e != nil {
			require.Equal(t, events.CodeTenantLimit, e.Code)
			break
		}
		require.True(t, r.Admitted)
		ids = append(ids, r.ReservationID)
	}
	require.GreaterOrEqual(t, len(ids), 9, "the burst less the put's token")
	require.Less(t, len(ids), 30, "the burst was spent")
	for _, id := range ids {
		var r events.CloseReply
		require.Nil(t, h.tcall("initech", streams.EndpointSettle, events.SettleRequest{ReservationID: id, Actual: "0.01"}, &r), "the settle of %s", id)
		require.Equal(t, events.StatusSettled, r.Status)
	}
	e := h.tcall("initech", streams.EndpointAdmit, events.AdmitRequest{RequestID: "after", Scopes: []string{"team:search"}, Amount: "0.01"}, nil)
	require.NotNil(t, e, "admits wait for the debt to be paid back")
	require.Equal(t, events.CodeTenantLimit, e.Code)
}
