package streams_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestPurgeOrphanChunks: chunks no live object names (an object whose
// writer died between its chunks and its meta) are purged once their
// newest chunk is older than the age given, and only those: the objects
// listed keep theirs, and a young orphan (a write still under way) is
// left. How it can fail: without it nothing ever deleted such chunks; a
// purge that did not check the live objects or the age fails the reads
// or the young orphan's check below.
func TestPurgeOrphanChunks(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bucket = "orphans"
	store, err := env.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket})
	require.NoError(t, err)
	body := bytes.Repeat([]byte("x"), 300<<10) // several chunks
	for _, name := range []string{"a", "b"} {
		_, err := store.PutBytes(ctx, name, body)
		require.NoError(t, err)
	}
	// A writer killed mid-object: chunks under a NUID no meta names.
	for range 3 {
		_, err := env.JS.Publish(ctx, "$O."+bucket+".C.DEADWRITER", bytes.Repeat([]byte("y"), 1024))
		require.NoError(t, err)
	}
	live := map[string]bool{}
	objs, err := streams.ListObjects(ctx, env.JS, bucket, nil)
	require.NoError(t, err)
	require.Len(t, objs, 2)
	for _, o := range objs {
		live[o.NUID] = true
	}

	n, err := streams.PurgeOrphanChunks(ctx, env.JS, bucket, live, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n, "an orphan younger than the age may be a write under way")
	has, err := streams.ObjectHasChunks(ctx, env.JS, bucket, "DEADWRITER")
	require.NoError(t, err)
	require.True(t, has)

	testenv.WaitFor(t, 10*time.Second, "the orphan's chunks are older than 50ms", func() bool {
		n, err = streams.PurgeOrphanChunks(ctx, env.JS, bucket, live, 50*time.Millisecond)
		require.NoError(t, err)
		return n == 1
	})
	has, err = streams.ObjectHasChunks(ctx, env.JS, bucket, "DEADWRITER")
	require.NoError(t, err)
	require.False(t, has, "purged")
	for _, name := range []string{"a", "b"} {
		got, err := store.GetBytes(ctx, name)
		require.NoError(t, err, name)
		require.Equal(t, body, got, name)
	}
	n, err = streams.PurgeOrphanChunks(ctx, env.JS, bucket, live, 0)
	require.NoError(t, err)
	require.Zero(t, n, "live objects' chunks are never orphans")
}
