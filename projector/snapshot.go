package projector

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// The projector reads a ledger snapshot (see package ledger: a header line
// with its size and SHA-256, then a JSON body; from version 3 a JSON line
// and the idempotency window as a binary section, snapshot_window.go) with
// its own decoder, from the snapshot format alone, and compares what it
// states with its own replay at the snapshot's sequence. Only the fields
// it compares are decoded.

type snapHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Seq     uint64 `json:"seq"`
	Size    int    `json:"size"`
	SHA256  string `json:"sha256"`
	// Signer and Sig sign it from version 4 (see gate.SignSnapshot).
	Signer string `json:"signer"`
	Sig    string `json:"sig"`
}

type snapKey struct {
	Key  string `json:"key"`
	Rev  uint64 `json:"rev"`
	Hash string `json:"hash"`
}

// snapDef is a definition key of a snapshot with the revision it was
// folded from.
type snapDef struct {
	snapKey
	Revision json.RawMessage `json:"revision"`
	// Retirement is a retired budget's time and reason and the final
	// numbers of the latest of its balances a replica dropped.
	Retirement *struct {
		At     *time.Time `json:"at"`
		Reason string     `json:"reason"`
		Last   *struct {
			Instance string        `json:"instance"`
			Rev      uint64        `json:"rev"`
			Spent    events.Money  `json:"spent"`
			Overrun  *events.Money `json:"overrun"`
		} `json:"last"`
	} `json:"retirement"`
}

type snapBody struct {
	Seq      uint64    `json:"seq"`
	Budgets  []snapDef `json:"budgets"`
	Prices   []snapDef `json:"prices"`
	Defaults []snapDef `json:"defaults"`
	// APIKeys and TenantLimits are the operator's settings (State.settings).
	APIKeys      []snapDef `json:"api_keys"`
	TenantLimits []snapDef `json:"tenant_limits"`
	LaneRevs     []snapKey `json:"lane_revisions"`
	Balances     []struct {
		Key      string            `json:"key"`
		Ref      events.BalanceRef `json:"ref"`
		Rev      uint64            `json:"rev"`
		Spent    events.Money      `json:"spent"`
		Reserved events.Money      `json:"reserved"`
		Overrun  events.Money      `json:"overrun"`
		Open     []string          `json:"open"`
	} `json:"balances"`
	Reservations []snapRes `json:"reservations"`
	// Closed and Expired are the idempotency window; from version 2 each
	// entry carries its reservation (version 1 lists it in Reservations).
	Closed  []snapClosed `json:"closed"`
	Expired []snapClosed `json:"expired"`
	// WindowSize is the length of the window section (version 3).
	WindowSize int `json:"window_size"`
	Voids      []struct {
		RequestID string `json:"request_id"`
	} `json:"voids"`
	// Sections are the readers' states (version 4), not read here.
	Sections map[string]json.RawMessage `json:"sections"`
}

type snapRes struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

type snapClosed struct {
	ID          string   `json:"id"`
	Reservation *snapRes `json:"reservation"`
}

// snapshotFormat and snapshotVersion are the encoding this decoder reads
// (versions 1 to snapshotVersion); snapshotLookup bounds finding and
// listing the snapshot bucket.
const (
	snapshotLookup  = 10 * time.Second
	snapshotFormat  = "spendgate.snapshot"
	snapshotVersion = 5
)

// SnapshotCheck is what Check found of the newest snapshot.
type SnapshotCheck struct {
	// Name and Seq name the snapshot checked ("" when there is none).
	Name string
	Seq  uint64
	// Verified: it decoded, passed its digest and equals the replay at
	// Seq; otherwise its problems are in the Report's Problems.
	Verified bool
}

