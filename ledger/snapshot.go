package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// A snapshot is the book dumped at one stream sequence: everything a
// replica folds from the revisions up to and including that sequence, and
// nothing after it. Its encoding is explicit and versioned:
//
//	{"format":"spendgate.snapshot","version":1,"seq":N,"size":S,"sha256":H}\n
//	<S bytes of JSON: snapshotState>
//
// The first line is a header; H is the SHA-256 of the S body bytes, so a
// corrupted or truncated snapshot is detected before anything of it is
// used. Money travels as decimal strings, times as RFC 3339 with
// nanoseconds. Budget definitions travel as the budget revision they were
// folded from (events.BudgetRevision, decoded again with
// events.DecodeBudgetRevision), so a field a budget revision gains travels
// with it without a change here.
//
// Version 2 (written now) carries each closed reservation of the
// idempotency window inside its queue entry, and lists only the rest
// (open reservations) under "reservations"; version 1 listed every
// reservation there and named the closed ones in the queues by id. Both
// are read.

// SnapshotFormat and SnapshotVersion identify the snapshot encoding:
// SnapshotVersion is the version written.
const (
	SnapshotFormat  = "spendgate.snapshot"
	SnapshotVersion = 2
)

// snapshotReadable reports whether version v can be loaded.
func snapshotReadable(v int) bool { return v == 1 || v == 2 }

// ErrSnapshotInvalid marks a snapshot that fails its integrity check (a
// wrong digest or size, a truncated body), has an unknown format or
// version, or does not describe a book this replica can load (another lane
// count, a reference to something it does not hold).
var ErrSnapshotInvalid = errors.New("ledger: invalid snapshot")

type snapshotHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Seq     uint64 `json:"seq"`
	Size    int    `json:"size"`
	SHA256  string `json:"sha256"`
}

// snapshotState is the body of a snapshot, every list sorted by key or id
// so that two books with the same state encode to the same bytes.
type snapshotState struct {
	Version int    `json:"version"`
	Seq     uint64 `json:"seq"`
	Lanes   int    `json:"lanes"`
	// ServerNow is the JetStream timestamp of the message at Seq.
	ServerNow    time.Time         `json:"server_now"`
	Budgets      []snapBudget      `json:"budgets"`
	LaneRevs     []snapKey         `json:"lane_revisions"`
	Balances     []snapBalance     `json:"balances"`
	Reservations []snapReservation `json:"reservations"`
	// Closed and Expired are the idempotency window's queues, in the order
	// their closes were stamped (version 2: with their reservations).
	Closed  []snapClosed `json:"closed"`
	Expired []snapClosed `json:"expired"`
}

type snapKey struct {
	Key  string `json:"key"`
	Rev  uint64 `json:"rev"`
	Hash string `json:"hash"`
}

type snapBudget struct {
	snapKey
	Revision json.RawMessage `json:"revision"`
}

type snapBalance struct {
	Key      string            `json:"key"`
	Ref      events.BalanceRef `json:"ref"`
	Rev      uint64            `json:"rev"`
	Unit     string            `json:"unit"`
	Limit    events.Money      `json:"limit"`
	Spent    events.Money      `json:"spent"`
	Reserved events.Money      `json:"reserved"`
	Overrun  events.Money      `json:"overrun"`
	Open     []string          `json:"open,omitempty"`
}

type snapReservation struct {
	ID          string              `json:"id"`
	RequestID   string              `json:"request_id"`
	RequestHash string              `json:"request_hash"`
	Balances    []events.BalanceRef `json:"balances"`
	Parts       []snapPart          `json:"parts"`
	OpenedAt    time.Time           `json:"opened_at"`
	ExpiresAt   time.Time           `json:"expires_at"`
	Status      string              `json:"status"`
	Late        bool                `json:"late,omitempty"`
}

