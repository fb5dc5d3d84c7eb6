package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// TestSnapshot_UntrustedWriterRefusedVerifiedKept: what `spendgate
// snapshot` may write. A snapshot signed by a key the ledger does not
// trust to write now (one it never listed, or one retired before the
// stream's end) is one no replica loads: it is refused and nothing is
// written. A snapshot at a position whose stored snapshot verifies is
// kept, never written over; one that does not verify is replaced. How it
// can fail: without the writer check the retired key's snapshot is
// written (a new object at the new position); writing over the stored one
// changes its object's NUID; without the replacement a starting replica
// finds nothing to load at that position.
func TestSnapshot_UntrustedWriterRefusedVerifiedKept(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	s1, s2, s3 := newSigner(t), newSigner(t), newSigner(t)
	trust := func(keys ...signing.Key) ledger.Option { return ledger.WithTrust(trustOf(t, keys...)) }
	k1 := signing.Key{Public: s1.PublicKey()}
	opts := func(o ...ledger.Option) []ledger.Option {
		return append(append([]ledger.Option(nil), snapOpts...), o...)
	}

	w := startLedger(t, env, opts(ledger.WithSigner(s1), trust(k1, signing.Key{Public: s2.PublicKey(), Until: 1}))...)
	snapHistory(t, w, 61, 2, 20)
	first, err := w.Snapshot(ctx)
	require.NoError(t, err)
	require.False(t, first.Kept)
	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	require.NoError(t, err)
	stored, err := store.GetInfo(ctx, first.Name)
	require.NoError(t, err)

	again, err := w.Snapshot(ctx)
	require.NoError(t, err)
	require.True(t, again.Kept, "the same position again: the verified one is kept")
	require.Equal(t, first.Name, again.Name)
	now, err := store.GetInfo(ctx, first.Name)
	require.NoError(t, err)
	require.Equal(t, stored.NUID, now.NUID, "not written over")

	snapHistory(t, w, 62, 2, 10)
	for _, c := range []struct {
		name   string
		signer *signing.Signer
		want   string
	}{
		{"retired key", s2, "is retired after sequence 1"},
		{"key in no list", s3, "is not among"},
	} {
		l := startLedger(t, env, opts(ledger.WithSigner(c.signer), trust(k1, signing.Key{Public: s2.PublicKey(), Until: 1}))...)
		_, err := l.Snapshot(ctx)
		require.ErrorIs(t, err, ledger.ErrNotTrusted, c.name)
		require.ErrorContains(t, err, c.want, c.name)
		list, err := streams.ListObjects(ctx, env.JS, env.Layout.SnapshotBucket(), func(string) bool { return true })
		require.NoError(t, err)
		require.Len(t, list, 1, "%s: nothing written: %v", c.name, list)
	}

	// A stored snapshot that does not verify is replaced.
	second, err := w.Snapshot(ctx)
	require.NoError(t, err)
	_, err = store.PutBytes(ctx, second.Name, []byte("junk"))
	require.NoError(t, err)
	third, err := w.Snapshot(ctx)
	require.NoError(t, err)
	require.False(t, third.Kept)
	require.Equal(t, second.Name, third.Name)
	l := startLedger(t, env, opts(ledger.WithSigner(s1), trust(k1))...)
	require.Equal(t, second.Seq, l.SnapshotStats().Loaded)
}
