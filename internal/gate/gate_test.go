package gate_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

var (
	t0  = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	bal = events.BalanceRef{Scope: "org:g", Period: events.PeriodMonth, Instance: "2026-12"}
)

// fixture is a stream being folded through one gate: write appends a
// message and checks it.
type fixture struct {
	t      *testing.T
	layout streams.Layout
	g      *gate.Gate
	h      *gate.Heads
	seq    uint64
	// last payload per key, to chain the next revision.
	last map[string][]byte
	prev map[string]uint64
}

func newFixture(t *testing.T, anchor *signing.KeySet) *fixture {
	layout := streams.Default()
	return &fixture{t: t, layout: layout, g: gate.New(layout, anchor), h: gate.NewHeads(), last: map[string][]byte{}, prev: map[string]uint64{}}
}

func signer(t *testing.T) *signing.Signer {
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	return s
}

func keys(t *testing.T, pubs ...string) *signing.KeySet {
	var ks []signing.Key
	for _, p := range pubs {
		ks = append(ks, signing.Key{Public: p})
	}
	set, err := signing.NewKeySet(ks, 0)
	require.NoError(t, err)
	return set
}

// lane returns a lane revision chained to the key's last written payload.
func (f *fixture) lane(id string) (string, []byte) { return f.laneWith(id, nil) }

// laneWith is lane with the revision changed by mod before it is encoded.
func (f *fixture) laneWith(id string, mod func(*events.LaneRevision)) (string, []byte) {
	key := f.layout.LaneKey(bal)
	c := events.Chain{Prev: f.prev[key]}
	if d := f.last[key]; d != nil {
		c.PrevHash = events.HashPayload(d)
	}
	rev := events.LaneRevision{Schema: events.SchemaLane, Chain: c, Balances: []events.BalanceRevision{{
		Schema: events.SchemaBalance, Balance: bal, Unit: "USD", Limit: events.MustMoney("1"),
		Spent: events.Zero, Reserved: events.MustMoney("0.1"), Overrun: events.Zero, Open: 1,
		Events: events.Events{events.ReservationOpened{ReservationID: id, RequestID: id, RequestHash: "h", Balance: bal,
			Amount: events.MustMoney("0.1"), Unit: "USD", Balances: []events.BalanceRef{bal}, ExpiresAt: t0.Add(time.Hour), At: t0}},
	}}}
	if mod != nil {
		mod(&rev)
	}
	data, err := codec.AppendLane(nil, &rev)
	require.NoError(f.t, err)
	return key, data
}

func (f *fixture) trust(by *signing.Signer, pubs ...string) (string, []byte) {
	key := streams.TrustKey
	c := events.Chain{Prev: f.prev[key]}
	if d := f.last[key]; d != nil {
		c.PrevHash = events.HashPayload(d)
	}
	rev := events.TrustRevision{Schema: events.SchemaTrust, Chain: c, By: by.PublicKey(), At: t0}
	for _, p := range pubs {
		rev.Keys = append(rev.Keys, events.TrustedKey{Public: p})
	}
	data, err := json.Marshal(rev)
	require.NoError(f.t, err)
	return key, data
}

// write appends data under key, signed by s (nil: unsigned), and checks it.
// A revision that passes becomes what the key's next revision chains to.
func (f *fixture) write(s *signing.Signer, key string, data []byte) (*gate.Revision, *gate.Rejection) {
	f.seq++
	h := nats.Header{}
	if s != nil {
		s.Sign(h, key, data)
	}
	rev, rej := f.g.Check(f.h, &gate.Message{Seq: f.seq, Subject: f.layout.Subject(key), Header: h, Data: data, At: t0})
	if rev != nil {
		f.last[rev.Key], f.prev[rev.Key] = data, rev.Seq
	}
	return rev, rej
}

func TestGate_Garbage(t *testing.T) {
	f := newFixture(t, nil)
	for key, want := range map[string]signing.Reason{
		"balance.x": signing.ReasonOldLayout, "lane.7": signing.ReasonWrongLane, "lane.x": signing.ReasonWrongLane,
		"nothing": signing.ReasonUnknownKey, "lane.0": signing.ReasonMalformed, "budget.org.a.month": signing.ReasonMalformed,
		"pricing.m": signing.ReasonMalformed, "default.user.month": signing.ReasonMalformed, streams.TrustKey: signing.ReasonUnsigned,
		"budget.\x82": signing.ReasonUnknownKey,
	} {
		_, rej := f.write(nil, key, []byte("junk"))
		require.NotNil(t, rej, key)
		require.Equal(t, want, rej.Reason, key)
	}
	// Keys no writer writes leave nothing in the heads.
	require.Zero(t, f.h.Rev("balance.x"))
	require.Zero(t, f.h.Rev("nothing"))
	require.Zero(t, f.h.Rev("budget.\x82"), "not UTF-8: no writer's key, and a snapshot could not name it")
	require.NotZero(t, f.h.Rev("lane.0"), "a skipped lane revision is what the next write names")
}

