package metrics

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
)

// gather collects r once (failing on any collection error, such as two
// series of one family with the same labels) and returns the families by
// name.
func gather(t *testing.T, r prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := r.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// sample returns the metric of f whose labels are exactly labels
// (name=value pairs), or nil.
func sample(f *dto.MetricFamily, labels ...string) *dto.Metric {
	if f == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

func gaugeOf(t *testing.T, f *dto.MetricFamily, labels ...string) float64 {
	t.Helper()
	m := sample(f, labels...)
	require.NotNil(t, m, "%s%v", f.GetName(), labels)
	return m.GetGauge().GetValue()
}

// fullSet is a Set with every Register* called, as serve does.
func fullSet(budgets func() []BudgetSample) *Set {
	s := New(BuildInfo{Version: "v1.2.3", Commit: "deadbeef"})
	one := func() uint64 { return 1 }
	s.RegisterBudgets(3, budgets)
	s.RegisterFollowerLag(func() uint64 { return 12 })
	s.RegisterSnapshotAge(func() time.Duration { return -1 })
	s.RegisterClockSkew(func() (time.Duration, bool) { return 0, false })
	s.RegisterFeedRelay(FeedRelayStats{Relayed: one, Lost: one, Forged: one, Drift: one, Queued: one, Stalled: one, Dropped: one, Refolded: one, CheckpointLoaded: one, CheckpointWritten: one})
	s.RegisterLedgerHealth(func() LedgerHealth { return LedgerHealth{Ready: true, Leader: true, Delay: time.Second} })
	s.RegisterTenantConsumerCheck(one, func() int64 { return 0 })
	s.RegisterDenials(one, one, one, one)
	s.RegisterAlerts(one, one, one, one, one, one)
	NewAlertSink(s.Registry)
	s.RegisterReport(func() (int, int) { return 4, 5 })
	s.RegisterTenants(func() []TenantSample {
		return []TenantSample{{Tenant: "acme", Open: 3, DefaultBudgets: 1, MaxOpen: 10, MaxDefaultBudgets: 5}}
	})
	s.TenantLimited("acme", "request_rate")
	s.TenantUnknownScopeDenial("acme")
	// Every vector has a member, so that its family is gathered.
	s.Admits.WithLabelValues(ResultAdmitted, "").Inc()
	s.AdmitChecks.WithLabelValues("check", ResultAdmitted, "").Inc()
	s.ObserveRequest("admit", CodeOK, time.Millisecond)
	s.LedgerBusy.WithLabelValues(BusyInflight).Inc()
	s.Rejected("unsigned")
	s.Committed(2)
	s.Conflicted()
	s.Expired(3)
	return s
}

func someBudgets() []BudgetSample {
	return []BudgetSample{{Scope: "org:a", Period: "month", Unit: "USD", Open: 1, Spent: "1", Reserved: "0.05", Limit: "10",
		Forecast: func() BudgetForecast {
			return BudgetForecast{Paced: true, ExhaustsIn: 90 * time.Minute, BeforeReset: true}
		}}}
}

// TestSet_Families pins every family spendgate had before it moved onto the
// Prometheus client, with its type and labels (the metrics table of docs/operator.md),
// plus the per-budget gauges added with it and the Go runtime's and the
// process' own.
func TestSet_Families(t *testing.T) {
	fams := gather(t, fullSet(someBudgets).Registry)
	for _, tc := range []struct {
		name   string
		typ    dto.MetricType
		labels []string
	}{
		{"spendgate_admits_total", dto.MetricType_COUNTER, []string{"reason", "result"}},
		{"spendgate_admit_checks_total", dto.MetricType_COUNTER, []string{"mode", "reason", "result"}},
		{"spendgate_requests_total", dto.MetricType_COUNTER, []string{"code", "endpoint"}},
		{"spendgate_request_duration_seconds", dto.MetricType_HISTOGRAM, []string{"endpoint"}},
		{"spendgate_inflight_requests", dto.MetricType_GAUGE, nil},
		{"spendgate_ledger_busy_total", dto.MetricType_COUNTER, []string{"cause"}},
		{"spendgate_commits_total", dto.MetricType_COUNTER, nil},
		{"spendgate_commit_txs", dto.MetricType_HISTOGRAM, nil},
		{"spendgate_cas_conflicts_total", dto.MetricType_COUNTER, nil},
		{"spendgate_sweeper_released_total", dto.MetricType_COUNTER, nil},
		{"spendgate_revisions_rejected_total", dto.MetricType_COUNTER, []string{"reason"}},
		{"spendgate_follower_lag_revisions", dto.MetricType_GAUGE, nil},
		{"spendgate_open_reservations", dto.MetricType_GAUGE, []string{"period", "scope", "unit"}},
		{"spendgate_reserved_amount", dto.MetricType_GAUGE, []string{"period", "scope", "unit"}},
		{"spendgate_spent_amount", dto.MetricType_GAUGE, []string{"period", "scope", "unit"}},
		{"spendgate_limit_amount", dto.MetricType_GAUGE, []string{"period", "scope", "unit"}},
		{"spendgate_budget_utilization_ratio", dto.MetricType_GAUGE, []string{"period", "scope", "unit"}},
		{"spendgate_budgets_not_exposed", dto.MetricType_GAUGE, nil},
		{"spendgate_budget_exhausts_in_seconds", dto.MetricType_GAUGE, []string{"period", "scope", "unit"}},
		{"spendgate_budget_exhausts_before_reset", dto.MetricType_GAUGE, []string{"period", "scope", "unit"}},
		{"spendgate_alerts_retrying", dto.MetricType_GAUGE, nil},
		{"spendgate_snapshot_age_seconds", dto.MetricType_GAUGE, nil},
		{"spendgate_build_info", dto.MetricType_GAUGE, []string{"commit", "go_version", "version"}},
		{"spendgate_feed_events_relayed_total", dto.MetricType_COUNTER, nil},
		{"spendgate_feed_appends_lost_total", dto.MetricType_COUNTER, nil},
		{"spendgate_feed_forged_total", dto.MetricType_COUNTER, nil},
		{"spendgate_feed_limits_changed_total", dto.MetricType_COUNTER, nil},
		{"spendgate_feed_queued_events", dto.MetricType_GAUGE, nil},
		{"spendgate_feed_stalled", dto.MetricType_GAUGE, nil},
		{"spendgate_feed_dropped_events_total", dto.MetricType_COUNTER, nil},
		{"spendgate_feed_refolded_events_total", dto.MetricType_COUNTER, nil},
		{"spendgate_ledger_ready", dto.MetricType_GAUGE, nil},
		{"spendgate_ledger_stream_leader", dto.MetricType_GAUGE, nil},
		{"spendgate_follower_delay_seconds", dto.MetricType_GAUGE, nil},
		{"spendgate_feed_checkpoint_loaded_seq", dto.MetricType_GAUGE, nil},
		{"spendgate_feed_checkpoint_written_seq", dto.MetricType_GAUGE, nil},
		{"spendgate_feed_tenant_consumer_problems_total", dto.MetricType_COUNTER, nil},
		{"spendgate_feed_tenant_consumers_wrong", dto.MetricType_GAUGE, nil},
		{"spendgate_denials_recorded_total", dto.MetricType_COUNTER, nil},
		{"spendgate_denials_dropped_total", dto.MetricType_COUNTER, nil},
		{"spendgate_denials_limited_total", dto.MetricType_COUNTER, nil},
		{"spendgate_clock_skew_seconds", dto.MetricType_GAUGE, nil},
		{"spendgate_denials_failed_total", dto.MetricType_COUNTER, nil},
		{"spendgate_report_cells", dto.MetricType_GAUGE, nil},
		{"spendgate_report_reservations", dto.MetricType_GAUGE, nil},
		{"spendgate_tenant_limited_total", dto.MetricType_COUNTER, []string{"limit", "tenant"}},
		{"spendgate_tenant_unknown_scope_denials_total", dto.MetricType_COUNTER, []string{"tenant"}},
		{"spendgate_tenant_open_reservations", dto.MetricType_GAUGE, []string{"tenant"}},
		{"spendgate_tenant_default_budgets", dto.MetricType_GAUGE, []string{"tenant"}},
		{"spendgate_tenant_max_open_reservations", dto.MetricType_GAUGE, []string{"tenant"}},
		{"spendgate_tenant_max_default_budgets", dto.MetricType_GAUGE, []string{"tenant"}},
		{"go_goroutines", dto.MetricType_GAUGE, nil},
		{"go_memstats_heap_alloc_bytes", dto.MetricType_GAUGE, nil},
		{"process_cpu_seconds_total", dto.MetricType_COUNTER, nil},
		{"process_resident_memory_bytes", dto.MetricType_GAUGE, nil},
	} {
		f := fams[tc.name]
		require.NotNil(t, f, tc.name)
		require.Equal(t, tc.typ, f.GetType(), tc.name)
		require.NotEmpty(t, f.GetHelp(), tc.name)
		for _, m := range f.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			require.Equal(t, tc.labels, names, tc.name)
		}
	}
	bi := sample(fams["spendgate_build_info"], "version", "v1.2.3", "commit", "deadbeef", "go_version", runtime.Version())
	require.NotNil(t, bi)
	require.Equal(t, 1.0, bi.GetGauge().GetValue())
	require.True(t, math.IsNaN(gaugeOf(t, fams["spendgate_snapshot_age_seconds"])))
	require.Equal(t, 12.0, gaugeOf(t, fams["spendgate_follower_lag_revisions"]))
	require.Equal(t, 3.0, fams["spendgate_sweeper_released_total"].GetMetric()[0].GetCounter().GetValue())
}

// TestSet_Lint runs the Prometheus linter (what promtool check metrics
// runs) over a full Set: names, suffixes, units, help texts.
func TestSet_Lint(t *testing.T) {
	s := fullSet(someBudgets)
	problems, err := testutil.GatherAndLint(s.Registry)
	require.NoError(t, err)
	var ours []string
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "spendgate_") {
			ours = append(ours, p.Metric+": "+p.Text)
		}
	}
	require.Empty(t, ours)
}

