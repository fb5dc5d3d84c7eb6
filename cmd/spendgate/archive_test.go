package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// runLedger runs a ledger replica on env until the test ends.
func runLedger(t *testing.T, env *testenv.Env, opts ...ledger.Option) *ledger.Ledger {
	l, _ := runLedgerReports(t, env, opts...)
	return l
}

// runLedgerReports is runLedger with the spend report fed by its fold, as
// a replica keeps it (so its snapshots carry the report's section).
func runLedgerReports(t *testing.T, env *testenv.Env, opts ...ledger.Option) (*ledger.Ledger, *report.Aggregator) {
	t.Helper()
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := ledger.New(context.Background(), nc, js, env.Layout, opts...)
	require.NoError(t, err)
	g, err := report.NewAggregator(js, env.Layout, report.WithSync(l.Sync))
	require.NoError(t, err)
	require.NoError(t, l.AddReader(g))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready():
	case err := <-done:
		t.Fatalf("ledger stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("ledger not ready")
	}
	return l, g
}

// TestAudit_ArchiveKillTrim: a history of admits, settles and releases is
// archived by a spendgate audit archive process that is SIGKILLed once it
// has written a few segments (a stray temporary file is left as a torn
// write would leave it); a rerun completes the archive up to the newest
// snapshot, with every message once. Then the stream is trimmed below the
// snapshot: the trim writes the report snapshot there was none of, from
// which a spend report starts and sums as before; the audit over archive
// + stream passes with the balances and reservation count it had before
// the trim, a replica still starts (from the snapshot) and admits, the
// stream alone no longer audits, and an edited archive segment is
// detected, whether or not its digest is recomputed. How it can fail: a killed run that left a half segment, or
// a rerun that re-archived or skipped messages, breaks the chain or the
// count; a trim that dropped a revision the snapshot names stops the
// replica (its anchors) and the audit (the chain).
func TestAudit_ArchiveKillTrim(t *testing.T) {
	t.Parallel()
	layout, err := streams.New(streams.Config{Trimmable: true})
	require.NoError(t, err)
	env := testenv.New(t, testenv.WithLayout(layout))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := runLedger(t, env, ledger.WithSnapshotEvery(0, 0))
	_, err = l.PutBudget(ctx, events.BudgetRef{Scope: "org:arch", Period: events.PeriodMonth}, events.MustMoney("100000"), "USD", time.Now())
	require.NoError(t, err)
	a, err := admit.New(l)
	require.NoError(t, err)
	s, err := settle.New(l)
	require.NoError(t, err)
	work := func(from, to int) {
		for i := from; i < to; i++ {
			rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("arch-%d", i), Scopes: []string{"org:arch"}, Amount: "0.5"})
			require.NoError(t, err)
			require.True(t, rep.Admitted)
			switch i % 3 {
			case 0:
				_, err = s.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "0.25"})
			case 1:
				_, err = s.Release(ctx, events.ReleaseRequest{ReservationID: rep.ReservationID})
			}
			require.NoError(t, err)
		}
	}
	// 240 reservations before the snapshot (401 messages, 80 segments of
	// 5 for the run that is killed once it has written 3: it had
	// archived 15 of the 401 when killed in each of three runs on loaded
	// cores, see the log, so the kill lands far from the end) and 60
	// after it (the trim leaves a quarter, under the half it asserts);
	// the soak step (soak.Long) runs the history this test had before,
	// 600 and 100.
	before, tail := 240, 60
	if soak.Long() {
		before, tail = 600, 100
	}
	work(0, before)
	snap, err := l.Snapshot(ctx)
	require.NoError(t, err)
	work(before, before+tail) // a tail after the snapshot

	checked, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, checked.OK(), checked.String())
	p := projector.New(env.JS, env.Layout)
	st, err := p.CatchUp(ctx)
	require.NoError(t, err)
	balances := st.Balances()
	byScope, err := report.NewReader(env.JS, env.Layout, p).Report(ctx, report.Filter{}, report.ByScope)
	require.NoError(t, err)

	dir := t.TempDir()
	arch := startProc(t, false, "audit", "archive", "--nats-url", env.URL(), "--dir", dir, "--segment-messages", "5")
	testenv.WaitFor(t, time.Minute, "a few segments written", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "segment-*.jsonl.gz"))
		return len(m) >= 3
	})
	select {
	case <-arch.done:
		t.Log("the archive finished before the kill: the rerun has nothing left to do")
	default:
		arch.kill(t)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "segment-00000000000000099999-00000000000000099999.jsonl.gz.tmp"), []byte("torn"), 0o644))
	info, err := projector.VerifyArchive(dir, env.Layout.StreamName())
	require.NoError(t, err, "a kill leaves whole segments")
	require.Less(t, info.Last, snap.Seq, "killed before the end")
	t.Logf("killed with %d of the %d messages up to the snapshot archived", info.Messages, snap.Seq)
	// The rerun is the command's second run, clientBin's plain build: the
	// killed one was race-built (procBin).
	rerunArgs := []string{"audit", "archive", "--nats-url", env.URL(), "--dir", dir, "--segment-messages", "50"}
	rerun := startProcBin(t, clientBin(rerunArgs...), testDir(t), nil, false, rerunArgs...)
	<-rerun.done
	require.NoError(t, rerun.err, rerun.out.String())
	info, err = projector.VerifyArchive(dir, env.Layout.StreamName())
	require.NoError(t, err)
	require.Equal(t, snap.Seq, info.Last)
	require.Equal(t, int(snap.Seq), info.Messages, "every message up to the snapshot, once")
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	require.Empty(t, tmps)

	res, err := projector.Trim(ctx, env.JS, env.Layout, dir)
	require.NoError(t, err)
	require.Equal(t, snap.Seq, res.Snapshot.Seq)
	require.Less(t, res.After, res.Before/2, "most of the stream is gone")
	// A replica's report starts from the snapshot's section and sums as
	// before the trim.
	_, g := runLedgerReports(t, env, ledger.WithSnapshotEvery(0, 0))
	require.NoError(t, g.Sync(ctx))
	require.Equal(t, snap.Seq, g.Loaded())
	gotScope, err := g.Report(ctx, report.ByScope, report.Filter{})
	require.NoError(t, err)
	sameReport(t, byScope, gotScope)

	after, err := projector.Check(ctx, env.JS, env.Layout, projector.WithArchive(dir))
	require.NoError(t, err)
	require.True(t, after.OK(), after.String())
	require.Equal(t, checked.Reservations, after.Reservations)
	require.Equal(t, checked.Position, after.Position)
	require.True(t, after.Snapshot.Verified)
	st2, err := p.CatchUp(ctx) // p has no archive: reads the trimmed stream
	require.ErrorIs(t, err, projector.ErrTrimmed, "the trimmed stream alone does not replay")
	_ = st2
	_, err = report.NewReader(env.JS, env.Layout, p).ExportJSONL(ctx, io.Discard, report.Filter{})
	require.ErrorIs(t, err, projector.ErrTrimmed, "nor exports")
	pa := projector.New(env.JS, env.Layout)
	_, err = pa.UseArchive(dir)
	require.NoError(t, err)
	st3, err := pa.CatchUp(ctx)
	require.NoError(t, err)
	require.Equal(t, balances, st3.Balances())

	// A replica starting now loads the snapshot and admits.
	l2 := runLedger(t, env, ledger.WithSnapshotEvery(0, 0))
	require.Equal(t, snap.Seq, l2.SnapshotStats().Loaded)
	a2, err := admit.New(l2)
	require.NoError(t, err)
	rep, err := a2.Admit(ctx, events.AdmitRequest{RequestID: "after-trim", Scopes: []string{"org:arch"}, Amount: "0.5"})
	require.NoError(t, err)
	require.True(t, rep.Admitted)

	// An edited segment: one amount changed.
	segs, _ := filepath.Glob(filepath.Join(dir, "segment-*.jsonl.gz"))
	require.Greater(t, len(segs), 2)
	victim := segs[len(segs)/2]
	orig, err := os.ReadFile(victim)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(orig))
	require.NoError(t, err)
	body, err := io.ReadAll(zr)
	require.NoError(t, err)
	i := bytes.IndexByte(body, '\n') + 1
	j := bytes.Index(body[i:], []byte(`"data":"`)) + i + len(`"data":"`) + 20
	body[j] ^= 1
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(body)
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(victim, z.Bytes(), 0o644))
	edited, err := projector.Check(ctx, env.JS, env.Layout, projector.WithArchive(dir))
	require.NoError(t, err)
	require.False(t, edited.OK())
	require.Contains(t, edited.String(), filepath.Base(victim))
	require.NoError(t, os.WriteFile(victim, orig, 0o644))
	ok, err := projector.Check(ctx, env.JS, env.Layout, projector.WithArchive(dir))
	require.NoError(t, err)
	require.True(t, ok.OK(), ok.String())
}

