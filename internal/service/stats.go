package service

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"
)

// EndpointStats is spendgate's own count of one endpoint's requests, in the
// data field of each endpoint of a micro STATS reply ($SRV.STATS,
// `nats micro stats spendgate --json`).
//
// micro's own counters (num_requests, num_errors, processing_time) are
// taken when a handler returns, and a spendgate handler returns as soon as
// it has handed the request to a goroutine (so that concurrent admits meet
// in the group commit); calling micro's Request from that goroutine after
// the handler returned would race with micro's own bookkeeping. So micro's
// num_requests counts every request, but its num_errors and
// processing_time see only the answers given on micro's goroutine (the
// in-flight refusals). EndpointStats counts every answer, when it is sent.
type EndpointStats struct {
	// NumRequests counts answered requests.
	NumRequests int64 `json:"num_requests"`
	// NumErrors counts error replies, and Errors counts them by code.
	NumErrors int64            `json:"num_errors"`
	Errors    map[string]int64 `json:"errors,omitempty"`
	// LastError is the code and message of the last error reply.
	LastError string `json:"last_error,omitempty"`
	// ProcessingTime is the total time from the request's arrival to its
	// reply, AverageProcessingTime its mean (nanoseconds, as micro's).
	ProcessingTime        time.Duration `json:"processing_time"`
	AverageProcessingTime time.Duration `json:"average_processing_time"`
}

// endpointStats holds EndpointStats per micro endpoint name.
type endpointStats struct {
	mu sync.Mutex
	m  map[string]*EndpointStats
}

// microName is the micro endpoint name of a spendgate endpoint.
func microName(endpoint string) string { return strings.ReplaceAll(endpoint, ".", "_") }

// observe counts one answer of endpoint; code is "" for a success.
func (st *endpointStats) observe(endpoint, code, message string, took time.Duration) {
	name := microName(endpoint)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]*EndpointStats{}
	}
	e := st.m[name]
	if e == nil {
		e = &EndpointStats{}
		st.m[name] = e
	}
	e.NumRequests++
	e.ProcessingTime += took
	e.AverageProcessingTime = e.ProcessingTime / time.Duration(e.NumRequests)
	if code != "" {
		e.NumErrors++
		if e.Errors == nil {
			e.Errors = map[string]int64{}
		}
		e.Errors[code]++
		e.LastError = code + ": " + message
	}
}

// handler is micro.Config.StatsHandler: a copy of the endpoint's counts.
func (st *endpointStats) handler(e *micro.Endpoint) any {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := EndpointStats{}
	if c := st.m[e.Name]; c != nil {
		out = *c
		if c.Errors != nil {
			out.Errors = make(map[string]int64, len(c.Errors))
			for k, v := range c.Errors {
				out.Errors[k] = v
			}
		}
	}
	return out
}

// Stats returns spendgate's counts of every endpoint that has answered,
// by micro endpoint name (e.g. "budget_list").
func (s *Service) Stats() map[string]EndpointStats {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	out := make(map[string]EndpointStats, len(s.stats.m))
	for k, v := range s.stats.m {
		out[k] = *v
	}
	return out
}
