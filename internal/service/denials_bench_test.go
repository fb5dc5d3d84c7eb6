package service_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkDeniedAdmit measures a denied admit over NATS (parallel
// callers) with the denial records on and off, and reports how many
// records were published and dropped: the records must cost the admit
// little, since they are published off the request path.
//
//	go test -run '^$' -bench DeniedAdmit -benchtime 20000x ./internal/service/
func BenchmarkDeniedAdmit(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("records=%v", on), func(b *testing.B) {
			env := testenv.New(b)
			nc := env.Connect(b)
			js, err := jetstream.New(nc)
			require.NoError(b, err)
			r, err := replica.Start(ctxT(b), nc, js, replica.Config{Layout: env.Layout, SweepInterval: -1, NoDenialRecords: !on})
			require.NoError(b, err)
			b.Cleanup(func() { _ = r.Stop() })
			h := &harness{t: b, env: env, nc: env.Connect(b), clock: &clock{}}
			h.putBudget("team:tight", "day", "0.5", "USD")
			var n atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					var rep events.AdmitReply
					e, err := h.callE("admit", events.AdmitRequest{RequestID: fmt.Sprintf("d-%d", n.Add(1)), Scopes: []string{"team:tight"}, Amount: "1"}, &rep)
					if err != nil || e != nil || rep.Admitted {
						b.Errorf("admit: %v %v %v", err, e, rep.Admitted)
						return
					}
				}
			})
			b.StopTimer()
			if on {
				deadline := time.Now().Add(time.Minute)
				for r.Denials.Recorded()+r.Denials.Dropped()+r.Denials.Failed() < uint64(n.Load()) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond) // a benchmark's report, not a test's synchronization
				}
				b.ReportMetric(float64(r.Denials.Recorded()), "recorded")
				b.ReportMetric(float64(r.Denials.Dropped()), "dropped")
			}
		})
	}
}
