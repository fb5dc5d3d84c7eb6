package ledger_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// lostAck lands the first lane write, then reports a timeout after delay.
type lostAck struct {
	armed            atomic.Bool
	delay            time.Duration
	calls            atomic.Int32
	entered, release chan struct{}
}

func (s *lostAck) publish(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error) {
	if strings.Contains(m.Subject, ".lane.") && s.entered != nil && s.calls.Add(1) == 1 {
		close(s.entered)
		<-s.release
	}
	ack, err := send(ctx, m)
	if strings.Contains(m.Subject, ".lane.") && s.calls.Load() >= 2 && s.armed.CompareAndSwap(true, false) {
		time.Sleep(s.delay)
		return nil, nats.ErrTimeout
	}
	return ack, err
}

// TestLedger_LostAckIsUnknownNotNothing: a lane write lands but its ack is
// lost; the resend loses its compare-and-set to that very write. A caller
// whose deadline passes meanwhile must be told the outcome is unknown, never
// "nothing was committed" while its reservation exists. Before the fix the
// resend's conflict was taken for another writer's (this test failed).
func TestLedger_LostAckIsUnknownNotNothing(t *testing.T) {
	env := testenv.New(t)
	nc := env.Connect(t)
	base, err := jetstream.New(nc)
	require.NoError(t, err)
	js := &lostAck{delay: 400 * time.Millisecond}
	l, err := ledger.New(context.Background(), nc, base, env.Layout, ledger.PublishHookForTesting(js.publish))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-l.Ready()
	_, err = l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("10"), "USD", t0)
	require.NoError(t, err)
	js.entered, js.release = make(chan struct{}), make(chan struct{})
	js.armed.Store(true)
	first := submitAsync(context.Background(), l, requestTx{id: "r0", rid: "q0", hash: "h"})
	<-js.entered
	actx, acancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer acancel()
	a := submitAsync(actx, l, requestTx{id: "ra", rid: "qa", hash: "h"})
	b := submitAsync(context.Background(), l, requestTx{id: "rb", rid: "qb", hash: "h"})
	waitFor(t, "A and B queued", func() bool { return l.Stats().Queued == 2 })
	close(js.release)
	require.NoError(t, await(t, first))
	err = await(t, a)
	errB := await(t, b)
	t.Logf("A: %v; B: %v", err, errB)
	_, ok := l.Reservation("ra")
	if err != nil && strings.Contains(err.Error(), "nothing was committed") && ok {
		t.Errorf("A was told %q but reservation ra is committed", err)
	}
}