// newestSnapshot reads the newest snapshot at or below last. ok is false
// when there is none (no bucket, no snapshot). An object whose header
// names another sequence than its name (a snapshot copied under a later
// name: replicas skip it) is passed over for an older one and listed in
// misnamed, for the audit to report, as is one that cannot be read (the
// problems the audit reports, whose snapshots replicas skip).
// A bucket that cannot be found or listed (it does not exist, or the
// auditor's permissions do not cover it) means no snapshot to check; the
// lookup is bounded so that it cannot hold the audit up.
func newestSnapshot(ctx context.Context, js jetstream.JetStream, layout streams.Layout, last uint64) (name string, seq uint64, data []byte, ok bool, misnamed []string, err error) {
	lctx, cancel := context.WithTimeout(ctx, snapshotLookup)
	defer cancel()
	store, err := js.ObjectStore(lctx, layout.SnapshotBucket())
	if err != nil {
		return "", 0, nil, false, nil, ctx.Err()
	}
	// Not store.List: metas are anyone's who may write the bucket, and it
	// decodes each whole (see streams.ListObjects).
	objs, err := streams.ListObjects(lctx, js, layout.SnapshotBucket(), func(name string) bool {
		s, ok := streams.SnapshotSeq(name)
		return ok && s <= last
	})
	if err != nil {
		return "", 0, nil, false, nil, ctx.Err()
	}
	type cand struct {
		name string
		seq  uint64
		o    streams.ObjectEntry
	}
	var cands []cand
	for _, o := range objs {
		s, _ := streams.SnapshotSeq(o.Name)
		cands = append(cands, cand{o.Name, s, o})
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.seq, a.seq) })
	for i, c := range cands {
		if i == snapshotTries {
			misnamed = append(misnamed, fmt.Sprintf("snapshots: the newest %d at or below seq %d are copies or unreadable; older ones not read", i, last))
			break
		}
		if c.o.Link {
			// Its read would follow links, one to itself included, until
			// it timed out.
			misnamed = append(misnamed, fmt.Sprintf("snapshot %s: its meta links to another object, which replicas skip", c.name))
			continue
		}
		if has, err := streams.ObjectHasChunks(ctx, js, layout.SnapshotBucket(), c.o.NUID); err == nil && !has && c.o.Size > 0 {
			// Its read would wait for chunks that never come.
			misnamed = append(misnamed, fmt.Sprintf("snapshot %s: its meta names chunks %q, none of one object the bucket holds: written by no object store, which replicas skip", c.name, c.o.NUID))
			continue
		}
		if line, err := streams.ReadObjectLine(ctx, store, c.name, snapshotHeaderMax); err == nil {
			var h snapHeader
			if json.Unmarshal(line, &h) == nil && h.Seq != c.seq {
				misnamed = append(misnamed, fmt.Sprintf("snapshot %s: its header says sequence %d: a copy under another name, which replicas skip", c.name, h.Seq))
				continue
			}
		}
		data, err = streams.ReadObject(ctx, store, c.name)
		if err != nil {
			if ctx.Err() != nil {
				return "", 0, nil, false, misnamed, ctx.Err()
			}
			// Replicas skip it too: the audit checks the next.
			misnamed = append(misnamed, fmt.Sprintf("snapshot %s: unreadable (%v), which replicas skip", c.name, err))
			continue
		}
		return c.name, c.seq, data, true, misnamed, nil
	}
	return "", 0, nil, false, misnamed, nil
}

// snapshotTries bounds how many snapshots newestSnapshot reads, as a
// replica at start: each that fails can take seconds (an object whose
// chunks never come fails when the read times out), and anyone who may
// write the bucket can write any number of them.
const snapshotTries = 8

// snapshotHeaderMax bounds what newestSnapshot reads of an object to
// check its header's sequence.
const snapshotHeaderMax = 4 << 10

// CheckSnapshotFile checks a ledger snapshot's bytes (a copy that Trim
// kept, say) before they are put back into bucket's snapshot bucket: its
// header, digest and body decode, and, with trusted (nil: signatures are
// not checked), its signature by a key trusted at its sequence. It returns
// the name the snapshot has in the bucket (streams.SnapshotName of its
// sequence) and the sequence.
func CheckSnapshotFile(data []byte, bucket string, trusted *signing.KeySet) (name string, seq uint64, err error) {
	h, err := snapshotHeader(data)
	if err != nil {
		return "", 0, fmt.Errorf("projector: not a ledger snapshot: %w", err)
	}
	if trusted != nil {
		if err := verifySnapshotSig(bucket, h, func(pub string) bool { return trusted.Trusts(pub, h.Seq) }); err != nil {
			return "", 0, fmt.Errorf("projector: snapshot at seq %d: %w", h.Seq, err)
		}
	}
	if _, err := decodeSnap(data); err != nil {
		return "", 0, fmt.Errorf("projector: snapshot at seq %d: %w", h.Seq, err)
	}
	return streams.SnapshotName(h.Seq), h.Seq, nil
}

// verifySnapshotSig checks that the snapshot whose header is h, in bucket's
// snapshot bucket, was signed by a key trusted accepts. The signature
// covers the header (the body's size and digest), not the body itself.
func verifySnapshotSig(bucket string, h snapHeader, trusted func(pub string) bool) error {
	id := gate.SnapshotID{Bucket: bucket, Version: h.Version, Seq: h.Seq, Size: h.Size, SHA256: h.SHA256}
	return gate.VerifySnapshot(id, h.Signer, h.Sig, trusted)
}

func decodeSnap(data []byte) (*snapBody, error) {
	b, _, err := decodeSnapParts(data)
	return b, err
}

// snapshotHeader reads a snapshot's header line.
func snapshotHeader(data []byte) (snapHeader, error) {
	var h snapHeader
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return h, errors.New("no header line")
	}
	if err := json.Unmarshal(data[:nl], &h); err != nil {
		return h, fmt.Errorf("header: %v", err)
	}
	return h, nil
}

