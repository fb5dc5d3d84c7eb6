package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/settle"
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

// TestAudit_SnapshotComparedAtItsOwnTime: a quiet spell longer than the
// audit's window between a snapshot and the next revision. The snapshot
// holds the book as of its own sequence, the idempotency window's closed
// reservations included; the audit compares its replay with it there.
// How it can fail: the audit moved its replay's window to the next
// revision's time before comparing, forgot the reservation the snapshot
// still holds, and reported "reservation ... is not in the replay" on a
// healthy ledger (after every quiet night, until a newer snapshot).
func TestAudit_SnapshotComparedAtItsOwnTime(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	env := snapLayout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*watchdog)
	defer cancel()
	const retention, window, quiet = time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond
	l := startLedger(t, env, ledger.WithRetention(retention, retention), ledger.WithSnapshotEvery(0, 0))
	_, err := l.PutBudget(ctx, events.BudgetRef{Scope: "org:quiet", Period: events.PeriodMonth}, events.MustMoney("10"), "USD", time.Now())
	require.NoError(t, err)
	a, err := admit.New(l)
	require.NoError(t, err)
	s, err := settle.New(l)
	require.NoError(t, err)
	rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: "quiet-1", Scopes: []string{"org:quiet"}, Amount: "1"})
	require.NoError(t, err)
	_, err = s.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "0.5"})
	require.NoError(t, err)
	snap, err := l.Snapshot(ctx)
	require.NoError(t, err)
	// The quiet spell is what is tested: the server's clock, which stamps
	// the next revision, must move past the audit's window.
	time.Sleep(quiet)
	_, err = a.Admit(ctx, events.AdmitRequest{RequestID: "quiet-2", Scopes: []string{"org:quiet"}, Amount: "1"})
	require.NoError(t, err)
	check, err := projector.Check(ctx, env.JS, env.Layout, projector.WithWindow(window, window))
	require.NoError(t, err)
	require.Equal(t, snap.Seq, check.Snapshot.Seq)
	require.True(t, check.Snapshot.Verified, check.String())
	require.True(t, check.OK(), check.String())
}
