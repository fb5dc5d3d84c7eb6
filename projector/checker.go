package projector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// MaxCheckRounds bounds how many times Check folds further to reach a live
// value that was written after its replay: a lane still moving after that
// many rounds is reported as a problem.
const MaxCheckRounds = 8

// Report is the outcome of Check.
type Report struct {
	// Position is the stream sequence the replay reached.
	Position uint64
	// Balances, Reservations and Events count what the replay folded.
	Balances, Reservations, Events int
	// Problems lists every discrepancy found, in the order found; empty
	// means replay equals live.
	Problems []string
	// Snapshot is what Check found of the newest ledger snapshot: it is
	// compared with the replay at its sequence.
	Snapshot SnapshotCheck
	// From is the snapshot the replay started from (WithFromSnapshot);
	// its Name is "" when the replay started at the first message.
	From SnapshotCheck
	// Skipped lists every revision the replay did not fold, as a replica
	// skips it (unsigned, untrusted key, bad signature, malformed, replay,
	// off the chain), in stream order. Each is also a problem.
	Skipped []Skipped
	// Refused lists the revisions the replay folded, as the replicas
	// did, that the keys given to WithTrust refuse: signed by a key they
	// distrust, or retire at until=N, after N. Each is also a problem.
	Refused []Skipped
	// Signed counts the revisions whose signature was verified (0 without
	// WithTrust).
	Signed int
}

// Skipped is one revision that Check, like a replica, did not fold.
type Skipped struct {
	Seq    uint64
	Key    string
	Reason signing.Reason
	// Detail is the decode or chain error, if any.
	Detail string
	// Reviewed: named by WithReviewed, so not a problem.
	Reviewed bool
}

// String is "seq N key K: reason (detail)".
func (s Skipped) String() string {
	out := fmt.Sprintf("seq %d %s: skipped, %s", s.Seq, s.Key, s.Reason)
	if s.Detail != "" {
		out += " (" + s.Detail + ")"
	}
	if s.Reviewed {
		out += ", reviewed"
	}
	return out
}

func (r *Report) skip(o *checkOptions, s Skipped) {
	s.Reviewed = o.reviewed[s.Seq]
	r.Skipped = append(r.Skipped, s)
	if !s.Reviewed {
		r.Problems = append(r.Problems, s.String())
	}
}

// OK reports whether Check found no problem.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// String is a one-line summary followed by one line per problem.
func (r *Report) String() string {
	var b strings.Builder
	if r.From.Name != "" {
		fmt.Fprintf(&b, "replayed %d events from snapshot %s (seq %d) to seq %d: %d balances, %d reservations: ",
			r.Events, r.From.Name, r.From.Seq, r.Position, r.Balances, r.Reservations)
	} else {
		fmt.Fprintf(&b, "replayed %d events to seq %d: %d balances, %d reservations: ",
			r.Events, r.Position, r.Balances, r.Reservations)
	}
	if r.OK() {
		b.WriteString("OK, replay equals live")
		if r.Signed > 0 {
			fmt.Fprintf(&b, "; %d revisions signed by trusted keys", r.Signed)
		}
		if r.Snapshot.Verified {
			fmt.Fprintf(&b, "; snapshot %s equals the replay at seq %d", r.Snapshot.Name, r.Snapshot.Seq)
		}
		for _, s := range r.Skipped {
			b.WriteString("\n  - ")
			b.WriteString(s.String())
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%d problems", len(r.Problems))
	for _, p := range r.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p)
	}
	return b.String()
}

