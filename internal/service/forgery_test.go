package service_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// signedEnv is a ledger whose replicas sign with k and trust it.
type signedEnv struct {
	env   *testenv.Env
	k     *signing.Signer
	trust *signing.KeySet
}

func newSignedEnv(t *testing.T) *signedEnv {
	t.Helper()
	k, err := signing.NewEphemeral()
	require.NoError(t, err)
	ks, err := signing.NewKeySet([]signing.Key{{Public: k.PublicKey()}}, 0)
	require.NoError(t, err)
	return &signedEnv{env: testenv.New(t), k: k, trust: ks}
}

func (s *signedEnv) replica(t *testing.T, feed bool) *replica.Replica {
	t.Helper()
	return replicatest.Start(t, s.env, replica.Config{SweepInterval: -1, Reports: true, Feed: feed,
		LedgerOptions: []ledger.Option{ledger.WithSigner(s.k), ledger.WithTrust(s.trust), ledger.WithSnapshotEvery(0, 0)}})
}

// TestSnapshot_ForgedIsRefusedAndNamed: a snapshot whose budget limit was
// changed (1 to 1000) and whose digest was recomputed, as someone with
// the replica login can do, is refused by a starting replica (it folds
// the stream instead: the limit stays 1, a 500 admit is denied) and named
// by the audit. How we know it can fail: before snapshots were signed,
// the same forgery let a tenant reserve 500 on a budget of 1, and the
// audit printed OK.
func TestSnapshot_ForgedIsRefusedAndNamed(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t)
	ctx := ctxT(t)
	r := s.replica(t, false)
	ref := events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}
	_, err := r.Ledger.PutBudget(ctx, ref, events.MustMoney("1"), "USD", time.Now())
	require.NoError(t, err)
	info, err := r.Ledger.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Stop())

	// Forge it: the limit changed in the body, size and digest recomputed,
	// the signature kept (it no longer matches) or dropped.
	store, err := s.env.JS.ObjectStore(ctx, s.env.Layout.SnapshotBucket())
	require.NoError(t, err)
	data, err := store.GetBytes(ctx, info.Name)
	require.NoError(t, err)
	for _, dropSig := range []bool{false, true} {
		nl := bytes.IndexByte(data, '\n')
		var h map[string]any
		require.NoError(t, json.Unmarshal(data[:nl], &h))
		body := bytes.Replace(data[nl+1:], []byte(`"limit":"1"`), []byte(`"limit":"1000"`), -1)
		require.NotEqual(t, data[nl+1:], body, "the forgery changed the limit")
		sum := sha256.Sum256(body)
		h["size"], h["sha256"] = len(body), hex.EncodeToString(sum[:])
		if dropSig {
			delete(h, "signer")
			delete(h, "sig")
		}
		head, err := json.Marshal(h)
		require.NoError(t, err)
		_, err = store.PutBytes(ctx, info.Name, append(append(head, '\n'), body...))
		require.NoError(t, err)

		r2 := s.replica(t, false)
		require.Zero(t, r2.Ledger.SnapshotStats().Loaded, "the forged snapshot is not loaded (signature dropped: %v)", dropSig)
		require.Positive(t, r2.Ledger.SnapshotStats().Skipped)
		b, ok := r2.Ledger.Budget(ref)
		require.True(t, ok)
		require.Equal(t, "1", b.Limit.String())
		rep, err := r2.Admitter.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "500", RequestID: fmt.Sprint("big-", dropSig)})
		require.NoError(t, err)
		require.False(t, rep.Admitted)

		audit, err := projector.Check(ctx, s.env.JS, s.env.Layout, projector.WithTrust(s.trust))
		require.NoError(t, err)
		require.False(t, audit.OK())
		named := false
		for _, p := range audit.Problems {
			named = named || (strings.Contains(p, "snapshot "+info.Name) && (strings.Contains(p, "signed") || strings.Contains(p, "limit 1000")))
		}
		require.True(t, named, "the audit names the forged snapshot: %s", audit)
		require.NoError(t, r2.Stop())
	}
}

