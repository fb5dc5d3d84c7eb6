package service_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestCluster_TwoReplicasStartTogether: on a 3-node cluster, two replicas
// connected to different nodes start at the same moment on a ledger stream
// that does not exist yet (one creates it; the other may meet it half
// created: "stream not found" 10059, "no suitable peers" 10005). Both must
// start and serve. Rounds with fresh buckets repeat the race; it fails if a
// transient start-up error is returned instead of retried.
func TestCluster_TwoReplicasStartTogether(t *testing.T) {
	t.Parallel()
	c := testenv.NewCluster(t, 3)
	const rounds = 2
	for round := 0; round < rounds; round++ {
		layout, err := streams.New(streams.Config{Bucket: fmt.Sprintf("race%d", round), Prefix: fmt.Sprintf("race%d.", round), Replicas: 3})
		require.NoError(t, err)
		var wg sync.WaitGroup
		replicas := make([]*replica.Replica, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		for i := range replicas {
			nc, err := nats.Connect(c.Servers[i].ClientURL()+","+c.URLs(), nats.MaxReconnects(-1), nats.Name(fmt.Sprintf("race-%d-%d", round, i)))
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				replicas[i], errs[i] = replica.Start(ctxT(t), nc, js, replica.Config{Layout: layout, SweepInterval: -1})
			}()
		}
		close(start)
		wg.Wait()
		for i, r := range replicas {
			require.NoError(t, errs[i], "round %d replica %d", round, i)
			t.Cleanup(func() { _ = r.Stop() })
		}
		// Both serve: a budget put through one is read through the other.
		nc := c.Conn
		data := []byte(`{"scope":"org:race","period":"month","limit":"1","unit":"USD"}`)
		// Start returns once each replica's endpoints are registered on
		// its own node; the node of c.Conn learns of them over the
		// routes a moment later, and until then a request gets no
		// responders (which the Go client retries as unavailable). No
		// responder took the request, so it is sent again.
		var msg *nats.Msg
		testenv.WaitFor(t, 10*time.Second, "the replicas' endpoints known on every node", func() bool {
			msg, err = nc.Request(layout.Endpoint(streams.EndpointBudgetPut), data, 10*time.Second)
			return !errors.Is(err, nats.ErrNoResponders)
		})
		require.NoError(t, err)
		require.NotContains(t, string(msg.Data), `"error"`)
		for _, r := range replicas {
			testenv.WaitFor(t, 10*time.Second, "replica sees the budget", func() bool {
				_, ok := r.Ledger.Budget(events.BudgetRef{Scope: "org:race", Period: events.PeriodMonth})
				return ok
			})
		}
	}
}