// TestGate_LaneContentAWriterCouldWrite: a lane revision on its chain,
// decodable, but whose content no writer writes (an event without the id
// it changes, of another balance, a balance named twice, a negative
// amount) is refused as malformed, and the next revision chains past it.
// The book would otherwise fold it and write a snapshot that cannot be
// loaded back (a void of request "" was the fuzzer's find). How it can
// fail: without the gate's content check every case below passes.
func TestGate_LaneContentAWriterCouldWrite(t *testing.T) {
	other := events.BalanceRef{Scope: "org:h", Period: events.PeriodMonth, Instance: "2026-12"}
	for name, mod := range map[string]func(*events.LaneRevision){
		"void with no request id": func(r *events.LaneRevision) {
			r.Balances[0].Events = events.Events{events.RequestVoided{Balance: bal, At: t0}}
		},
		"settle with no reservation id": func(r *events.LaneRevision) {
			r.Balances[0].Events = events.Events{events.ReservationSettled{Balance: bal, Reserved: events.Zero, Actual: events.Zero, Overrun: events.Zero, At: t0}}
		},
		"open with no request id": func(r *events.LaneRevision) {
			e := r.Balances[0].Events[0].(events.ReservationOpened)
			e.RequestID = ""
			r.Balances[0].Events[0] = e
		},
		"open not naming its balance": func(r *events.LaneRevision) {
			e := r.Balances[0].Events[0].(events.ReservationOpened)
			e.Balances = []events.BalanceRef{other}
			r.Balances[0].Events[0] = e
		},
		"event of another balance": func(r *events.LaneRevision) {
			r.Balances[0].Events = events.Events{events.RequestVoided{RequestID: "q", Balance: other, At: t0}}
		},
		"balance twice": func(r *events.LaneRevision) { r.Balances = append(r.Balances, r.Balances[0]) },
		"negative spent": func(r *events.LaneRevision) {
			require.NoError(t, r.Balances[0].Spent.UnmarshalJSON([]byte(`"-1"`)))
		},
		"negative open":      func(r *events.LaneRevision) { r.Balances[0].Open = -1 },
		"no unit":            func(r *events.LaneRevision) { r.Balances[0].Unit = "" },
		"a scope of nothing": func(r *events.LaneRevision) { r.Balances[0].Balance.Scope = "" },
	} {
		f := newFixture(t, nil)
		key, bad := f.laneWith("a", mod)
		_, rej := f.write(nil, key, bad)
		require.NotNil(t, rej, name)
		require.Equal(t, signing.ReasonMalformed, rej.Reason, name)
		_, good := f.lane("b")
		rev, rej := f.write(nil, key, good)
		require.Nil(t, rej, name)
		require.NotNil(t, rev, name)
	}
}

func TestGate_ChainAndReplay(t *testing.T) {
	f := newFixture(t, nil)
	key, d1 := f.lane("a")
	rev, rej := f.write(nil, key, d1)
	require.Nil(t, rej)
	require.NotNil(t, rev)
	_, d2 := f.lane("b")
	_, rej = f.write(nil, key, d2)
	require.Nil(t, rej)
	// The first revision written again: a replay.
	_, rej = f.write(nil, key, d1)
	require.NotNil(t, rej)
	require.Equal(t, signing.ReasonReplay, rej.Reason)
	// An unchained (version 1) revision after chained ones: a replay too.
	v1 := events.LaneRevision{Schema: events.SchemaLaneV1, Balances: []events.BalanceRevision{{Schema: events.SchemaBalance, Balance: bal,
		Unit: "USD", Limit: events.MustMoney("1"), Spent: events.Zero, Reserved: events.Zero, Overrun: events.Zero, Events: events.Events{}}}}
	data, err := json.Marshal(v1)
	require.NoError(t, err)
	_, rej = f.write(nil, key, data)
	require.NotNil(t, rej)
	require.Equal(t, signing.ReasonReplay, rej.Reason)
	valid, _ := f.h.Valid(key)
	require.EqualValues(t, 2, valid)
	require.EqualValues(t, 4, f.h.Rev(key))
}

