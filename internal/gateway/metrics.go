package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/metrics"
)

// Outcomes of a call (the outcome label of spendgate_gateway_calls_total).
const (
	OutcomeOK            = "ok"             // answered by the upstream and settled
	OutcomeDenied        = "denied"         // a budget denied it: never sent upstream
	OutcomeUnauthorized  = "unauthorized"   // no key, an unknown or disabled key
	OutcomeBadRequest    = "bad_request"    // a body the gateway cannot price (unpriced_option included)
	OutcomeUnavailable   = "unavailable"    // the ledger did not answer: failed closed
	OutcomeBusy          = "busy"           // the gateway held as many request bodies as it may (503 gateway_busy)
	OutcomeUpstreamError = "upstream_error" // the upstream refused it (released)
	OutcomeUnreachable   = "unreachable"    // no answer from the upstream
	OutcomeCut           = "cut"            // the answer broke off mid-way
	OutcomeCallerGone    = "caller_gone"    // the caller left before the answer's end (settled from the usage read after it, else at the reservation)
	// OutcomeShutdown: the gateway's shutdown cut the call at
	// --shutdown-timeout, its caller still there (settle note
	// reservation_gateway_shutdown).
	OutcomeShutdown = "gateway_shutdown"
	// OutcomeDraining: refused 503 gateway_draining, the gateway shutting
	// down; never sent upstream.
	OutcomeDraining = "draining"
)

// Metrics are the gateway's: register them in the registry its listener
// serves at /metrics. Every family is a Prometheus client collector, each a
// plain field.
type Metrics struct {
	// Calls counts calls: WithLabelValues(api, outcome).
	Calls *prometheus.CounterVec
	// Denials counts budget denials: WithLabelValues(reason), the ledger's
	// reason (limit_reached, budget_disabled, unknown_budget,
	// unpriced_model, ...).
	Denials *prometheus.CounterVec
	// UpstreamSeconds is the upstream's latency to its response headers:
	// WithLabelValues(api).
	UpstreamSeconds *prometheus.HistogramVec
	// AdmitSeconds is what the gateway adds before the call goes
	// upstream (key, admit): WithLabelValues(api).
	AdmitSeconds *prometheus.HistogramVec
	// SettleLag is the time from the upstream's last byte to the settle
	// or release acknowledged by the ledger.
	SettleLag prometheus.Histogram
	// SettleFailures counts settles and releases the ledger did not
	// acknowledge at the call's end: WithLabelValues(code), the error's
	// stable code (ledger_unavailable, ledger_busy, internal for an
	// outage; the service's code for a refusal). An outage's close is
	// then retried in the background (SettleRetries).
	SettleFailures *prometheus.CounterVec
	// SettleRetries counts the closes retried in the background by how
	// their retries ended: WithLabelValues(result), RetryLanded,
	// RetryGivenUp or RetryDropped (not retried: too many waiting).
	SettleRetries *prometheus.CounterVec
	// SettlesPending is the closes waiting for a retry now.
	SettlesPending prometheus.Gauge
	// Inflight is the calls being handled now.
	Inflight prometheus.Gauge
	// KeyLookups counts key lookups: WithLabelValues(result), "hit" (from
	// the cache) or "miss".
	KeyLookups *prometheus.CounterVec
	// AuthLimited counts the requests refused 429 too_many_unknown_keys:
	// their client address had presented too many unknown keys
	// (Config.AuthFailures), and their key was not looked up.
	AuthLimited prometheus.Counter
	// OtherModel counts calls settled from usage whose answer named
	// another model than the one priced (a router's fallback, an upstream
	// substituting): WithLabelValues(api). Their settles carry the note
	// NoteOtherModel.
	OtherModel *prometheus.CounterVec
	// AbandonedDrained counts calls whose caller left before the
	// answer's end and that were settled from the provider's usage, read
	// by the gateway after the caller left (Config.DrainAbandoned):
	// WithLabelValues(api). Their settles carry the note NoteCallerGone;
	// those of outcome caller_gone not counted here were charged their
	// reservation.
	AbandonedDrained *prometheus.CounterVec
}