// TestSet_Promtool pipes a scrape of a full Set through `promtool check
// metrics`, when promtool is installed (.ci/run unpacks it from Debian's
// prometheus package; TestSet_Lint runs the same linter in process).
func TestSet_Promtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus); TestSet_Lint runs its linter in process")
	}
	srv := httptest.NewServer(fullSet(someBudgets).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	// promtool exits 3 for lint warnings of families not ours (go_*,
	// process_*); everything it says about ours is a failure.
	for _, line := range strings.Split(string(out), "\n") {
		require.NotContains(t, line, "spendgate_", string(out))
	}
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, string(out))
		require.NotEqual(t, 1, ee.ExitCode(), "promtool could not parse the scrape:\n%s", out)
	}
}

// TestSet_RegisterBudgets: a scope with a USD and a requests budget in the
// same period gets one series per unit in every per-budget family (on the
// hand-written exposition, spendgate_open_reservations had no unit label
// and wrote two series with the same labels, which Prometheus rejects); the
// series limit keeps the budgets nearest their limit; amounts are exact
// decimals turned into the float a Prometheus server would parse them to.
func TestSet_RegisterBudgets(t *testing.T) {
	var calls int
	var mu sync.Mutex
	book := []BudgetSample{
		{Scope: "org:a", Period: "month", Unit: "USD", Open: 1, Spent: "1", Reserved: "0.05", Limit: "100"},                                  // 1.05 %
		{Scope: "org:a", Period: "month", Unit: "requests", Open: 7, Spent: "80", Reserved: "7", Limit: "100"},                               // 87 %
		{Scope: "org:b", Period: "day", Unit: "USD", Open: 2, Spent: "0.1", Reserved: "100000000000000000.000000000001", Limit: "1e30"},      // bad limit: NaN
		{Scope: "org:c", Period: "day", Unit: "USD", Open: 0, Spent: "9", Reserved: "0", Limit: "10"},                                        // 90 %
		{Scope: "org:d", Period: "lifetime", Unit: "USD", Open: 9, Spent: "0.25", Reserved: "0", Limit: "0"},                                 // zero limit, used: +Inf
		{Scope: "org:e", Period: "week", Unit: "tokens", Open: 0, Spent: "0", Reserved: "0", Limit: "1000"},                                  // 0 %
		{Scope: "org:f", Period: "week", Unit: "USD", Open: 3, Spent: "123456789012345678.123456789012", Reserved: "0", Limit: "1000000000"}, // huge
	}
	s := New(BuildInfo{})
	s.RegisterBudgets(4, func() []BudgetSample {
		mu.Lock()
		calls++
		mu.Unlock()
		return book
	})
	fams := gather(t, s.Registry)
	require.Equal(t, 1, calls, "one read of the book per scrape")
	require.Equal(t, "org:a", book[0].Scope, "the callback's slice is not reordered")
	open := fams["spendgate_open_reservations"]
	require.Len(t, open.GetMetric(), 4)
	// The four nearest their limit: f (huge), d (+Inf), c (90 %), a/requests (87 %).
	require.Equal(t, 7.0, gaugeOf(t, open, "scope", "org:a", "period", "month", "unit", "requests"))
	require.Nil(t, sample(open, "scope", "org:a", "period", "month", "unit", "USD"), "1 % is not among the four nearest")
	require.Equal(t, 9.0, gaugeOf(t, open, "scope", "org:d", "period", "lifetime", "unit", "USD"))
	require.Equal(t, 3.0, gaugeOf(t, fams["spendgate_budgets_not_exposed"]))

	util := fams["spendgate_budget_utilization_ratio"]
	require.Equal(t, 0.87, gaugeOf(t, util, "scope", "org:a", "period", "month", "unit", "requests"))
	require.Equal(t, 0.9, gaugeOf(t, util, "scope", "org:c", "period", "day", "unit", "USD"))
	require.True(t, math.IsInf(gaugeOf(t, util, "scope", "org:d", "period", "lifetime", "unit", "USD"), 1))
	require.Equal(t, 123456789.012345678123456789012, gaugeOf(t, util, "scope", "org:f", "period", "week", "unit", "USD"))

	exact := "123456789012345678.123456789012"
	f, err := strconv.ParseFloat(exact, 64)
	require.NoError(t, err)
	require.Equal(t, f, gaugeOf(t, fams["spendgate_spent_amount"], "scope", "org:f", "period", "week", "unit", "USD"),
		"the float Prometheus would parse the exact decimal to")
	require.Equal(t, 7.0, gaugeOf(t, fams["spendgate_reserved_amount"], "scope", "org:a", "period", "month", "unit", "requests"))
	require.Equal(t, 80.0, gaugeOf(t, fams["spendgate_spent_amount"], "scope", "org:a", "period", "month", "unit", "requests"))
	require.Equal(t, 100.0, gaugeOf(t, fams["spendgate_limit_amount"], "scope", "org:a", "period", "month", "unit", "requests"))
	require.Equal(t, 0.0, gaugeOf(t, fams["spendgate_limit_amount"], "scope", "org:d", "period", "lifetime", "unit", "USD"))

	// With room for all, both units of org:a are there, and an amount
	// that is not a plain decimal shows as NaN, never as a number.
	s = New(BuildInfo{})
	s.RegisterBudgets(0, func() []BudgetSample { return book })
	fams = gather(t, s.Registry)
	for _, name := range []string{"spendgate_open_reservations", "spendgate_reserved_amount", "spendgate_spent_amount", "spendgate_limit_amount", "spendgate_budget_utilization_ratio"} {
		require.Len(t, fams[name].GetMetric(), len(book), name)
		require.NotNil(t, sample(fams[name], "scope", "org:a", "period", "month", "unit", "USD"), name)
		require.NotNil(t, sample(fams[name], "scope", "org:a", "period", "month", "unit", "requests"), name)
	}
	require.True(t, math.IsNaN(gaugeOf(t, fams["spendgate_limit_amount"], "scope", "org:b", "period", "day", "unit", "USD")))
	require.True(t, math.IsNaN(gaugeOf(t, fams["spendgate_budget_utilization_ratio"], "scope", "org:b", "period", "day", "unit", "USD")))
	require.Equal(t, 0.0105, gaugeOf(t, fams["spendgate_budget_utilization_ratio"], "scope", "org:a", "period", "month", "unit", "USD"))
	require.Equal(t, 0.0, gaugeOf(t, fams["spendgate_budgets_not_exposed"]))
}