// TestAudit_TrimRefusesAStreamThatDeniesPurges: the default ledger
// stream denies purges, and trim says so before it audits anything.
func TestAudit_TrimRefusesAStreamThatDeniesPurges(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := projector.Trim(ctx, env.JS, env.Layout, t.TempDir())
	require.ErrorContains(t, err, "denies purges")
}

// TestAudit_VoidWindowFollowsTheLedger: a ledger that remembers voids for
// 2 s (its closed retention) and an audit whose window is 3 s agree on a
// voided request id. A second of writes after the void, the ledger still
// refuses an admit of it (request_voided) and its snapshot remembers the
// void; the audit, whose clock has moved on that second too, verifies that
// snapshot, and starts from it. Once the ledger has forgotten the void it
// admits the request id again, and the audit passes, with the same
// numbers as an audit that keeps everything. How it can fail: an audit
// that forgot a void within the second (a window shorter than the
// ledger's, or a void never stamped) reports the snapshot's void as "not
// in the replay" (checked by hand with a 500 ms window); one that refused
// or counted differently a re-admitted request id reports a mismatch with
// the live balances.
func TestAudit_VoidWindowFollowsTheLedger(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := runLedger(t, env, ledger.WithSnapshotEvery(0, 0), ledger.WithRetention(2*time.Second, time.Hour))
	_, err := l.PutBudget(ctx, events.BudgetRef{Scope: "org:void", Period: events.PeriodMonth}, events.MustMoney("1000"), "USD", time.Now())
	require.NoError(t, err)
	a, err := admit.New(l)
	require.NoError(t, err)
	s, err := settle.New(l)
	require.NoError(t, err)
	req := events.AdmitRequest{RequestID: "gone", Scopes: []string{"org:void"}, Amount: "2"}
	rep, err := a.Admit(ctx, req)
	require.NoError(t, err)
	require.True(t, rep.Admitted)
	_, err = s.Void(ctx, events.VoidRequest{RequestID: "gone", Scopes: []string{"org:void"}})
	require.NoError(t, err)
	voided := time.Now()
	// Writes move the server's clock on (by about a second here, until the
	// ledger forgets the void below): one every 100 ms is enough (it is
	// the time they span that counts, not their number; a write on every
	// 10 ms poll wrote some 200, each replayed by every check below).
	i := 0
	var wrote time.Time
	filler := func() {
		if time.Since(wrote) < 100*time.Millisecond {
			return
		}
		wrote = time.Now()
		i++
		_, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("filler-%d", i), Scopes: []string{"org:void"}, Amount: "0.01"})
		require.NoError(t, err)
	}
	testenv.WaitFor(t, time.Minute, "a second of writes after the void", func() bool {
		filler()
		return time.Since(voided) > time.Second
	})
	_, err = a.Admit(ctx, req)
	require.Equal(t, events.CodeRequestVoided, events.CodeOf(err), "within the ledger's retention: refused")
	require.True(t, l.Voided("gone"))
	snap, err := l.Snapshot(ctx)
	require.NoError(t, err)
	window := projector.WithWindow(3*time.Second, 2*time.Hour)
	for _, from := range []bool{false, true} {
		opts := []projector.CheckOption{window}
		if from {
			opts = append(opts, projector.WithFromSnapshot())
		}
		rep, err := projector.Check(ctx, env.JS, env.Layout, opts...)
		require.NoError(t, err)
		require.True(t, rep.OK(), rep.String())
		if !from {
			require.True(t, rep.Snapshot.Verified, "the snapshot's void is in the replay")
			require.Equal(t, snap.Seq, rep.Snapshot.Seq)
		}
	}
	testenv.WaitFor(t, time.Minute, "the ledger forgets the void", func() bool {
		filler()
		return !l.Voided("gone")
	})
	rep, err = a.Admit(ctx, req)
	require.NoError(t, err)
	require.True(t, rep.Admitted, "after the retention the request id reserves again")
	require.False(t, rep.Replayed)
	_, err = l.Snapshot(ctx)
	require.NoError(t, err)
	after, err := projector.Check(ctx, env.JS, env.Layout, window)
	require.NoError(t, err)
	require.True(t, after.OK(), after.String())
	require.True(t, after.Snapshot.Verified)
	full, err := projector.Check(ctx, env.JS, env.Layout, projector.WithWindow(0, 0))
	require.NoError(t, err)
	require.True(t, full.OK(), full.String())
	require.Equal(t, full.Balances, after.Balances)
	require.Equal(t, full.Reservations, after.Reservations)
}

