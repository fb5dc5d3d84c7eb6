package service_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// TestService_MicroStats: a $SRV.STATS reply carries, in each endpoint's
// data, every answer counted when it was sent: requests, errors by code,
// the last error and processing time. It fails if the error replies made on
// the request goroutines are not counted (micro's own num_errors misses
// them: the handler returned before they were sent).
func TestService_MicroStats(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "100", "USD")
	for i := 0; i < 3; i++ {
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("r%d", i), Scopes: []string{"org:acme"}, Amount: "1", TTL: "1m"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
	}
	_, e := h.admit(events.AdmitRequest{RequestID: "bad", Scopes: []string{"org:acme"}, Amount: "-1", TTL: "1m"})
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidAmount, e.Code)
	_, e = h.settle("rsv_nosuch", "1")
	require.NotNil(t, e)

	msg, err := h.nc.Request("$SRV.STATS."+streams.ServiceName, nil, 5*time.Second)
	require.NoError(t, err)
	var st micro.Stats
	require.NoError(t, json.Unmarshal(msg.Data, &st))
	byName := map[string]*micro.EndpointStats{}
	for _, ep := range st.Endpoints {
		byName[ep.Name] = ep
	}
	data := func(name string) service.EndpointStats {
		ep := byName[name]
		require.NotNil(t, ep, name)
		var d service.EndpointStats
		require.NoError(t, json.Unmarshal(ep.Data, &d), string(ep.Data))
		return d
	}
	adm := data("admit")
	require.Equal(t, int64(4), adm.NumRequests)
	require.Equal(t, int64(1), adm.NumErrors)
	require.Equal(t, map[string]int64{"invalid_amount": 1}, adm.Errors)
	require.Contains(t, adm.LastError, "invalid_amount")
	require.Positive(t, adm.ProcessingTime)
	require.Equal(t, adm.ProcessingTime/4, adm.AverageProcessingTime)
	require.Equal(t, 4, byName["admit"].NumRequests, "micro counts every request it dispatched")
	set := data("settle")
	require.Equal(t, int64(1), set.NumRequests)
	require.Equal(t, map[string]int64{"unknown_reservation": 1}, set.Errors)
	put := data("budget_put")
	require.Equal(t, int64(1), put.NumRequests)
	require.Zero(t, put.NumErrors)
	require.Equal(t, adm, h.replicas[0].Service.Stats()["admit"])
}
