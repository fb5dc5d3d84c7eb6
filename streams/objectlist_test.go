package streams_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestListObjects: the objects of a bucket are listed by the name their
// meta's subject encodes, with their size and NUID, deleted ones left out,
// only those keep accepts; an empty bucket lists none and a missing one is
// ErrBucketNotFound; no listing leaves its consumer behind. How it can
// fail: a lister that waits for a meta that never comes (an empty bucket)
// times out; one that lists deletions or names keep refuses fails the
// comparison; without the delete, each listing's ordered consumer stayed
// on the server for 5 minutes (a replica writing snapshots every second
// reached the server's consumer limit).
func TestListObjects(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := streams.ListObjects(ctx, env.JS, "nobucket", nil)
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound)
	store, err := env.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "list"})
	require.NoError(t, err)
	got, err := streams.ListObjects(ctx, env.JS, "list", nil)
	require.NoError(t, err)
	require.Empty(t, got)

	want := map[string]uint64{}
	for i := range 5 {
		name := fmt.Sprintf("obj-%d", i)
		info, err := store.PutString(ctx, name, strings.Repeat("x", i*100_000))
		require.NoError(t, err)
		want[name] = info.Size
	}
	_, err = store.PutString(ctx, "other", "x")
	require.NoError(t, err)
	require.NoError(t, store.Delete(ctx, "obj-1"))
	delete(want, "obj-1")
	got, err = streams.ListObjects(ctx, env.JS, "list", func(name string) bool { return strings.HasPrefix(name, "obj-") })
	require.NoError(t, err)
	have := map[string]uint64{}
	for _, o := range got {
		info, err := store.GetInfo(ctx, o.Name)
		require.NoError(t, err)
		require.Equal(t, info.NUID, o.NUID)
		require.False(t, o.ModTime.IsZero())
		have[o.Name] = o.Size
	}
	require.Equal(t, want, have)

	// The listing's consumers do not outlive it.
	for range 20 {
		_, err = streams.ListObjects(ctx, env.JS, "list", nil)
		require.NoError(t, err)
	}
	s, err := env.JS.Stream(ctx, "OBJ_list")
	require.NoError(t, err)
	testenv.WaitFor(t, 5*time.Second, "no consumer left", func() bool {
		info, err := s.Info(ctx)
		require.NoError(t, err)
		return info.State.Consumers == 0
	})
}

// TestListObjects_FatMetas: metas written straight to the bucket's meta
// subject by a login that may write it, each near the server's max payload
// of metadata under a snapshot name, are listed without keeping what they
// carry: ObjectStore.List retained several times their size on the heap
// (15 MB of them, over 100 MB), so that a GB of them would take a starting
// replica's, or the audit's, whole memory. How it can fail: a ListObjects
// that decoded each meta whole (as List does) holds as much; the test
// measures both (the full suite once failed a bound of twice the metas'
// size for ListObjects, set too tight for the buffers of the client and
// server in this process). Not parallel: it reads the heap's size.
func TestListObjects_FatMetas(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := env.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "fat"})
	require.NoError(t, err)
	md := map[string]string{}
	for i := 0; len(md)*12 < 900_000; i++ {
		md[fmt.Sprintf("%x", i)] = ""
	}
	const metas = 10
	for i := range metas {
		testenv.ForgeObjectMeta(t, env.JS, "fat", jetstream.ObjectInfo{
			ObjectMeta: jetstream.ObjectMeta{Name: streams.SnapshotName(uint64(i + 1)), Metadata: md},
			NUID:       "NOCHUNKS", Size: 1, Chunks: 1,
		})
	}
	md = nil
	// What a listing's result holds: the heap with it, less the heap once
	// it is dropped (the server's block cache, in this process, is in both).
	held := func(list func() any) uint64 {
		res := list()
		var with, without runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&with)
		runtime.KeepAlive(res)
		runtime.GC()
		runtime.ReadMemStats(&without)
		return max(with.HeapAlloc, without.HeapAlloc) - without.HeapAlloc
	}
	byList := held(func() any {
		all, err := store.List(ctx)
		require.NoError(t, err)
		require.Len(t, all, metas)
		return all
	})
	listObjects := func() any {
		some, err := streams.ListObjects(ctx, env.JS, "fat", func(name string) bool {
			_, ok := streams.SnapshotSeq(name)
			return ok
		})
		require.NoError(t, err)
		require.Len(t, some, metas)
		return some
	}
	held(listObjects) // the client's buffers grow to the metas' size once
	byListObjects := held(listObjects)
	st, err := store.Status(ctx)
	require.NoError(t, err)
	stored := st.Size()
	t.Logf("metas of %d MB held: by List's result %d MB, by ListObjects' %d KB", stored>>20, byList>>20, byListObjects>>10)
	require.Greater(t, byList, 5*stored, "the hazard: List keeps every meta whole")
	// The client's and the server's buffers, in this process, come and go
	// with the messages: as much again as the metas, not several times.
	require.Less(t, byListObjects, 3*stored)
}