// sameReport checks that a replica's spend report equals the replay's,
// group by group, to the cent.
func sameReport(t *testing.T, want *report.SpendReport, got *report.AggregateReport) {
	t.Helper()
	require.Equal(t, len(want.Groups), len(got.Groups), "groups: want %v got %v", want.Groups, got.Groups)
	for i := range want.Groups {
		w, g := want.Groups[i], got.Groups[i]
		require.Equal(t, [8]any{w.Value, w.Unit, w.Reservations, w.Open, w.Settled, w.Released, w.Expired, w.Late},
			[8]any{g.Value, g.Unit, g.Reservations, g.Open, g.Settled, g.Released, g.Expired, g.Late}, "group %d", i)
		require.Equal(t, [3]string{w.Spend.String(), w.Overrun.String(), w.Reserved.String()},
			[3]string{g.Spend.String(), g.Overrun.String(), g.Reserved.String()}, "group %d (%s)", i, w.Value)
	}
}

// TestAudit_TrimKeepsReportsAndKeys: the ledger snapshot the stream is
// trimmed below carries the spend report as a section, so a replica
// started after the trim loads it, folds the tail, and answers the same
// totals as the replay of the book before the trim, by scope and by
// metadata key. audit keys reads the archive
// with --archive: the same keys, sequences and counts as before the trim;
// without it, it refuses the trimmed stream.
func TestAudit_TrimKeepsReportsAndKeys(t *testing.T) {
	t.Parallel()
	layout, err := streams.New(streams.Config{Trimmable: true})
	require.NoError(t, err)
	env := testenv.New(t, testenv.WithLayout(layout))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	signer, err := signing.NewEphemeral()
	require.NoError(t, err)
	l := runLedger(t, env, ledger.WithSnapshotEvery(0, 0), ledger.WithSigner(signer))
	for _, scope := range []events.Scope{"org:rep", "team:rep-a", "team:rep-b"} {
		_, err = l.PutBudget(ctx, events.BudgetRef{Scope: scope, Period: events.PeriodMonth}, events.MustMoney("100000"), "USD", time.Now())
		require.NoError(t, err)
	}
	a, err := admit.New(l)
	require.NoError(t, err)
	s, err := settle.New(l)
	require.NoError(t, err)
	work := func(from, to int) {
		for i := from; i < to; i++ {
			team := []string{"team:rep-a", "team:rep-b"}[i%2]
			rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("rep-%d", i), Scopes: []string{"org:rep", team},
				Amount: "0.5", Metadata: map[string]string{"model": []string{"m1", "m2", "m3"}[i%3]}})
			require.NoError(t, err)
			require.True(t, rep.Admitted)
			switch i % 3 {
			case 0:
				_, err = s.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "0.75"})
			case 1:
				_, err = s.Release(ctx, events.ReleaseRequest{ReservationID: rep.ReservationID})
			}
			require.NoError(t, err)
		}
	}
	// 120 reservations before the snapshot and 20 after it: each of the
	// six combinations of team (i%2) and model and outcome (i%3) comes 20
	// times before and 3 or 4 times after, and the trim still removes
	// most of the stream; the soak step (soak.Long) runs the history this
	// test had before, 300 and 40.
	before, tail := 120, 20
	if soak.Long() {
		before, tail = 300, 40
	}
	work(0, before)
	snap, err := l.Snapshot(ctx)
	require.NoError(t, err)
	work(before, before+tail)

	p := projector.New(env.JS, env.Layout)
	byScope, err := report.NewReader(env.JS, env.Layout, p).Report(ctx, report.Filter{}, report.ByScope)
	require.NoError(t, err)
	byModel, err := report.NewReader(env.JS, env.Layout, p).Report(ctx, report.Filter{}, report.ByMetadata("model"))
	require.NoError(t, err)
	keysBefore, err := projector.Signers(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.Len(t, keysBefore, 1)
	require.Equal(t, signer.PublicKey(), keysBefore[0].Key)

	dir := t.TempDir()
	_, err = projector.Archive(ctx, env.JS, env.Layout, dir, projector.ArchiveOptions{})
	require.NoError(t, err)
	res, err := projector.Trim(ctx, env.JS, env.Layout, dir)
	require.NoError(t, err)
	require.Less(t, res.After, res.Before/2, "most of the stream is gone")

	check := func(g *report.Aggregator, loaded uint64) {
		t.Helper()
		require.NoError(t, g.Sync(ctx))
		require.Equal(t, loaded, g.Loaded())
		got, err := g.Report(ctx, report.ByScope, report.Filter{})
		require.NoError(t, err)
		sameReport(t, byScope, got)
		got, err = g.Report(ctx, report.ByMetadata("model"), report.Filter{})
		require.NoError(t, err)
		sameReport(t, byModel, got)
	}
	_, g2 := runLedgerReports(t, env, ledger.WithSnapshotEvery(0, 0), ledger.WithSigner(signer))
	check(g2, snap.Seq)

	// audit keys: the archive and the stream, or a refusal.
	_, err = projector.Signers(ctx, env.JS, env.Layout)
	require.ErrorIs(t, err, projector.ErrTrimmed)
	keysAfter, err := projector.Signers(ctx, env.JS, env.Layout, projector.WithArchive(dir))
	require.NoError(t, err)
	require.Equal(t, keysBefore, keysAfter)
	code, out := e2eCLI(t, env.URL(), "audit", "keys", "--archive", dir)
	require.Equal(t, 0, code, string(out))
	require.Equal(t, fmt.Sprintf("%s first=%d last=%d revisions=%d\n", signer.PublicKey(), keysBefore[0].First, keysBefore[0].Last, keysBefore[0].Revisions), string(out))
	code, _, stderr := e2eCLIErr(t, env.URL(), "audit", "keys")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--archive")
	code, out = e2eCLI(t, env.URL(), "audit", "check", "--unverified", "--archive", dir)
	require.Equal(t, 0, code, string(out))
	// Without the archive, audit check says so once rather than report
	// every revision the trim cut off from its predecessor; from the
	// snapshot it needs no archive.
	code, _, stderr = e2eCLIErr(t, env.URL(), "audit", "check", "--unverified")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "stream trimmed")
	code, out = e2eCLI(t, env.URL(), "audit", "check", "--unverified", "--from-snapshot")
	require.Equal(t, 0, code, string(out))
}

