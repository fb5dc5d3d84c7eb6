package ledger_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestSnapshot_WidenedBucketRefused: the snapshot bucket's stream updated
// to capture the admit endpoint as well (what a replica login could do
// while its role could update the bucket: callers then read the stream's
// acknowledgements as answers). A replica writes no snapshot into it
// (streams.ErrSnapshotSubjects, nothing stored), one that starts logs it
// at error level, and the operator's EnsureSnapshots repairs it, after
// which snapshots are written again. It fails if writeSnapshot did not
// check the bucket's subjects: the write would succeed.
func TestSnapshot_WidenedBucketRefused(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	w := startLedger(t, env, snapOpts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	snapHistory(t, w, 50, 2, 20)
	first, err := w.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, streams.CheckSnapshotBucket(ctx, env.JS, env.Layout))

	s, err := env.JS.Stream(ctx, env.Layout.SnapshotStreamName())
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.Subjects = append(cfg.Subjects, env.Layout.Endpoint(streams.EndpointAdmit))
	_, err = env.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	require.ErrorIs(t, streams.CheckSnapshotBucket(ctx, env.JS, env.Layout), streams.ErrSnapshotSubjects)

	snapHistory(t, w, 51, 2, 20)
	_, err = w.Snapshot(ctx)
	require.ErrorIs(t, err, streams.ErrSnapshotSubjects)
	require.ErrorContains(t, err, env.Layout.Endpoint(streams.EndpointAdmit))
	list, err := streams.ListObjects(ctx, env.JS, env.Layout.SnapshotBucket(), func(string) bool { return true })
	require.NoError(t, err)
	require.Len(t, list, 1, "nothing written into it: %v", list)
	require.Equal(t, first.Name, list[0].Name)

	var logs testenv.LogBuffer
	l := startLedger(t, env, append(snapOpts, ledger.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	require.Equal(t, first.Seq, l.SnapshotStats().Loaded, "its snapshot is checked and loaded like any other")
	require.Contains(t, logs.String(), "level=ERROR msg=\"ledger: the snapshot bucket's stream captures other subjects")

	_, err = streams.EnsureSnapshots(ctx, env.JS, env.Layout)
	require.NoError(t, err, "the operator's identity repairs it")
	require.NoError(t, streams.CheckSnapshotBucket(ctx, env.JS, env.Layout))
	_, err = l.Snapshot(ctx)
	require.NoError(t, err)
}