// TestGate_TrustFromTheLedger: the first trust revision passes when the
// anchor trusts its signer; from then on the ledger decides who may sign,
// and the anchor no longer does.
func TestGate_TrustFromTheLedger(t *testing.T) {
	a, b, c := signer(t), signer(t), signer(t)
	f := newFixture(t, keys(t, a.PublicKey()))
	// A trust revision by a key the anchor does not trust is garbage.
	key, data := f.trust(c, c.PublicKey())
	_, rej := f.write(c, key, data)
	require.NotNil(t, rej)
	require.Equal(t, signing.ReasonUntrustedKey, rej.Reason)
	key, data = f.trust(a, a.PublicKey(), b.PublicKey())
	rev, rej := f.write(a, key, data)
	require.Nil(t, rej)
	require.Equal(t, gate.KindTrust, rev.Kind)
	require.NoError(t, f.g.MayWrite(b.PublicKey(), f.seq))
	require.Error(t, f.g.MayWrite(c.PublicKey(), f.seq))
	lk, ld := f.lane("by-b")
	_, rej = f.write(b, lk, ld)
	require.Nil(t, rej, "b is trusted by the ledger, not by the anchor")
	// Unsigned is refused once keys are checked.
	_, ld = f.lane("unsigned")
	_, rej = f.write(nil, lk, ld)
	require.NotNil(t, rej)
	require.Equal(t, signing.ReasonUnsigned, rej.Reason)
}

// TestGate_TrustOnFirstUse: with no anchor, the first trust revision passes
// only from a key it lists itself.
func TestGate_TrustOnFirstUse(t *testing.T) {
	a, b := signer(t), signer(t)
	f := newFixture(t, nil)
	key, data := f.trust(a, b.PublicKey())
	_, rej := f.write(a, key, data)
	require.NotNil(t, rej)
	key, data = f.trust(a, a.PublicKey())
	_, rej = f.write(a, key, data)
	require.Nil(t, rej)
	require.Error(t, f.g.MayWrite(b.PublicKey(), f.seq))
}

// TestGate_UnknownSignerIsGarbage: a revision validly signed by a key the
// ledger does not trust is skipped like garbage (replicas refuse to write
// with such a key, so it is nobody's acknowledged work), its key's next
// write lands after it; a distrusted key likewise; and KnowsSigner tells a
// reader reading ahead of its fold that it must bring its trust up to date
// before it decides. How we know it can fail: the signature is valid and
// the revision follows its key's chain; only the trust state refuses it.
func TestGate_UnknownSignerIsGarbage(t *testing.T) {
	a, b, c := signer(t), signer(t), signer(t)
	f := newFixture(t, keys(t, a.PublicKey()))
	key, data := f.trust(a, a.PublicKey())
	_, rej := f.write(a, key, data)
	require.Nil(t, rej)
	lk, d1 := f.lane("by-b")
	m := &gate.Message{Seq: f.seq + 1, Subject: f.layout.Subject(lk), Header: nats.Header{}, Data: d1}
	b.Sign(m.Header, lk, d1)
	require.False(t, f.g.KnowsSigner(m), "a reader ahead of its fold must refresh its trust first")
	_, rej = f.write(b, lk, d1)
	require.NotNil(t, rej)
	require.Equal(t, signing.ReasonUntrustedKey, rej.Reason)
	require.EqualValues(t, f.seq, f.h.Rev(lk), "the key's next write lands after it")
	valid, _ := f.h.Valid(lk)
	require.Zero(t, valid)

	rev := events.TrustRevision{Schema: events.SchemaTrust, Chain: events.Chain{Prev: 1, PrevHash: events.HashPayload(data)},
		Keys: []events.TrustedKey{{Public: a.PublicKey()}}, Distrusted: []string{c.PublicKey()}, By: a.PublicKey(), At: t0}
	tdata, err := json.Marshal(rev)
	require.NoError(t, err)
	_, rej = f.write(a, streams.TrustKey, tdata)
	require.Nil(t, rej)
	_, d2 := f.lane("by-c")
	m = &gate.Message{Seq: f.seq + 1, Subject: f.layout.Subject(lk), Header: nats.Header{}, Data: d2}
	c.Sign(m.Header, lk, d2)
	require.True(t, f.g.KnowsSigner(m), "a distrusted key is decided")
	_, rej = f.write(c, lk, d2)
	require.NotNil(t, rej)
	require.Equal(t, signing.ReasonDistrustedKey, rej.Reason)
}

