package client_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/testenv"
)

// A replica restarting: while none serves the subjects, every request is
// answered no responders at once. With the default budget (2 s x 3) an
// admit and a settle wait for the replica to come back, as WithRetries
// promises for a change of under a second, instead of giving up after
// three attempts 60 ms apart: a settle that gave up there leaves a paid
// call's spend unrecorded.
func TestClient_noRespondersRideThroughARestart(t *testing.T) {
	env := testenv.New(t)
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	first, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: env.Layout, SweepInterval: -1})
	require.NoError(t, err)

	var logs testenv.LogBuffer
	c := newClient(t, env.Connect(t), client.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	putBudget(t, c, "org:acme", "1.00")
	held, err := c.Admit(ctxT(t), admitReq("0.10", "org:acme"))
	require.NoError(t, err)
	require.NoError(t, first.Stop())

	type result struct {
		res *client.Reservation
		err error
	}
	admitted := make(chan result, 1)
	go func() {
		res, err := c.Admit(context.Background(), admitReq("0.20", "org:acme"))
		admitted <- result{res, err}
	}()
	settled := make(chan error, 1)
	go func() {
		_, err := held.Settle(context.Background(), "0.05")
		settled <- err
	}()
	// Both are retrying past their third attempt, or one gave up.
	testenv.WaitFor(t, waitTimeout, "a fourth attempt of the admit and of the settle, or an answer", func() bool {
		l := logs.String()
		return (strings.Contains(l, "subject=spendgate.admit attempt=4") && strings.Contains(l, "subject=spendgate.settle attempt=4")) ||
			len(admitted) > 0 || len(settled) > 0
	})
	require.Empty(t, admitted, "the admit gave up while no replica served")
	require.Empty(t, settled, "the settle gave up while no replica served")

	startService(t, env)
	select {
	case got := <-admitted:
		require.NoError(t, got.err)
		_, err := got.res.Release(ctxT(t))
		require.NoError(t, err)
	case <-ctxT(t).Done():
		t.Fatal("no admit answer")
	}
	select {
	case err := <-settled:
		require.NoError(t, err)
	case <-ctxT(t).Done():
		t.Fatal("no settle answer")
	}
	v := budget(t, c, "org:acme")
	requireMoney(t, "0.05", v.Spent)
	requireMoney(t, "0", v.Reserved)
}

// No replica serves the subjects at all: every attempt of an admit is
// answered no responders, so the server delivered none and nothing can
// have been reserved. The admit fails closed after timeout × attempts
// without voiding (a void, retried through no responders for its own
// timeout × attempts, doubled the caller's wait: 12 s with the defaults).
func TestClient_Admit_noRespondersFailsClosedWithoutAVoid(t *testing.T) {
	env := testenv.New(t)
	var logs testenv.LogBuffer
	const timeout, attempts = 500 * time.Millisecond, 2
	c := newClient(t, env.Connect(t), client.WithTimeout(timeout), client.WithRetries(attempts),
		client.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))

	start := time.Now()
	res, err := c.Admit(ctxT(t), admitReq("0.10", "org:acme"))
	elapsed := time.Since(start)
	de := requireUnavailableDenial(t, res, err)
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.Nil(t, de.Void)
	require.Contains(t, logs.String(), "subject=spendgate.admit", "the admit was retried")
	require.NotContains(t, logs.String(), "spendgate.void", "a void was sent for an admit no replica received")
	require.Less(t, elapsed, 2*timeout*attempts, "the admit's bound, not twice it")
}
