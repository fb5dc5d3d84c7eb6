package streams_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestEnsureDenials_DefaultCapFitsTheServersStorage: a server whose
// JetStream storage has less room than the denial stream's default cap
// (a nearly full disk: nats-server gives itself 75% of the free disk)
// still gets a denial stream, its cap lowered to fit, so the replica
// serves admits; a cap given explicitly that does not fit is a clear
// error and leaves the stream as it was.
//
// How it can fail: before, the default cap was asked for whole, the
// server answered 10047 "insufficient storage resources available", and
// the replica (and every test on a CI machine with under 1.4 GB free)
// failed at start.
func TestEnsureDenials_DefaultCapFitsTheServersStorage(t *testing.T) {
	t.Parallel()
	const store = 300 << 20
	env := testenv.New(t, testenv.WithMaxStore(store))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := streams.EnsureDenials(ctx, env.JS, env.Layout, 0, 0)
	require.NoError(t, err, "the default cap is lowered until it fits")
	got := s.CachedInfo().Config.MaxBytes
	require.Less(t, got, int64(streams.DefaultDenialMaxBytes))
	require.LessOrEqual(t, got, int64(store))
	require.GreaterOrEqual(t, got, int64(streams.MinDenialMaxBytes))
	require.Greater(t, 2*got, int64(store)/2, "halved no further than it had to be")

	// Again (a restart, another replica): the same cap, no error.
	s, err = streams.EnsureDenials(ctx, env.JS, env.Layout, 0, 0)
	require.NoError(t, err)
	require.Equal(t, got, s.CachedInfo().Config.MaxBytes)

	// An explicit cap is the operator's: not lowered behind their back.
	_, err = streams.EnsureDenials(ctx, env.JS, env.Layout, 0, streams.DefaultDenialMaxBytes)
	require.Error(t, err)
	require.True(t, streams.IsStorageExceeded(err), "%v", err)
	require.Contains(t, err.Error(), "does not fit in the JetStream storage")
	info, err := env.JS.Stream(ctx, env.Layout.DenialStreamName())
	require.NoError(t, err)
	require.Equal(t, got, info.CachedInfo().Config.MaxBytes, "the refused update changed nothing")

	// A cap that fits is taken as given.
	s, err = streams.EnsureDenials(ctx, env.JS, env.Layout, 0, 100<<20)
	require.NoError(t, err)
	require.Equal(t, int64(100<<20), s.CachedInfo().Config.MaxBytes)
}

// TestEnsureDenials_TooLittleStorageIsAnError: below MinDenialMaxBytes
// the default cap is not lowered further: the error says why.
func TestEnsureDenials_TooLittleStorageIsAnError(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithMaxStore(streams.MinDenialMaxBytes/2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := streams.EnsureDenials(ctx, env.JS, env.Layout, 0, 0)
	require.True(t, streams.IsStorageExceeded(err), "%v", err)
	_, err = env.JS.Stream(ctx, env.Layout.DenialStreamName())
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}

// TestEnsureDenials_ExistingCapIsNotCountedTwice: a restart finds the
// denial stream with its default cap on a server with room for it once
// but not twice. The server checks a create's cap against its storage
// before it looks for the stream, so the create is refused as if the cap
// were asked for again; the stream must be kept as it is, not refused and
// not lowered.
func TestEnsureDenials_ExistingCapIsNotCountedTwice(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.WithMaxStore(streams.DefaultDenialMaxBytes*3/2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		s, err := streams.EnsureDenials(ctx, env.JS, env.Layout, 0, 0)
		require.NoError(t, err, "ensure %d", i)
		require.Equal(t, int64(streams.DefaultDenialMaxBytes), s.CachedInfo().Config.MaxBytes, "ensure %d", i)
	}
}

// TestEnsureDenials_ClusterDefaultCapFits: the same on a 3-node cluster
// whose nodes each have less storage left than the default cap: the
// denial stream, replicated on all three, gets a cap that fits (the meta
// leader answers 10005 "insufficient storage", not 10047, and it is not
// retried as a cluster still forming is).
func TestEnsureDenials_ClusterDefaultCapFits(t *testing.T) {
	t.Parallel()
	c, err := testenv.StartCluster(testenv.ClusterConfig{Nodes: 3, Dir: t.TempDir(), Name: t.Name(), MaxStore: 300 << 20})
	require.NoError(t, err)
	t.Cleanup(c.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = streams.EnsureDenials(ctx, c.JS, c.Layout, 0, streams.DefaultDenialMaxBytes)
	require.True(t, streams.IsStorageExceeded(err), "%v", err)
	s, err := streams.EnsureDenials(ctx, c.JS, c.Layout, 0, 0)
	require.NoError(t, err)
	got := s.CachedInfo().Config.MaxBytes
	require.Less(t, got, int64(streams.DefaultDenialMaxBytes))
	require.Equal(t, 3, s.CachedInfo().Config.Replicas)
	s, err = streams.EnsureDenials(ctx, c.JS, c.Layout, 0, 0)
	require.NoError(t, err, "again, as a restart: the stream as it is")
	require.Equal(t, got, s.CachedInfo().Config.MaxBytes)
}

// TestIsStorageExceeded_ClusterReasons: a cluster's placement refusal is a
// storage refusal only when storage is all it names; one that also names a
// peer not heard from yet ("peer offline") or not known yet
// ("miscellaneous issue") may come from a cluster still forming and is
// retried as transient instead, so that a start never lowers a cap it did
// not have to.
func TestIsStorageExceeded_ClusterReasons(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code      jetstream.ErrorCode
		desc      string
		storage   bool
		transient bool
	}{
		{10047, "insufficient storage resources available", true, false},
		{10005, "no suitable peers for placement, insufficient storage", true, true},
		{10005, "no suitable peers for placement, peer offline, insufficient storage", false, true},
		{10005, "no suitable peers for placement, insufficient storage, miscellaneous issue", false, true},
		{10005, "no suitable peers for placement, peer offline", false, true},
		{10058, "stream name already in use with a different configuration", false, false},
	} {
		err := fmt.Errorf("streams: ensure: %w", &jetstream.APIError{ErrorCode: c.code, Description: c.desc})
		require.Equal(t, c.storage, streams.IsStorageExceeded(err), c.desc)
		require.Equal(t, c.transient, streams.IsTransient(err), c.desc)
	}
}