// snapParts are the parts of a checked snapshot: the JSON of its body and
// (version 3) the window's queues, read from the window section.
type snapParts struct {
	json   []byte
	window *[2][]snapFullQ
}

// decodeSnapParts checks data's header and digest and decodes its body.
func decodeSnapParts(data []byte) (*snapBody, *snapParts, error) {
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, nil, errors.New("no header line")
	}
	var h snapHeader
	if err := json.Unmarshal(data[:nl], &h); err != nil {
		return nil, nil, fmt.Errorf("header: %v", err)
	}
	if h.Format != snapshotFormat || h.Version < 1 || h.Version > snapshotVersion {
		return nil, nil, fmt.Errorf("format %q version %d", h.Format, h.Version)
	}
	body := data[nl+1:]
	if len(body) != h.Size {
		return nil, nil, fmt.Errorf("body of %d bytes, header says %d", len(body), h.Size)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return nil, nil, errors.New("digest mismatch")
	}
	parts := &snapParts{json: body}
	var section []byte
	if h.Version >= 3 {
		nl := bytes.IndexByte(body, '\n')
		if nl < 0 {
			return nil, nil, errors.New("body: no JSON line")
		}
		parts.json, section = body[:nl], body[nl+1:]
	}
	var b snapBody
	if err := json.Unmarshal(parts.json, &b); err != nil {
		return nil, nil, fmt.Errorf("body: %v", err)
	}
	if b.Seq != h.Seq {
		return nil, nil, fmt.Errorf("body at seq %d, header says %d", b.Seq, h.Seq)
	}
	if h.Version >= 3 {
		if len(b.Closed)+len(b.Expired) > 0 || b.WindowSize != len(section) {
			return nil, nil, fmt.Errorf("version 3 with queues in its JSON, or a window section of %d bytes (window_size %d)", len(section), b.WindowSize)
		}
		bals := make([]snapBalRef, len(b.Balances))
		for i, sb := range b.Balances {
			bals[i] = snapBalRef{sb.Key, sb.Ref}
		}
		qs, err := decodeWindow(section, bals, h.Version)
		if err != nil {
			return nil, nil, err
		}
		parts.window = &qs
		// A reservation of the book (the JSON line's) is not in the
		// window too: the ledger's loader refuses the snapshot, which
		// would give a replica two states of one reservation.
		book := make(map[string]bool, len(b.Reservations))
		for _, r := range b.Reservations {
			book[r.ID] = true
		}
		for _, q := range qs {
			for _, c := range q {
				if book[c.ID] {
					return nil, nil, fmt.Errorf("window: reservation %s twice: in the book and in the window", c.ID)
				}
			}
		}
		for i, q := range qs {
			list := &b.Closed
			if i == 1 {
				list = &b.Expired
			}
			for _, c := range q {
				*list = append(*list, snapClosed{ID: c.ID, Reservation: &snapRes{ID: c.Reservation.ID, Status: c.Reservation.Status}})
			}
		}
	}
	if h.Version >= 2 {
		for _, q := range [][]snapClosed{b.Closed, b.Expired} {
			for _, c := range q {
				if c.Reservation == nil || c.Reservation.ID != c.ID {
					return nil, nil, fmt.Errorf("window entry %s carries no reservation", c.ID)
				}
				b.Reservations = append(b.Reservations, *c.Reservation)
			}
		}
	}
	return &b, parts, nil
}

