package alerting_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/alerting"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

func blocking(i int) events.Alert {
	return events.BlockingAlert(events.BalanceRef{Scope: events.Scope("team:t" + strconv.Itoa(i)), Period: "month", Instance: "2026-12"},
		"USD", events.MustMoney("10"), events.MustMoney("9.5"), "1", "req-"+strconv.Itoa(i), 0, time.Now())
}

// An alert whose publish fails (here: the alert stream is missing, as it
// is while a stream has no leader) waits and is published once the stream
// takes it, instead of being given up after its first round; only past
// maxRetrying waiting alerts is one given up. How we know it can fail:
// the publisher counted the alert failed after one round and never
// published it, so Published stayed 0.
func TestPublisher_FailedAlertIsPublishedLater(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := env.JS.Stream(ctx, env.Layout.AlertStreamName())
	require.Error(t, err, "no alert stream yet")

	p := alerting.New(env.JS, env.Layout)
	alerting.ShortenRetries(p, 2, 50*time.Millisecond, 200*time.Millisecond, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()

	p.Blocked(blocking(1))
	testenv.WaitFor(t, 20*time.Second, "the first alert waits for another round", func() bool { return p.Retrying() == 1 })
	// A second failing alert finds the retry list full: given up, and
	// its blocking alert may be queued again.
	p.Blocked(blocking(2))
	testenv.WaitFor(t, 20*time.Second, "the second alert given up", func() bool { return p.Failed() == 1 })
	require.Equal(t, uint64(0), p.Published())

	_, err = streams.EnsureAlerts(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	testenv.WaitFor(t, 20*time.Second, "the waiting alert published", func() bool { return p.Published() == 1 && p.Retrying() == 0 })
	s, err := env.JS.Stream(ctx, env.Layout.AlertStreamName())
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(ctx, env.Layout.AlertMsgSubject(blocking(1)))
	require.NoError(t, err)
	require.Equal(t, blocking(1).ID, m.Header.Get(streams.HeaderAlertID))

	p.Blocked(blocking(2)) // forgotten when given up: queued again
	testenv.WaitFor(t, 20*time.Second, "the given-up alert published on its next denial", func() bool { return p.Published() == 2 })
	require.Equal(t, uint64(1), p.Failed())

	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}
