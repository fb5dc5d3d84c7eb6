package ledger_test

import (
	"context"
	"math"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

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
// directly to the bucket's meta subject, claims 2^64-1 bytes. A starting
// replica skips it (counted) and loads the real one below; the audit names
// it and goes on. How it can fail: ReadObjectAhead sized its buffer from the
// meta before anything was checked, and make panicked with a negative
// capacity: the replica (and the audit) crashed at start.
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
	forgeSnapshotMeta(t, env, forged, "NOSUCHCHUNKS", math.MaxUint64)

	l := startLedger(t, env, snapOpts...)
	require.Equal(t, info.Seq, l.SnapshotStats().Loaded, "the real snapshot below the forged one")
	require.EqualValues(t, 1, l.SnapshotStats().Skipped)
	got, _ := bookOf(t, l)
	require.Equal(t, withoutQueues(want), withoutQueues(got)) // see TestSnapshot_TailEqualsWholeFold

	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.Contains(t, rep.String(), "snapshot "+forged+": unreadable")
}
