package streams_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// compressedMagic starts a message block file that nats-server stored
// compressed: "cmp" and the algorithm byte (1 is S2).
var compressedMagic = []byte{'c', 'm', 'p', byte(jetstream.S2Compression)}

// blocks returns the ledger stream's message block files in dir, in block
// order, and which of them are stored S2-compressed.
func blocks(t *testing.T, dir, stream string) (names []string, compressed map[string]bool) {
	t.Helper()
	compressed = map[string]bool{}
	matches, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", stream, "msgs", "*.blk"))
	require.NoError(t, err)
	for _, m := range matches {
		f, err := os.Open(m)
		require.NoError(t, err)
		head := make([]byte, len(compressedMagic))
		n, _ := f.Read(head)
		f.Close()
		compressed[filepath.Base(m)] = n == len(head) && bytes.Equal(head, compressedMagic)
		names = append(names, filepath.Base(m))
	}
	sort.Slice(names, func(i, j int) bool {
		var a, b int
		fmt.Sscanf(names[i], "%d.blk", &a)
		fmt.Sscanf(names[j], "%d.blk", &b)
		return a < b
	})
	return names, compressed
}

// TestEnsure_UncompressesS2Stream: a ledger stream that an older build
// created S2-compressed is updated by Ensure to no compression, which
// nats-server 2.15.2 allows. The blocks the server compressed before stay
// compressed and readable; after the server's restart (compression is
// read when the store opens) every block it seals is written uncompressed;
// every message written before and after reads back. It fails if Ensure
// left S2 on, if the server refused the update, or if the old compressed
// blocks could no longer be read.
func TestEnsure_UncompressesS2Stream(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := env.Layout.StreamName()
	cfg := env.Layout.StreamConfig()
	require.Equal(t, jetstream.NoCompression, cfg.Compression, "the default")
	require.NoError(t, env.JS.DeleteStream(ctx, name))
	cfg.Compression = jetstream.S2Compression // what earlier builds created
	// The create right after the delete was once refused "error creating
	// store for stream" (10049) under load, the old store still being
	// removed: retry that refusal alone, for at most 10 s.
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = env.JS.CreateStream(ctx, cfg)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != 10049 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err)

	// Compressible messages, 1 KiB each, until the server has sealed and
	// compressed a block (4 MiB blocks for this stream).
	body := []byte(strings.Repeat("spendgate ledger revision ", 40))[:1024]
	written := 0
	// 500 at a time, published asynchronously and every ack checked: one
	// at a time, each waiting for its ack, the ~16,000 writes were two
	// thirds of the test's CPU (a round trip and its syscalls each).
	write := func(until func() bool) {
		for !until() {
			acks := make([]jetstream.PubAckFuture, 0, 500)
			for i := 0; i < 500; i++ {
				written++
				f, err := env.JS.PublishAsync(env.Layout.Subject(fmt.Sprintf("test.k%d", written)), append([]byte(fmt.Sprint(written, ":")), body...))
				require.NoError(t, err)
				acks = append(acks, f)
			}
			for _, f := range acks {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					require.NoError(t, err)
				case <-ctx.Done():
					t.Fatal("no ack in time")
				}
			}
			require.Less(t, written, 100_000, "no block sealed")
		}
	}
	dir := env.StoreDir
	anyCompressed := func() bool {
		_, c := blocks(t, dir, name)
		for _, v := range c {
			if v {
				return true
			}
		}
		return false
	}
	write(func() bool { names, _ := blocks(t, dir, name); return len(names) >= 2 })
	testenv.WaitFor(t, 30*time.Second, "the sealed block compressed", anyCompressed)
	before, _ := blocks(t, dir, name)

	s, err := streams.Ensure(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.Equal(t, jetstream.NoCompression, s.CachedInfo().Config.Compression)
	env.Restart(t)
	info, err := env.JS.Stream(ctx, name)
	require.NoError(t, err)
	require.Equal(t, jetstream.NoCompression, info.CachedInfo().Config.Compression)

	// Seal at least one more block after the restart.
	write(func() bool { names, _ := blocks(t, dir, name); return len(names) >= len(before)+2 })
	after, compressed := blocks(t, dir, name)
	require.True(t, compressed[before[0]], "the block compressed before the update stays compressed")
	for _, b := range after[len(before):] {
		require.False(t, compressed[b], "block %s written after the update and the restart is compressed", b)
	}
	// Nothing lost, and the compressed block reads back (the last block
	// before the update was still open, so it need not be compressed).
	si, err := info.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(written), si.State.Msgs)
	for _, seq := range []uint64{1, 2, uint64(written) / 3, uint64(written)} {
		m, err := info.GetMsg(ctx, seq)
		require.NoError(t, err, "seq %d", seq)
		require.True(t, bytes.HasPrefix(m.Data, []byte(fmt.Sprint(seq, ":"))), "seq %d", seq)
	}
	cons, err := env.JS.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	read := 0
	for read < written {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			read++
			meta, err := m.Metadata()
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(m.Data(), []byte(fmt.Sprint(meta.Sequence.Stream, ":"))))
		}
		require.NoError(t, batch.Error())
		require.Positive(t, n, "the stream ends early, at %d of %d", read, written)
	}
	require.Equal(t, written, read)
}

// TestEnsure_CompressedRefused: an identity that may not update the ledger
// stream (the replicas' role) meets an S2 stream of an older build: Ensure
// fails with ErrCompressed, which says what to do, and leaves the stream
// as it was. An identity that may update it then fixes it.
func TestEnsure_CompressedRefused(t *testing.T) {
	t.Parallel()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "replica", Password: "replica", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.UPDATE.>"}}}},
		}}
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))
	connect := func(user string) jetstream.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, user))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return js
	}
	admin, replica := connect("admin"), connect("replica")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := streams.Default()
	cfg := l.StreamConfig()
	cfg.Compression = jetstream.S2Compression
	_, err = admin.CreateStream(ctx, cfg)
	require.NoError(t, err)

	// The denied update is never answered: bound the retries.
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	_, err = streams.Ensure(short, replica, l)
	cancelShort()
	require.ErrorIs(t, err, streams.ErrCompressed)
	require.Contains(t, err.Error(), "S2-compressed")
	s, err := admin.Stream(ctx, l.StreamName())
	require.NoError(t, err)
	require.Equal(t, jetstream.S2Compression, s.CachedInfo().Config.Compression, "unchanged")

	_, err = streams.Ensure(ctx, admin, l)
	require.NoError(t, err)
	_, err = streams.Ensure(ctx, replica, l)
	require.NoError(t, err, "nothing left to update")
}
