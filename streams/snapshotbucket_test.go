package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestEnsureSnapshots_CreateOpenRepair: EnsureSnapshots creates the bucket
// with its configuration and opens it as it is on the next call; a bucket
// an older build made S2-compressed, or whose stream someone gave another
// subject, is updated back by an identity that may (the operator's), and
// CheckSnapshotBucket names the extra subject until then. It fails if
// EnsureSnapshots left a wrong bucket alone or CheckSnapshotBucket passed
// one with a subject too many.
func TestEnsureSnapshots_CreateOpenRepair(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := env.Layout
	require.ErrorIs(t, streams.CheckSnapshotBucket(ctx, env.JS, l), jetstream.ErrStreamNotFound)
	for range 2 {
		_, err := streams.EnsureSnapshots(ctx, env.JS, l)
		require.NoError(t, err)
		require.NoError(t, streams.CheckSnapshotBucket(ctx, env.JS, l))
	}
	stream := func() jetstream.StreamConfig {
		s, err := env.JS.Stream(ctx, l.SnapshotStreamName())
		require.NoError(t, err)
		return s.CachedInfo().Config
	}
	require.Equal(t, l.SnapshotSubjects(), stream().Subjects)

	for _, change := range []func(*jetstream.StreamConfig){
		func(c *jetstream.StreamConfig) { c.Compression = jetstream.S2Compression },
		func(c *jetstream.StreamConfig) { c.Subjects = append(c.Subjects, l.Endpoint(streams.EndpointAdmit)) },
	} {
		cfg := stream()
		change(&cfg)
		_, err := env.JS.UpdateStream(ctx, cfg)
		require.NoError(t, err)
		if len(cfg.Subjects) > 2 {
			err := streams.CheckSnapshotBucket(ctx, env.JS, l)
			require.ErrorIs(t, err, streams.ErrSnapshotSubjects)
			require.ErrorContains(t, err, l.Endpoint(streams.EndpointAdmit))
		}
		_, err = streams.EnsureSnapshots(ctx, env.JS, l)
		require.NoError(t, err)
		got := stream()
		require.Equal(t, l.SnapshotSubjects(), got.Subjects)
		require.Equal(t, jetstream.NoCompression, got.Compression)
		require.NoError(t, streams.CheckSnapshotBucket(ctx, env.JS, l))
	}
}
