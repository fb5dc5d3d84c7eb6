package metrics

import "github.com/prometheus/client_golang/prometheus"

// Failure reasons of AlertSink.Failures.
const (
	// SinkFailStatus: the webhook answered a status other than 2xx.
	SinkFailStatus = "status"
	// SinkFailTransport: the webhook could not be reached or did not
	// answer in time.
	SinkFailTransport = "transport"
	// SinkFailMalformed: the alert message could not be read (dropped).
	SinkFailMalformed = "malformed"
	// SinkFailForged: no trusted key signed the alert message (dropped,
	// never delivered): a login that may publish alerts wrote it.
	SinkFailForged = "forged"
	// SinkFailUntrustedKey: the alert message is validly signed by a key
	// the sink does not trust (yet): held for a key reload (SIGHUP) and
	// tried again; given up, and counted undelivered, after its last
	// attempt.
	SinkFailUntrustedKey = "untrusted-key"
)

// AlertSink is the metric set of the webhook sink (spendgate alerts
// webhook), registered in a registry of its own process.
//
//	name                                          type     labels  meaning
//	spendgate_alert_webhook_deliveries_total      counter          alerts the webhook took (2xx)
//	spendgate_alert_webhook_failures_total        counter  reason  failed delivery attempts; reason status|transport|malformed|forged
//	spendgate_alert_webhook_undelivered_total     counter          alerts given up after their last attempt (max deliver)
type AlertSink struct {
	Deliveries  prometheus.Counter
	Failures    *prometheus.CounterVec
	Undelivered prometheus.Counter
}

// NewAlertSink returns the sink's metrics, registered in r (nil: not
// registered anywhere).
func NewAlertSink(r prometheus.Registerer) *AlertSink {
	s := &AlertSink{
		Deliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "spendgate_alert_webhook_deliveries_total",
			Help: "Alerts the webhook took (a 2xx answer)."}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_alert_webhook_failures_total",
			Help: "Failed alert delivery attempts, by reason (status: a non-2xx answer; transport: unreachable or timed out; malformed: an unreadable alert; forged: an alert no trusted key signed, never delivered; untrusted-key: an alert signed by a key the sink does not trust yet, held for a key reload)."}, []string{"reason"}),
		Undelivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "spendgate_alert_webhook_undelivered_total",
			Help: "Alerts given up after their last delivery attempt."}),
	}
	for _, reason := range []string{SinkFailStatus, SinkFailTransport, SinkFailMalformed, SinkFailForged, SinkFailUntrustedKey} {
		s.Failures.WithLabelValues(reason)
	}
	if r != nil {
		r.MustRegister(s.Deliveries, s.Failures, s.Undelivered)
	}
	return s
}

// RegisterAlerts adds the counters of the replica's alert publisher
// (internal/alerting): alerts stored on the alert stream, found there
// already (another replica's), dropped (buffer full), given up, alert
// subjects found holding something forged, and the gauge of alerts
// waiting to be published again.
func (s *Set) RegisterAlerts(published, duplicates, dropped, failed, forged, retrying func() uint64) {
	s.Registry.MustRegister(
		counterFunc("spendgate_alerts_published_total", "Alerts this replica stored on the alert stream.", published),
		counterFunc("spendgate_alerts_duplicate_total", "Alerts this replica published that the alert stream held already (another replica's, or an earlier publish).", duplicates),
		counterFunc("spendgate_alerts_dropped_total", "Alerts not published because the replica's alert buffer was full.", dropped),
		counterFunc("spendgate_alerts_failed_total", "Alerts given up: their publish failed while too many others waited to be published again, or the replica stopped first.", failed),
		gaugeFunc("spendgate_alerts_retrying", "Alerts whose publish failed, waiting to be published again (every 30 s, doubling to 5 min).", retrying),
		counterFunc("spendgate_alerts_forged_total", "Times an alert's subject held something other than that alert signed by a trusted key (a login that may publish alerts wrote it); the alert was published after it.", forged),
	)
}