// verifySnapshot compares snapshot data (named name, at seq, in bucket)
// with st, the replay up to exactly seq, and reports every difference. With
// trusted (nil: signatures are not checked), a snapshot no key it accepts
// signed is a problem: a replica would not load it.
func verifySnapshot(rep *Report, st *State, bucket, name string, seq uint64, data []byte, trusted func(pub string) bool) {
	before := len(rep.Problems)
	pf := func(format string, args ...any) {
		rep.problemf("snapshot %s: "+format, append([]any{name}, args...)...)
	}
	if data == nil {
		pf("unreadable")
		return
	}
	if trusted != nil {
		// Before its body is decoded: JSON decodes into many times its
		// size, and a body no trusted key signed (its digest its writer's
		// own) is anyone's who may write the bucket. A replica would not
		// load it; what it holds is not compared.
		h, _ := snapshotHeader(data)
		if err := verifySnapshotSig(bucket, h, trusted); err != nil {
			pf("%v", err)
			return
		}
	}
	b, err := decodeSnap(data)
	if err != nil {
		pf("%v", err)
		return
	}
	verifyDefinitions(pf, st, b)
	verifyRetirements(pf, st, b)
	verifyLastRevisions(pf, st, b)
	lanes := map[string]bool{}
	for _, k := range b.LaneRevs {
		lanes[k.Key] = true
		if st.lanes[k.Key] != k.Rev || st.hashes[k.Key] != k.Hash {
			pf("lane %s at %d (%s), the replay at %d (%s)", k.Key, k.Rev, k.Hash, st.lanes[k.Key], st.hashes[k.Key])
		}
	}
	for lane := range st.lanes {
		if !lanes[lane] {
			pf("lane %s is missing", lane)
		}
	}
	budgets := map[string]bool{}
	for _, k := range b.Budgets {
		budgets[k.Key] = true
		if st.hashes[k.Key] != k.Hash {
			pf("budget %s at %d (%s), the replay's hash %s", k.Key, k.Rev, k.Hash, st.hashes[k.Key])
		}
	}
	for ref := range st.budgets {
		if !budgets[streams.BudgetKey(ref)] {
			pf("budget %s is missing", streams.BudgetKey(ref))
		}
	}
	inSnap := make(map[events.BalanceRef]bool, len(b.Balances))
	for _, sb := range b.Balances {
		inSnap[sb.Ref] = true
	}
	// A replica drops a minute or hour balance that can no longer change,
	// and a retired budget's (internal/ledger/prune.go): the snapshot may
	// leave out a balance of the replay whose instance has ended, or whose
	// budget was retired, with nothing open in it. Any
	// other balance must be there; that the dropped one is never written
	// again is checked by the replay's fold of every later revision.
	for ref, bl := range st.balances {
		if !inSnap[ref] && !st.sealed(bl) {
			pf("balance %s is missing (%d open, instance %s)", bl.Key, bl.Open, ref.Instance)
		}
	}
	for _, sb := range b.Balances {
		bl, ok := st.balances[sb.Ref]
		if !ok {
			pf("balance %s is not in the replay", sb.Key)
			continue
		}
		if bl.Spent.Cmp(sb.Spent) != 0 || bl.Reserved.Cmp(sb.Reserved) != 0 || bl.Overrun.Cmp(sb.Overrun) != 0 ||
			bl.Open != int64(len(sb.Open)) || bl.Revision != sb.Rev {
			pf("balance %s: spent %s reserved %s overrun %s open %d at %d; the replay: spent %s reserved %s overrun %s open %d at %d",
				sb.Key, sb.Spent, sb.Reserved, sb.Overrun, len(sb.Open), sb.Rev, bl.Spent, bl.Reserved, bl.Overrun, bl.Open, bl.Revision)
		}
		for _, id := range sb.Open {
			r, ok := st.reservations[id]
			if !ok || r.Parts[sb.Ref].Status != events.StatusOpen {
				pf("balance %s: reservation %s is open, not in the replay", sb.Key, id)
			}
		}
	}
	// A snapshot may stand between two messages of an atomic batch that
	// closes a reservation over two lanes: the ledger's book calls it
	// closed at its first close, the replay open until its last. Such a
	// reservation (some parts closed, some open) is compared as closed.
	open := 0
	for _, sr := range b.Reservations {
		r, status, ok := st.statusOf(sr.ID)
		switch {
		case !ok:
			pf("reservation %s is not in the replay (if it closed longer ago than the audit's window, widen --window)", sr.ID)
		case status != sr.Status && !(r != nil && partlyClosed(r) && sr.Status != events.StatusOpen):
			pf("reservation %s is %s, the replay %s", sr.ID, sr.Status, status)
		}
		if sr.Status == events.StatusOpen {
			open++
		}
	}
	replayOpen := 0
	for _, r := range st.reservations {
		if r.Status == events.StatusOpen && !partlyClosed(r) {
			replayOpen++
		}
	}
	if open != replayOpen {
		pf("%d open reservations, the replay %d", open, replayOpen)
	}
	// The snapshot remembers the voids of its idempotency window: each
	// must be a void of the replay (whose window keeps a void at least as
	// long as a replica with the same retention).
	for _, v := range b.Voids {
		if !st.Voided(v.RequestID) {
			pf("void of request %s is not in the replay (if it was voided longer ago than the audit's window, widen --window)", v.RequestID)
		}
	}
	rep.Snapshot = SnapshotCheck{Name: name, Seq: seq, Verified: len(rep.Problems) == before}
}

// sealed reports whether a replica may have dropped bl from its book: a
// balance with nothing open of a budget retired by the replay's position,
// or a minute or hour balance with nothing open whose instance (in its
// budget's time zone) ended by the replay's time.
func (s *State) sealed(bl *Balance) bool {
	ref := bl.Ref
	if bl.Open != 0 {
		return false
	}
	if b := s.budgets[ref.Budget()]; b != nil && b.Retired {
		return true
	}
	if ref.Period != events.PeriodMinute && ref.Period != events.PeriodHour {
		return false
	}
	var loc *time.Location
	if b := s.budgets[ref.Budget()]; b != nil {
		l, err := events.LoadZone(b.TZ)
		if err != nil {
			return false
		}
		loc = l
	}
	_, end, ok := events.CalendarOf(ref.Period, loc).InstanceBounds(ref.Instance)
	return ok && !end.After(s.at)
}

