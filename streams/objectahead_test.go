package streams_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestReadObjectAhead: an object read ahead (a snapshot a replica decodes
// while it arrives) hands out its bytes as they arrive, in order, and all
// of them: Wait(n) returns at least n bytes (or all there are, with
// io.EOF), each a prefix of the object; All returns the object; a read
// closed part way stops, and a Wait after it returns, with an error rather
// than waiting for bytes that will not come. How it can fail: a Wait that
// returns fewer bytes than asked while the read goes on, bytes handed out
// before they were written, or a Close that leaves Wait blocked (the test
// would time out).
func TestReadObjectAhead(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := env.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "ahead"})
	require.NoError(t, err)
	data := make([]byte, 3<<20+12345) // 25 chunks and a part
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	_, err = store.PutBytes(ctx, "obj", data)
	require.NoError(t, err)

	o, err := streams.ReadObjectAhead(ctx, store, "obj")
	require.NoError(t, err)
	require.Equal(t, len(data), o.Size())
	for n := 1; n <= len(data); n += 400_000 {
		buf, err := o.Wait(n)
		require.GreaterOrEqual(t, len(buf), n)
		require.True(t, bytes.Equal(data[:len(buf)], buf), "the first %d bytes", len(buf))
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, buf, len(data))
		}
	}
	all, err := o.All()
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, all))
	o.Close()

	got, err := streams.ReadObject(ctx, store, "obj")
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))

	o, err = streams.ReadObjectAhead(ctx, store, "obj")
	require.NoError(t, err)
	o.Close()
	buf, err := o.Wait(len(data) + 1)
	require.Error(t, err)
	if len(buf) == len(data) {
		require.ErrorIs(t, err, io.EOF) // it had all arrived before the close
	} else {
		require.NotErrorIs(t, err, io.EOF)
		_, err = o.All()
		require.Error(t, err)
	}
}

// TestReadObjectAhead_NotCutAtTheDefaultTimeout: a whole object's read is
// bounded by its size (streams.ObjectMinRate), not by the JetStream
// context's default timeout: the object store bounds a read whose context
// has no deadline by that timeout, as a whole, so a snapshot that took
// longer than 5 s to arrive was always cut short and skipped. Here the
// default timeout is a millisecond, which reading 8 MB takes longer than.
// How we know it can fail: with the read's context stripped of its
// deadline (as openObject had it) this fails with "nats: timeout".
func TestReadObjectAhead_NotCutAtTheDefaultTimeout(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := env.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "slow"})
	require.NoError(t, err)
	data := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	_, err = store.PutBytes(ctx, "obj", data)
	require.NoError(t, err)

	js, err := jetstream.New(env.Connect(t), jetstream.WithDefaultTimeout(time.Millisecond))
	require.NoError(t, err)
	short, err := js.ObjectStore(ctx, "slow")
	require.NoError(t, err)
	got, err := streams.ReadObject(ctx, short, "obj")
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
}