// TestAudit_TrimPurgesOnlyWhatItVerified: a login that may write the
// snapshot bucket (the replica's) replaces the snapshot object that
// audit trim has just verified, while the audit replays the stream, with
// one naming lane.0 at the stream's newest revision (its digest its own,
// its header's signature left stale). The trim must purge below the
// revisions of the snapshot it verified, never below what a later read of
// the bucket says: every revision after the snapshot stays in the
// stream, and with the genuine snapshot put back, the audit of archive +
// stream passes and a replica starts from it. How it can fail: a trim
// that reads the snapshot again after its audit purges lane.0 below its
// newest revision, so the revisions between the snapshot and it, which no
// archive holds, are gone, and the replay breaks on lane.0's chain.
func TestAudit_TrimPurgesOnlyWhatItVerified(t *testing.T) {
	t.Parallel()
	layout, err := streams.New(streams.Config{Trimmable: true})
	require.NoError(t, err)
	env := testenv.New(t, testenv.WithLayout(layout))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	signer, err := signing.NewEphemeral()
	require.NoError(t, err)
	l := runLedger(t, env, ledger.WithSnapshotEvery(0, 0), ledger.WithSigner(signer))
	_, err = l.PutBudget(ctx, events.BudgetRef{Scope: "org:trim", Period: events.PeriodMonth}, events.MustMoney("1000"), "USD", time.Now())
	require.NoError(t, err)
	a, err := admit.New(l)
	require.NoError(t, err)
	work := func(from, to int) {
		for i := from; i < to; i++ {
			rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("trim-%d", i), Scopes: []string{"org:trim"}, Amount: "0.5"})
			require.NoError(t, err)
			require.True(t, rep.Admitted)
		}
	}
	work(0, 20)
	snap, err := l.Snapshot(ctx)
	require.NoError(t, err)
	work(20, 30)
	dir := t.TempDir()
	_, err = projector.Archive(ctx, env.JS, env.Layout, dir, projector.ArchiveOptions{})
	require.NoError(t, err)

	stream, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)
	lane := env.Layout.Subject("lane.0")
	newest, err := stream.GetLastMsgForSubject(ctx, lane)
	require.NoError(t, err)
	laneAfter := func() (seqs []uint64) {
		for seq := snap.Seq + 1; seq <= newest.Sequence; seq++ {
			m, err := stream.GetMsg(ctx, seq)
			if err == nil && m.Subject == lane {
				seqs = append(seqs, seq)
			}
		}
		return seqs
	}
	before := laneAfter()
	require.Len(t, before, 10, "lane.0's revisions after the snapshot")

	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	require.NoError(t, err)
	genuine, err := store.GetBytes(ctx, snap.Name)
	require.NoError(t, err)
	forged := forgeSnapshotLane(t, genuine, "lane.0", newest.Sequence)
	var swapped bool
	swap := func(_, _ uint64) {
		if !swapped {
			swapped = true
			_, err := store.PutBytes(ctx, snap.Name, forged)
			require.NoError(t, err)
		}
	}
	ks, err := signing.NewKeySet([]signing.Key{{Public: signer.PublicKey()}}, 0)
	require.NoError(t, err)
	_, err = projector.Trim(ctx, env.JS, env.Layout, dir, projector.WithTrust(ks), projector.WithProgress(swap))
	require.True(t, swapped, "the object was replaced during the audit")
	require.NoError(t, err)
	require.Equal(t, before, laneAfter(), "the trim kept every revision after the snapshot it verified")

	// The operator puts the genuine snapshot back (operator.md: keep a
	// copy of the snapshot you trim to): the audit passes, a replica starts.
	_, err = store.PutBytes(ctx, snap.Name, genuine)
	require.NoError(t, err)
	rep, err := projector.Check(ctx, env.JS, env.Layout, projector.WithArchive(dir), projector.WithTrust(ks))
	require.NoError(t, err)
	require.True(t, rep.OK(), "%s", rep)
	runLedger(t, env, ledger.WithSnapshotEvery(0, 0), ledger.WithSigner(signer))
}