// verifyDefinitions compares the budget and price definitions a snapshot
// states with the replay's: the revisions it carries could have been
// changed under a recomputed digest.
func verifyDefinitions(pf func(string, ...any), st *State, b *snapBody) {
	for _, d := range b.Budgets {
		rev, err := events.DecodeBudgetRevision(d.Revision)
		if err != nil {
			pf("budget %s: %v", d.Key, err)
			continue
		}
		cur, ok := st.budgets[rev.Budget]
		if !ok || streams.BudgetKey(rev.Budget) != d.Key {
			continue // reported as missing or not in the replay by the hash check
		}
		if cur.Retired != rev.Retired {
			pf("budget %s: retired %v; the replay: retired %v", d.Key, rev.Retired, cur.Retired)
		}
		if cur.Limit.Cmp(rev.Limit) != 0 || cur.Unit != rev.Unit || cur.TZ != rev.TZ || cur.Disabled != rev.Disabled ||
			slotString(cur.FixedSlot) != slotString(rev.FixedSlot) || moneyList(cur.Thresholds) != moneyList(rev.Thresholds) {
			pf("budget %s: limit %s %s tz %q disabled %v slot %s thresholds %s; the replay: limit %s %s tz %q disabled %v slot %s thresholds %s",
				d.Key, rev.Limit, rev.Unit, rev.TZ, rev.Disabled, slotString(rev.FixedSlot), moneyList(rev.Thresholds),
				cur.Limit, cur.Unit, cur.TZ, cur.Disabled, slotString(cur.FixedSlot), moneyList(cur.Thresholds))
		}
	}
	for _, d := range b.Prices {
		rev, err := events.DecodePricingRevision(d.Revision)
		if err != nil {
			pf("pricing %s: %v", d.Key, err)
			continue
		}
		v, ok := st.pricing.versions[rev.Model][d.Rev]
		if !ok {
			pf("pricing %s at %d is not in the replay", d.Key, d.Rev)
			continue
		}
		if v.Unit != rev.Unit || v.Input.Cmp(rev.Input) != 0 || v.Output.Cmp(rev.Output) != 0 || slotString(v.CachedInput) != slotString(rev.CachedInput) {
			pf("pricing %s: %s input %s output %s cached %s; the replay: %s input %s output %s cached %s", d.Key,
				rev.Unit, rev.Input, rev.Output, slotString(rev.CachedInput), v.Unit, v.Input, v.Output, slotString(v.CachedInput))
		}
	}
}

// verifyRetirements compares what a snapshot states of each retired
// budget, which a replica shows in the budget once its balance has left
// memory, with the replay: the retirement's time and reason, and the
// final numbers of the balance it names, when the replay holds that
// balance (one that started from a snapshot without it does not).
func verifyRetirements(pf func(string, ...any), st *State, b *snapBody) {
	for _, d := range b.Budgets {
		r := d.Retirement
		if r == nil {
			continue
		}
		rev, err := events.DecodeBudgetRevision(d.Revision)
		if err != nil {
			continue // reported by verifyDefinitions
		}
		cur := st.budgets[rev.Budget]
		if cur == nil || !cur.Retired {
			pf("budget %s: a retirement, and the replay has not retired it", d.Key)
			continue
		}
		if r.At != nil && !cur.RetiredAt.IsZero() && (!r.At.Equal(cur.RetiredAt) || r.Reason != cur.RetiredReason) {
			pf("budget %s: retired at %s (%q); the replay: at %s (%q)", d.Key, r.At.Format(time.RFC3339Nano), r.Reason,
				cur.RetiredAt.Format(time.RFC3339Nano), cur.RetiredReason)
		}
		l := r.Last
		if l == nil {
			continue
		}
		ref := events.BalanceRef{Scope: rev.Budget.Scope, Period: rev.Budget.Period, Instance: l.Instance, Unit: rev.Budget.Unit}
		bl, ok := st.balances[ref]
		if !ok {
			continue
		}
		overrun := events.Zero
		if l.Overrun != nil {
			overrun = *l.Overrun
		}
		if bl.Open != 0 || bl.Revision != l.Rev || bl.Spent.Cmp(l.Spent) != 0 || bl.Overrun.Cmp(overrun) != 0 {
			pf("budget %s: last balance %s spent %s overrun %s at %d; the replay: spent %s overrun %s at %d, %d open", d.Key,
				bl.Key, l.Spent, overrun, l.Rev, bl.Spent, bl.Overrun, bl.Revision, bl.Open)
		}
	}
}

