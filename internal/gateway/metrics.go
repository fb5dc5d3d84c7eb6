package gateway

import (
	"github.com/spendgate/spendgate/internal/metrics"
)

// Outcomes of a call (the outcome label of spendgate_gateway_calls_total).
const (
	OutcomeOK            = "ok"             // answered by the upstream and settled
	OutcomeDenied        = "denied"         // a budget denied it: never sent upstream
	OutcomeUnauthorized  = "unauthorized"   // no key, an unknown or disabled key
	OutcomeBadRequest    = "bad_request"    // a body the gateway cannot price
	OutcomeUnavailable   = "unavailable"    // the ledger did not answer: failed closed
	OutcomeUpstreamError = "upstream_error" // the upstream refused it (released)
	OutcomeUnreachable   = "unreachable"    // no answer from the upstream
	OutcomeCut           = "cut"            // the answer broke off mid-way
	OutcomeCallerGone    = "caller_gone"    // the caller left before the answer's end
)

// Metrics are the gateway's: register them in the registry its listener
// serves at /metrics. Every family is one of package metrics' primitives,
// each a plain field, so that moving to another metrics library is a
// change of this file.
type Metrics struct {
	// Calls counts calls: With(api, outcome).
	Calls *metrics.CounterVec
	// Denials counts budget denials: With(reason), the ledger's reason
	// (limit_reached, budget_disabled, unknown_budget, unpriced_model,
	// ...).
	Denials *metrics.CounterVec
	// UpstreamSeconds is the upstream's latency to its response headers:
	// With(api).
	UpstreamSeconds *metrics.HistogramVec
	// AdmitSeconds is what the gateway adds before the call goes
	// upstream (key, admit): With(api).
	AdmitSeconds *metrics.HistogramVec
	// SettleLag is the time from the upstream's last byte to the settle
	// or release acknowledged by the ledger.
	SettleLag *metrics.Histogram
	// SettleFailures counts settles and releases the ledger did not
	// acknowledge: With(code); the reservation then expires after its TTL.
	SettleFailures *metrics.CounterVec
	// Inflight is the calls being handled now.
	Inflight *metrics.Gauge
	// KeyLookups counts key lookups: With(result), "hit" (from the
	// cache) or "miss".
	KeyLookups *metrics.CounterVec
}

// NewMetrics returns the gateway's metrics, registered in r.
func NewMetrics(r *metrics.Registry) *Metrics {
	m := &Metrics{
		Calls:           metrics.NewCounterVec("spendgate_gateway_calls_total", "Gateway calls, by API and outcome.", "api", "outcome"),
		Denials:         metrics.NewCounterVec("spendgate_gateway_denials_total", "Gateway calls a budget denied, by the ledger's reason.", "reason"),
		UpstreamSeconds: metrics.NewHistogramVec("spendgate_gateway_upstream_seconds", "Upstream latency to the response headers, by API.", metrics.LatencyBuckets, "api"),
		AdmitSeconds:    metrics.NewHistogramVec("spendgate_gateway_admit_seconds", "Time from a call's arrival to its forwarding upstream (key lookup, admit), by API.", metrics.LatencyBuckets, "api"),
		SettleLag:       metrics.NewHistogram("spendgate_gateway_settle_lag_seconds", "Time from the upstream's last byte to the settle or release acknowledged.", metrics.LatencyBuckets),
		SettleFailures:  metrics.NewCounterVec("spendgate_gateway_settle_failures_total", "Settles and releases the ledger did not acknowledge, by error code.", "code"),
		Inflight:        metrics.NewGauge("spendgate_gateway_inflight_calls", "Gateway calls being handled now."),
		KeyLookups:      metrics.NewCounterVec("spendgate_gateway_key_lookups_total", "API key lookups, by result (hit: from the cache; miss).", "result"),
	}
	if r != nil {
		r.MustRegister(m.Calls, m.Denials, m.UpstreamSeconds, m.AdmitSeconds, m.SettleLag, m.SettleFailures, m.Inflight, m.KeyLookups)
	}
	return m
}