// forgeSnapshotLane returns snapshot data naming key at rev instead, with
// its header's size and digest made to match (its signature left as it
// was): what a login that may write the snapshot bucket can write.
func forgeSnapshotLane(t *testing.T, data []byte, key string, rev uint64) []byte {
	t.Helper()
	nl := bytes.IndexByte(data, '\n')
	require.Positive(t, nl)
	var header map[string]any
	require.NoError(t, json.Unmarshal(data[:nl], &header))
	body := data[nl+1:]
	jl := bytes.IndexByte(body, '\n')
	require.Positive(t, jl)
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body[:jl], &doc))
	var lanes []map[string]any
	require.NoError(t, json.Unmarshal(doc["lane_revisions"], &lanes))
	found := false
	for _, k := range lanes {
		if k["key"] == key {
			k["rev"], found = rev, true
		}
	}
	require.True(t, found, "the snapshot names %s", key)
	var err error
	doc["lane_revisions"], err = json.Marshal(lanes)
	require.NoError(t, err)
	js, err := json.Marshal(doc)
	require.NoError(t, err)
	newBody := append(append(js, '\n'), body[jl+1:]...)
	sum := sha256.Sum256(newBody)
	header["size"], header["sha256"] = len(newBody), hex.EncodeToString(sum[:])
	h, err := json.Marshal(header)
	require.NoError(t, err)
	return append(append(h, '\n'), newBody...)
}