type snapPart struct {
	Key    string       `json:"key"`
	Unit   string       `json:"unit"`
	Amount events.Money `json:"amount"`
	Actual events.Money `json:"actual"`
}

type snapClosed struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
	// Reservation is the closed reservation (version 2; version 1 lists
	// it under the snapshot's reservations).
	Reservation *snapReservation `json:"reservation,omitempty"`
}

// exactAt reports whether the book holds exactly the revisions up to seq:
// no key has a revision folded past it (a committer folds its own writes
// before the follower reaches them) and no close waits for its stamp.
func (b *book) exactAt(seq uint64) bool {
	if len(b.pending) > 0 {
		return false
	}
	for _, rev := range b.lanes {
		if rev > seq {
			return false
		}
	}
	for _, d := range b.budgets {
		if d.rev > seq {
			return false
		}
	}
	return true
}

// snapshot dumps the book as of seq (the caller has checked exactAt). It
// copies what it reads, so the result may be encoded without the lock.
func (b *book) snapshot(seq uint64) (*snapshotState, error) {
	st := &snapshotState{Version: SnapshotVersion, Seq: seq, Lanes: b.layout.Lanes(), ServerNow: b.serverNow}
	for key, d := range b.budgets {
		raw, err := json.Marshal(&d.src)
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot of budget %s: %w", key, err)
		}
		st.Budgets = append(st.Budgets, snapBudget{snapKey{key, d.rev, b.hashes[key]}, raw})
	}
	sort.Slice(st.Budgets, func(i, j int) bool { return st.Budgets[i].Key < st.Budgets[j].Key })
	for key, rev := range b.lanes {
		st.LaneRevs = append(st.LaneRevs, snapKey{key, rev, b.hashes[key]})
	}
	sort.Slice(st.LaneRevs, func(i, j int) bool { return st.LaneRevs[i].Key < st.LaneRevs[j].Key })
	for key, bl := range b.balances {
		sb := snapBalance{Key: key, Ref: bl.ref, Rev: bl.rev, Unit: bl.unit, Limit: bl.limit,
			Spent: bl.spent, Reserved: bl.reserved, Overrun: bl.overrun}
		for id := range bl.open {
			sb.Open = append(sb.Open, id)
		}
		sort.Strings(sb.Open)
		st.Balances = append(st.Balances, sb)
	}
	sort.Slice(st.Balances, func(i, j int) bool { return st.Balances[i].Key < st.Balances[j].Key })
	for _, r := range b.reservations {
		st.Reservations = append(st.Reservations, snapRes(r))
	}
	sort.Slice(st.Reservations, func(i, j int) bool { return st.Reservations[i].ID < st.Reservations[j].ID })
	st.Closed = b.snapQueue(winClosed)
	st.Expired = b.snapQueue(winExpired)
	return st, nil
}

func snapRes(r *Reservation) snapReservation {
	sr := snapReservation{ID: r.ID, RequestID: r.RequestID, RequestHash: r.RequestHash,
		Balances: append([]events.BalanceRef(nil), r.Balances...), OpenedAt: r.OpenedAt, ExpiresAt: r.ExpiresAt,
		Status: r.Status, Late: r.Late}
	for _, p := range r.Parts {
		sr.Parts = append(sr.Parts, snapPart{p.Key, p.Unit, p.Amount, p.Actual})
	}
	return sr
}

func (sr *snapReservation) reservation() *Reservation {
	r := &Reservation{ID: sr.ID, RequestID: sr.RequestID, RequestHash: sr.RequestHash, Balances: sr.Balances,
		Parts: make([]Part, 0, len(sr.Parts)), OpenedAt: sr.OpenedAt, ExpiresAt: sr.ExpiresAt, Status: sr.Status, Late: sr.Late}
	for _, p := range sr.Parts {
		r.Parts = append(r.Parts, Part{Key: p.Key, Unit: p.Unit, Amount: p.Amount, Actual: p.Actual})
	}
	return r
}