// TestRankBudgets compares utilizations exactly: two ratios a float64
// cannot tell apart still rank in order.
func TestRankBudgets(t *testing.T) {
	all := []BudgetSample{
		{Scope: "a", Spent: "0.99999999999999999999", Reserved: "0", Limit: "1"},
		{Scope: "b", Spent: "0.99999999999999999998", Reserved: "0", Limit: "1"},
		{Scope: "c", Spent: "0", Reserved: "0", Limit: "0"},     // nothing fits: 1
		{Scope: "d", Spent: "1", Reserved: "0.5", Limit: "2"},   // 0.75
		{Scope: "e", Spent: "x", Reserved: "0", Limit: "1"},     // unparsable: last
		{Scope: "f", Spent: "0", Reserved: "0.001", Limit: "0"}, // +Inf
		{Scope: "g", Spent: "1", Reserved: "0", Limit: "1", Open: 2},
	}
	var got []string
	for _, r := range rankBudgets(all, len(all)-1) {
		got = append(got, r.Scope)
	}
	require.Equal(t, []string{"f", "g", "c", "a", "b", "d"}, got)
}

// TestRankBudgets_KindByKind: 300 agent runs, each spent to its limit for
// good, and an org and two teams at 99 % and 95 %: with 100 gauges, the org
// and the teams keep theirs (ranked by utilization alone, the 300 runs
// took all 100 and the documented 90 % rule could no longer fire for an
// org), and the rest go to the runs.
func TestRankBudgets_KindByKind(t *testing.T) {
	var all []BudgetSample
	for i := range 300 {
		all = append(all, BudgetSample{Scope: fmt.Sprintf("run:r%03d", i), Period: "lifetime", Spent: "1", Reserved: "0", Limit: "1"})
	}
	all = append(all,
		BudgetSample{Scope: "org:acme", Period: "month", Spent: "99", Reserved: "0", Limit: "100"},
		BudgetSample{Scope: "team:a", Period: "month", Spent: "95", Reserved: "0", Limit: "100"},
		BudgetSample{Scope: "team:b", Period: "month", Spent: "1", Reserved: "0", Limit: "100"},
		BudgetSample{Scope: "acme/run:x", Period: "lifetime", Spent: "1", Reserved: "0", Limit: "1"})
	got := map[string]int{}
	for _, r := range rankBudgets(all, 100) {
		k, _, _ := strings.Cut(r.Scope, ":")
		got[k]++
	}
	require.Equal(t, map[string]int{"run": 96, "org": 1, "team": 2, "acme/run": 1}, got)
}