// TestCLI_TrimAfterAForgedWrite: a login that may write the ledger (the
// replica's) writes one unsigned lane revision, which the replicas skip
// and the audit lists for good (the stream denies deletes). audit trim,
// which trims only after an audit that passes, refuses; named with
// --reviewed, as audit check takes it once the operator has looked into
// it, the trim goes ahead. How it can fail: without --reviewed on audit
// trim, one forged write made the stream untrimmable for ever.
func TestCLI_TrimAfterAForgedWrite(t *testing.T) {
	t.Parallel()
	layout, err := streams.New(streams.Config{Trimmable: true})
	require.NoError(t, err)
	env := testenv.New(t, testenv.WithLayout(layout))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	signer, err := signing.NewEphemeral()
	require.NoError(t, err)
	ks, err := signing.NewKeySet([]signing.Key{{Public: signer.PublicKey()}}, 0)
	require.NoError(t, err)
	l := runLedger(t, env, ledger.WithSnapshotEvery(0, 0), ledger.WithSigner(signer), ledger.WithTrust(ks))
	_, err = l.PutBudget(ctx, events.BudgetRef{Scope: "org:forged", Period: events.PeriodMonth}, events.MustMoney("1000"), "USD", time.Now())
	require.NoError(t, err)
	a, err := admit.New(l)
	require.NoError(t, err)
	work := func(from, to int) {
		for i := from; i < to; i++ {
			rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("forged-%d", i), Scopes: []string{"org:forged"}, Amount: "0.5"})
			require.NoError(t, err)
			require.True(t, rep.Admitted)
		}
	}
	work(0, 5)
	ack, err := env.JS.Publish(ctx, env.Layout.Subject("lane.0"), []byte(`{"forged":true}`))
	require.NoError(t, err)
	work(5, 10)
	_, err = l.Snapshot(ctx)
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = projector.Archive(ctx, env.JS, env.Layout, dir, projector.ArchiveOptions{})
	require.NoError(t, err)
	keys := filepath.Join(t.TempDir(), "trusted-keys")
	require.NoError(t, os.WriteFile(keys, []byte(signer.PublicKey()+"\n"), 0o600))

	code, _, errOut := e2eCLIErr(t, env.URL(), "audit", "trim", "--dir", dir, "--trusted-keys", keys)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, fmt.Sprintf("seq %d lane.0: skipped, unsigned", ack.Sequence))
	code, out, errOut := e2eCLIErr(t, env.URL(), "audit", "trim", "--dir", dir, "--trusted-keys", keys, "--reviewed", strconv.FormatUint(ack.Sequence, 10))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "trimmed below snapshot")
	code, _, errOut = e2eCLIErr(t, env.URL(), "audit", "check", "--archive", dir, "--trusted-keys", keys, "--reviewed", strconv.FormatUint(ack.Sequence, 10))
	require.Equal(t, 0, code, errOut)
}

