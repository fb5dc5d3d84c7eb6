package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

func newSigner(t *testing.T) *signing.Signer {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	s, err := signing.NewSigner(seed)
	require.NoError(t, err)
	return s
}

func trustOf(t *testing.T, keys ...signing.Key) *signing.KeySet {
	t.Helper()
	ks, err := signing.NewKeySet(keys, 0)
	require.NoError(t, err)
	return ks
}

// rawPut publishes data under key directly on the stream, as any identity
// with write access to the ledger's subjects can: no compare-and-set,
// headers as given.
func rawPut(t *testing.T, env *testenv.Env, key string, data []byte, h nats.Header) uint64 {
	t.Helper()
	msg := nats.NewMsg(env.Layout.Subject(key))
	msg.Data = data
	for k, v := range h {
		if k != streams.HeaderExpectedLastSubjSeq { // a replay is written blindly
			msg.Header[k] = v
		}
	}
	ack, err := env.JS.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
	return ack.Sequence
}

func lastMsg(t *testing.T, env *testenv.Env, key string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := env.JS.Stream(context.Background(), env.Layout.StreamName())
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), env.Layout.Subject(key))
	require.NoError(t, err)
	return m
}

func signed(s *signing.Signer, key string, data []byte) nats.Header {
	h := nats.Header{}
	s.Sign(h, key, data)
	return h
}