func (r *Report) problemf(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// CheckOption configures Check.
type CheckOption func(*checkOptions)

type checkOptions struct {
	progress        func(seq, last uint64)
	window          bool
	closed, expired time.Duration
	fromSnapshot    bool
	archive         string
	trust           *signing.KeySet
	unverified      bool
	reviewed        map[uint64]bool
	// verified receives the snapshot Check verified, as it read it (Trim
	// trims to it: the bucket is anyone's who may write it, the replica
	// login's, so the object read again later may say something else).
	verified *[]byte
}

// withVerifiedSnapshot has Check put the bytes of the snapshot it verified
// in *data (left alone when none was).
func withVerifiedSnapshot(data *[]byte) CheckOption {
	return func(o *checkOptions) { o.verified = data }
}

// WithUnverified makes Check's gate check no signature (see Unverified):
// decoding and chains are still checked.
func WithUnverified() CheckOption {
	return func(o *checkOptions) { o.unverified = true }
}

// WithArchive has Check (and CatchUp, ReplayUntil) read the archive in
// dir before the stream (see Projector.UseArchive): the audit of a stream
// trimmed below its archive. An archive that fails verification is
// reported as a problem, and nothing is replayed.
func WithArchive(dir string) CheckOption {
	return func(o *checkOptions) { o.archive = dir }
}

func newCheckOptions(opts []CheckOption, window bool) checkOptions {
	o := checkOptions{window: window, closed: DefaultWindowClosed, expired: DefaultWindowExpired}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithWindow sets how long after its close (by the server's clock) a
// replay keeps a settled or released reservation (closed) and an expired
// one (expired) before forgetting it (see window.go): the replay's memory
// then follows what is open plus that window. Check uses
// DefaultWindowClosed and DefaultWindowExpired unless told otherwise;
// CatchUp and ReplayUntil keep everything unless given this option. A
// duration <= 0 keeps everything. A ledger run with longer retentions
// needs at least those here, or the newest snapshot's idempotency window
// is reported as not in the replay.
func WithWindow(closed, expired time.Duration) CheckOption {
	return func(o *checkOptions) {
		o.window = closed > 0 && expired > 0
		o.closed, o.expired = closed, expired
	}
}

// WithFromSnapshot has Check start from the newest ledger snapshot
// instead of the stream's first message: the snapshot must pass its
// digest, and every lane and budget revision it names must be in the
// stream at the sequence it names with the payload hash it names; then
// only the tail after it is replayed and reconciled with the live
// balances. The history before the snapshot is not replayed (a full
// Check verifies snapshots against it). Balance counters (opened,
// settled, ...) count the tail only.
func WithFromSnapshot() CheckOption {
	return func(o *checkOptions) { o.fromSnapshot = true }
}

// WithReviewed names skipped revisions an operator has already looked
// into (see docs/security.md, Recovery): they are still listed in
// Report.Skipped, marked Reviewed, but are no problem. A sequence that is
// not skipped is no problem either; it is simply unused.
func WithReviewed(seqs ...uint64) CheckOption {
	return func(o *checkOptions) {
		if o.reviewed == nil {
			o.reviewed = map[uint64]bool{}
		}
		for _, s := range seqs {
			o.reviewed[s] = true
		}
	}
}

// WithTrust makes ks the anchor of Check's gate: the keys that vouch for
// the ledger's first trust revision, and decide alone while the ledger has
// none (see package gate). Every revision of every key passes the gate as
// a replica's does: what it refuses is skipped, as a replica skips it, and
// reported in Report.Skipped. Without it the ledger's first trust
// revision is trusted on first use.
func WithTrust(ks *signing.KeySet) CheckOption {
	return func(o *checkOptions) { o.trust = ks }
}

// WithProgress has f told the sequence of every message Check folds and
// the stream's last sequence when Check started (f must be quick: it runs
// on the replay's path).
func WithProgress(f func(seq, last uint64)) CheckOption {
	return func(o *checkOptions) { o.progress = f }
}

// Check replays the ledger stream from its first message and reconciles
// the result with the live KV bucket, to the last digit:
//
//   - with WithTrust, every lane and budget revision must be signed by a
//     trusted key (signing.KeySet.Verify);
//   - every message must apply (see State.Apply);
//   - every lane key's live value must be the revision the replay folded
//     last for that lane, and each balance it names must have that
//     revision as its last and state exactly the replayed spent,
//     reserved, overrun, open, limit and unit; no lane may exist on one
//     side only;
//   - per balance, reserved == the sum of the amounts of the reservations
//     open in it, open == their number, and
//     spent + reserved <= limit + overrun;
//   - every reservation has a part in each balance its ReservationOpened
//     lists, all in the same status (a reservation is atomic across
//     budgets).
//
// Check does not stop at the first problem. A balance of a lane revision
// that fails to apply becomes a problem and is quarantined: its later
// revisions are skipped (they would only repeat the first problem) and it
// is left out of the live comparison and of the checks above, while every
// other balance, in that lane too, goes on folding (with one lane, a lane
// is the whole book). A revision a replica skips (a signature that fails,
// a payload that does not decode, a revision off its key's chain) is
// skipped the same way, reported in Report.Skipped with its sequence and
// reason, and the key's chain goes on from its last valid revision; a
// lane whose live value is such a revision is not compared. Any other
// budget revision that fails quarantines its key. A live value written
// after the replay makes Check fold further, up to MaxCheckRounds times.
//
// Problems go into the Report; the error is only for failing to read:
// the stream or bucket lookup, a consumer or KV read error, ErrTrimmed (a
// trimmed stream read from its start without WithArchive; WithFromSnapshot
// needs no archive), or ctx's error.
func Check(ctx context.Context, js jetstream.JetStream, layout streams.Layout, opts ...CheckOption) (*Report, error) {
	o := newCheckOptions(opts, true)
	p := New(js, layout, Verifying(o.trust))
	p.unverified = o.unverified
	s, last, err := p.stream(ctx)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	if o.archive != "" {
		if _, err := p.UseArchive(o.archive); err != nil {
			rep.problemf("%v", err)
			return rep, nil
		}
	}
	if !o.fromSnapshot {
		// A trimmed stream alone does not replay: said once, not as
		// every revision whose predecessor the trim took away.
		if err := p.whole(s, last); err != nil {
			return nil, err
		}
	}
	// Lanes are a property of the stream: a balance's lane must be the
	// one the stream's recorded lane count gives it.
	if n, err := streams.RecordedLanes(s.CachedInfo().Config); err == nil {
		lc := layout.Config()
		lc.Lanes = n
		if l, err := streams.New(lc); err == nil {
			layout = l
		}
	} else {
		rep.problemf("stream %s records no valid lane count: %v", layout.StreamName(), err)
	}
	st := NewState()
	bad := map[string]bool{} // quarantined budget keys and balances (by balance key)
	if o.window {
		st.setWindow(o.closed, o.expired, func(r *Reservation) { checkReservation(rep, st, layout, bad, r) })
	}
	rejected := map[uint64]bool{}
	// The newest snapshot is compared with the replay when the replay
	// stands exactly at its sequence.
	snapName, snapSeq, snapData, haveSnap, misnamed, err := newestSnapshot(ctx, js, layout, last)
	if err != nil {
		return nil, err
	}
	rep.Problems = append(rep.Problems, misnamed...)
	if o.fromSnapshot {
		if !haveSnap {
			return nil, fmt.Errorf("projector: no snapshot to start from in %s", layout.SnapshotBucket())
		}
		if !o.unverified && o.trust != nil {
			// The book it starts from must be one a trusted key signed,
			// as a replica loads only such a snapshot.
			h, herr := snapshotHeader(snapData)
			if herr != nil {
				return nil, fmt.Errorf("projector: snapshot %s: %w", snapName, herr)
			}
			if err := verifySnapshotSig(layout.Bucket(), h, func(pub string) bool { return o.trust.Trusts(pub, h.Seq) }); err != nil {
				return nil, fmt.Errorf("projector: snapshot %s: %w (audit the whole stream instead)", snapName, err)
			}
		}
		if err := st.loadSnapshot(ctx, s, layout, snapData); err != nil {
			return nil, fmt.Errorf("projector: snapshot %s: %w", snapName, err)
		}
		haveSnap = false
		rep.From = SnapshotCheck{Name: snapName, Seq: snapSeq, Verified: true}
	}
	v := p.verifierFrom(st.Position() + 1)
	verifySnap := func() {
		if haveSnap {
			haveSnap = false
			var trusted func(string) bool
			if !o.unverified {
				if ks := v.g.Keys(); ks != nil {
					// Whom the ledger trusted at the snapshot's sequence
					// (the replay stands there), or the auditor's own keys.
					trusted = func(pub string) bool { return ks.Trusts(pub, snapSeq) || o.trust.Trusts(pub, snapSeq) }
				}
			}
			verifySnapshot(rep, st, layout.Bucket(), snapName, snapSeq, snapData, trusted)
			if rep.Snapshot.Verified && o.verified != nil {
				*o.verified = snapData
			}
		}
	}
	if o.fromSnapshot {
		st.seedHeads(v)
	}
	v.refused = func(r *gate.Revision) {
		s := Skipped{Seq: r.Seq, Key: r.Key, Reason: r.Refused, Reviewed: o.reviewed[r.Seq]}
		rep.Refused = append(rep.Refused, s)
		if !s.Reviewed {
			rep.Problems = append(rep.Problems, fmt.Sprintf("seq %d %s: signed by %s, which the given keys refuse (%s); the replicas folded it", r.Seq, r.Key, r.Signer, r.Refused))
		}
	}
	v.rejected = func(rej *gate.Rejection) {
		rep.skip(&o, Skipped{Seq: rej.Seq, Key: rej.Key, Reason: rej.Reason, Detail: rejDetail(rej)})
		rejected[rej.Seq] = true
		st.skip(rej.Seq)
	}
	fold := func(from, until uint64) error {
		if until < from {
			return nil
		}
		return p.readVerified(ctx, s, from, until, v, func(m message) error {
			if o.progress != nil {
				o.progress(m.seq, last)
			}
			// The snapshot is the book as of its own sequence: compared
			// before the window moves to the next message's time (after
			// a quiet spell that time has forgotten what the snapshot
			// still holds).
			if haveSnap && m.seq > snapSeq {
				verifySnap()
			}
			st.advance(m.at)
			if bad[m.key] {
				st.skip(m.seq)
				return nil
			}
			if m.rev.Signer != "" && !o.unverified {
				rep.Signed++
			}
			if streams.IsLaneKey(m.key) {
				// Balance by balance: a bad balance is quarantined, the
				// other balances of the lane go on folding.
				failed, err := st.applyLaneQuarantine(m.seq, m.key, m.data, &parsedLane{rev: *m.rev.Lane}, bad)
				if err != nil {
					if reason, ok := rejection(m.key, err); ok {
						// The gate passed it and the projector's own
						// reading refuses it: skipped as a replica skips
						// it, and said.
						rep.skip(&o, Skipped{Seq: m.seq, Key: m.key, Reason: reason, Detail: detail(err)})
						rejected[m.seq] = true
					} else {
						rep.problemf("%v", &ApplyError{Seq: m.seq, Key: m.key, Err: err})
					}
					st.skip(m.seq)
					return nil
				}
				for _, ref := range slices.SortedFunc(maps.Keys(failed), func(a, b events.BalanceRef) int {
					return strings.Compare(streams.BalanceKey(a), streams.BalanceKey(b))
				}) {
					rep.problemf("%v", &ApplyError{Seq: m.seq, Key: m.key, Err: fmt.Errorf("balance %s: %w", ref, failed[ref])})
					bad[streams.BalanceKey(ref)] = true
				}
				return nil
			}
			if err := st.Apply(m.seq, m.key, m.data); err != nil {
				if reason, ok := rejection(m.key, err); ok {
					rep.skip(&o, Skipped{Seq: m.seq, Key: m.key, Reason: reason, Detail: detail(err)})
					rejected[m.seq] = true
				} else {
					rep.problemf("%v", err)
					bad[m.key] = true
				}
				st.skip(m.seq)
			}
			return nil
		})
	}
	if err := fold(st.Position()+1, last); err != nil {
		return nil, err
	}
	verifySnap() // the snapshot is at the stream's last sequence

	kv, err := js.KeyValue(ctx, layout.Bucket())
	if err != nil {
		return nil, fmt.Errorf("projector: bucket %s: %w", layout.Bucket(), err)
	}
	liveKeys, err := laneKeys(ctx, kv, layout)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{} // live keys compared or reported
	pending := liveKeys
	for round := 0; len(pending) > 0; round++ {
		if round == MaxCheckRounds {
			for _, k := range pending {
				seen[k] = true
				rep.problemf("lane %s: still changing after %d rounds; not compared", k, MaxCheckRounds)
			}
			break
		}
		var later []string
		var until uint64
		for _, key := range pending {
			if bad[key] {
				continue
			}
			e, err := kv.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // deleted since listed: reported below if replayed
			}
			if err != nil {
				return nil, fmt.Errorf("projector: get %s: %w", key, err)
			}
			if e.Revision() > st.Position() {
				later = append(later, key)
				until = max(until, e.Revision())
				continue
			}
			seen[key] = true
			if rejected[e.Revision()] {
				// The live value is a skipped revision (reported above):
				// replicas serve the lane's last valid revision.
				continue
			}
			if o.fromSnapshot && e.Revision() <= rep.From.Seq && e.Revision() != st.lanes[key] {
				// Written before the snapshot the replay started from, so
				// never replayed: passed over only if the gate refuses it
				// on its own (garbage, a forged or unknown signature).
				refused, err := refusedOnItsOwn(ctx, s, layout, v.g, e.Revision())
				if err != nil {
					return nil, err
				}
				if refused {
					continue
				}
			}
			compareLane(rep, st, key, e, bad)
		}
		if err := fold(st.Position()+1, until); err != nil {
			return nil, err
		}
		pending = later
	}
	for _, lane := range slices.Sorted(maps.Keys(st.lanes)) {
		if !bad[lane] && !seen[lane] {
			rep.problemf("lane %s: replayed to seq %d but has no live value", lane, st.lanes[lane])
		}
	}

	for _, b := range st.Balances() {
		if want := layout.LaneKey(b.Ref); b.Lane != want {
			rep.problemf("balance %s: in lane %s, but the stream's %d lane(s) put it in %s", b.Key, b.Lane, layout.Lanes(), want)
		}
	}
	checkInvariants(rep, st, layout, bad)
	rep.Position = st.Position()
	rep.Balances = len(st.balances)
	rep.Reservations = len(st.reservations) + st.Forgotten()
	rep.Events = st.Events()
	return rep, nil
}

// rejection reports whether err, from folding one whole revision of key,
// is one a replica skips (a lane or budget payload that does not decode, a
// revision off its key's chain), and why.
func rejection(key string, err error) (signing.Reason, bool) {
	if err == nil || !(streams.IsLaneKey(key) || streams.IsBudgetKey(key)) {
		return "", false
	}
	if r, ok := signing.ChainReason(err); ok {
		return r, true
	}
	var ae *ApplyError
	if errors.Is(err, ErrMalformed) && (!errors.As(err, &ae) || !strings.HasPrefix(ae.Err.Error(), "balance ")) {
		return signing.ReasonMalformed, true
	}
	return "", false
}

// rejDetail is what a rejection adds to its reason, if anything.
func rejDetail(rej *gate.Rejection) string {
	if rej.Err != nil {
		return rej.Err.Error()
	}
	return ""
}

// detail is err's message without the wrapping that Skipped already says.
func detail(err error) string {
	var ae *ApplyError
	if errors.As(err, &ae) {
		err = ae.Err
	}
	return err.Error()
}

// refusedOnItsOwn reports whether the gate refuses the stream's message at
// seq whatever came before it: it does not decode as its key's kind, or
// its signature does not verify (the chain is not checked).
func refusedOnItsOwn(ctx context.Context, s jetstream.Stream, layout streams.Layout, g *gate.Gate, seq uint64) (bool, error) {
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return false, fmt.Errorf("projector: reading %d: %w", seq, err)
	}
	_, rej := g.Inspect(&gate.Message{Seq: seq, Subject: m.Subject, Header: m.Header, Data: m.Data, At: m.Time})
	return rej != nil, nil
}

// laneKeys lists every live lane key, reading the lister to its end so
// that its goroutine is done when this returns.
func laneKeys(ctx context.Context, kv jetstream.KeyValue, layout streams.Layout) ([]string, error) {
	filter := strings.TrimPrefix(layout.LaneKeysFilter(), layout.KeyPrefix())
	l, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("projector: list lane keys: %w", err)
	}
	var keys []string
	for k := range l.Keys() {
		// A key under the lane family that is no lane of this layout
		// ("lane.7" with 4 lanes, "lane.00") holds nothing a writer
		// wrote: the replay skips it (wrong-lane) and replicas never
		// read it.
		if layout.HasLane(k) {
			keys = append(keys, k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("projector: list lane keys: %w", err)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// compareLane compares one live lane value with the replay, which has
// folded every message up to at least the value's revision.
func compareLane(rep *Report, st *State, lane string, e jetstream.KeyValueEntry, bad map[string]bool) {
	last, ok := st.lanes[lane]
	if !ok {
		rep.problemf("lane %s: live at revision %d but never replayed", lane, e.Revision())
		return
	}
	if e.Revision() != last {
		rep.problemf("lane %s: live revision %d, replay's last revision %d", lane, e.Revision(), last)
		return
	}
	var live events.LaneRevision
	if err := decodeStrict(e.Value(), &live); err != nil {
		rep.problemf("lane %s: live value: %v", lane, err)
		return
	}
	if err := events.UpcastLane(&live); err != nil {
		rep.problemf("lane %s: live value: %v", lane, err)
		return
	}
	for i := range live.Balances {
		if bad[streams.BalanceKey(live.Balances[i].Balance)] {
			continue
		}
		compareBalance(rep, st, lane, e.Revision(), &live.Balances[i])
	}
}

// compareBalance compares one balance of a live lane value at revision rev
// with the replay.
func compareBalance(rep *Report, st *State, lane string, rev uint64, live *events.BalanceRevision) {
	key := streams.BalanceKey(live.Balance)
	b, ok := st.balances[live.Balance]
	if !ok {
		rep.problemf("balance %s: live in lane %s at revision %d but never replayed", key, lane, rev)
		return
	}
	if b.Lane != lane {
		rep.problemf("balance %s: live in lane %s, replayed in lane %s", key, lane, b.Lane)
		return
	}
	if b.Revision != rev {
		rep.problemf("balance %s: live revision %d, replay's last revision %d", key, rev, b.Revision)
		return
	}
	for _, c := range []struct {
		field          string
		live, replayed events.Money
	}{
		{"spent", live.Spent, b.Spent},
		{"reserved", live.Reserved, b.Reserved},
		{"overrun", live.Overrun, b.Overrun},
		{"limit", live.Limit, b.Limit},
	} {
		if c.live.Cmp(c.replayed) != 0 {
			rep.problemf("balance %s: live %s %s, replayed %s", key, c.field, c.live, c.replayed)
		}
	}
	if live.Open != b.Open {
		rep.problemf("balance %s: live open %d, replayed %d", key, live.Open, b.Open)
	}
	if live.Unit != b.Unit {
		rep.problemf("balance %s: live unit %q, replayed %q", key, live.Unit, b.Unit)
	}
}

// checkReservation checks one reservation across its balances: it was
// opened in every balance it lists, and its parts agree on its status.
// Balances in a quarantined lane are left out: the lane of a balance the
// replay never folded is the one layout gives it.
func checkReservation(rep *Report, st *State, layout streams.Layout, bad map[string]bool, r *Reservation) {
	quarantined := func(ref events.BalanceRef) bool {
		if bad[streams.BalanceKey(ref)] {
			return true
		}
		if b, ok := st.balances[ref]; ok {
			return bad[b.Lane]
		}
		return bad[layout.LaneKey(ref)]
	}
	statuses := map[string]bool{}
	for _, ref := range r.Balances {
		if quarantined(ref) {
			continue
		}
		p, ok := r.Parts[ref]
		if !ok {
			rep.problemf("reservation %s: lists balance %s but was never opened there", r.ID, ref)
			continue
		}
		statuses[p.Status] = true
	}
	if len(statuses) > 1 {
		list := make([]string, 0, len(statuses))
		for s := range statuses {
			list = append(list, s)
		}
		slices.Sort(list)
		rep.problemf("reservation %s: parts disagree on its status: %s", r.ID, strings.Join(list, ", "))
	}
}

// checkInvariants checks the replayed state on its own: each balance
// against its open reservations and its limit, each reservation across its
// balances. Balances in a quarantined lane are left out: the lane of a
// balance the replay never folded is the one layout gives it.
func checkInvariants(rep *Report, st *State, layout streams.Layout, bad map[string]bool) {
	type sum struct {
		reserved events.Money
		open     int64
	}
	open := map[events.BalanceRef]sum{}
	for _, r := range st.Reservations() {
		checkReservation(rep, st, layout, bad, &r)
		for ref, p := range r.Parts {
			if p.Status == events.StatusOpen {
				o := open[ref]
				open[ref] = sum{reserved: o.reserved.Add(p.Amount), open: o.open + 1}
			}
		}
	}
	for _, b := range st.Balances() {
		if bad[b.Lane] {
			continue
		}
		o := open[b.Ref]
		if b.Reserved.Cmp(o.reserved) != 0 {
			rep.problemf("balance %s: reserved %s, but its open reservations hold %s", b.Key, b.Reserved, o.reserved)
		}
		if b.Open != o.open {
			rep.problemf("balance %s: open %d, but %d reservations are open in it", b.Key, b.Open, o.open)
		}
		if b.Reserved.Sign() < 0 {
			rep.problemf("balance %s: reserved %s is negative", b.Key, b.Reserved)
		}
		// A limit lowered below what the balance held lets it stay above
		// the limit (no admit lands meanwhile): the bound is what it held
		// then, if larger.
		limit, lowered := b.Limit, ""
		if b.Lowered.Cmp(limit) > 0 {
			limit, lowered = b.Lowered, fmt.Sprintf(" (the limit %s was lowered below the %s it held)", b.Limit, b.Lowered)
		}
		if total, bound := b.Spent.Add(b.Reserved), limit.Add(b.Overrun); total.Cmp(bound) > 0 {
			rep.problemf("balance %s: spent %s + reserved %s = %s exceeds limit %s + overrun %s = %s%s",
				b.Key, b.Spent, b.Reserved, total, limit, b.Overrun, bound, lowered)
		}
	}
}