// TestSet_Concurrent increments from many goroutines while others scrape
// over HTTP: every scrape parses, and the totals are exact.
func TestSet_Concurrent(t *testing.T) {
	s := New(BuildInfo{Version: "test", Commit: "abc"})
	s.RegisterBudgets(0, someBudgets)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	const workers, per = 4, 1000
	stop := make(chan struct{})
	scrapeErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				scrapeErr <- nil
				return
			default:
			}
			resp, err := http.Get(srv.URL)
			if err == nil {
				p := expfmt.NewTextParser(model.LegacyValidation)
				_, err = p.TextToMetricFamilies(resp.Body)
				resp.Body.Close()
			}
			if err != nil {
				scrapeErr <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				s.Admits.WithLabelValues(ResultDenied, "r"+strconv.Itoa(i%5)).Inc()
				s.ObserveRequest("admit", CodeOK, time.Duration(i%10)*time.Millisecond)
				s.Inflight.Inc()
				s.Committed(w + 1)
				s.Inflight.Dec()
			}
		})
	}
	wg.Wait()
	close(stop)
	require.NoError(t, <-scrapeErr)
	fams := gather(t, s.Registry)
	for i := range 5 {
		m := sample(fams["spendgate_admits_total"], "result", "denied", "reason", "r"+strconv.Itoa(i))
		require.Equal(t, float64(workers*per/5), m.GetCounter().GetValue())
	}
	require.Equal(t, float64(workers*per), testutil.ToFloat64(s.Commits))
	require.Equal(t, 0.0, testutil.ToFloat64(s.Inflight))
	h := sample(fams["spendgate_request_duration_seconds"], "endpoint", "admit").GetHistogram()
	require.Equal(t, uint64(workers*per), h.GetSampleCount())
	txs := fams["spendgate_commit_txs"].GetMetric()[0].GetHistogram()
	for _, b := range txs.GetBucket() {
		if b.GetUpperBound() == 2 {
			require.Equal(t, uint64(2*per), b.GetCumulativeCount(), "workers 0 and 1 observed 1 and 2")
		}
	}
}