// trimmedWithReservations is a trimmable ledger holding 6 of the 10 of
// org:trimmed's month reserved, trimmed below a snapshot taken after the
// admits; the signer its replica signed with, and the copy of the
// snapshot the trim kept.
func trimmedWithReservations(t *testing.T, ctx context.Context) (*testenv.Env, *signing.Signer, events.BudgetRef, string) {
	t.Helper()
	layout, err := streams.New(streams.Config{Trimmable: true})
	require.NoError(t, err)
	env := testenv.New(t, testenv.WithLayout(layout))
	signer, err := signing.NewEphemeral()
	require.NoError(t, err)
	l := runLedger(t, env, ledger.WithSnapshotEvery(0, 0), ledger.WithSigner(signer))
	ref := events.BudgetRef{Scope: "org:trimmed", Period: events.PeriodMonth}
	_, err = l.PutBudget(ctx, ref, events.MustMoney("10"), "USD", time.Now())
	require.NoError(t, err)
	a, err := admit.New(l)
	require.NoError(t, err)
	for i := range 6 {
		rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("trimmed-%d", i), Scopes: []string{"org:trimmed"}, Amount: "1", TTL: "1h"})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
	}
	_, err = l.Snapshot(ctx)
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = projector.Archive(ctx, env.JS, env.Layout, dir, projector.ArchiveOptions{})
	require.NoError(t, err)
	res, err := projector.Trim(ctx, env.JS, env.Layout, dir)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, res.Snapshot.Name), res.SnapshotFile)
	return env, signer, ref, res.SnapshotFile
}

// startLedger starts a ledger on env and returns it with Run's result.
func startLedger(t *testing.T, ctx context.Context, env *testenv.Env, readers []ledger.Reader, opts ...ledger.Option) (*ledger.Ledger, chan error) {
	t.Helper()
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := ledger.New(ctx, nc, js, env.Layout, opts...)
	require.NoError(t, err)
	for _, r := range readers {
		require.NoError(t, l.AddReader(r))
	}
	done := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	go func() { done <- l.Run(rctx) }()
	t.Cleanup(cancel)
	return l, done
}