// TestAudit_UnsignedPricingAndDefaultsAreListed: unsigned price, default
// and gateway key revisions (written past the permissions) and a replayed
// signed key revision are skipped by the replicas and listed by the audit
// with their reasons, and nothing of them is folded. How we know it can fail: the audit used to verify lane and
// budget keys only, and folded the others silently.
func TestAudit_UnsignedPricingAndDefaultsAreListed(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t)
	ctx := ctxT(t)
	r := s.replica(t, false)
	_, err := r.Ledger.DefinePrice(ctx, ledger.Price{Model: "gpt-x", Unit: "USD", Input: events.MustMoney("1"), Output: events.MustMoney("2")}, time.Now())
	require.NoError(t, err)
	_, pack := unsignedNext(t, s.env, streams.PricingKey("gpt-x"), func(v *events.PricingRevision, next events.Chain) {
		v.Chain, v.Input = next, events.MustMoney("0")
	})
	dflt := events.DefaultRevision{Schema: events.SchemaDefault, Kind: "user", Period: events.PeriodMonth, Limit: events.MustMoney("1000000"), Unit: "USD",
		Events: events.Events{events.DefaultDefined{Kind: "user", Period: events.PeriodMonth, Limit: events.MustMoney("1000000"), Unit: "USD", At: time.Now().UTC()}}}
	ddata, err := json.Marshal(dflt)
	require.NoError(t, err)
	dack, err := s.env.JS.Publish(ctx, s.env.Layout.Subject(streams.DefaultKey("user", events.PeriodMonth)), ddata)
	require.NoError(t, err)
	// A disabled gateway key, re-enabled with another hash by an unsigned
	// revision chained to the real one.
	_, err = r.Ledger.DefineAPIKey(ctx, "k1", func(ledger.APIKey, bool) (ledger.APIKey, error) {
		return ledger.APIKey{Hash: strings.Repeat("a", 64), Scopes: []string{"team:x"}, Disabled: true}, nil
	}, time.Now())
	require.NoError(t, err)
	km, kack := unsignedNext(t, s.env, streams.APIKeyKey("k1"), func(v *events.APIKeyRevision, next events.Chain) {
		v.Chain, v.Disabled, v.Hash = next, false, strings.Repeat("b", 64)
	})
	// The key's signed revision, published again as it is: a replay.
	replay := nats.NewMsg(s.env.Layout.Subject(streams.APIKeyKey("k1")))
	replay.Data = km.Data
	for _, h := range []string{streams.HeaderSigKey, streams.HeaderSig} {
		replay.Header.Set(h, km.Header.Get(h))
	}
	rack, err := s.env.JS.PublishMsg(ctx, replay)
	require.NoError(t, err)
	// A tenant's limits raised by an unsigned revision chained to the
	// real one.
	one := int64(1)
	_, err = r.Ledger.DefineTenantLimits(ctx, "acme", events.TenantLimitValues{MaxOpen: &one}, time.Now())
	require.NoError(t, err)
	_, tack := unsignedNext(t, s.env, streams.TenantLimitsKey("acme"), func(v *events.TenantLimitsRevision, next events.Chain) {
		lots := int64(1000000)
		v.Chain, v.MaxOpen = next, &lots
	})
	require.NoError(t, r.Ledger.Sync(ctx))
	tl, ok := r.Ledger.TenantLimitsOf("acme")
	require.True(t, ok)
	require.Equal(t, int64(1), *tl.MaxOpen, "the forged limits are not folded")
	k, ok := r.Ledger.APIKey("k1")
	require.True(t, ok)
	require.True(t, k.Disabled, "the forged key revision is not folded")
	require.Equal(t, strings.Repeat("a", 64), k.Hash)
	p, ok := r.Ledger.Price("gpt-x")
	require.True(t, ok)
	require.Equal(t, "1", p.Input.String(), "the forged price is not folded")
	require.Empty(t, r.Ledger.DefaultsOf("user"), "the forged default is not folded")

	audit, err := projector.Check(ctx, s.env.JS, s.env.Layout, projector.WithTrust(s.trust))
	require.NoError(t, err)
	got := map[uint64]signing.Reason{}
	for _, sk := range audit.Skipped {
		got[sk.Seq] = sk.Reason
	}
	require.Equal(t, map[uint64]signing.Reason{pack.Sequence: signing.ReasonUnsigned, dack.Sequence: signing.ReasonUnsigned,
		kack.Sequence: signing.ReasonUnsigned, rack.Sequence: signing.ReasonReplay, tack.Sequence: signing.ReasonUnsigned}, got, audit.String())
}