// snapQueue lists the window's ring which, in stamp order, each entry with
// its reservation.
func (b *book) snapQueue(which int) []snapClosed {
	var out []snapClosed
	b.win.each(which, func(r *Reservation, at time.Time) {
		sr := snapRes(r)
		out = append(out, snapClosed{ID: r.ID, At: at, Reservation: &sr})
	})
	return out
}

// bookFromSnapshot builds the book st describes, as a replica with layout
// and these retentions would hold it after folding every revision up to
// st.Seq. It reads versions 1 and 2.
func bookFromSnapshot(layout streams.Layout, retention, expiredKeep time.Duration, st *snapshotState) (*book, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSnapshotInvalid, fmt.Sprintf(format, args...))
	}
	if !snapshotReadable(st.Version) {
		return nil, bad("version %d, want 1 or 2", st.Version)
	}
	if st.Lanes != layout.Lanes() {
		return nil, bad("written with %d lane(s), this layout has %d", st.Lanes, layout.Lanes())
	}
	b := newBook(layout, retention, expiredKeep)
	b.serverNow = st.ServerNow
	for _, sb := range st.Budgets {
		rev, err := events.DecodeBudgetRevision(sb.Revision)
		if err != nil {
			return nil, bad("budget %s: %v", sb.Key, err)
		}
		if streams.BudgetKey(rev.Budget) != sb.Key || sb.Rev == 0 || sb.Rev > st.Seq {
			return nil, bad("budget %s: revision of %s at %d", sb.Key, streams.BudgetKey(rev.Budget), sb.Rev)
		}
		if err := b.setBudget(sb.Key, sb.Rev, &rev, sb.Hash); err != nil {
			return nil, bad("budget %s: %v", sb.Key, err)
		}
	}
	for _, k := range st.LaneRevs {
		if !streams.IsLaneKey(k.Key) || k.Rev == 0 || k.Rev > st.Seq {
			return nil, bad("lane %s at %d", k.Key, k.Rev)
		}
		b.lanes[k.Key] = k.Rev
		b.hashes[k.Key] = k.Hash
	}
	// Balances first (the window's entries point at them), their open
	// reservations last (they may be in the window: a close over two
	// lanes that a snapshot splits).
	for _, sb := range st.Balances {
		if streams.BalanceKey(sb.Ref) != sb.Key || sb.Rev > st.Seq {
			return nil, bad("balance %s at %d", sb.Key, sb.Rev)
		}
		b.balances[sb.Key] = &balance{key: sb.Key, ref: sb.Ref, self: []events.BalanceRef{sb.Ref}, rev: sb.Rev, unit: sb.Unit,
			limit: sb.Limit, spent: sb.Spent, reserved: sb.Reserved, overrun: sb.Overrun, open: make(map[string]*Reservation, len(sb.Open))}
	}
	for _, sr := range st.Reservations {
		switch sr.Status {
		case events.StatusOpen, events.StatusSettled, events.StatusReleased, events.StatusExpired:
		default:
			return nil, bad("reservation %s has status %q", sr.ID, sr.Status)
		}
		if _, dup := b.reservations[sr.ID]; dup || sr.ID == "" {
			return nil, bad("reservation %q twice", sr.ID)
		}
		r := sr.reservation()
		b.reservations[r.ID] = r
		b.requests[r.RequestID] = r
		if r.Status == events.StatusOpen {
			b.due.add(r)
		}
	}
	// Single-balance reservations share their balance's one-element slice,
	// as the fold makes them.
	for _, r := range b.reservations {
		if len(r.Balances) == 1 {
			if bl := b.balances[streams.BalanceKey(r.Balances[0])]; bl != nil && bl.ref == r.Balances[0] {
				r.Balances = bl.self
			}
		}
	}
	for _, q := range []struct {
		name  string
		which int
		list  []snapClosed
	}{{"closed", winClosed, st.Closed}, {"expired", winExpired, st.Expired}} {
		for _, c := range q.list {
			if err := b.loadClosed(st.Version, q.which, c); err != nil {
				return nil, bad("%s: %v", q.name, err)
			}
		}
	}
	for _, sb := range st.Balances {
		bl := b.balances[sb.Key]
		for _, id := range sb.Open {
			r := b.reservations[id]
			if r == nil {
				if _, h, ok := b.win.get(id, false); ok {
					r = b.win.shared(h)
				}
			}
			if r == nil {
				return nil, bad("balance %s holds unknown reservation %s", sb.Key, id)
			}
			bl.open[id] = r
		}
	}
	return b, nil
}