// TestHandler serves the text format with the documented content type,
// bucket bounds as written before the move (le="0.00025").
func TestHandler(t *testing.T) {
	s := New(BuildInfo{})
	s.ObserveRequest("settle", "unknown_reservation", 3*time.Millisecond)
	s.ObserveRequest("settle", CodeOK, 20*time.Second)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, ContentType, resp.Header.Get("Content-Type"))
	require.True(t, strings.HasPrefix(ContentType, "text/plain; version=0.0.4"), ContentType)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	body := string(b)
	for _, line := range []string{
		`spendgate_requests_total{code="unknown_reservation",endpoint="settle"} 1`,
		`spendgate_requests_total{code="ok",endpoint="settle"} 1`,
		`spendgate_request_duration_seconds_bucket{endpoint="settle",le="0.00025"} 0`,
		`spendgate_request_duration_seconds_bucket{endpoint="settle",le="0.005"} 1`,
		`spendgate_request_duration_seconds_bucket{endpoint="settle",le="10"} 1`,
		`spendgate_request_duration_seconds_bucket{endpoint="settle",le="+Inf"} 2`,
	} {
		require.Contains(t, body, line+"\n")
	}
	require.Contains(t, body, "\ngo_goroutines ")
	require.Contains(t, body, "\nprocess_start_time_seconds ")
}