// TestLedger_SkipsBadRevisions: with signatures required, every kind of
// bad revision written straight to the stream by an identity with write
// access (a forged budget raising the limit, unsigned garbage, signed
// garbage, a revision signed by an untrusted key, a bad signature, a
// replay of an old signed revision, a signed revision off the chain) is
// skipped: counted, the book unchanged, an admit above the original
// limit denied, and the replica's next write lands right after it (no
// lost compare-and-set) within a second. The audit names every skipped
// sequence with its reason; a second replica folding the whole stream and
// a third starting from a snapshot taken right after a skip hold the same
// book and write without a lost compare-and-set. How we know it can fail: without the signature check the forged
// budget is folded (the 5.00 admit is admitted, limit 500); without the
// seen revision the next write's compare-and-set names the last valid
// revision and loses (Conflicts > 0), or the follower stops on garbage.
func TestLedger_SkipsBadRevisions(t *testing.T) {
	env := testenv.New(t)
	k1, other := newSigner(t), newSigner(t)
	trust := trustOf(t, signing.Key{Public: k1.PublicKey()})
	l := startLedger(t, env, ledger.WithSigner(k1), ledger.WithTrust(trust))
	ctx := context.Background()
	_, err := l.PutBudget(ctx, bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	require.NoError(t, l.Submit(ctx, &openTx{id: "r0", amount: events.MustMoney("0.1")}))
	lane := env.Layout.LaneKey(bal)
	bkey := streams.BudgetKey(bal.Budget())
	firstLane := lastMsg(t, env, lane) // r0's revision, signed by k1

	type want struct {
		seq    uint64
		reason signing.Reason
	}
	var wants []want
	n := 0
	reserved := events.MustMoney("0.1")
	// after checks one skipped revision: counted, the lane and budget
	// unchanged, and the next write lands after it without a conflict,
	// within a second.
	after := func(seq uint64, reason signing.Reason) {
		t.Helper()
		wants = append(wants, want{seq, reason})
		waitFor(t, fmt.Sprintf("seq %d skipped", seq), func() bool { return l.Stats().Rejected == int64(len(wants)) })
		b, ok := l.Budget(bal.Budget())
		require.True(t, ok)
		require.Equal(t, "1", b.Limit.String(), "the limit is the signed one")
		big := &openTx{id: fmt.Sprintf("big%d", n), amount: events.MustMoney("5")}
		require.NoError(t, l.Submit(ctx, big))
		require.True(t, big.denied, "an admit above the original limit is denied")
		conflicts := l.Stats().Conflicts
		n++
		start := time.Now()
		require.NoError(t, l.Submit(ctx, &openTx{id: fmt.Sprintf("r%d", n), amount: events.MustMoney("0.05")}))
		require.Less(t, time.Since(start), time.Second)
		require.Equal(t, conflicts, l.Stats().Conflicts, "the write named the skipped revision")
		reserved = reserved.Add(events.MustMoney("0.05"))
		require.Zero(t, reserved.Cmp(l.Balance(bal).Reserved), "reserved %s, want %s", l.Balance(bal).Reserved, reserved)
	}

	// 1. A forged budget: the same JSON with a bigger limit, chained
	// correctly, unsigned.
	cur := lastMsg(t, env, bkey)
	var brev events.BudgetRevision
	require.NoError(t, json.Unmarshal(cur.Data, &brev))
	brev.Limit = events.MustMoney("500")
	brev.Chain = events.Chain{Prev: cur.Sequence, PrevHash: events.HashPayload(cur.Data)}
	forged, err := json.Marshal(brev)
	require.NoError(t, err)
	after(rawPut(t, env, bkey, forged, nil), signing.ReasonUnsigned)

	// 2. The same forgery signed by a key nobody trusts.
	after(rawPut(t, env, bkey, forged, signed(other, bkey, forged)), signing.ReasonUntrustedKey)

	// 3. Signed as k1 (the header names it) with another key's signature.
	h := signed(other, bkey, forged)
	h.Set(streams.HeaderSigKey, k1.PublicKey())
	after(rawPut(t, env, bkey, forged, h), signing.ReasonBadSignature)

	// 4. k1's own signature over a lane revision, moved to the budget key.
	after(rawPut(t, env, bkey, firstLane.Data, firstLane.Header), signing.ReasonBadSignature)

	// 5. Garbage on the lane, unsigned.
	after(rawPut(t, env, lane, []byte("garbage"), nil), signing.ReasonUnsigned)

	// 6. Garbage signed by a trusted key (an insider's or a bug's).
	after(rawPut(t, env, lane, []byte("garbage"), signed(k1, lane, []byte("garbage"))), signing.ReasonMalformed)

	// 7. A replay of r0's revision, signature and all.
	after(rawPut(t, env, lane, firstLane.Data, firstLane.Header), signing.ReasonReplay)

	// 8. A signed revision off the chain (names a revision that is not
	// the lane's last valid one).
	last := lastMsg(t, env, lane)
	var lrev events.LaneRevision
	require.NoError(t, json.Unmarshal(last.Data, &lrev))
	lrev.Chain.Prev = last.Sequence + 100
	off, err := codec.AppendLane(nil, &lrev)
	require.NoError(t, err)
	after(rawPut(t, env, lane, off, signed(k1, lane, off)), signing.ReasonChain)

	// The last revision of the lane is a skipped one again.
	rawPut(t, env, lane, []byte("{}"), nil)
	wants = append(wants, want{lastSeq(t, env), signing.ReasonUnsigned})
	waitFor(t, "the last garbage skipped", func() bool { return l.Stats().Rejected == int64(len(wants)) })
	seen, valid := ledger.Revs(l, lane)
	require.Equal(t, lastSeq(t, env), seen)
	require.Less(t, valid, seen)
	// A snapshot taken while the last revisions of the lane and of the
	// budget are skipped ones. (A tail holding a signed revision off its
	// chain would make a starting replica drop the snapshot and fold the
	// whole stream: see the package doc.)
	_, err = l.Snapshot(ctx)
	require.NoError(t, err)

	// The audit names every one.
	rep, err := projector.Check(ctx, env.JS, env.Layout, projector.WithTrust(trust))
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Len(t, rep.Skipped, len(wants), rep.String())
	for i, w := range wants {
		require.Equal(t, w.seq, rep.Skipped[i].Seq, rep.String())
		require.Equal(t, w.reason, rep.Skipped[i].Reason, rep.String())
	}
	require.Len(t, rep.Problems, len(wants), "nothing else is wrong: %s", rep.String())

	// Finance's replays (audit balances, export, report) skip them too.
	st, err := projector.New(env.JS, env.Layout, projector.Verifying(trust)).CatchUp(ctx)
	require.NoError(t, err)
	pb, ok := st.Budget(bal.Budget())
	require.True(t, ok)
	require.Equal(t, "1", pb.Limit.String())
	pbal, ok := st.Balance(bal)
	require.True(t, ok)
	require.Zero(t, pbal.Reserved.Cmp(l.Balance(bal).Reserved))
	// Without the keys the replay gets past garbage and off-chain
	// revisions but takes the forgery for a revision (here it stops on
	// it: the forger changed the stated limit, not the event): the keys
	// are what tell it apart.
	_, err = projector.New(env.JS, env.Layout).CatchUp(ctx)
	require.ErrorContains(t, err, "stated 500")

	// A replica folding the whole stream, and one starting from the
	// snapshot, hold the same book and write without a conflict.
	// The budget key's last revisions were all skipped, and none followed:
	// only the snapshot can tell the third replica where the next write
	// of the key must land.
	bseen, bvalid := ledger.Revs(l, bkey)
	require.Less(t, bvalid, bseen)
	for i, opt := range []ledger.Option{ledger.WithSnapshotLoad(false), ledger.WithSnapshotLoad(true)} {
		l2 := startLedger(t, env, ledger.WithSigner(k1), ledger.WithTrust(trust), opt)
		require.Equal(t, i == 1, l2.SnapshotStats().Loaded > 0, "the third replica starts from the snapshot")
		require.Equal(t, l.Balance(bal), l2.Balance(bal))
		s2, v2 := ledger.Revs(l2, lane)
		require.Equal(t, seen, s2)
		require.Equal(t, valid, v2)
		s2, v2 = ledger.Revs(l2, bkey)
		require.Equal(t, bseen, s2)
		require.Equal(t, bvalid, v2)
		require.NoError(t, l2.Submit(ctx, &openTx{id: fmt.Sprintf("l2-%d", l2.SnapshotStats().Loaded), amount: events.MustMoney("0.05")}))
		require.Zero(t, l2.Stats().Conflicts)
		waitFor(t, "l folds l2's write", func() bool { s, _ := ledger.Revs(l, lane); return s == lastSeq(t, env) })
		seen, valid = ledger.Revs(l, lane)
		require.Equal(t, seen, valid)
	}
}

// TestLedger_KeyRotationUnderLoad: two replicas under continuous load
// rotate from k1 to k2 as docs/security.md says (trust both everywhere, switch
// the signing key replica by replica, then retire k1 after the last
// sequence it signed): no request fails, no revision is skipped, and the
// audit with the final key set (k1 retired, k2) passes, as does a fresh
// replica that trusts only that set. How we know it can fail: switching a
// replica's signing key before the other trusts k2 makes the other skip
// its revisions (Rejected > 0, then a fork between the two books, see the
// docs/security.md's rotation steps); retiring k1 before its last revision makes
// the audit report it as untrusted-key.
func TestLedger_KeyRotationUnderLoad(t *testing.T) {
	env := testenv.New(t)
	k1, k2 := newSigner(t), newSigner(t)
	only1 := trustOf(t, signing.Key{Public: k1.PublicKey()})
	a := startLedger(t, env, ledger.WithSigner(k1), ledger.WithTrust(only1))
	b := startLedger(t, env, ledger.WithSigner(k1), ledger.WithTrust(only1))
	ctx := context.Background()
	_, err := a.PutBudget(ctx, bal.Budget(), events.MustMoney("1000000"), "USD", t0)
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	for i, l := range []*ledger.Ledger{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				err := l.Submit(ctx, &openTx{id: fmt.Sprintf("w%d-%d", i, j), amount: events.MustMoney("0.01")})
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	progress := func(what string) {
		t.Helper()
		n := ok.Load()
		waitFor(t, what, func() bool { return ok.Load() >= n+50 })
	}
	progress("load before the rotation")
	both := trustOf(t, signing.Key{Public: k1.PublicKey()}, signing.Key{Public: k2.PublicKey()})
	a.SetTrust(both)
	b.SetTrust(both)
	progress("load while both keys are trusted")
	a.SetSigner(k2)
	progress("load with a on k2")
	b.SetSigner(k2)
	progress("load with both on k2")
	// Retire k1 after the last revision it signed: a write signed before
	// the switch lands within its commit deadline, and the load above
	// has moved past it; the stream says where.
	retire := lastK1(t, env, k1.PublicKey())
	final := trustOf(t, signing.Key{Public: k1.PublicKey(), Until: retire}, signing.Key{Public: k2.PublicKey()})
	a.SetTrust(final)
	b.SetTrust(final)
	progress("load after k1 was retired")
	close(stop)
	wg.Wait()

	require.Zero(t, failed.Load(), "no request fails: %v", firstErr.Load())
	require.Zero(t, a.Stats().Rejected)
	require.Zero(t, b.Stats().Rejected)
	require.Equal(t, retire, lastK1(t, env, k1.PublicKey()), "k1 signed nothing after it was retired")
	rep, err := projector.Check(ctx, env.JS, env.Layout, projector.WithTrust(final))
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	require.Equal(t, int(lastSeq(t, env)), rep.Signed, "every revision verified")
	c := startLedger(t, env, ledger.WithTrust(final), ledger.WithSnapshotLoad(false))
	require.Zero(t, c.Stats().Rejected)
	require.Equal(t, a.Balance(bal), c.Balance(bal))
}

// lastK1 returns the last stream sequence signed by pub.
func lastK1(t *testing.T, env *testenv.Env, pub string) uint64 {
	t.Helper()
	s, err := env.JS.Stream(context.Background(), env.Layout.StreamName())
	require.NoError(t, err)
	var last uint64
	for seq := lastSeq(t, env); seq > 0; seq-- {
		m, err := s.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		if m.Header.Get(streams.HeaderSigKey) == pub {
			last = seq
			break
		}
	}
	return last
}

// BenchmarkSubmit_Signing measures the commit path with and without
// signing (the writer signs every revision; a second replica trusting the
// key folds and checks them): 32 callers reserving on one lane, both
// variants in one run (compare them within a run: the machine's noise
// differs between runs). Run it with
//
//	go test -run '^$' -bench BenchmarkSubmit_Signing -benchtime 3000x -count 3 ./internal/ledger/
func BenchmarkSubmit_Signing(b *testing.B) {
	for _, signed := range []bool{false, true} {
		name := "unsigned"
		if signed {
			name = "signed"
		}
		b.Run(name, func(b *testing.B) {
			env := testenv.New(b)
			var opts []ledger.Option
			if signed {
				kp, err := nkeys.CreateUser()
				require.NoError(b, err)
				seed, err := kp.Seed()
				require.NoError(b, err)
				s, err := signing.NewSigner(seed)
				require.NoError(b, err)
				opts = append(opts, ledger.WithSigner(s), ledger.WithTrust(trustOfB(b, s.PublicKey())))
			}
			l := startBenchLedger(b, env, opts...)
			follower := startBenchLedger(b, env, opts...)
			_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1000000000"), "USD", t0)
			require.NoError(b, err)
			var next atomic.Int64
			var failed atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := 0; w < 32; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if l.Submit(context.Background(), &openTx{id: fmt.Sprintf("b%d", i), amount: events.MustMoney("0.01")}) != nil {
							failed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			require.Zero(b, failed.Load())
			require.NoError(b, follower.Sync(context.Background()))
			require.Zero(b, follower.Stats().Rejected)
			b.ReportMetric(float64(l.Stats().Commits), "commits")
		})
	}
}

func trustOfB(b *testing.B, pub string) *signing.KeySet {
	ks, err := signing.ParseKeys(pub)
	require.NoError(b, err)
	return ks
}