// unsignedNext publishes, unsigned, a revision chained to key's last one,
// as a login that may write the stream could: the last one decoded into T
// and changed by change, which also sets the chain it is given. It
// returns the last message and the forgery's acknowledgement.
func unsignedNext[T any](t *testing.T, env *testenv.Env, key string, change func(v *T, next events.Chain)) (*jetstream.RawStreamMsg, *jetstream.PubAck) {
	t.Helper()
	last, err := lastOf(ctxT(t), env, key)
	require.NoError(t, err)
	var v T
	require.NoError(t, json.Unmarshal(last.Data, &v))
	change(&v, events.Chain{Prev: last.Sequence, PrevHash: events.HashPayload(last.Data)})
	data, err := json.Marshal(v)
	require.NoError(t, err)
	ack, err := env.JS.Publish(ctxT(t), env.Layout.Subject(key), data)
	require.NoError(t, err)
	return last, ack
}

// lastOf reads key's last message.
func lastOf(ctx context.Context, env *testenv.Env, key string) (*jetstream.RawStreamMsg, error) {
	s, err := env.JS.Stream(ctx, env.Layout.StreamName())
	if err != nil {
		return nil, err
	}
	return s.GetLastMsgForSubject(ctx, env.Layout.Subject(key))
}

// TestReaders_GarbageNeverReachesThem: garbage under every key, an
// unsigned lane revision and a replayed signed one leave every reader
// answering (the report, the export, the feed, the audit), and none of
// them shows any of it. How we know it can fail: the report used to be
// built without the trusted keys (an unsigned lane revision showed as
// spend) and to stop for good on a replayed revision; exports and the
// report replay stopped with "incomplete".
func TestReaders_GarbageNeverReachesThem(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t)
	ctx := ctxT(t)
	r := s.replica(t, true)
	ref := events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}
	_, err := r.Ledger.PutBudget(ctx, ref, events.MustMoney("10"), "USD", time.Now())
	require.NoError(t, err)
	rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "1", RequestID: "real"})
	require.NoError(t, err)
	require.True(t, rep.Admitted)
	lane := s.env.Layout.LaneKey(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth})
	lm, err := lastOf(ctx, s.env, lane)
	require.NoError(t, err)

	// A replay of the signed revision, the same bytes and signature.
	replay := nats.NewMsg(s.env.Layout.Subject(lane))
	replay.Data = lm.Data
	replay.Header.Set(streams.HeaderSigKey, lm.Header.Get(streams.HeaderSigKey))
	replay.Header.Set(streams.HeaderSig, lm.Header.Get(streams.HeaderSig))
	_, err = s.env.JS.PublishMsg(ctx, replay)
	require.NoError(t, err)
	// An unsigned revision that adds spend: chained properly, no signature.
	var lrev events.LaneRevision
	require.NoError(t, json.Unmarshal(lm.Data, &lrev))
	cur, err := lastOf(ctx, s.env, lane)
	require.NoError(t, err)
	lrev.Chain = events.Chain{Prev: lm.Sequence, PrevHash: events.HashPayload(lm.Data)}
	lrev.Balances[0].Spent = events.MustMoney("9")
	unsigned, err := codec.AppendLane(nil, &lrev)
	require.NoError(t, err)
	_, err = s.env.JS.Publish(ctx, s.env.Layout.Subject(lane), unsigned, jetstream.WithExpectLastSequencePerSubject(cur.Sequence))
	require.NoError(t, err)
	for _, key := range garbageKeys {
		_, err := s.env.JS.Publish(ctx, s.env.Layout.Subject(key), []byte("junk"))
		require.NoError(t, err, key)
	}
	// Real traffic after it all.
	rep2, err := r.Admitter.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "2", RequestID: "after"})
	require.NoError(t, err)
	require.True(t, rep2.Admitted)
	require.NoError(t, r.Ledger.Sync(ctx))

	// The report answers, with the real spend only.
	got, err := r.Reports.Report(ctx, report.ByScope, report.Filter{})
	require.NoError(t, err)
	require.Len(t, got.Groups, 1)
	require.Equal(t, "3", got.Groups[0].Reserved.String(), "what was reserved for real")
	require.Equal(t, "0", got.Groups[0].Spend.String(), "nothing of the unsigned spend")
	// The export and the report replay answer, the same.
	p := projector.New(s.env.JS, s.env.Layout, projector.Verifying(s.trust))
	var csv strings.Builder
	tot, err := report.NewReader(s.env.JS, s.env.Layout, p).ExportCSV(ctx, &csv, report.Filter{})
	require.NoError(t, err)
	require.EqualValues(t, 2, tot.Units[0].Rows)
	replayed, err := report.NewReader(s.env.JS, s.env.Layout, p).Report(ctx, report.Filter{}, report.ByScope)
	require.NoError(t, err)
	require.Equal(t, "3", replayed.Groups[0].Reserved.String())
	// The feed holds the real events only (budget, two admits).
	testenv.WaitFor(t, 30*time.Second, "the feed to take the real events", func() bool { return r.Relay.Relayed() >= 3 })
	fs, err := s.env.JS.Stream(ctx, s.env.Layout.FeedStreamName())
	require.NoError(t, err)
	finfo, err := fs.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, finfo.State.Msgs)
	// The audit lists every skipped message.
	audit, err := projector.Check(ctx, s.env.JS, s.env.Layout, projector.WithTrust(s.trust))
	require.NoError(t, err)
	require.Len(t, audit.Skipped, len(garbageKeys)+2, audit.String())
}

