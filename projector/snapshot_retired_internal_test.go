package projector

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// TestLoadSnapshot_RetirementFromTheStream: a replay that starts from a
// ledger snapshot takes a retired budget's time and reason from the
// stream's own retiring revision (the snapshot's tombstone carries no
// event), so a later snapshot's retirement is compared with what the
// stream holds. It runs on a real embedded JetStream server (testenv
// imports this package). How it can fail: a load that read the
// tombstone alone left the time zero and the reason empty.
func TestLoadSnapshot_RetirementFromTheStream(t *testing.T) {
	srv, err := embedded.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	layout := streams.Default()
	_, err = streams.Ensure(ctx, js, layout)
	require.NoError(t, err)
	l, err := ledger.New(ctx, nc, js, layout)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	select {
	case <-l.Ready():
	case <-ctx.Done():
		t.Fatal("ledger not ready")
	}

	ref := events.BudgetRef{Scope: "run:r1", Period: events.PeriodLifetime}
	at := time.Date(2026, 12, 6, 9, 30, 0, 0, time.UTC)
	_, err = l.PutBudget(ctx, ref, events.MustMoney("1"), "USD", at)
	require.NoError(t, err)
	_, _, err = l.RetireBudget(ctx, ref, "", "run over", at.Add(time.Minute))
	require.NoError(t, err)
	info, err := l.Snapshot(ctx)
	require.NoError(t, err)
	store, err := js.ObjectStore(ctx, layout.SnapshotBucket())
	require.NoError(t, err)
	data, err := store.GetBytes(ctx, info.Name)
	require.NoError(t, err)
	stream, err := js.Stream(ctx, layout.StreamName())
	require.NoError(t, err)

	st := NewState()
	require.NoError(t, st.loadSnapshot(ctx, stream, layout, data))
	b, ok := st.Budget(ref)
	require.True(t, ok)
	require.True(t, b.Retired)
	require.Equal(t, "run over", b.RetiredReason)
	require.True(t, b.RetiredAt.Equal(at.Add(time.Minute)), "retired at %s", b.RetiredAt)
}
