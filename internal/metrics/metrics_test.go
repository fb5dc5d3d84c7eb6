package metrics

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func scrape(t *testing.T, r *Registry) (string, map[string]*parsedFamily) {
	t.Helper()
	var b bytes.Buffer
	n, err := r.WriteTo(&b)
	require.NoError(t, err)
	require.Equal(t, int64(b.Len()), n)
	fams, err := parseExposition(b.String())
	require.NoError(t, err, b.String())
	return b.String(), fams
}

func TestRegistry_WriteTo(t *testing.T) {
	r := NewRegistry()
	c := NewCounter("b_total", "A counter.\nSecond line with a \\ backslash.")
	cv := NewCounterVec("a_total", "Labelled.", "x", "y")
	g := NewGauge("c", "A gauge.")
	h := NewHistogram("d_seconds", "A histogram.", []float64{0.001, 0.5, 1})
	r.MustRegister(c, cv, g, h)
	c.Add(3)
	cv.With("z", `quote " back \ nl`+"\n").Inc()
	cv.With("a", "").Add(2)
	cv.With("a", "b").Inc()
	g.Set(-1.5)
	h.Observe(0.0005)
	h.Observe(0.5)
	h.Observe(7)

	got, _ := scrape(t, r)
	want := `# HELP a_total Labelled.
# TYPE a_total counter
a_total{x="a",y=""} 2
a_total{x="a",y="b"} 1
a_total{x="z",y="quote \" back \\ nl\n"} 1
# HELP b_total A counter.\nSecond line with a \\ backslash.
# TYPE b_total counter
b_total 3
# HELP c A gauge.
# TYPE c gauge
c -1.5
# HELP d_seconds A histogram.
# TYPE d_seconds histogram
d_seconds_bucket{le="0.001"} 1
d_seconds_bucket{le="0.5"} 2
d_seconds_bucket{le="1"} 2
d_seconds_bucket{le="+Inf"} 3
d_seconds_sum 7.5005
d_seconds_count 3
`
	require.Equal(t, want, got)
}

func TestRegistry_WriteToEmptyVecAndSpecialValues(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(
		NewCounterVec("unused_total", "Never used.", "l"),
		NewGaugeFunc("nan", "Not a number.", math.NaN),
		NewGaugeFunc("inf", "Infinite.", func() float64 { return math.Inf(-1) }),
		NewGaugeVecFunc("dec", "Decimals.", []string{"k"}, func() []Sample {
			return []Sample{
				{LabelValues: []string{"big"}, Value: Decimal("123456789012345678.123456789012")},
				{LabelValues: []string{"bad"}, Value: Decimal("1e5")},
				{LabelValues: []string{"neg"}, Value: Decimal("-0.05")},
				{LabelValues: []string{"int"}, Value: Int(-42)},
				{LabelValues: []string{"float"}, Value: Float(0.25)},
				{LabelValues: []string{"too", "many"}, Value: Int(1)}, // dropped
				{LabelValues: []string{"bad\xffutf8"}, Value: Int(1)},
			}
		}),
	)
	got, fams := scrape(t, r)
	require.True(t, strings.HasSuffix(got, "# HELP unused_total Never used.\n# TYPE unused_total counter\n"), got)
	require.Equal(t, "NaN", fams["nan"].value("nan"))
	require.Equal(t, "-Inf", fams["inf"].value("inf"))
	d := fams["dec"]
	require.Equal(t, "123456789012345678.123456789012", d.value("dec", "k", "big"), "decimals are written verbatim")
	require.Equal(t, "NaN", d.value("dec", "k", "bad"))
	require.Equal(t, "-0.05", d.value("dec", "k", "neg"))
	require.Equal(t, "-42", d.value("dec", "k", "int"))
	require.Equal(t, "0.25", d.value("dec", "k", "float"))
	require.Equal(t, "1", d.value("dec", "k", "bad\uFFFDutf8"))
	require.Len(t, d.samples, 6)
}