// TestAudit_GivenKeysRefuseAKey: an auditor whose own list retires the
// replicas' key before its last revisions gets those revisions listed as
// refused, and a problem each, while the replay's numbers stay the
// replicas' (the revisions are folded, their chains intact). How it can
// fail: the auditor's list used only as the root of trust printed OK; its
// refusals skipped instead of marked broke every later revision's chain.
func TestAudit_GivenKeysRefuseAKey(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t)
	ctx := ctxT(t)
	r := s.replica(t, false)
	ref := events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}
	_, err := r.Ledger.PutBudget(ctx, ref, events.MustMoney("10"), "USD", time.Now())
	require.NoError(t, err)
	bm, err := lastOf(ctx, s.env, streams.BudgetKey(ref))
	require.NoError(t, err)
	for _, id := range []string{"a1", "a2"} {
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "1", RequestID: id})
		require.NoError(t, err)
		require.True(t, rep.Admitted)
	}
	lane := s.env.Layout.LaneKey(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth})
	lm, err := lastOf(ctx, s.env, lane)
	require.NoError(t, err)

	plain, err := projector.Check(ctx, s.env.JS, s.env.Layout, projector.WithTrust(s.trust))
	require.NoError(t, err)
	require.True(t, plain.OK(), plain.String())

	retired, err := signing.NewKeySet([]signing.Key{{Public: s.k.PublicKey(), Until: bm.Sequence}}, 0)
	require.NoError(t, err)
	audit, err := projector.Check(ctx, s.env.JS, s.env.Layout, projector.WithTrust(retired))
	require.NoError(t, err)
	require.False(t, audit.OK())
	require.Empty(t, audit.Skipped, "nothing skipped: the replicas folded it all")
	require.NotEmpty(t, audit.Refused)
	for _, rf := range audit.Refused {
		require.Greater(t, rf.Seq, bm.Sequence)
		require.Equal(t, signing.ReasonRetiredKey, rf.Reason)
	}
	require.Equal(t, lm.Sequence, audit.Refused[len(audit.Refused)-1].Seq, "the lane's last revision, after the first refused one: its chain holds")
	require.Len(t, audit.Problems, len(audit.Refused), "the refusals are the only problems: the replay equals live\n%s", audit.String())
	require.Equal(t, plain.Events, audit.Events, "the same events folded")
	require.Contains(t, audit.String(), "which the given keys refuse (retired-key); the replicas folded it")
}

// TestAudit_SnapshotSettingsEqualTheReplay: a snapshot signed by a trusted
// key whose tenant limits entry says something the stream does not (a
// buggy or compromised writer) is named by the audit, though its signature
// holds: a replica that loads it holds the tenant to what it carries. How
// it can fail: the audit compared only a snapshot's budgets, prices,
// lanes and balances with the replay, and printed "equals the replay".
func TestAudit_SnapshotSettingsEqualTheReplay(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t)
	ctx := ctxT(t)
	r := s.replica(t, false)
	five := int64(5)
	_, err := r.Ledger.DefineTenantLimits(ctx, "acme", events.TenantLimitValues{MaxOpen: &five}, time.Now())
	require.NoError(t, err)
	info, err := r.Ledger.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Stop())
	audit, err := projector.Check(ctx, s.env.JS, s.env.Layout, projector.WithTrust(s.trust))
	require.NoError(t, err)
	require.True(t, audit.OK(), audit.String())
	require.True(t, audit.Snapshot.Verified)

	// The entry's revision says 5000, and the snapshot is signed again by
	// the trusted key.
	s.resign(t, info, `"max_open":5,`, `"max_open":5000,`)
	s.requireNamed(t, info, "tenantlimits.acme")
}