// NewMetrics returns the gateway's metrics, registered in r when r is not
// nil (metrics.NewRegistry makes one with the go_* and process_* metrics).
func NewMetrics(r *prometheus.Registry) *Metrics {
	counters := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	latency := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: metrics.LatencyBuckets}, labels)
	}
	m := &Metrics{
		Calls:           counters("spendgate_gateway_calls_total", "Gateway calls, by API and outcome.", "api", "outcome"),
		Denials:         counters("spendgate_gateway_denials_total", "Gateway calls a budget denied, by the ledger's reason.", "reason"),
		UpstreamSeconds: latency("spendgate_gateway_upstream_seconds", "Upstream latency to the response headers, by API.", "api"),
		AdmitSeconds:    latency("spendgate_gateway_admit_seconds", "Time from a call's arrival to its forwarding upstream (key lookup, admit), by API.", "api"),
		SettleLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spendgate_gateway_settle_lag_seconds",
			Help: "Time from the upstream's last byte to the settle or release acknowledged.", Buckets: metrics.LatencyBuckets}),
		SettleFailures: counters("spendgate_gateway_settle_failures_total", "Settles and releases the ledger did not acknowledge at a call's end, by error code.", "code"),
		SettleRetries: counters("spendgate_gateway_settle_retries_total",
			"Settles and releases retried in the background after an outage, by result (landed, given_up, dropped).", "result"),
		SettlesPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spendgate_gateway_settle_retries_pending",
			Help: "Settles and releases waiting for a background retry."}),
		Inflight:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "spendgate_gateway_inflight_calls", Help: "Gateway calls being handled now."}),
		KeyLookups: counters("spendgate_gateway_key_lookups_total", "API key lookups, by result (hit: from the cache; miss).", "result"),
		AuthLimited: prometheus.NewCounter(prometheus.CounterOpts{Name: "spendgate_gateway_auth_limited_total",
			Help: "Requests refused 429 too_many_unknown_keys (their address presented too many unknown keys) without a key lookup."}),
		OtherModel: counters("spendgate_gateway_served_other_model_total",
			"Calls settled from usage whose answer named another model than the one priced, by API.", "api"),
		AbandonedDrained: counters("spendgate_gateway_abandoned_drained_total",
			"Calls whose caller left before the answer's end, settled from the usage the gateway read after it left (--drain-abandoned), by API.", "api"),
	}
	// Every series whose labels are known is there from the start, at 0:
	// Prometheus' rate and increase miss the first count of a series that
	// first appears at 1 (the first denial, the first settle given up).
	for _, a := range apis {
		for _, o := range []string{OutcomeOK, OutcomeDenied, OutcomeUnauthorized, OutcomeBadRequest, OutcomeUnavailable,
			OutcomeUpstreamError, OutcomeUnreachable, OutcomeCut, OutcomeCallerGone, OutcomeShutdown, OutcomeDraining} {
			m.Calls.WithLabelValues(a.name, o)
		}
		m.OtherModel.WithLabelValues(a.name)
		m.AbandonedDrained.WithLabelValues(a.name)
	}
	for _, reason := range events.DenialReasons {
		m.Denials.WithLabelValues(string(reason))
	}
	for _, c := range []events.Code{events.CodeLedgerUnavailable, events.CodeLedgerBusy, events.CodeInternal} {
		m.SettleFailures.WithLabelValues(string(c))
	}
	for _, result := range []string{RetryLanded, RetryGivenUp, RetryDropped} {
		m.SettleRetries.WithLabelValues(result)
	}
	for _, result := range []string{"hit", "miss"} {
		m.KeyLookups.WithLabelValues(result)
	}
	if r != nil {
		r.MustRegister(m.Calls, m.Denials, m.UpstreamSeconds, m.AdmitSeconds, m.SettleLag, m.SettleFailures, m.SettleRetries, m.SettlesPending,
			m.Inflight, m.KeyLookups, m.AuthLimited, m.OtherModel, m.AbandonedDrained)
	}
	return m
}
