package gateway_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
)

// TestNewMetrics_PresetsKnownSeries: the gateway's labelled counters whose
// label values are known are gathered from the start, at 0, so that a rate
// over the first denial or the first settle given up sees it (a series
// that first appears at 1 has no earlier sample). Without the presets in
// NewMetrics these series do not exist before a count and this fails.
func TestNewMetrics_PresetsKnownSeries(t *testing.T) {
	r := prometheus.NewRegistry()
	gateway.NewMetrics(r)
	mfs, err := r.Gather()
	require.NoError(t, err)
	got := map[string]map[string]bool{} // family -> "label=value,..." present at 0
	for _, mf := range mfs {
		got[mf.GetName()] = map[string]bool{}
		for _, m := range mf.GetMetric() {
			if m.GetCounter() == nil || m.GetCounter().GetValue() != 0 {
				continue
			}
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			got[mf.GetName()][key] = true
		}
	}
	for _, reason := range events.DenialReasons {
		require.True(t, got["spendgate_gateway_denials_total"]["reason="+string(reason)+","], "denials %s", reason)
	}
	for _, result := range []string{gateway.RetryLanded, gateway.RetryGivenUp, gateway.RetryDropped} {
		require.True(t, got["spendgate_gateway_settle_retries_total"]["result="+result+","], "settle retries %s", result)
	}
	for _, code := range []events.Code{events.CodeLedgerUnavailable, events.CodeLedgerBusy, events.CodeInternal} {
		require.True(t, got["spendgate_gateway_settle_failures_total"]["code="+string(code)+","], "settle failures %s", code)
	}
	for _, api := range []string{"chat.completions", "messages"} {
		for _, outcome := range []string{gateway.OutcomeOK, gateway.OutcomeDenied, gateway.OutcomeUnavailable} {
			require.True(t, got["spendgate_gateway_calls_total"]["api="+api+",outcome="+outcome+","], "calls %s %s", api, outcome)
		}
	}
}