// resign replaces from with to in snapshot info's body and signs it again
// with the trusted key: a writer that holds the key and states something
// the stream does not.
func (s *signedEnv) resign(t *testing.T, info ledger.SnapshotInfo, from, to string) {
	t.Helper()
	ctx := ctxT(t)
	store, err := s.env.JS.ObjectStore(ctx, s.env.Layout.SnapshotBucket())
	require.NoError(t, err)
	data, err := store.GetBytes(ctx, info.Name)
	require.NoError(t, err)
	nl := bytes.IndexByte(data, '\n')
	var h map[string]any
	require.NoError(t, json.Unmarshal(data[:nl], &h))
	body := bytes.Replace(data[nl+1:], []byte(from), []byte(to), -1)
	require.NotEqual(t, data[nl+1:], body, "the forgery changed %s", from)
	sum := sha256.Sum256(body)
	h["size"], h["sha256"] = len(body), hex.EncodeToString(sum[:])
	version, _ := h["version"].(float64)
	h["signer"], h["sig"] = gate.SignSnapshot(s.k, gate.SnapshotID{Bucket: s.env.Layout.Bucket(), Version: int(version),
		Seq: info.Seq, Size: len(body), SHA256: hex.EncodeToString(sum[:])})
	head, err := json.Marshal(h)
	require.NoError(t, err)
	_, err = store.PutBytes(ctx, info.Name, append(append(head, '\n'), body...))
	require.NoError(t, err)
}

// requireNamed checks that the audit names what in snapshot info, and
// not its signature (the trusted key signed it).
func (s *signedEnv) requireNamed(t *testing.T, info ledger.SnapshotInfo, what string) {
	t.Helper()
	audit, err := projector.Check(ctxT(t), s.env.JS, s.env.Layout, projector.WithTrust(s.trust))
	require.NoError(t, err)
	require.False(t, audit.OK())
	named := false
	for _, p := range audit.Problems {
		named = named || strings.Contains(p, "snapshot "+info.Name) && strings.Contains(p, what)
		require.NotContains(t, p, "signature", "the forgery is signed by the trusted key: only what it says is wrong")
	}
	require.True(t, named, "the audit names the snapshot's %s: %s", what, audit)
}

// TestAudit_SnapshotRetirementEqualsTheReplay: a retired run's balance
// has left the replica's memory, and its budget reads the final numbers
// the snapshot keeps for it. The audit compares them with the replay: a
// snapshot signed by the trusted key whose numbers (or whose retirement's
// reason) the stream does not hold is named. How it can fail: without the
// audit's check of a snapshot's retirements, the forged final spend
// passes and "equals the replay".
func TestAudit_SnapshotRetirementEqualsTheReplay(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t)
	ctx := ctxT(t)
	r := replicatest.Start(t, s.env, replica.Config{SweepInterval: -1, LedgerOptions: []ledger.Option{ledger.WithSigner(s.k),
		ledger.WithTrust(s.trust), ledger.WithSnapshotEvery(0, 0), ledger.WithRetention(time.Second, 2*time.Second)}})
	now := time.Now()
	_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "run:r1", Period: events.PeriodLifetime}, events.MustMoney("1"), "USD", now)
	require.NoError(t, err)
	_, err = r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "team:t", Period: events.PeriodMonth}, events.MustMoney("100"), "USD", now)
	require.NoError(t, err)
	call := func(rid string, scopes ...string) {
		rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: rid, Scopes: scopes, Amount: "0.5"})
		require.NoError(t, err)
		require.True(t, rep.Admitted, "%+v", rep.Denial)
		_, err = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "0.375"})
		require.NoError(t, err)
	}
	call("c1", "run:r1", "team:t")
	_, _, err = r.Ledger.RetireBudget(ctx, events.BudgetRef{Scope: "run:r1", Period: events.PeriodLifetime}, "", "run over", time.Now())
	require.NoError(t, err)
	n := 0
	testenv.WaitFor(t, 30*time.Second, "the run's balance leaves memory", func() bool {
		n++
		call(fmt.Sprint("team-", n), "team:t")
		return r.Ledger.Stats().Balances == 1
	})
	v, err := r.Service.BudgetView(events.BudgetRef{Scope: "run:r1", Period: events.PeriodLifetime})
	require.NoError(t, err)
	require.Equal(t, "0.375", v.Spent)
	info, err := r.Ledger.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Stop())
	audit, err := projector.Check(ctx, s.env.JS, s.env.Layout, projector.WithTrust(s.trust))
	require.NoError(t, err)
	require.True(t, audit.OK(), audit.String())

	s.resign(t, info, `"spent":"0.375"}`, `"spent":"0.001"}`)
	s.requireNamed(t, info, "last balance")
	s.resign(t, info, `"reason":"run over"`, `"reason":"never ran"`)
	s.requireNamed(t, info, "retired at")
}
