package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// ContentType is the media type Handler answers a scrape without an Accept
// header with: the text exposition format, version 0.0.4 (Prometheus
// itself asks for and gets the protobuf or OpenMetrics format).
var ContentType = string(expfmt.NegotiateAccept(http.Header{}, expfmt.DefaultAcceptedFormats()...))

// LatencyBuckets are the upper bounds, in seconds, of the latency
// histograms: 100µs to 10s, about three per decade. An in-process admit
// commits in a few milliseconds; a leader failover costs seconds.
var LatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5, 10,
}

// TxBuckets are the upper bounds of the transactions-per-commit histogram:
// powers of two up to 4096, the largest group ledger.WithMaxGroup allows.
var TxBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

// NewRegistry returns a Prometheus registry of its own (not the client
// library's global one) holding the Go runtime's metrics (go_*) and this
// process' (process_*: CPU, memory, file descriptors). Every spendgate
// process that serves /metrics starts from one: serve's Set, the gateway.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves r's metrics to a scrape, in the format the scraper asks
// for (the text format by default). A family that fails to collect is left
// out of the answer rather than failing the whole scrape, and counted in
// promhttp_metric_handler_errors_total, registered in r.
func Handler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: r})
}