// loadClosed puts one queue entry of a snapshot of version v into ring
// which of the window.
func (b *book) loadClosed(v, which int, c snapClosed) error {
	var r *Reservation
	switch {
	case v >= 2:
		if c.Reservation == nil || c.Reservation.ID != c.ID {
			return fmt.Errorf("entry %s carries no reservation", c.ID)
		}
		if _, ok := b.get(c.ID); ok {
			return fmt.Errorf("reservation %s twice", c.ID)
		}
		r = c.Reservation.reservation()
		if bl := b.windowBalance(r); bl != nil && bl.ref == r.Balances[0] {
			r.Balances = bl.self
		}
	default:
		// Version 1: the reservation is among the snapshot's; one both
		// queues name (expired, then settled late) goes to the first.
		r = b.reservations[c.ID]
		if r == nil {
			if _, _, ok := b.win.get(c.ID, false); ok {
				return nil
			}
		}
		if r != nil {
			delete(b.reservations, r.ID)
			if b.requests[r.RequestID] == r {
				delete(b.requests, r.RequestID)
			}
		}
	}
	if r == nil || r.Status == events.StatusOpen || winStatus(r.Status) == 0 {
		return fmt.Errorf("reservation %s is not a closed reservation of the snapshot", c.ID)
	}
	b.win.add(which, r, b.windowBalance(r), c.At)
	return nil
}

// encodeSnapshot returns st's encoding: header line, then body.
func encodeSnapshot(st *snapshotState) ([]byte, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("ledger: encoding snapshot: %w", err)
	}
	sum := sha256.Sum256(body)
	h, err := json.Marshal(snapshotHeader{Format: SnapshotFormat, Version: SnapshotVersion, Seq: st.Seq, Size: len(body), SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		return nil, fmt.Errorf("ledger: encoding snapshot: %w", err)
	}
	out := make([]byte, 0, len(h)+1+len(body))
	out = append(append(append(out, h...), '\n'), body...)
	return out, nil
}

// decodeSnapshot checks data's header and digest and decodes its body.
// Errors wrap ErrSnapshotInvalid.
func decodeSnapshot(data []byte) (*snapshotState, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSnapshotInvalid, fmt.Sprintf(format, args...))
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, bad("no header line (%d bytes)", len(data))
	}
	var h snapshotHeader
	if err := json.Unmarshal(data[:nl], &h); err != nil {
		return nil, bad("header: %v", err)
	}
	if h.Format != SnapshotFormat || !snapshotReadable(h.Version) {
		return nil, bad("format %q version %d, want %q version 1 or 2", h.Format, h.Version, SnapshotFormat)
	}
	body := data[nl+1:]
	if len(body) != h.Size {
		return nil, bad("body of %d bytes, header says %d (truncated?)", len(body), h.Size)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return nil, bad("digest mismatch")
	}
	st := &snapshotState{}
	if err := json.Unmarshal(body, st); err != nil {
		return nil, bad("body: %v", err)
	}
	if st.Seq != h.Seq || st.Version != h.Version {
		return nil, bad("body at seq %d version %d, header says seq %d version %d", st.Seq, st.Version, h.Seq, h.Version)
	}
	return st, nil
}
