package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestCluster_HotBudgetR3: on a 3-node cluster with the ledger stream at R3,
// two replicas connected to different nodes admit exactly 20 of 200
// concurrent 0.05 admits against 1.00 (on R3 a lost compare-and-set may come
// back as 10164 instead of 10071; both must be treated as conflicts), and
// after the stream leader is stopped the ledger keeps admitting and stays
// consistent.
func TestCluster_HotBudgetR3(t *testing.T) {
	t.Parallel()
	c := testenv.NewCluster(t, 3)
	urls := []string{c.Servers[0].ClientURL(), c.Servers[1].ClientURL()}
	var replicas []*replica.Replica
	for i, u := range urls {
		nc, err := nats.Connect(u+","+c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.Name(fmt.Sprintf("replica-%d", i)))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: c.Layout, SweepInterval: -1})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Stop() })
		replicas = append(replicas, r)
	}
	nc := c.Conn
	// callE never calls require, so burst goroutines can use it; call is
	// for the test goroutine.
	callE := func(endpoint string, req, out any) (*events.Error, error) {
		data, _ := json.Marshal(req)
		var msg *nats.Msg
		var err error
		// A request in flight while the stream leader changes may time out;
		// retrying with the same ids is what clients do.
		for attempt := 0; attempt < 20; attempt++ {
			msg, err = nc.Request(c.Layout.Endpoint(endpoint), data, 5*time.Second)
			if err == nil {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		var er events.ErrorReply
		if err := json.Unmarshal(msg.Data, &er); err != nil {
			return nil, err
		}
		if er.Error != nil {
			return er.Error, nil
		}
		return nil, json.Unmarshal(msg.Data, out)
	}
	call := func(endpoint string, req, out any) *events.Error {
		e, err := callE(endpoint, req, out)
		require.NoError(t, err)
		return e
	}
	var bv events.BudgetView
	require.Nil(t, call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:r3", Period: "month", Limit: "1.00", Unit: "USD"}, &bv))
	burstR3 := func(prefix string, n int) []string {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var admitted []string
		failures := make([]string, n)
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var r events.AdmitReply
				e, err := callE(streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", prefix, i), Scopes: []string{"org:r3"}, Amount: "0.05"}, &r)
				switch {
				case err != nil:
					failures[i] = err.Error()
				case e != nil:
					failures[i] = string(e.Code) + ": " + e.Message
				case r.Admitted:
					mu.Lock()
					admitted = append(admitted, r.ReservationID)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		for i, f := range failures {
			require.Empty(t, f, "admit %d", i)
		}
		return admitted
	}
	ids := burstR3("a", 200)
	require.Len(t, ids, 20)

	// Give half back, then lose the stream leader and fill up again.
	require.Nil(t, call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:r3", Period: "month"}, &bv))
	require.Equal(t, "1", bv.Reserved)
	for _, id := range ids[:10] {
		var cr events.CloseReply
		require.Nil(t, call(streams.EndpointRelease, events.ReleaseRequest{ReservationID: id}, &cr))
	}
	leader := c.Leader()
	require.GreaterOrEqual(t, leader, 0)
	c.StopServer(leader)
	require.Len(t, burstR3("b", 100), 10)

	stats := replicas[0].Ledger.Stats().Conflicts + replicas[1].Ledger.Stats().Conflicts
	t.Logf("conflicts across the two replicas: %d", stats)
	testenv.WaitFor(t, 30*time.Second, "invariant check on the surviving nodes", func() bool {
		rep, err := projector.Check(context.Background(), c.JS, c.Layout)
		return err == nil && rep.OK()
	})
}