// TestNew_OwnRegistry: two Sets in one process do not collide (nothing is
// registered in the client library's global registry).
func TestNew_OwnRegistry(t *testing.T) {
	a, b := New(BuildInfo{}), New(BuildInfo{})
	a.Commits.Inc()
	require.Equal(t, 0.0, testutil.ToFloat64(b.Commits))
	mfs, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	names := make([]string, 0, len(mfs))
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	require.False(t, slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "spendgate_") }), names)
}

// TestDocs_AlertingRules checks the alerting rules of docs/alerts.md: every
// spendgate_ metric they name exists (the gateway's are in
// internal/gateway; the webhook sink's are AlertSink's), and promtool
// accepts the file when it is installed.
func TestDocs_AlertingRules(t *testing.T) {
	doc, err := os.ReadFile("../../docs/alerts.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "```yaml\ngroups:\n- name: spendgate\n")
	require.True(t, ok, "the alerting rules of docs/alerts.md")
	rules, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	rules = "groups:\n- name: spendgate\n" + rules
	fams := gather(t, fullSet(someBudgets).Registry)
	for _, name := range regexp.MustCompile(`spendgate_[a-z_]+`).FindAllString(rules, -1) {
		if !strings.HasPrefix(name, "spendgate_gateway_") {
			require.Contains(t, fams, name)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed: the rules' syntax is not checked")
	}
	f := filepath.Join(t.TempDir(), "rules.yml")
	require.NoError(t, os.WriteFile(f, []byte(rules), 0o644))
	out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput()
	require.NoError(t, err, string(out))
}

// TestSet_TenantSeriesBounded: the tenant label names at most
// MaxTenantSeries tenants per family, so a deployment with many tenants
// (or a bug that counts made-up names) cannot grow a scrape without bound:
// the counters name the first ones counted and sum the rest under
// TenantOther; the gauges show the tenants with the most open
// reservations. How we know it can fail: without tenantLabels or
// topTenants the families hold 150 series and the counts below differ.
func TestSet_TenantSeriesBounded(t *testing.T) {
	s := New(BuildInfo{})
	var all []TenantSample
	for i := range 150 {
		tenant := fmt.Sprintf("t%03d", i)
		s.TenantLimited(tenant, "request_rate")
		s.TenantUnknownScopeDenial(tenant)
		all = append(all, TenantSample{Tenant: tenant, Open: i, DefaultBudgets: 1})
	}
	s.RegisterTenants(func() []TenantSample { return all })
	fams := gather(t, s.Registry)
	limited := fams["spendgate_tenant_limited_total"]
	require.Len(t, limited.GetMetric(), MaxTenantSeries+1)
	require.Equal(t, 1.0, sample(limited, "tenant", "t000", "limit", "request_rate").GetCounter().GetValue())
	require.Equal(t, 50.0, sample(limited, "tenant", TenantOther, "limit", "request_rate").GetCounter().GetValue())
	require.Nil(t, sample(limited, "tenant", "t100", "limit", "request_rate"))
	require.Len(t, fams["spendgate_tenant_unknown_scope_denials_total"].GetMetric(), MaxTenantSeries+1)
	open := fams["spendgate_tenant_open_reservations"]
	require.Len(t, open.GetMetric(), MaxTenantSeries)
	require.Equal(t, 149.0, gaugeOf(t, open, "tenant", "t149"))
	require.Equal(t, 50.0, gaugeOf(t, open, "tenant", "t050"))
	require.Nil(t, sample(open, "tenant", "t049"), "the tenants with the fewest open reservations are left out")
	require.Len(t, fams["spendgate_tenant_default_budgets"].GetMetric(), MaxTenantSeries)
	require.Equal(t, "t000", all[0].Tenant, "the caller's slice is not reordered")
}

// TestNew_PresetsKnownSeries: every series of a labelled counter whose
// label values are known is gathered from the start, at 0. A series that
// first appears at 1 has no earlier sample, so rate and increase miss its
// first count: an alert on the first forged revision would never fire.
// Without Set.preset none of these series exists before a count and this
// fails.
func TestNew_PresetsKnownSeries(t *testing.T) {
	fams := gather(t, New(BuildInfo{}).Registry)
	zero := func(name string, labels ...string) {
		t.Helper()
		m := sample(fams[name], labels...)
		require.NotNil(t, m, "%s%v is there before its first count", name, labels)
		require.Zero(t, m.GetCounter().GetValue(), "%s%v", name, labels)
	}
	for _, r := range signing.Reasons {
		zero("spendgate_revisions_rejected_total", "reason", string(r))
	}
	for _, c := range []string{BusyInflight, BusyConflicts} {
		zero("spendgate_ledger_busy_total", "cause", c)
	}
	zero("spendgate_admits_total", "result", ResultAdmitted, "reason", "")
	for _, r := range events.DenialReasons {
		zero("spendgate_admits_total", "result", ResultDenied, "reason", string(r))
		for _, mode := range []string{events.ModeCheck, events.ModeShadow} {
			zero("spendgate_admit_checks_total", "mode", mode, "result", ResultDenied, "reason", string(r))
		}
	}
	require.NotContains(t, events.DenialReasons, events.ReasonLedgerUnavailable, "only clients deny with it")
}

// TestBudgets_Forecast: the forecast gauges of a budget running out before
// its reset, of one exhausted now, of one running out after its reset,
// and of one without a burn rate.
func TestBudgets_Forecast(t *testing.T) {
	s := New(BuildInfo{})
	row := func(scope string, f BudgetForecast) BudgetSample {
		return BudgetSample{Scope: scope, Period: "month", Unit: "USD", Spent: "1", Reserved: "0", Limit: "10",
			Forecast: func() BudgetForecast { return f }}
	}
	s.RegisterBudgets(10, func() []BudgetSample {
		return []BudgetSample{
			row("team:soon", BudgetForecast{Paced: true, ExhaustsIn: 90 * time.Minute, BeforeReset: true}),
			row("team:out", BudgetForecast{Exhausted: true, Paced: true}),
			row("team:later", BudgetForecast{Paced: true, ExhaustsIn: 40 * 24 * time.Hour}),
			row("team:idle", BudgetForecast{}),
			{Scope: "team:none", Period: "month", Unit: "USD", Spent: "0", Reserved: "0", Limit: "10"},
		}
	})
	fams := gather(t, s.Registry)
	in, before := fams["spendgate_budget_exhausts_in_seconds"], fams["spendgate_budget_exhausts_before_reset"]
	for _, tc := range []struct {
		scope  string
		in     float64 // -1: no series
		before float64 // -1: no series
	}{
		{"team:soon", 5400, 1}, {"team:out", 0, 1}, {"team:later", 40 * 24 * 3600, 0}, {"team:idle", -1, 0}, {"team:none", -1, -1},
	} {
		got := sample(in, "scope", tc.scope, "period", "month", "unit", "USD")
		if tc.in < 0 {
			require.Nil(t, got, tc.scope)
		} else {
			require.NotNil(t, got, tc.scope)
			require.Equal(t, tc.in, got.GetGauge().GetValue(), tc.scope)
		}
		got = sample(before, "scope", tc.scope, "period", "month", "unit", "USD")
		if tc.before < 0 {
			require.Nil(t, got, tc.scope)
		} else {
			require.NotNil(t, got, tc.scope)
			require.Equal(t, tc.before, got.GetGauge().GetValue(), tc.scope)
		}
	}
}
