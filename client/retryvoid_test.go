package client_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// A caller gives up on an admit in flight and retries it at once under the
// same request id, as idempotency invites. The client voids the first
// attempt in the background; the retry must not overtake that void: sent
// first, it is answered with the open reservation (a replay), which the
// void then releases under the caller, whose upstream call runs unreserved
// and whose settle is refused already_released (its spend never
// recorded). The retry waits for the void and is refused request_voided.
func TestClient_Admit_retryAfterCancelWaitsForTheVoid(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)

	// A proxy on "test.": it forwards the first admit and never answers it
	// (its caller gives up), holds every void until released, and counts
	// admits.
	var admits atomic.Int32
	admitLanded := make(chan struct{})
	voidArrived := make(chan struct{}, 16)
	releaseVoid := make(chan struct{})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(releaseVoid) }) }
	t.Cleanup(release)
	pnc := env.Connect(t)
	sub, err := pnc.Subscribe("test.>", func(m *nats.Msg) {
		endpoint := strings.TrimPrefix(m.Subject, "test.")
		n := int32(0)
		if endpoint == "admit" {
			n = admits.Add(1)
		}
		go func() {
			if endpoint == "void" {
				voidArrived <- struct{}{}
				<-releaseVoid
			}
			reply, err := pnc.RequestMsg(&nats.Msg{Subject: env.Layout.Endpoint(endpoint), Data: m.Data, Header: m.Header}, waitTimeout)
			if err != nil {
				t.Errorf("proxy: forward %s: %v", endpoint, err)
				return
			}
			if n == 1 {
				close(admitLanded)
				return
			}
			_ = m.RespondMsg(&nats.Msg{Data: reply.Data, Header: reply.Header})
		}()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, pnc.Flush())

	c := newClient(t, env.Connect(t), client.WithPrefix("test."))
	putBudget(t, c, "org:acme", "1.00")
	req := admitReq("0.10", "org:acme")
	req.RequestID = "req-retried"

	cctx, cancel := context.WithCancel(ctxT(t))
	first := make(chan error, 1)
	go func() {
		_, err := c.Admit(cctx, req)
		first <- err
	}()
	select {
	case <-admitLanded:
	case <-time.After(waitTimeout):
		t.Fatal("the first admit never reached the service")
	}
	cancel()
	require.ErrorIs(t, <-first, context.Canceled)
	select {
	case <-voidArrived:
	case <-time.After(waitTimeout):
		t.Fatal("the client never voided the admit its caller gave up")
	}

	type result struct {
		res *client.Reservation
		err error
	}
	retried := make(chan result, 1)
	go func() {
		res, err := c.Admit(ctxT(t), req)
		retried <- result{res, err}
	}()
	// The retry must not be sent while the void is under way.
	overtook := testenv.Within(time.Second, func() bool { return admits.Load() >= 2 })
	release()
	got := <-retried
	if got.res != nil {
		_, settleErr := got.res.Settle(ctxT(t), "0.10")
		t.Logf("the retry was admitted (replayed %v); its settle: %v", got.res.Reply().Replayed, settleErr)
	}
	require.False(t, overtook, "the retry was sent while the void of its request id was under way")
	var ee *events.Error
	require.ErrorAs(t, got.err, &ee)
	require.Equal(t, events.CodeRequestVoided, ee.Code)
	require.ErrorIs(t, got.err, client.ErrConflict)
	testenv.WaitFor(t, waitTimeout, "nothing reserved", func() bool {
		v := budget(t, c, "org:acme")
		return v.Open == 0
	})
}
