package replica_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// A replica whose server has less JetStream storage left than the denial
// stream's default cap (a nearly full disk) starts, serves admits, and
// says it lowered the cap. How we know it can fail: it did not start at
// all ("insufficient storage resources available" from the denial
// stream's create), which took down a CI run on a machine with little
// disk left.
func TestReplica_StartsWhenTheDenialCapDoesNotFit(t *testing.T) {
	env := testenv.New(t, testenv.WithMaxStore(300<<20))
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1, Log: log})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:acme", Period: "month"}, events.MustMoney("1"), "USD", time.Now())
	require.NoError(t, err)
	rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "fits", Scopes: []string{"org:acme"}, Amount: "1"})
	require.NoError(t, err)
	require.True(t, rep.Admitted)
	// Over NATS, where a replica records what it denies.
	c, err := client.New(env.Conn)
	require.NoError(t, err)
	_, err = c.Admit(ctx, events.AdmitRequest{RequestID: "over", Scopes: []string{"org:acme"}, Amount: "1"})
	require.ErrorIs(t, err, client.ErrDenied, "the budget holds")

	s, err := env.JS.Stream(ctx, env.Layout.DenialStreamName())
	require.NoError(t, err)
	got := s.CachedInfo().Config.MaxBytes
	require.Less(t, got, int64(streams.DefaultDenialMaxBytes))
	require.Contains(t, logs.String(), "the denial stream's cap was lowered")
	require.Contains(t, logs.String(), "max_bytes="+fmtInt(got))
	require.Eventually(t, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= 1
	}, 30*time.Second, 20*time.Millisecond, "the denial is recorded, within the lowered cap")
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }
