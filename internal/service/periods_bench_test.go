package service_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// pacedRate is the offered load of BenchmarkAdmit_Paced: admits per
// second on one budget; pacedInFlight bounds the admits in flight.
const (
	pacedRate     = 1000
	pacedInFlight = 256
)

// BenchmarkAdmit_Paced offers 1,000 admits per second (open loop: one
// every millisecond, whatever the replies) to one per-minute budget, then,
// in the same run, to one per-month budget, on a real JetStream with one
// replica. The clock runs with the wall clock from 1.5 s before a minute
// boundary, so a run of more than 1.5 s crosses at least one (the minute
// budget starts a new balance, with no write of its own). It reports the
// achieved rate of answered admits (achieved/s) and their median and p99
// latency. b.N is the number of admits offered:
//
//	go test -run '^$' -bench BenchmarkAdmit_Paced -benchtime 5000x ./internal/service/
func BenchmarkAdmit_Paced(b *testing.B) {
	h := newHarness(b, harnessOpts{noCheck: true})
	for _, p := range []events.Period{events.PeriodMinute, events.PeriodMonth} {
		b.Run(string(p), func(b *testing.B) {
			scope := "team:paced-" + string(p) + fmt.Sprint(b.N)
			h.putBudget(scope, string(p), "1000000000", "USD")
			base := time.Date(2026, 11, 30, 12, 0, 58, 500_000_000, time.UTC)
			lat := make([]time.Duration, b.N)
			admitted := make([]bool, b.N)
			sem := make(chan struct{}, pacedInFlight)
			var wg sync.WaitGroup
			b.ResetTimer()
			t0 := time.Now()
			for i := 0; i < b.N; i++ {
				if d := time.Until(t0.Add(time.Duration(i) * time.Second / pacedRate)); d > 0 {
					time.Sleep(d) // pacing the offered load, not synchronization
				}
				h.clock.now.Store(base.Add(time.Since(t0)))
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					data, _ := json.Marshal(events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d-%d", p, b.N, i), Scopes: []string{scope}, Amount: "0.000001", TTL: "2m", Brief: true})
					start := time.Now()
					msg, err := h.nc.Request(h.env.Layout.Endpoint(streams.EndpointAdmit), data, 10*time.Second)
					lat[i] = time.Since(start)
					var r events.AdmitReply
					admitted[i] = err == nil && json.Unmarshal(msg.Data, &r) == nil && r.Admitted
				}()
			}
			wg.Wait()
			elapsed := time.Since(t0)
			b.StopTimer()
			n := 0
			for _, ok := range admitted {
				if ok {
					n++
				}
			}
			require.Equal(b, b.N, n, "every admit is admitted")
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(n)/elapsed.Seconds(), "achieved/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "median-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}