// TestGate_AuditorMarksWhatItsListRefuses: a reader that only reads
// (gate.NewAuditor) folds what a replica's gate (gate.New) folds, and marks
// each revision its own list refuses (Revision.Refused): signed by a key it
// distrusts, or retires at until=N after N, a trust revision included. A
// later revision by a trusted key, chained to a marked one, folds: the
// chain is the replicas'. How it can fail: with the auditor's list used only
// as the root of trust (as a replica uses its own), an auditor who
// distrusts b printed OK for every revision b signed; with the list's
// refusals skipped instead of marked, a's revision after b's broke its chain
// and every later spend on the lane dropped out of the auditor's numbers.
func TestGate_AuditorMarksWhatItsListRefuses(t *testing.T) {
	a, b, c := signer(t), signer(t), signer(t)
	distrustB, err := keys(t, a.PublicKey()).WithDistrusted(b.PublicKey())
	require.NoError(t, err)
	retireB, err := signing.NewKeySet([]signing.Key{{Public: a.PublicKey()}, {Public: b.PublicKey(), Until: 3}}, 0)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		anchor *signing.KeySet
		want   []signing.Reason // of seq 2, 3, 4 (b's lane revisions), 5 (b's trust revision adding c)
	}{
		{"b distrusted", distrustB, []signing.Reason{signing.ReasonDistrustedKey, signing.ReasonDistrustedKey, signing.ReasonDistrustedKey, signing.ReasonDistrustedKey}},
		{"b retired after 3", retireB, []signing.Reason{"", "", signing.ReasonRetiredKey, signing.ReasonRetiredKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replica, auditor := newFixture(t, keys(t, a.PublicKey())), newFixture(t, tc.anchor)
			auditor.g = gate.NewAuditor(auditor.layout, tc.anchor)
			both := func(s *signing.Signer, write func(f *fixture) (string, []byte)) []*gate.Revision {
				var out []*gate.Revision
				for _, f := range []*fixture{replica, auditor} {
					key, data := write(f)
					rev, rej := f.write(s, key, data)
					require.Nil(t, rej, "seq %d: both fold it", f.seq)
					out = append(out, rev)
				}
				return out
			}
			both(a, func(f *fixture) (string, []byte) { return f.trust(a, a.PublicKey(), b.PublicKey()) }) // seq 1
			for i, want := range tc.want {
				var revs []*gate.Revision
				if i < 3 {
					revs = both(b, func(f *fixture) (string, []byte) { return f.lane(fmt.Sprint("by-b-", i)) })
				} else {
					revs = both(b, func(f *fixture) (string, []byte) { return f.trust(b, a.PublicKey(), b.PublicKey(), c.PublicKey()) })
				}
				require.Empty(t, revs[0].Refused, "a replica's gate marks nothing")
				require.Equal(t, want, revs[1].Refused, "seq %d", revs[1].Seq)
			}
			// a's revision after b's: chained to b's, it folds on both.
			revs := both(a, func(f *fixture) (string, []byte) { return f.lane("by-a") })
			require.Empty(t, revs[1].Refused)
		})
	}
}

// TestGate_SkippedOnlyHeadsBounded: garbage under keys no one defined
// ("budget.<anything>", "pricing.<anything>", ...), which a login that may
// write the stream can name without end, holds at most MaxSkippedOnly heads;
// the oldest are forgotten first, a key whose revision passed keeps its
// head, and a snapshot's heads (Set) are bounded alike. How it can fail:
// without the bound every key below keeps a head, 3x the bound.
func TestGate_SkippedOnlyHeadsBounded(t *testing.T) {
	f := newFixture(t, nil)
	f.write(nil, "pricing.kept", []byte("junk"))
	for i := range 3 * gate.MaxSkippedOnly {
		_, rej := f.write(nil, fmt.Sprintf("budget.org.g%d.month", i), []byte("junk"))
		require.NotNil(t, rej)
	}
	require.LessOrEqual(t, f.h.Len(), gate.MaxSkippedOnly)
	require.Zero(t, f.h.Rev("pricing.kept"), "the oldest is forgotten")
	require.NotZero(t, f.h.Rev(fmt.Sprintf("budget.org.g%d.month", 3*gate.MaxSkippedOnly-1)), "the newest is kept")

	h := gate.NewHeads()
	h.Set("lane.0", gate.Head{Valid: 7, Hash: "h"})
	for i := range 2 * gate.MaxSkippedOnly {
		h.Set(fmt.Sprintf("budget.org.s%d.month", i), gate.Head{Seen: uint64(10 + i)})
	}
	require.Equal(t, gate.MaxSkippedOnly+1, h.Len())
	require.Equal(t, uint64(7), h.Rev("lane.0"), "a head a revision passed is never forgotten")
}