// TestAudit_TrimmedStreamWithoutSnapshotStops: after a trim, the login
// that may write the snapshot bucket (the replica's) deletes every
// snapshot. A replica that starts then must stop (ledger.ErrTrimmed), as
// operator.md says, never fold the trimmed stream from its first message:
// that fold skips each lane's first revision left (its predecessor is
// gone) and every one after it, and answers with a book that has
// forgotten what was reserved and spent. How it can fail: the ledger
// before this check became ready on such a fold, with the budget's
// reservations gone (available its whole limit).
//
// Then the copy of the snapshot the trim kept in the archive's directory
// is put back with `spendgate snapshot --restore` (a copy edited by one
// byte, or checked against keys that did not sign it, is refused, and
// nothing is put back), and a replica starts from it with the book
// right. How that can fail: without the copy (the trim kept none before)
// the deployment has nothing to start from.
func TestAudit_TrimmedStreamWithoutSnapshotStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, signer, ref, kept := trimmedWithReservations(t, ctx)
	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	require.NoError(t, err)
	objs, err := store.List(ctx)
	require.NoError(t, err)
	for _, o := range objs {
		require.NoError(t, store.Delete(ctx, o.Name))
	}
	l2, done := startLedger(t, ctx, env, nil, ledger.WithSigner(signer))
	select {
	case err := <-done:
		require.ErrorIs(t, err, ledger.ErrTrimmed)
	case <-l2.Ready():
		b, _ := l2.Budget(ref)
		t.Fatalf("ready on a trimmed stream with no snapshot: %+v", l2.Balance(b.Balance(time.Now())))
	case <-ctx.Done():
		t.Fatal("the replica neither stopped nor became ready")
	}

	keys := filepath.Join(t.TempDir(), "trusted-keys")
	require.NoError(t, os.WriteFile(keys, []byte(signer.PublicKey()+"\n"), 0o600))
	other, err := signing.NewEphemeral()
	require.NoError(t, err)
	otherKeys := filepath.Join(t.TempDir(), "trusted-keys")
	require.NoError(t, os.WriteFile(otherKeys, []byte(other.PublicKey()+"\n"), 0o600))
	data, err := os.ReadFile(kept)
	require.NoError(t, err)
	edited := filepath.Join(t.TempDir(), filepath.Base(kept))
	bad := slices.Clone(data)
	bad[len(bad)-2] ^= 1
	require.NoError(t, os.WriteFile(edited, bad, 0o600))
	code, _, errOut := e2eCLIErr(t, env.URL(), "snapshot", "--restore", edited, "--trusted-keys", keys)
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, "digest mismatch")
	code, _, errOut = e2eCLIErr(t, env.URL(), "snapshot", "--restore", kept, "--trusted-keys", otherKeys)
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, "not signed by a trusted key")
	objs, err = store.List(ctx)
	require.ErrorIs(t, err, jetstream.ErrNoObjectsFound, "nothing put back: %v", objs)

	code, out, errOut := e2eCLIErr(t, env.URL(), "snapshot", "--restore", kept, "--trusted-keys", keys)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"restored":true`)
	l3 := startedLedger(t, ctx, env, nil, ledger.WithSigner(signer))
	b, ok := l3.Budget(ref)
	require.True(t, ok)
	require.Equal(t, "6", l3.Balance(b.Balance(time.Now())).Reserved.String(), "the book as the kept snapshot holds it")
}

// startedLedger is startLedger, once the ledger is ready (failing the
// test if it stops instead).
func startedLedger(t *testing.T, ctx context.Context, env *testenv.Env, readers []ledger.Reader, opts ...ledger.Option) *ledger.Ledger {
	t.Helper()
	l, done := startLedger(t, ctx, env, readers, opts...)
	select {
	case err := <-done:
		t.Fatalf("the replica stopped: %v", err)
	case <-l.Ready():
	case <-ctx.Done():
		t.Fatal("the replica neither stopped nor became ready")
	}
	return l
}

// behindReader is a reader that stands before every snapshot (a feed
// relay whose feed is far behind, or stalled by junk so that it cannot
// say where it stands).
type behindReader struct{}

func (behindReader) Fold(*gate.Revision, bool)               {}
func (behindReader) Ceiling(context.Context) (uint64, error) { return 0, nil }

// TestAudit_TrimmedStreamFeedBehindStarts: on a trimmed stream, a replica
// whose feed stands before every snapshot (a feed turned on late, or
// stalled by junk a login that may write the feed published) starts from
// the newest snapshot anyway, with the book right, rather than stop: no
// fold can give the feed what the trim dropped. How it can fail: the
// replica honoured the feed's position, loaded no snapshot, and (before
// ledger.ErrTrimmed) folded a wrong book, or (with it) stopped.
func TestAudit_TrimmedStreamFeedBehindStarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, signer, ref, _ := trimmedWithReservations(t, ctx)
	l2 := startedLedger(t, ctx, env, []ledger.Reader{behindReader{}}, ledger.WithSigner(signer))
	b, ok := l2.Budget(ref)
	require.True(t, ok)
	bal := l2.Balance(b.Balance(time.Now()))
	require.Equal(t, "6", bal.Reserved.String(), "the book as the snapshot holds it")
}
