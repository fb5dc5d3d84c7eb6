package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// scrape returns the value of every sample of /metrics, by its series
// ("name{labels}", labels in name order as the Prometheus client writes
// them). A series written twice fails the test: Prometheus rejects such a
// scrape.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		require.NotContains(t, out, line[:i], "a series written twice")
		out[line[:i]] = v
	}
	return out
}

func httpStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServe_Metrics runs serve with --http, drives a known load (admits,
// denials, settles, a refused request) and scrapes /metrics: every counter
// equals what the load did, the per-budget gauges show the open
// reservations, spent, limit and utilization of each of the scope's two
// budgets (USD and requests: before the unit label, two series of
// spendgate_open_reservations with the same labels), the go_* and
// process_* metrics are there, and /healthz and /readyz answer 200 once it
// serves.
func TestServe_Metrics(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	startProc(t, true, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", listen, "--http", httpAddr, "--feed", "--feed-max-age", "2h")
	base := "http://" + httpAddr
	var code int
	var body string
	testenv.WaitFor(t, 10*time.Second, "ready, the stream's end read", func() bool {
		code, body = httpStatus(t, base+"/readyz")
		return code == http.StatusOK
	})
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ready))
	require.True(t, ready.Ready)
	require.Equal(t, "ok", ready.Checks["ledger"])
	require.Equal(t, "ok", ready.Checks["ledger_stream"])
	code, _ = httpStatus(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)

	nc := connect(t, "nats://"+listen)
	var bv events.BudgetView
	require.Nil(t, e2eRequest(t, nc, "spendgate.budget.put", events.BudgetPutRequest{Scope: "org:m", Period: "month", Limit: "1", Unit: "USD"}, &bv))
	require.Nil(t, e2eRequest(t, nc, "spendgate.budget.put", events.BudgetPutRequest{Scope: "org:m", Period: "month", Limit: "100", Unit: "requests"}, &bv))
	// Ten admits of 0.125 against 1: eight fit, two are denied.
	const requests = 10
	var ids []string
	for i := range requests {
		var r events.AdmitReply
		require.Nil(t, e2eRequest(t, nc, "spendgate.admit", events.AdmitRequest{RequestID: fmt.Sprintf("m-%d", i), Scopes: []string{"org:m"}, Amount: "0.125"}, &r))
		if r.Admitted {
			ids = append(ids, r.ReservationID)
		}
	}
	require.Len(t, ids, 8, "1 / 0.125 = 8 fit")
	nAdmitted, nDenied := len(ids), requests-len(ids)
	for _, id := range ids[:5] {
		var c events.CloseReply
		require.Nil(t, e2eRequest(t, nc, "spendgate.settle", events.SettleRequest{ReservationID: id, Actual: "0.1"}, &c))
	}
	var c events.CloseReply
	e := e2eRequest(t, nc, "spendgate.settle", events.SettleRequest{ReservationID: "rsv_00000000-0000-0000-0000-000000000000", Actual: "0.1"}, &c)
	require.NotNil(t, e)

	var m map[string]float64
	testenv.WaitFor(t, 10*time.Second, "the last request counted", func() bool {
		m = scrape(t, base)
		return m[`spendgate_requests_total{code="unknown_reservation",endpoint="settle"}`] == 1
	})
	require.Equal(t, float64(nAdmitted), m[`spendgate_admits_total{reason="",result="admitted"}`])
	require.Equal(t, float64(nDenied), m[`spendgate_admits_total{reason="limit_reached",result="denied"}`])
	require.Equal(t, float64(requests), m[`spendgate_requests_total{code="ok",endpoint="admit"}`])
	require.Equal(t, float64(5), m[`spendgate_requests_total{code="ok",endpoint="settle"}`])
	require.Equal(t, float64(requests), m[`spendgate_request_duration_seconds_count{endpoint="admit"}`])
	// Every admitted admit and every settle was one transaction of some
	// commit; denials commit nothing (a budget put is written apart).
	require.Equal(t, float64(nAdmitted+5), m[`spendgate_commit_txs_sum`])
	require.Positive(t, m[`spendgate_commits_total`])
	usd, req := `{period="month",scope="org:m",unit="USD"}`, `{period="month",scope="org:m",unit="requests"}`
	require.Equal(t, float64(nAdmitted-5), m[`spendgate_open_reservations`+usd])
	require.Equal(t, 0.375, m[`spendgate_reserved_amount`+usd])
	require.Equal(t, 0.5, m[`spendgate_spent_amount`+usd])
	require.Equal(t, float64(1), m[`spendgate_limit_amount`+usd])
	require.Equal(t, 0.875, m[`spendgate_budget_utilization_ratio`+usd])
	require.Contains(t, m, `spendgate_open_reservations`+req)
	require.Equal(t, float64(100), m[`spendgate_limit_amount`+req])
	require.Contains(t, m, `go_goroutines`)
	require.Contains(t, m, `process_resident_memory_bytes`)
	require.Equal(t, float64(0), m[`spendgate_inflight_requests`])
	require.Contains(t, m, `spendgate_follower_lag_revisions`)
	require.Equal(t, float64(1), m[`spendgate_ledger_ready`])
	require.Equal(t, float64(1), m[`spendgate_ledger_stream_leader`])
	require.Contains(t, m, `spendgate_follower_delay_seconds`)
	// The feed relay's counters and the spend report's size.
	testenv.WaitFor(t, 30*time.Second, "the relay to append the events", func() bool {
		m = scrape(t, base)
		return m[`spendgate_feed_events_relayed_total`] >= float64(nAdmitted+5) &&
			m[`spendgate_report_reservations`] == float64(nAdmitted-5)
	})
	require.Contains(t, m, `spendgate_feed_appends_lost_total`)
	// Nothing was forged or replayed here, and the relay started on an
	// empty ledger, so it loaded no checkpoint.
	require.Equal(t, float64(0), m[`spendgate_feed_forged_total`])
	for _, k := range []string{`spendgate_feed_forged_total`, `spendgate_feed_limits_changed_total`, `spendgate_feed_queued_events`,
		`spendgate_feed_checkpoint_loaded_seq`, `spendgate_feed_checkpoint_written_seq`} {
		require.Contains(t, m, k)
	}
	require.Equal(t, float64(0), m[`spendgate_feed_checkpoint_loaded_seq`])
	require.Positive(t, m[`spendgate_report_cells`])
	found := false
	for k := range m {
		if regexp.MustCompile(`^spendgate_build_info\{`).MatchString(k) {
			found = true
		}
	}
	require.True(t, found, "build info is exposed")
}
