package ledger_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// forgeSnapshotLink publishes, as forgeSnapshotMeta, the meta of a
// snapshot object named name that links to itself.
func forgeSnapshotLink(t *testing.T, env *testenv.Env, name string) {
	bucket := env.Layout.SnapshotBucket()
	testenv.ForgeObjectMeta(t, env.JS, bucket, jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{Link: &jetstream.ObjectLink{Bucket: bucket, Name: name}}},
		NUID:       "SELF",
	})
}

// forgeSnapshotMeta publishes, as a login that may write the snapshot
// bucket could, the meta of a snapshot object named name claiming size
// bytes in chunks under nuid (none unless the caller publishes some).
func forgeSnapshotMeta(t *testing.T, env *testenv.Env, name, nuid string, size uint64) {
	testenv.ForgeObjectMeta(t, env.JS, env.Layout.SnapshotBucket(), jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name},
		NUID:       nuid, Size: size, Chunks: 1, Digest: "SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=",
	})
}

// TestSnapshot_ForgedSizeSkipped: the newest snapshot object's meta, written
// directly to the bucket's meta subject, claims 2^64-1 bytes (of which it
// has a chunk); the next two name chunks the bucket does not hold, and
// every object's chunks (NUID ">"); the next links to itself. A starting
// replica skips the four (counted), without waiting for chunks or
// following the link, and loads the real one below; the audit names the
// four and checks the real one. How it can fail: ReadObjectAhead sized its
// buffer from the meta before anything was checked, and make panicked with
// a negative capacity: the replica (and the audit) crashed at start;
// without the check that the
// bucket holds a chunk under the meta's NUID, each meta without chunks took
// 5 s to fail (the object store's read timeout, "nats: timeout" logged);
// the audit checked none (the newest, unreadable, was its snapshot); the
// object store's Get followed the self-link until its 5 s timeout.
func TestSnapshot_ForgedSizeSkipped(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	w := startLedger(t, env, snapOpts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	snapHistory(t, w, 50, 2, 20)
	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	snapHistory(t, w, 51, 2, 20)
	want, last := bookOf(t, w)
	forged := streams.SnapshotName(last)
	forgeSnapshotMeta(t, env, forged, "LIARCHUNKS", math.MaxUint64)
	testenv.ForgeObjectChunk(t, env.JS, env.Layout.SnapshotBucket(), "LIARCHUNKS", []byte("a chunk\n"))
	forgeSnapshotMeta(t, env, streams.SnapshotName(last-1), "NOSUCHCHUNKS", 1000)
	forgeSnapshotMeta(t, env, streams.SnapshotName(last-2), ">", info.Size)
	forgeSnapshotLink(t, env, streams.SnapshotName(last-3))

	var logs testenv.LogBuffer
	l := startLedger(t, env, append(snapOpts, ledger.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	require.Equal(t, info.Seq, l.SnapshotStats().Loaded, "the real snapshot below the forged ones")
	require.EqualValues(t, 4, l.SnapshotStats().Skipped)
	require.NotContains(t, logs.String(), "nats: timeout", "metas without chunks skipped without waiting for them")
	require.NotContains(t, logs.String(), "deadline exceeded", "a link skipped without following it")
	got, _ := bookOf(t, l)
	require.Equal(t, withoutQueues(want), withoutQueues(got)) // see TestSnapshot_TailEqualsWholeFold

	// The audit names each and checks the real snapshot below them, as
	// quickly.
	start := time.Now()
	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.Contains(t, rep.String(), "snapshot "+forged+": unreadable")
	require.Contains(t, rep.String(), "snapshot "+streams.SnapshotName(last-1)+": its meta names chunks")
	require.Contains(t, rep.String(), "snapshot "+streams.SnapshotName(last-2)+": its meta names chunks")
	require.Contains(t, rep.String(), "snapshot "+streams.SnapshotName(last-3)+": its meta links")
	require.Equal(t, info.Name, rep.Snapshot.Name)
	require.True(t, rep.Snapshot.Verified, rep.String())
	require.Less(t, time.Since(start), 5*time.Second, "no read waited for chunks")
}

// TestSnapshot_ForgedManyBounded: a login that may write the snapshot
// bucket writes ledger.SnapshotTries objects under snapshot names between
// the real snapshot and the stream's end. A starting replica reads that
// many, skips each, and folds the whole stream rather than reading on:
// each such object can take 5 s to fail (chunks that never come, the
// object store's read timeout), and there may be any number of them. With
// one fewer, it reaches the real one. How it can fail: without the bound
// the replica read every one (Loaded is the real snapshot's sequence and
// Skipped one more), so 1,000 such objects held its start for over an
// hour.
func TestSnapshot_ForgedManyBounded(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	w := startLedger(t, env, snapOpts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	snapHistory(t, w, 52, 2, 20)
	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	snapHistory(t, w, 53, 2, 20)
	want, last := bookOf(t, w)
	require.Greater(t, last, info.Seq+ledger.SnapshotTries)
	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	require.NoError(t, err)
	for i := range uint64(ledger.SnapshotTries) {
		_, err := store.PutBytes(ctx, streams.SnapshotName(last-i), []byte("not a snapshot\n"))
		require.NoError(t, err)
	}

	l := startLedger(t, env, snapOpts...)
	require.Zero(t, l.SnapshotStats().Loaded, "the whole stream")
	require.EqualValues(t, ledger.SnapshotTries, l.SnapshotStats().Skipped)
	got, _ := bookOf(t, l)
	require.Equal(t, withoutQueues(want), withoutQueues(got))

	require.NoError(t, store.Delete(ctx, streams.SnapshotName(last)))
	l = startLedger(t, env, snapOpts...)
	require.Equal(t, info.Seq, l.SnapshotStats().Loaded)
	require.EqualValues(t, ledger.SnapshotTries-1, l.SnapshotStats().Skipped)
}

// TestSnapshot_ForgedBodyNotDecodedBeforeSignature: with signatures
// checked, a snapshot object written by a login that may write the bucket,
// whose header is signed by no key the replica trusts, is skipped for its
// signature before its body is decoded: decoding JSON allocates many times
// its size ("{}," is a reservation of about 200 bytes), so an untrusted
// body of tens of MB could make a starting replica allocate gigabytes. The
// forged body here is not even JSON, so the reason logged says which check
// ran first. How it can fail: when the body was decoded before the header
// was checked, the skip's reason was the body's JSON error ("body: ...").
func TestSnapshot_ForgedBodyNotDecodedBeforeSignature(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	k1, other := newSigner(t), newSigner(t)
	trust := trustOf(t, signing.Key{Public: k1.PublicKey()})
	signed := append([]ledger.Option{ledger.WithSigner(k1), ledger.WithTrust(trust)}, snapOpts...)
	w := startLedger(t, env, signed...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	snapHistory(t, w, 54, 2, 10)
	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	snapHistory(t, w, 55, 2, 10)
	_, last := bookOf(t, w)

	body := []byte(`{"version":5,"seq":` + strconv.FormatUint(last, 10) + `,"reservations":[` + strings.Repeat("{},", 100_000) + "\n")
	sum := sha256.Sum256(body)
	header, err := json.Marshal(map[string]any{"format": ledger.SnapshotFormat, "version": 5, "seq": last, "size": len(body),
		"sha256": hex.EncodeToString(sum[:]), "signer": other.PublicKey(), "sig": "AAAA"})
	require.NoError(t, err)
	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	require.NoError(t, err)
	_, err = store.PutBytes(ctx, streams.SnapshotName(last), append(append(header, '\n'), body...))
	require.NoError(t, err)

	var logs testenv.LogBuffer
	l := startLedger(t, env, append(signed, ledger.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	require.Equal(t, info.Seq, l.SnapshotStats().Loaded)
	require.EqualValues(t, 1, l.SnapshotStats().Skipped)
	require.Contains(t, logs.String(), "does not verify")
	require.NotContains(t, logs.String(), "body:")
}

// TestSnapshot_ForgedMetasPruned: a login that may write the snapshot
// bucket publishes three metas under snapshot names: one naming chunks that
// do not exist, a copy of a real snapshot's meta (its chunks) under a name
// past the stream's end, and one naming every object's chunks (NUID ">").
// A replica writing snapshots deletes all three when it prunes, and every
// real snapshot stays readable. How it can fail: the pruner left
// the meta without chunks alone (its header read timed out after 5 s, at
// every pruning, forever), and deleted the other two with the object
// store's Delete, which purges the chunks their meta names: the real
// snapshot's, then every object's (the reads below fail).
func TestSnapshot_ForgedMetasPruned(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	p := startLedger(t, env, ledger.WithSnapshotEvery(1, time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	bucket := env.Layout.SnapshotBucket()
	written := snapshotWritten(ctx, t, p)
	first := written(56)
	store, err := env.JS.ObjectStore(ctx, bucket)
	require.NoError(t, err)
	real, err := store.GetInfo(ctx, streams.SnapshotName(first))
	require.NoError(t, err)

	noChunks, copied, wild := streams.SnapshotName(first-1), streams.SnapshotName(first+1000), streams.SnapshotName(first-2)
	forgeSnapshotMeta(t, env, noChunks, "NOSUCHCHUNKS", 1000)
	cp := *real
	cp.Name = copied
	testenv.ForgeObjectMeta(t, env.JS, bucket, cp)
	forgeSnapshotMeta(t, env, wild, ">", real.Size)
	link := streams.SnapshotName(first - 3)
	forgeSnapshotLink(t, env, link)

	second := written(57)
	forged := []string{noChunks, copied, wild, link}
	deleted := func() bool {
		list, err := ledger.ListSnapshots(ctx, env.JS, env.Layout)
		require.NoError(t, err)
		for _, s := range list {
			if slices.Contains(forged, s.Name) {
				return false
			}
		}
		return true
	}
	// Each snapshot's pruning deletes what it can read as junk; a header
	// whose read times out (a loaded machine) is left for the next one,
	// so a few more snapshots may be needed, never more than a few.
	for round := 0; ; round++ {
		if testenv.Within(5*time.Second, deleted) {
			break
		}
		require.Less(t, round, 4, "the forged metas are still listed after %d more snapshots", round)
		written(58 + uint64(round))
	}
	for _, seq := range []uint64{first, second} {
		_, err := streams.ReadObject(ctx, store, streams.SnapshotName(seq))
		require.NoError(t, err, "snapshot %d", seq)
	}
}

// TestSnapshot_UnfinishedSnapshotChunksPurged: the chunks a snapshot
// writer left when it was killed between its chunks and its meta (tens
// of MB each, named by no meta) are purged by the next snapshot's
// pruning; the snapshots themselves stay readable. How we know it can
// fail: before, pruning looked only at metas, and such chunks stayed in
// the bucket for good.
func TestSnapshot_UnfinishedSnapshotChunksPurged(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	p := startLedger(t, env, ledger.WithSnapshotEvery(1, time.Second), ledger.WithOrphanChunkAge(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	bucket := env.Layout.SnapshotBucket()
	written := snapshotWritten(ctx, t, p)
	written(61)
	for range 4 {
		_, err := env.JS.Publish(ctx, "$O."+bucket+".C.KILLEDWRITER", make([]byte, 128<<10))
		require.NoError(t, err)
	}
	orphan := func() bool {
		has, err := streams.ObjectHasChunks(ctx, env.JS, bucket, "KILLEDWRITER")
		require.NoError(t, err)
		return has
	}
	// The periodic snapshot's pruning may take it before any round.
	for round := 0; orphan(); round++ {
		require.Less(t, round, 4, "the unfinished snapshot's chunks are still there after %d more snapshots", round)
		written(62 + uint64(round))
	}
	// Every snapshot listed is whole: pruning took no live object's chunks.
	store, err := env.JS.ObjectStore(ctx, bucket)
	require.NoError(t, err)
	list, err := ledger.ListSnapshots(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.NotEmpty(t, list)
	for _, s := range list {
		_, err := streams.ReadObject(ctx, store, s.Name)
		require.NoError(t, err, s.Name)
	}
}

// snapshotWritten returns a func that writes a history from seed through
// p and waits (bounded) until p's periodic snapshot reaches the stream's
// end, and returns that sequence.
func snapshotWritten(ctx context.Context, t *testing.T, p *ledger.Ledger) func(seed uint64) uint64 {
	return func(seed uint64) uint64 {
		t.Helper()
		snapHistory(t, p, seed, 2, 10)
		require.NoError(t, p.Sync(ctx))
		_, last := bookOf(t, p)
		testenv.WaitFor(t, watchdog, "a periodic snapshot at the stream's end", func() bool {
			return p.SnapshotStats().Written == last
		})
		return last
	}
}
