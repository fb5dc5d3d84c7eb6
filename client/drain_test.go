package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// Many admits whose callers give up within 1-3 ms, then a shutdown: the
// client voids each request id in the background, and Drain waits for
// those voids, so that closing the connection after it leaves nothing
// reserved. A proxy on "drain." lands every admit and never answers it
// (its caller gives up), and holds every void until the test lets them
// go: while they are held, Drain must not return (a Drain that did not
// wait returns nil there; closing the connection then fails the voids and
// leaves the admits' reservations held until their TTL).
func TestClient_Drain_waitsForTheVoidsOfAbandonedAdmits(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	direct := newClient(t, env.Connect(t))
	putBudget(t, direct, "org:drain", "1000")

	gate := make(chan struct{})
	var gateOnce sync.Once
	open := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(open)
	var forwards sync.WaitGroup
	pnc := env.Connect(t)
	sub, err := pnc.Subscribe("drain.>", func(m *nats.Msg) {
		endpoint := strings.TrimPrefix(m.Subject, "drain.")
		forwards.Add(1)
		go func() {
			defer forwards.Done()
			if endpoint == streams.EndpointVoid {
				<-gate
			}
			reply, err := pnc.RequestMsg(&nats.Msg{Subject: env.Layout.Endpoint(endpoint), Data: m.Data, Header: m.Header}, waitTimeout)
			if err != nil {
				t.Errorf("proxy: forward %s: %v", endpoint, err)
				return
			}
			if endpoint != streams.EndpointVoid {
				return // an admit: it landed, its caller never learns it
			}
			if err := m.RespondMsg(&nats.Msg{Data: reply.Data, Header: reply.Header}); err != nil {
				t.Errorf("proxy: respond: %v", err)
			}
		}()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, pnc.Flush())

	var logs testenv.LogBuffer
	nc := env.Connect(t)
	c := newClient(t, nc, client.WithPrefix("drain."), client.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))

	const n = 200
	var callers sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		callers.Add(1)
		go func() {
			defer callers.Done()
			ctx, cancel := context.WithTimeout(ctxT(t), time.Duration(1+i%3)*time.Millisecond)
			defer cancel()
			res, err := c.Admit(ctx, admitReq("1", "org:drain"))
			if err == nil {
				_, err = res.Release(ctxT(t))
				err = errors.Join(errors.New("admitted through a proxy that never answers"), err)
			}
			errs <- err
		}()
	}
	callers.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}

	// The voids are held: Drain waits for them.
	short, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Drain(short), context.DeadlineExceeded, "Drain returned while the voids were still in flight")

	open()
	require.NoError(t, c.Drain(ctxT(t)))
	nc.Close()
	forwards.Wait()
	require.NotContains(t, logs.String(), "failed", "a void failed")
	v := budget(t, direct, "org:drain")
	requireMoney(t, "0", v.Reserved, "the voids released every admit that landed")
	require.Equal(t, int64(0), v.Open)
	require.NoError(t, c.Drain(ctxT(t)), "nothing left to wait for")
}
