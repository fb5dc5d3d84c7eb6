package metrics_test

import (
	"os"
	"time"

	"github.com/spendgate/spendgate/internal/metrics"
)

func ExampleRegistry() {
	admits := metrics.NewCounterVec("spendgate_admits_total", "Admit decisions.", "result", "reason")
	latency := metrics.NewHistogram("admit_seconds", "Admit latency.", []float64{0.001, 0.01})
	reserved := metrics.NewGaugeVecFunc("reserved", "Reserved amount, exact.", []string{"scope"}, func() []metrics.Sample {
		// The ledger's decimal string goes out verbatim, never as a float.
		return []metrics.Sample{{LabelValues: []string{"org:acme"}, Value: metrics.Decimal("1234.000000000001")}}
	})
	r := metrics.NewRegistry()
	r.MustRegister(admits, latency, reserved)

	admits.With(metrics.ResultDenied, "limit_reached").Inc()
	admits.With(metrics.ResultAdmitted, "").Add(2)
	latency.ObserveDuration(3 * time.Millisecond)

	_, _ = r.WriteTo(os.Stdout)
	// Output:
	// # HELP admit_seconds Admit latency.
	// # TYPE admit_seconds histogram
	// admit_seconds_bucket{le="0.001"} 0
	// admit_seconds_bucket{le="0.01"} 1
	// admit_seconds_bucket{le="+Inf"} 1
	// admit_seconds_sum 0.003
	// admit_seconds_count 1
	// # HELP reserved Reserved amount, exact.
	// # TYPE reserved gauge
	// reserved{scope="org:acme"} 1234.000000000001
	// # HELP spendgate_admits_total Admit decisions.
	// # TYPE spendgate_admits_total counter
	// spendgate_admits_total{result="admitted",reason=""} 2
	// spendgate_admits_total{result="denied",reason="limit_reached"} 1
}