func TestRegistry_Register(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, r.Register(NewCounter("x_total", "")))
	require.ErrorContains(t, r.Register(NewGauge("x_total", "")), "already registered")
	for _, c := range []Collector{
		NewCounter("", "h"),
		NewCounter("1abc", "h"),
		NewCounter("a-b", "h"),
		NewCounterVec("ok", "h", "bad:label"),
		NewCounterVec("ok", "h", "__reserved"),
		NewCounterVec("ok", "h", "a", "a"),
		NewHistogramVec("ok", "h", LatencyBuckets, "le"),
	} {
		require.Error(t, r.Register(c), c.desc())
	}
	require.True(t, r.Unregister("x_total"))
	require.False(t, r.Unregister("x_total"))
	require.NoError(t, r.Register(NewGauge("x_total", "")))
}

func TestCounterVec_WithWrongLabelCount(t *testing.T) {
	v := NewCounterVec("a_total", "", "x", "y")
	require.PanicsWithValue(t, `metrics: a_total has labels [x y]; got 1 values`, func() { v.With("only") })
	require.Same(t, v.With("p", "q"), v.With("p", "q"))
	require.NotSame(t, v.With("a:1", "b"), v.With("a", "1:b"), "label values must not collide")
	require.NotSame(t, v.With("ab", ""), v.With("a", "b"))
}

func TestHistogram_Observe(t *testing.T) {
	h := NewHistogram("h_seconds", "", []float64{0.001, 0.01, 0.1})
	// le is inclusive: a value equal to a bound lands in that bucket.
	for _, v := range []float64{-1, 0, 0.001, 0.0010001, 0.01, 0.05, 0.1, 0.1000001, 100, math.Inf(1)} {
		h.Observe(v)
	}
	h.ObserveDuration(2 * time.Millisecond) // 0.002: second bucket
	snap := h.snapshot()
	require.Equal(t, []uint64{3, 3, 2, 3}, snap.counts, "per-bucket (non-cumulative) counts")
	require.Equal(t, uint64(11), h.Count())

	r := NewRegistry()
	r.MustRegister(h)
	_, fams := scrape(t, r)
	f := fams["h_seconds"]
	require.Equal(t, "3", f.value("h_seconds_bucket", "le", "0.001"))
	require.Equal(t, "6", f.value("h_seconds_bucket", "le", "0.01"))
	require.Equal(t, "8", f.value("h_seconds_bucket", "le", "0.1"))
	require.Equal(t, "11", f.value("h_seconds_bucket", "le", "+Inf"))
	require.Equal(t, "11", f.value("h_seconds_count"))
	require.Equal(t, "+Inf", f.value("h_seconds_sum"))

	require.Panics(t, func() { NewHistogram("x", "", []float64{1, 1}) })
	require.Panics(t, func() { NewHistogram("x", "", []float64{2, 1}) })
	require.Panics(t, func() { NewHistogramVec("x", "", []float64{1, math.Inf(1)}) })
}

func TestLatencyBuckets_Labels(t *testing.T) {
	h := NewHistogram("lat_seconds", "", LatencyBuckets)
	r := NewRegistry()
	r.MustRegister(h)
	got, _ := scrape(t, r)
	for _, le := range []string{"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"} {
		require.Contains(t, got, `lat_seconds_bucket{le="`+le+`"} 0`+"\n")
	}
}