// verifyLastRevisions compares the last revision a snapshot states for
// each default, API key and tenant limits key with the replay's, and the
// revision it carries with its hash: a replica loads them from the
// snapshot and holds its callers to them.
func verifyLastRevisions(pf func(string, ...any), st *State, b *snapBody) {
	seen := map[string]bool{}
	for _, d := range slices.Concat(b.Defaults, b.APIKeys, b.TenantLimits) {
		seen[d.Key] = true
		if got := events.HashPayload(d.Revision); got != d.Hash {
			pf("%s: the revision it carries hashes to %s, not %s", d.Key, got, d.Hash)
		}
		rev := st.settings[d.Key]
		if streams.IsDefaultKey(d.Key) {
			rev = st.defaultRev[d.Key]
		}
		if rev != d.Rev || st.hashes[d.Key] != d.Hash {
			pf("%s at %d (%s), the replay at %d (%s)", d.Key, d.Rev, d.Hash, rev, st.hashes[d.Key])
		}
	}
	for _, keys := range []map[string]uint64{st.defaultRev, st.settings} {
		for key := range keys {
			if !seen[key] {
				pf("%s is missing", key)
			}
		}
	}
}

// partlyClosed reports whether some of r's parts are closed and some open.
func partlyClosed(r *Reservation) bool {
	var open, closed bool
	for _, p := range r.Parts {
		if p.Status == events.StatusOpen {
			open = true
		} else {
			closed = true
		}
	}
	return open && closed
}

// snapFull is what loadSnapshot reads of a snapshot body: the whole book.
type snapFull struct {
	Seq       uint64    `json:"seq"`
	ServerNow time.Time `json:"server_now"`
	Budgets   []struct {
		snapKey
		Revision json.RawMessage `json:"revision"`
	} `json:"budgets"`
	// Prices and Defaults are the current revision of each pricing and
	// default key (their earlier versions are read from the stream).
	Prices   []snapKey `json:"prices"`
	Defaults []snapKey `json:"defaults"`
	// APIKeys and TenantLimits: the operator's settings, their last
	// revisions (State.settings).
	APIKeys      []snapKey `json:"api_keys"`
	TenantLimits []snapKey `json:"tenant_limits"`
	LaneRevs     []snapKey `json:"lane_revisions"`
	Balances     []struct {
		Key      string            `json:"key"`
		Ref      events.BalanceRef `json:"ref"`
		Rev      uint64            `json:"rev"`
		Unit     string            `json:"unit"`
		Limit    events.Money      `json:"limit"`
		Spent    events.Money      `json:"spent"`
		Reserved events.Money      `json:"reserved"`
		Overrun  events.Money      `json:"overrun"`
		Open     []string          `json:"open"`
		Alerted  []events.Money    `json:"alerted"`
		Arm      uint64            `json:"arm"`
	} `json:"balances"`
	Reservations []snapFullRes `json:"reservations"`
	Closed       []snapFullQ   `json:"closed"`
	Expired      []snapFullQ   `json:"expired"`
	Voids        []struct {
		RequestID string    `json:"request_id"`
		At        time.Time `json:"at"`
	} `json:"voids"`
}

type snapFullRes struct {
	ID        string              `json:"id"`
	RequestID string              `json:"request_id"`
	Balances  []events.BalanceRef `json:"balances"`
	Parts     []snapFullPart      `json:"parts"`
	OpenedAt  time.Time           `json:"opened_at"`
	ExpiresAt time.Time           `json:"expires_at"`
	Status    string              `json:"status"`
	Late      bool                `json:"late"`
	// AfterExpiry: settled after the sweeper released it (absent in a
	// snapshot written before the ledger kept it).
	AfterExpiry bool               `json:"after_expiry"`
	Pricing     *events.PriceQuote `json:"pricing"`
	// RequestHash is not compared; it is decoded so that a value of
	// another type is refused, as the ledger's loader refuses it.
	RequestHash string `json:"request_hash"`
}

type snapFullPart struct {
	Key    string       `json:"key"`
	Unit   string       `json:"unit"`
	Amount events.Money `json:"amount"`
	Actual events.Money `json:"actual"`
	// Ceiling is not compared either; decoded so that one that is not an
	// amount is refused, as the ledger's loader refuses it.
	Ceiling *events.Money `json:"ceiling"`
}

type snapFullQ struct {
	ID          string       `json:"id"`
	At          time.Time    `json:"at"`
	Reservation *snapFullRes `json:"reservation"`
}

