package streams_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestReadObjectAhead_MetaSizeLies: an object whose meta (which anyone who
// may write the bucket can publish) claims more bytes than the bucket holds
// is refused with ErrObjectTooLarge before its buffer is sized, by
// ReadObjectAhead, ReadObject and so every snapshot reader. How it can
// fail: without the check, a size past math.MaxInt64 made
// make([]byte, 0, int(size)) panic with a negative capacity (this test
// crashed: "makeslice: cap out of range"), and one of a few TB tried to
// allocate them.
func TestReadObjectAhead_MetaSizeLies(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := env.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "lies"})
	require.NoError(t, err)
	_, err = store.PutBytes(ctx, "honest", []byte("an honest object\n"))
	require.NoError(t, err)

	for _, size := range []uint64{math.MaxUint64, math.MaxInt64 + 1, 1 << 62, 4 << 40} {
		testenv.ForgeObjectMeta(t, env.JS, "lies", jetstream.ObjectInfo{
			ObjectMeta: jetstream.ObjectMeta{Name: "liar"},
			NUID:       "NOCHUNKS", Size: size, Chunks: 1, Digest: "SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=",
		})
		_, err := streams.ReadObjectAhead(ctx, store, "liar")
		require.ErrorIs(t, err, streams.ErrObjectTooLarge, "size %d", size)
		_, err = streams.ReadObject(ctx, store, "liar")
		require.ErrorIs(t, err, streams.ErrObjectTooLarge, "size %d", size)
	}
	got, err := streams.ReadObject(ctx, store, "honest")
	require.NoError(t, err)
	require.Equal(t, "an honest object\n", string(got))
}