// TestRegistry_Concurrent increments counters, gauges and histograms from
// many goroutines while others scrape, then checks exact totals. It fails
// if an update is lost (a non-atomic add, or two goroutines creating the
// same vector member and one of them counting into a discarded copy), if a
// scrape ever writes malformed output or a histogram whose +Inf bucket
// disagrees with its count, and under -race on any unsynchronised access.
func TestRegistry_Concurrent(t *testing.T) {
	s := New(BuildInfo{Version: "test", Commit: "abc"})
	const workers, per = 8, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	scrapeErr := make(chan error, 2)
	var scrapers sync.WaitGroup
	for range 2 {
		scrapers.Add(1)
		go func() {
			defer scrapers.Done()
			for {
				select {
				case <-stop:
					scrapeErr <- nil
					return
				default:
				}
				var b bytes.Buffer
				if _, err := s.Registry.WriteTo(&b); err != nil {
					scrapeErr <- err
					return
				}
				if _, err := parseExposition(b.String()); err != nil {
					scrapeErr <- fmt.Errorf("%v\n%s", err, b.String())
					return
				}
			}
		}()
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				reason := "r" + strconv.Itoa(i%5) // members created concurrently
				s.Admits.With(ResultDenied, reason).Inc()
				s.Requests.With("admit", CodeOK).Inc()
				s.Inflight.Inc()
				s.RequestDuration.With("admit").Observe(float64(i%10) / 1000)
				s.CommitTxs.Observe(float64(w + 1))
				s.Commits.Inc()
				s.Inflight.Dec()
			}
		}()
	}
	wg.Wait()
	close(stop)
	scrapers.Wait()
	for range 2 {
		require.NoError(t, <-scrapeErr)
	}

	_, fams := scrape(t, s.Registry)
	for i := range 5 {
		require.Equal(t, strconv.Itoa(workers*per/5), fams["spendgate_admits_total"].value("spendgate_admits_total", "result", "denied", "reason", "r"+strconv.Itoa(i)))
	}
	require.Equal(t, strconv.Itoa(workers*per), fams["spendgate_requests_total"].value("spendgate_requests_total", "endpoint", "admit", "code", "ok"))
	require.Equal(t, strconv.Itoa(workers*per), fams["spendgate_commits_total"].value("spendgate_commits_total"))
	require.Equal(t, "0", fams["spendgate_inflight_requests"].value("spendgate_inflight_requests"))
	require.Equal(t, strconv.Itoa(workers*per), fams["spendgate_request_duration_seconds"].value("spendgate_request_duration_seconds_count", "endpoint", "admit"))
	// Sum of 0..9 ms, per/10 times each, per worker: exact in binary? No:
	// compare with a tolerance, the sum is a float of latencies.
	sum, err := strconv.ParseFloat(fams["spendgate_request_duration_seconds"].value("spendgate_request_duration_seconds_sum", "endpoint", "admit"), 64)
	require.NoError(t, err)
	require.InDelta(t, float64(workers*per/10)*0.045, sum, 1e-9)
	// Transactions per commit: worker w observed w+1, per times.
	txs := fams["spendgate_commit_txs"]
	require.Equal(t, strconv.Itoa(per), txs.value("spendgate_commit_txs_bucket", "le", "1"))
	require.Equal(t, strconv.Itoa(2*per), txs.value("spendgate_commit_txs_bucket", "le", "2"))
	require.Equal(t, strconv.Itoa(4*per), txs.value("spendgate_commit_txs_bucket", "le", "4"))
	require.Equal(t, strconv.Itoa(8*per), txs.value("spendgate_commit_txs_bucket", "le", "8"))
}