// loadSnapshot makes s (fresh) the book a snapshot states, for a replay
// that starts after it (WithFromSnapshot). The snapshot must pass its
// digest, and every lane and budget revision it names must be the
// stream's message at that sequence, under that key, with that payload
// hash: a snapshot of another stream, or of a stream since rewritten, is
// refused.
func (s *State) loadSnapshot(ctx context.Context, stream jetstream.Stream, layout streams.Layout, data []byte) error {
	if data == nil {
		return errors.New("unreadable")
	}
	_, parts, err := decodeSnapParts(data)
	if err != nil {
		return err
	}
	var b snapFull
	if err := json.Unmarshal(parts.json, &b); err != nil {
		return fmt.Errorf("body: %v", err)
	}
	if parts.window != nil {
		b.Closed, b.Expired = parts.window[0], parts.window[1]
	}
	anchorData := func(key string, rev uint64, hash string) ([]byte, error) {
		m, err := stream.GetMsg(ctx, rev)
		if err != nil {
			return nil, fmt.Errorf("%s at %d: %w", key, rev, err)
		}
		if k, ok := layout.KeyOf(m.Subject); !ok || k != key || events.HashPayload(m.Data) != hash {
			return nil, fmt.Errorf("the stream's message at %d is not the revision of %s the snapshot names", rev, key)
		}
		return m.Data, nil
	}
	anchor := func(key string, rev uint64, hash string) error {
		_, err := anchorData(key, rev, hash)
		return err
	}
	for _, k := range b.LaneRevs {
		if err := anchor(k.Key, k.Rev, k.Hash); err != nil {
			return err
		}
		s.lanes[k.Key] = k.Rev
		s.hashes[k.Key] = k.Hash
	}
	for _, sb := range b.Budgets {
		data, err := anchorData(sb.Key, sb.Rev, sb.Hash)
		if err != nil {
			return err
		}
		rev, err := events.DecodeBudgetRevision(sb.Revision)
		if err != nil {
			return fmt.Errorf("budget %s: %v", sb.Key, err)
		}
		s.budgets[rev.Budget] = &Budget{Ref: rev.Budget, Limit: rev.Limit, Unit: rev.Unit, TZ: rev.TZ, Disabled: rev.Disabled,
			FixedSlot: rev.FixedSlot, Thresholds: rev.Thresholds, ExposureCap: rev.ExposureCap, Learn: rev.Learn,
			FromDefault: rev.FromDefault, Revision: sb.Rev, Retired: rev.Retired}
		if rev.Retired {
			// The snapshot names the retiring revision (no definition
			// follows one); the stream's message carries its event (the
			// snapshot's tombstone does not).
			s.budgets[rev.Budget].RetiredRevision = sb.Rev
			retiring, err := events.DecodeBudgetRevision(data)
			if err != nil {
				return fmt.Errorf("budget %s: the stream's revision at %d: %v", sb.Key, sb.Rev, err)
			}
			for _, e := range retiring.Events {
				if r, ok := e.(events.BudgetRetired); ok {
					s.budgets[rev.Budget].RetiredAt, s.budgets[rev.Budget].RetiredReason = r.At, r.Reason
				}
			}
		}
		s.hashes[sb.Key] = sb.Hash
	}
	// A pricing or default key keeps every version (a quote or a budget
	// names the one it was made from): its chain is folded from the
	// stream, back from the revision the snapshot names to the first, or
	// to the first the stream still holds.
	events0 := s.events
	chain := func(key string, rev uint64, hash string, prevOf func([]byte) (events.Chain, string, error), fold func(seq uint64, data []byte) error, start func(name string, c events.Chain)) error {
		if err := anchor(key, rev, hash); err != nil {
			return err
		}
		type msg struct {
			seq  uint64
			data []byte
		}
		var back []msg
		for seq := rev; seq != 0; {
			m, err := stream.GetMsg(ctx, seq)
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgNotFound) && len(back) > 0 {
					break // trimmed: the versions before it are gone
				}
				return fmt.Errorf("%s at %d: %w", key, seq, err)
			}
			if k, ok := layout.KeyOf(m.Subject); !ok || k != key {
				return fmt.Errorf("the stream's message at %d is not a revision of %s", seq, key)
			}
			c, _, err := prevOf(m.Data)
			if err != nil {
				return fmt.Errorf("%s at %d: %v", key, seq, err)
			}
			back = append(back, msg{seq, m.Data})
			if c.Prev >= seq {
				return fmt.Errorf("%s at %d: chain goes forward to %d", key, seq, c.Prev)
			}
			seq = c.Prev
		}
		first := back[len(back)-1]
		c, name, _ := prevOf(first.data)
		start(name, c)
		for i := len(back) - 1; i >= 0; i-- {
			if err := fold(back[i].seq, back[i].data); err != nil {
				return fmt.Errorf("%s at %d: %w", key, back[i].seq, err)
			}
		}
		return nil
	}
	for _, sp := range b.Prices {
		err := chain(sp.Key, sp.Rev, sp.Hash, func(data []byte) (events.Chain, string, error) {
			rev, err := events.DecodePricingRevision(data)
			return rev.Chain, rev.Model, err
		}, func(seq uint64, data []byte) error { return s.applyPricing(seq, sp.Key, data) },
			func(model string, c events.Chain) {
				if c.Prev != 0 {
					s.pricing.current[model], s.hashes[sp.Key] = c.Prev, c.PrevHash
				}
			})
		if err != nil {
			return err
		}
	}
	for _, sd := range b.Defaults {
		err := chain(sd.Key, sd.Rev, sd.Hash, func(data []byte) (events.Chain, string, error) {
			rev, err := events.DecodeDefaultRevision(data)
			return rev.Chain, "", err
		}, func(seq uint64, data []byte) error { return s.applyDefault(seq, sd.Key, data) },
			func(_ string, c events.Chain) {
				if c.Prev != 0 {
					s.defaultRev[sd.Key], s.hashes[sd.Key] = c.Prev, c.PrevHash
				}
			})
		if err != nil {
			return err
		}
	}
	for _, k := range slices.Concat(b.APIKeys, b.TenantLimits) {
		s.settings[k.Key], s.hashes[k.Key] = k.Rev, k.Hash
	}
	s.events = events0 // counters count the tail only
	// A void the snapshot remembers is stamped as the ledger stamped it
	// (or, without a stamp, at the snapshot's time) and forgotten after
	// the window's closed retention from there.
	for _, v := range b.Voids {
		s.voided[v.RequestID] = 0
		if s.win != nil {
			at := v.At
			if at.IsZero() {
				at = b.ServerNow
			}
			s.win.voids = append(s.win.voids, voidRef{rid: v.RequestID, at: at.UnixNano()})
		}
	}
	openIn := map[string]map[string]bool{} // balance key -> open reservation ids
	for _, sb := range b.Balances {
		s.balances[sb.Ref] = &Balance{Ref: sb.Ref, Key: sb.Key, Lane: layout.LaneKey(sb.Ref), Unit: sb.Unit, Limit: sb.Limit,
			Spent: sb.Spent, Reserved: sb.Reserved, Overrun: sb.Overrun, Open: int64(len(sb.Open)), Revision: sb.Rev, Alerted: sb.Alerted, Arm: sb.Arm}
		if bl := s.balances[sb.Ref]; bl.Spent.Add(bl.Reserved).Cmp(bl.Limit.Add(bl.Overrun)) > 0 {
			// Above its limit in the snapshot: lowered before it (the
			// revisions that show it are behind the snapshot).
			bl.Lowered = bl.Spent.Add(bl.Reserved)
		}
		openIn[sb.Key] = map[string]bool{}
		for _, id := range sb.Open {
			openIn[sb.Key][id] = true
		}
	}
	add := func(sr *snapFullRes) *Reservation {
		r := &Reservation{ID: sr.ID, RequestID: sr.RequestID, Balances: sr.Balances,
			Parts: map[events.BalanceRef]ReservationPart{}, OpenedAt: sr.OpenedAt, ExpiresAt: sr.ExpiresAt, Late: sr.Late,
			Expired: sr.Status == events.StatusExpired, Pricing: sr.Pricing}
		for _, p := range sr.Parts {
			for _, ref := range sr.Balances {
				if streams.BalanceKey(ref) != p.Key {
					continue
				}
				part := ReservationPart{Status: sr.Status, Amount: p.Amount, Actual: p.Actual}
				if openIn[p.Key][sr.ID] {
					part.Status = events.StatusOpen
				}
				if part.Status == events.StatusSettled {
					part.Late, part.AfterExpiry = sr.Late, sr.AfterExpiry
				}
				r.Parts[ref] = part
				if r.Unit == "" || !events.IsCount(p.Unit) {
					r.Unit = p.Unit
				}
			}
		}
		r.refreshStatus()
		s.reservations[r.ID] = r
		return r
	}
	for i := range b.Reservations {
		add(&b.Reservations[i])
	}
	if s.win != nil {
		s.win.now = b.ServerNow
	}
	for i, q := range [][]snapFullQ{b.Closed, b.Expired} {
		for _, c := range q {
			r := s.reservations[c.ID] // version 1: among the rest
			if c.Reservation != nil {
				r = add(c.Reservation)
			}
			if r == nil {
				continue
			}
			if s.win != nil && r.Status != events.StatusOpen {
				s.win.queues[i] = append(s.win.queues[i], closedRef{id: r.ID, at: c.At.UnixNano()})
			}
		}
	}
	s.position = b.Seq
	return nil
}
