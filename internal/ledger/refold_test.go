package ledger_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkRefold is how fast a replica hands out again what its fold
// passed (Ledger.Refold: each message read from the stream's leader, then
// the gate's decode): the pace at which a feed relay gets back the
// events it dropped, against the pace at which the ledger writes new
// ones, against reading each message through the stream's leader.
// revisions/s counts lane revisions of one reservation each.
//
//	go test -run '^$' -bench BenchmarkRefold -benchtime 5x ./internal/ledger/
func BenchmarkRefold(b *testing.B) {
	env := testenv.New(b)
	l := startLedger(b, env)
	ctx := context.Background()
	_, err := l.PutBudget(ctx, bal.Budget(), events.MustMoney("1000000"), "USD", t0)
	require.NoError(b, err)
	const n = 2000
	for i := range n {
		require.NoError(b, l.Submit(ctx, &openTx{id: "r" + strconv.Itoa(i), amount: events.MustMoney("1")}))
	}
	require.NoError(b, l.Sync(ctx))
	last := uint64(n + 1)
	b.Run("refold", func(b *testing.B) {
		got := 0
		for range b.N {
			next := uint64(1)
			for next <= last {
				revs, nx, err := l.Refold(ctx, next, last, 256)
				require.NoError(b, err)
				got += len(revs)
				next = nx
			}
		}
		require.Equal(b, b.N*int(last), got, "every revision handed out again")
		b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "revisions/s")
	})
	// The baseline: one read through the leader per message.
	b.Run("leader-reads", func(b *testing.B) {
		got := 0
		for range b.N {
			k, err := ledger.LeaderReads(ctx, l, 1, last)
			require.NoError(b, err)
			got += k
		}
		require.Equal(b, b.N*int(last), got)
		b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "revisions/s")
	})
}

// A revision the fold passed is handed out again after the ledger's
// trust changed: the fold checks each revision against the trust state of
// its place in the stream, so a key distrusted later leaves its earlier
// revisions in the book, and a reader that gets them back (a feed relay's
// dropped events) must get them too, or the feed lacks what the book
// holds. How we know it can fail: Refold checked each message again
// against the trust as it stands now and left out every revision of the
// distrusted key ("refused on a second read").
func TestRefold_KeyDistrustedLaterStillHandsOutItsRevisions(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	k1, k2 := newSigner(t), newSigner(t)
	both := trustOf(t, signing.Key{Public: k1.PublicKey()}, signing.Key{Public: k2.PublicKey()})
	a := startLedger(t, env, ledger.WithSigner(k1), ledger.WithTrust(both))
	b := startLedger(t, env, ledger.WithSigner(k2), ledger.WithTrust(both))
	_, err := a.PutBudget(ctx, bal.Budget(), events.MustMoney("1000"), "USD", t0)
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))
	for i := range 5 {
		require.NoError(t, b.Submit(ctx, &openTx{id: "b" + strconv.Itoa(i), amount: events.MustMoney("1")}))
		require.NoError(t, a.Submit(ctx, &openTx{id: "a" + strconv.Itoa(i), amount: events.MustMoney("1")}))
	}
	require.NoError(t, a.Sync(ctx))
	last := a.Applied()
	all := func(refold func(context.Context, uint64, uint64, int) ([]*gate.Revision, uint64, error)) (n, byK2 int) {
		t.Helper()
		for next := uint64(1); next <= last; {
			revs, nx, err := refold(ctx, next, last, 64)
			require.NoError(t, err)
			for _, r := range revs {
				n++
				if r.Signer == k2.PublicKey() {
					byK2++
				}
			}
			next = nx
		}
		return n, byK2
	}
	before, beforeK2 := all(a.Refold)
	require.GreaterOrEqual(t, beforeK2, 5, "b's revisions, signed by k2")

	// k2 is distrusted from now on: the ledger's trust revision says so.
	distrustK2, err := trustOf(t, signing.Key{Public: k1.PublicKey()}).WithDistrusted(k2.PublicKey())
	require.NoError(t, err)
	a.SetTrust(distrustK2)
	wrote, err := a.PublishTrust(ctx, distrustK2, t0)
	require.NoError(t, err)
	require.True(t, wrote)
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, b.Sync(ctx))
	require.ErrorIs(t, b.Submit(ctx, &openTx{id: "b-after", amount: events.MustMoney("1")}), ledger.ErrNotTrusted,
		"k2 writes nothing once distrusted")

	for name, refold := range map[string]func(context.Context, uint64, uint64, int) ([]*gate.Revision, uint64, error){
		"Refold": a.Refold, "RefoldPassed": a.RefoldPassed,
	} {
		n, byK2 := all(refold)
		require.Equal(t, before, n, "%s: every revision the fold passed up to %d", name, last)
		require.Equal(t, beforeK2, byK2, "%s: k2's revisions from before its distrust", name)
	}
}

// A write a replica decided before it folded the trust revision that
// distrusts its key, and that lands after it, is skipped by every replica:
// the writer either answers its Txs ledger_unavailable and skips the write
// itself (it folded the trust revision first), or, if it had folded its
// own write from memory first, its follower stops
// (ErrOwnWriteRefused) rather than serve a book the others do not hold.
// The publish hook lands the trust revision between the writer's decision
// and its write, the window writable cannot close. How we know it can
// fail: the writer answered the Tx done and kept the reservation in its
// book while the other replica's book skipped it, and kept serving.
func TestLedger_WriteLandingAfterItsKeyIsDistrustedIsNotHeld(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k1, k2 := newSigner(t), newSigner(t)
	both := trustOf(t, signing.Key{Public: k1.PublicKey()}, signing.Key{Public: k2.PublicKey()})
	a := startLedger(t, env, ledger.WithSigner(k1), ledger.WithTrust(both))
	_, err := a.PutBudget(ctx, bal.Budget(), events.MustMoney("1000"), "USD", t0)
	require.NoError(t, err)

	distrustK2, err := trustOf(t, signing.Key{Public: k1.PublicKey()}).WithDistrusted(k2.PublicKey())
	require.NoError(t, err)
	var once sync.Once
	hook := ledger.PublishHookForTesting(func(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error) {
		once.Do(func() {
			wrote, err := a.PublishTrust(ctx, distrustK2, t0)
			require.NoError(t, err)
			require.True(t, wrote)
		})
		return send(ctx, m)
	})
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	b, err := ledger.New(ctx, nc, js, env.Layout, ledger.WithSigner(k2), ledger.WithTrust(both), hook)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- b.Run(runCtx) }()
	select {
	case <-b.Ready():
	case <-ctx.Done():
		t.Fatal("b not ready")
	}

	submitErr := b.Submit(ctx, &openTx{id: "b-race", amount: events.MustMoney("1")})
	require.NoError(t, a.Sync(ctx))
	_, held := a.Reservation("b-race")
	require.False(t, held, "the other replica skips the write")
	if submitErr != nil {
		require.ErrorIs(t, submitErr, ledger.ErrNotTrusted)
		require.NoError(t, b.Sync(ctx))
		_, held := b.Reservation("b-race")
		require.False(t, held, "the writer skips its own write too")
		t.Log("the writer folded the trust revision first: its Tx was answered ledger_unavailable")
		return
	}
	// Answered done: the writer's follower must stop on the trust revision.
	select {
	case err := <-runErr:
		require.ErrorIs(t, err, ledger.ErrOwnWriteRefused)
		t.Log("the writer had folded its write first: its follower stopped")
	case <-ctx.Done():
		t.Fatal("the writer acknowledged a write every other replica skips, and kept running")
	}
}