func TestSet_RegisterBudgets(t *testing.T) {
	s := New(BuildInfo{Version: "v1.2.3", Commit: "deadbeef"})
	var books [][]BudgetSample
	s.RegisterBudgets(3, func() []BudgetSample {
		b := []BudgetSample{
			{Scope: "org:a", Period: "month", Unit: "USD", Open: 1, Reserved: "0.05"},
			{Scope: "org:b", Period: "month", Unit: "USD", Open: 7, Reserved: "100000000000000000.000000000001"},
			{Scope: "org:c", Period: "day", Unit: "USD", Open: 2, Reserved: "100000000000000000"},
			{Scope: "user:x", Period: "day", Unit: "requests", Open: 3, Reserved: "3"},
			{Scope: "org:d", Period: "day", Unit: "USD", Open: 9, Reserved: "0.050"},
		}
		books = append(books, b)
		return b
	})
	s.RegisterFollowerLag(func() uint64 { return 12 })
	s.RegisterSnapshotAge(func() time.Duration { return -1 })

	got, fams := scrape(t, s.Registry)
	t.Log(got)
	amt := fams["spendgate_reserved_amount"]
	require.Len(t, amt.samples, 3)
	require.Equal(t, "100000000000000000.000000000001", amt.value("spendgate_reserved_amount", "scope", "org:b", "period", "month", "unit", "USD"), "exact, not rounded through a float")
	require.Equal(t, "100000000000000000", amt.value("spendgate_reserved_amount", "scope", "org:c", "period", "day", "unit", "USD"))
	require.Equal(t, "3", amt.value("spendgate_reserved_amount", "scope", "user:x", "period", "day", "unit", "requests"))
	open := fams["spendgate_open_reservations"]
	require.Equal(t, "7", open.value("spendgate_open_reservations", "scope", "org:b", "period", "month"))
	require.Len(t, open.samples, 3)
	require.Equal(t, "2", fams["spendgate_budgets_not_exposed"].value("spendgate_budgets_not_exposed"))
	require.Equal(t, "12", fams["spendgate_follower_lag_revisions"].value("spendgate_follower_lag_revisions"))
	require.Equal(t, "NaN", fams["spendgate_snapshot_age_seconds"].value("spendgate_snapshot_age_seconds"))
	bi := fams["spendgate_build_info"].samples
	require.Len(t, bi, 1)
	require.Equal(t, [2]string{"version", "v1.2.3"}, bi[0].labels[0])
	require.Equal(t, [2]string{"commit", "deadbeef"}, bi[0].labels[1])
	require.Equal(t, "1", bi[0].value)
	for _, b := range books {
		require.Equal(t, "org:a", b[0].Scope, "the callback's slice is not reordered")
	}
}

func TestCompareDecimal(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"0", "0", 0},
		{"0.0", "0", 0},
		{"-0", "0", 0},
		{"007", "7.000", 0},
		{"0.05", "0.050", 0},
		{"0.05", "0.5", -1},
		{"10", "9.999999999999", 1},
		{"100000000000000000.000000000001", "100000000000000000", 1},
		{"-1", "0", -1},
		{"-2", "-1", -1},
		{"-0.5", "-0.25", -1},
		{"x", "0", -1},
		{"0", "1e9", 1},
	} {
		require.Equal(t, tc.want, compareDecimal(tc.a, tc.b), "%s vs %s", tc.a, tc.b)
		require.Equal(t, -tc.want, compareDecimal(tc.b, tc.a), "%s vs %s", tc.b, tc.a)
	}
}

func TestRegistry_ServeHTTP(t *testing.T) {
	s := New(BuildInfo{})
	s.Commits.Inc()
	srv := httptest.NewServer(s.Registry)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, ContentType, resp.Header.Get("Content-Type"))
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	require.NoError(t, err)
	fams, err := parseExposition(b.String())
	require.NoError(t, err)
	require.Equal(t, "1", fams["spendgate_commits_total"].value("spendgate_commits_total"))

	resp, err = http.Post(srv.URL, "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func BenchmarkCounterVec_With(b *testing.B) {
	v := NewCounterVec("x_total", "", "result", "reason")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v.With(ResultDenied, "limit_reached").Inc()
		}
	})
}

func BenchmarkHistogram_Observe(b *testing.B) {
	h := NewHistogram("x_seconds", "", LatencyBuckets)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(0.003)
		}
	})
}

func TestSet_ObserveRequest(t *testing.T) {
	s := New(BuildInfo{})
	s.ObserveRequest("settle", "unknown_reservation", 3*time.Millisecond)
	s.ObserveRequest("settle", CodeOK, 20*time.Second)
	_, fams := scrape(t, s.Registry)
	req := fams["spendgate_requests_total"]
	require.Equal(t, "1", req.value("spendgate_requests_total", "endpoint", "settle", "code", "unknown_reservation"))
	require.Equal(t, "1", req.value("spendgate_requests_total", "endpoint", "settle", "code", "ok"))
	d := fams["spendgate_request_duration_seconds"]
	require.Equal(t, "1", d.value("spendgate_request_duration_seconds_bucket", "endpoint", "settle", "le", "0.005"))
	require.Equal(t, "1", d.value("spendgate_request_duration_seconds_bucket", "endpoint", "settle", "le", "10"))
	require.Equal(t, "2", d.value("spendgate_request_duration_seconds_bucket", "endpoint", "settle", "le", "+Inf"))
}
