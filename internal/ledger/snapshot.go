package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// A snapshot is the book dumped at one stream sequence: everything a
// replica folds from the revisions up to and including that sequence, and
// nothing after it. Its encoding is explicit and versioned:
//
//	{"format":"spendgate.snapshot","version":5,"seq":N,"size":S,"sha256":H,...}\n
//	<S bytes of body>
//
// The first line is a header; H is the SHA-256 of the S body bytes, so a
// corrupted or truncated snapshot is detected before anything of it is
// used.
//
// Versions 3 to 5 (5 is written now) have a body of two parts:
//
//	<one line of JSON: snapshotState, without "closed" and "expired">\n
//	<window_size bytes: the window section>
//
// The JSON line is everything but the idempotency window: budget
// definitions as the budget revisions they were folded from
// (events.BudgetRevision, decoded again with events.DecodeBudgetRevision,
// so a field a budget revision gains travels with it without a change
// here; a retired budget's with its "retirement": when, why, and the
// final numbers of its latest balance the book dropped), prices and defaults likewise, lane revisions and hashes,
// balances (with their exposure), open reservations (their parts with
// their ceilings) and voids, the learned reservations' windows (package
// learn: the last costs per scope and model, so a restored replica
// reserves what its peers do), money as decimal strings, times
// as RFC 3339 with nanoseconds. It holds no newline (encoding/json escapes
// one in a string); its "window_size" is the length of what follows it.
//
// The window section holds the idempotency window's closed reservations,
// which are most of a busy replica's book (hundreds of thousands, up to
// millions), in the shape the window keeps them (window.go), so a
// replica reads each into a window entry without parsing text or
// building a Reservation. Integers are Go's encoding/binary varints:
// uvarint unsigned, svarint zigzag signed.
//
//	section = units [quotes] closed expired      quotes: version 5
//	units   = uvarint(count) count × str        table of units
//	quotes  = uvarint(count) count × str        table of price quotes: each
//	          an events.PriceQuote's JSON with its token counts 0
//	closed, expired = uvarint(count) count × entry   each ring, in stamp order
//	str     = uvarint(length) length bytes of UTF-8
//	entry   = tag svarint(at - previous entry's at in this ring, or - 0)
//	          (compact | full)
//	tag     = bits 0-1 status: 1 settled, 2 released, 3 expired; 0 full form
//	          bit 2 late; bit 3 the request hash is 16 bytes
//	          bits 4-5 kind of the id, bits 6-7 kind of the request id:
//	          0 a str (non-empty), 1 a UUID as 16 bytes, 2 "rsv_" + a UUID
//	          as 16 bytes; a full entry's tag is 0
//	compact = id request-id hash
//	          svarint(opened - at) svarint(expires - opened)
//	          uvarint(balance) uvarint(unit)
//	          svarint(amount coefficient) byte(amount exponent, int8)
//	          svarint(actual coefficient) byte(actual exponent, int8)
//	          [more]                                        version 5
//	more    = byte(flags: bit 0 parts follow, bit 1 a quote follows)
//	          [uvarint(count, 1..64) count × part] [quote]
//	part    = uvarint(balance) uvarint(unit)
//	          svarint(amount coefficient) byte(amount exponent, int8)
//	          svarint(actual coefficient) byte(actual exponent, int8)
//	quote   = uvarint(index into quotes) uvarint(input tokens)
//	          uvarint(max output tokens)
//	hash    = 16 bytes (bit 3: 32 lowercase hex characters) | str
//	full    = str: the reservation as JSON (version 2's snapReservation)
//
// Times are Unix nanoseconds (UTC); at is the entry's stamp. A compact
// entry's first part is in its own fields, and (version 5) its other parts
// and its price quote in more: balance is an index into
// the JSON line's "balances" (the reservation's balance ref and its
// part's key are that balance's), unit an index into the section's
// units, and its part's amount and actual are coefficient × 10^exponent
// (events.Money.Compact), at most 18 digits before the point and 12
// after, as a stored amount's JSON. A string id that is a canonical UUID,
// and a string hash of 32 lowercase hex characters, load as the compact
// form. What does not fit (before version 5, several balances or a
// pricing quote; a part with a ceiling, a time outside 1678..2262, an
// amount Compact cannot split, a reservation the book holds whole because
// a balance's open set names it) is written in full form; its status must
// be settled, released or expired too. Deltas
// of a signed 64-bit value wrap (two's complement): adding them back
// gives the value. Loading checks every field (tags and kinds, counts
// against the bytes left, indexes, lengths, UTF-8, non-empty ids and
// request ids, amounts, a quote's prices, a balance once in an entry, a
// closed status in full form, a reservation id once in the window and
// the book, no byte after the section) and refuses anything else as
// ErrSnapshotInvalid. The projector's decoder refuses the same.
//
// Why a binary section beside JSON, and not a binary body nor base64 in
// the JSON: the window is the only part that grows with traffic, and at a
// million entries its JSON (~500 bytes an entry) took 10 s to decode and
// rebuild, against 0.7 s for the section; the rest is small, stays readable (head -2 shows it),
// keeps travelling budget revisions as their own JSON, and is what the
// projector's independent decoder compares field by field. Base64 would
// add a third to the section and a byte-by-byte scan of it.
//
// Version 5 writes a reservation held in several balances or priced from a
// model compact (more), where version 4 wrote it in full form: an LLM
// gateway's admits (a key, a team and a user, priced) are all such, and
// their JSON made a snapshot of a busy replica's window about 450 bytes an
// entry and seconds to load. Version 4 signed snapshots and added the
// readers' sections; version 3 added the window section.
//
// Version 2 carried each closed reservation of the window inside its queue
// entry in the JSON ("closed", "expired": {"id","at","reservation"}), and
// version 1 listed every reservation under "reservations" and named the
// closed ones in the queues by id; both have a body of JSON only, and
// both are read. The optional lists (prices, defaults, voids, skipped, a
// balance's alerted thresholds, a reservation's pricing quote) are the
// same in every version: absent in a snapshot written before they
// existed, which holds none.

// SnapshotFormat and SnapshotVersion identify the snapshot encoding:
// SnapshotVersion is the version written.
const (
	SnapshotFormat  = "spendgate.snapshot"
	SnapshotVersion = 5
)

// snapshotReadable reports whether version v can be loaded.
func snapshotReadable(v int) bool { return v >= 1 && v <= 5 }

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
	// Signer and Sig (version 4) sign the snapshot: see
	// gate.SignSnapshot. A reader that checks signatures loads only a
	// snapshot signed by a key it trusts.
	Signer string `json:"signer,omitempty"`
	Sig    string `json:"sig,omitempty"`
}

// id is what the header's signature covers.
func (h snapshotHeader) id(bucket string) gate.SnapshotID {
	return gate.SnapshotID{Bucket: bucket, Version: h.Version, Seq: h.Seq, Size: h.Size, SHA256: h.SHA256}
}

// snapshotState is the body of a snapshot, every list sorted by key or id
// so that two books with the same state encode to the same bytes.
type snapshotState struct {
	Version int    `json:"version"`
	Seq     uint64 `json:"seq"`
	Lanes   int    `json:"lanes"`
	// ServerNow is the JetStream timestamp of the message at Seq.
	ServerNow time.Time    `json:"server_now"`
	Budgets   []snapBudget `json:"budgets"`
	// BudgetArms are the budgets' arm generations (Budget.Arm) that are
	// not 0, by budget key: the fold computes them from the definitions
	// before the one Budgets carries.
	BudgetArms map[string]uint64 `json:"budget_arms,omitempty"`
	// Prices travel as the pricing revision they were folded from.
	Prices []snapBudget `json:"prices,omitempty"`
	// Defaults travel as the default revision they were folded from.
	Defaults     []snapBudget      `json:"defaults,omitempty"`
	LaneRevs     []snapKey         `json:"lane_revisions"`
	Balances     []snapBalance     `json:"balances"`
	Reservations []snapReservation `json:"reservations"`
	// Closed and Expired are the idempotency window's queues, in the order
	// their closes were stamped (version 2: with their reservations;
	// version 3: absent, the window section holds them).
	Closed  []snapClosed `json:"closed,omitempty"`
	Expired []snapClosed `json:"expired,omitempty"`
	// WindowSize is the length of the window section (version 3).
	WindowSize int `json:"window_size,omitempty"`
	// windowAhead, when set, reads the window section of a snapshot still
	// arriving (decodeSnapshotAhead), in place of window.
	windowAhead *sectionReader
	// whole are the window section's entries written whole, whose JSON
	// finishWindow inserts into window (and WindowSize) outside the
	// book's lock, before the snapshot is encoded.
	whole []windowWhole
	// sectionsLater are the readers' sections copied under the book's
	// lock (SectionCopier), which finish encodes into Sections.
	sectionsLater []laterSection
	// budgetsLater are the budgets' revisions copied under the book's
	// lock, in the order of Budgets, which finish encodes into each
	// one's Revision: a revision is never changed once folded (the book
	// replaces it), so the copy shares its slices safely.
	budgetsLater []events.BudgetRevision
	// Voids are the voided request ids the book remembers, in the order
	// their voids were stamped (absent in a snapshot written before voids
	// existed, which holds none).
	Voids []snapVoid `json:"voids,omitempty"`
	// Trust is the ledger's last trust revision (absent: none, or a
	// snapshot written before trust revisions existed).
	Trust *snapBudget `json:"trust,omitempty"`
	// Sections (version 4) are the states of the readers the fold feeds
	// (see Section), as of Seq, by section name.
	Sections map[string]json.RawMessage `json:"sections,omitempty"`
	// Skipped lists the keys whose last revision up to Seq was skipped
	// (see gate.Head.Seen), with that revision: the next write of the key
	// lands after it, while its chain continues from LaneRevs or Budgets.
	Skipped []snapSkip `json:"skipped,omitempty"`
	// APIKeys travel as the API key revision they were folded from
	// (absent in a snapshot written before API keys existed).
	APIKeys []snapBudget `json:"api_keys,omitempty"`
	// TenantLimits travel as the tenant limits revision they were folded
	// from (absent in a snapshot written before the ledger kept them).
	TenantLimits []snapBudget `json:"tenant_limits,omitempty"`
	// Learned are the learned reservations' windows (package learn), by
	// scope then model, each oldest cost first (absent in a snapshot
	// written before learned reservations existed, whose ledger admitted
	// none under a learn rule, so that nothing was learned).
	Learned []snapLearned `json:"learned,omitempty"`

	// window is the window section (version 3), which follows the JSON.
	window []byte
}

// snapLearned is one learned-reservation window.
type snapLearned struct {
	Scope events.Scope   `json:"scope"`
	Model string         `json:"model"`
	Costs []events.Money `json:"costs"`
}

// snapVoid is one remembered void: the request id, the time of its
// events.RequestVoided, and the stamp its retention runs from.
type snapVoid struct {
	RequestID string    `json:"request_id"`
	VoidedAt  time.Time `json:"voided_at"`
	At        time.Time `json:"at"`
}

type snapSkip struct {
	Key string `json:"key"`
	Rev uint64 `json:"rev"`
}

type snapKey struct {
	Key  string `json:"key"`
	Rev  uint64 `json:"rev"`
	Hash string `json:"hash"`
}

// snapRetirement is a retired budget's Budget.RetiredAt and RetiredReason
// and its budget.last (absent: a snapshot written before they were kept;
// the budget reads as retired, with neither).
type snapRetirement struct {
	At     *time.Time       `json:"at,omitempty"`
	Reason string           `json:"reason,omitempty"`
	Last   *snapLastBalance `json:"last,omitempty"`
}

// snapLastBalance is a lastBalance: its balance is the budget's in
// Instance.
type snapLastBalance struct {
	Instance string        `json:"instance"`
	Rev      uint64        `json:"rev"`
	Spent    events.Money  `json:"spent"`
	Overrun  *events.Money `json:"overrun,omitempty"`
}

type snapBudget struct {
	snapKey
	Revision json.RawMessage `json:"revision"`
	// Retirement is a retired budget's (budgets only).
	Retirement *snapRetirement `json:"retirement,omitempty"`
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
	// Exposure is the balance's exposure (absent: zero, or a snapshot
	// written before exposure existed, which holds no ceiling).
	Exposure *events.Money  `json:"exposure,omitempty"`
	Open     []string       `json:"open,omitempty"`
	Alerted  []events.Money `json:"alerted,omitempty"`
	// Arm is the arm generation of Alerted.
	Arm uint64 `json:"arm,omitempty"`
	// StampedAt and ExpiredAt are a balance's stamps (see prune.go): the
	// server time its last revision was stamped at (absent: not stamped
	// yet; kept for a minute or hour balance and a retired budget's), and
	// that of its last expiry (absent: none; kept for every balance).
	StampedAt *time.Time `json:"stamped_at,omitempty"`
	ExpiredAt *time.Time `json:"expired_at,omitempty"`
	// LastAt is the time of the balance's latest event (balance.lastAt);
	// absent in snapshots written before it was kept.
	LastAt *time.Time `json:"last_at,omitempty"`
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
	// AfterExpiry (absent: false, or a snapshot written before it was
	// kept): settled after the sweeper released it.
	AfterExpiry bool               `json:"after_expiry,omitempty"`
	Pricing     *events.PriceQuote `json:"pricing,omitempty"`
}

type snapPart struct {
	Key    string       `json:"key"`
	Unit   string       `json:"unit"`
	Amount events.Money `json:"amount"`
	Actual events.Money `json:"actual"`
	// Ceiling is the part's ceiling (absent: none, or a snapshot written
	// before ceilings existed).
	Ceiling *events.Money `json:"ceiling,omitempty"`
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
	exact := true
	b.heads.Each(func(_ string, hd gate.Head) {
		if hd.Rev() > seq {
			exact = false
		}
	})
	return exact
}

// snapshotAs dumps the book as of seq (the caller has checked exactAt) as
// a snapshot of version 2 or 3 (SnapshotVersion is the one written; 2 is
// for tests). It copies what it reads, so the result may be encoded
// without the lock.
func (b *book) snapshotAs(seq uint64, version int) (*snapshotState, error) {
	st, err := b.snapshotCopy(seq, version)
	if err == nil {
		err = st.finish()
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

// snapshotCopy is snapshotAs but for the JSON of the window's entries
// written whole, which st.finish adds: a replica copies its book under
// the book's read lock, and encodes those outside it.
func (b *book) snapshotCopy(seq uint64, version int) (*snapshotState, error) {
	st := &snapshotState{Version: version, Seq: seq, Lanes: b.layout.Lanes(), ServerNow: b.serverNow}
	// The budgets' revisions are encoded by finish, off the lock: with
	// tens of thousands of budgets (most of them retired runs) their JSON
	// held the book, and every admit, for half a second to 2.7 s per
	// snapshot.
	if len(b.budgets) > 0 {
		st.Budgets = make([]snapBudget, 0, len(b.budgets))
		st.budgetsLater = make([]events.BudgetRevision, 0, len(b.budgets))
	}
	for key, d := range b.budgets {
		st.budgetsLater = append(st.budgetsLater, d.src)
		_, hash := b.valid(key)
		sb := snapBudget{snapKey: snapKey{key, d.rev, hash}}
		if d.def.Retired && (!d.def.RetiredAt.IsZero() || d.last != nil) {
			sb.Retirement = &snapRetirement{At: optTime(d.def.RetiredAt), Reason: d.def.RetiredReason}
			if l := d.last; l != nil {
				sb.Retirement.Last = &snapLastBalance{Instance: l.ref.Instance, Rev: l.rev, Spent: l.spent}
				if !l.overrun.IsZero() {
					sb.Retirement.Last.Overrun = &l.overrun
				}
			}
		}
		st.Budgets = append(st.Budgets, sb)
		if d.def.Arm != 0 {
			if st.BudgetArms == nil {
				st.BudgetArms = map[string]uint64{}
			}
			st.BudgetArms[key] = d.def.Arm
		}
	}
	sort.Sort(budgetsByKey{st})
	var err error
	if st.Prices, err = snapDefs(b, "pricing", b.prices, func(p *pricing) (uint64, any) { return p.def.Version, &p.src }); err != nil {
		return nil, err
	}
	if st.Defaults, err = snapDefs(b, "default", b.defaults, func(d *dflt) (uint64, any) { return d.def.Def.Revision, &d.src }); err != nil {
		return nil, err
	}
	if t := b.trust; t != nil {
		raw, err := json.Marshal(t.Trust)
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot of trust: %w", err)
		}
		st.Trust = &snapBudget{snapKey: snapKey{t.Key, t.Seq, t.Hash}, Revision: raw}
	}
	if st.APIKeys, err = snapDefs(b, "API key", b.apikeys, func(k *apiKey) (uint64, any) { return k.def.Version, &k.src }); err != nil {
		return nil, err
	}
	if st.TenantLimits, err = snapDefs(b, "tenant limits", b.tenantLimits, func(t *tenantLimits) (uint64, any) { return t.def.Version, &t.src }); err != nil {
		return nil, err
	}
	b.heads.Each(func(key string, hd gate.Head) {
		if streams.IsLaneKey(key) && hd.Valid > 0 {
			st.LaneRevs = append(st.LaneRevs, snapKey{key, hd.Valid, hd.Hash})
		}
		if hd.Seen > hd.Valid {
			st.Skipped = append(st.Skipped, snapSkip{key, hd.Seen})
		}
	})
	sort.Slice(st.LaneRevs, func(i, j int) bool { return st.LaneRevs[i].Key < st.LaneRevs[j].Key })
	keys := make([]string, 0, len(b.balances))
	for key := range b.balances {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	balIdx := make(map[*balance]int, len(keys))
	for i, key := range keys {
		bl := b.balances[key]
		sb := snapBalance{Key: key, Ref: bl.ref, Rev: bl.rev, Unit: bl.unit, Limit: bl.limit,
			Spent: bl.spent, Reserved: bl.reserved, Overrun: bl.overrun, Alerted: bl.alerted, Arm: bl.arm}
		if !bl.exposure.IsZero() {
			exp := bl.exposure
			sb.Exposure = &exp
		}
		if b.prunable(bl.ref) && bl.stampedSeq >= bl.rev {
			sb.StampedAt = optTime(bl.stampedAt)
		}
		sb.ExpiredAt, sb.LastAt = optTime(bl.expiredAt), optTime(bl.lastAt)
		for id := range bl.open {
			sb.Open = append(sb.Open, id)
		}
		sort.Strings(sb.Open)
		st.Balances = append(st.Balances, sb)
		balIdx[bl] = i
	}
	for _, r := range b.reservations {
		st.Reservations = append(st.Reservations, snapRes(r))
	}
	sort.Slice(st.Reservations, func(i, j int) bool { return st.Reservations[i].ID < st.Reservations[j].ID })
	switch version {
	case 2:
		st.Closed = b.snapQueue(winClosed)
		st.Expired = b.snapQueue(winExpired)
	case 3, 4, 5:
		var err error
		// Sized for the entries at once: grown by append, a large
		// window was copied over and over while the book was locked.
		n := b.win.rings[winClosed].n + b.win.rings[winExpired].n
		buf := make([]byte, 0, 64+b.win.sectionBytes(n))
		if st.window, st.whole, err = b.win.appendWindow(buf, balIdx, version); err != nil {
			return nil, err
		}
		b.win.sized(len(st.window), n)
		st.WindowSize = len(st.window)
	default:
		return nil, fmt.Errorf("ledger: snapshot version %d is not written", version)
	}
	for _, c := range b.voided {
		if b.voids[c.r.RequestID] == c.r {
			st.Voids = append(st.Voids, snapVoid{c.r.RequestID, c.r.OpenedAt, c.at})
		}
	}
	sort.Slice(st.Skipped, func(i, j int) bool { return st.Skipped[i].Key < st.Skipped[j].Key })
	for _, k := range b.learned.Keys() {
		st.Learned = append(st.Learned, snapLearned{Scope: k.Scope, Model: k.Model, Costs: b.learned.Window(k).Costs()})
	}
	return st, nil
}

// finish encodes what was copied under the book's lock to be encoded
// after it: the readers' sections that are SectionCopiers, and the JSON of
// the window's entries written whole, inserted into the window section
// (snapshotCopy and dumpSections leave them out); once done it does
// nothing.
func (st *snapshotState) finish() error {
	for i := range st.budgetsLater {
		raw, err := json.Marshal(&st.budgetsLater[i])
		if err != nil {
			return fmt.Errorf("ledger: snapshot of budget %s: %w", st.Budgets[i].Key, err)
		}
		st.Budgets[i].Revision = raw
	}
	st.budgetsLater = nil
	for _, ls := range st.sectionsLater {
		data, err := ls.encode()
		if err != nil {
			return fmt.Errorf("ledger: snapshot section %s: %w", ls.name, err)
		}
		if st.Sections == nil {
			st.Sections = map[string]json.RawMessage{}
		}
		st.Sections[ls.name] = data
	}
	st.sectionsLater = nil
	if len(st.whole) == 0 {
		return nil
	}
	win, err := finishWindow(st.window, st.whole)
	if err != nil {
		return err
	}
	st.window, st.WindowSize, st.whole = win, len(win), nil
	return nil
}

// budgetsByKey sorts a snapshot's budgets by key, their revisions to
// encode with them.
type budgetsByKey struct{ st *snapshotState }

func (s budgetsByKey) Len() int           { return len(s.st.Budgets) }
func (s budgetsByKey) Less(i, j int) bool { return s.st.Budgets[i].Key < s.st.Budgets[j].Key }
func (s budgetsByKey) Swap(i, j int) {
	b, l := s.st.Budgets, s.st.budgetsLater
	b[i], b[j] = b[j], b[i]
	l[i], l[j] = l[j], l[i]
}

// laterSection is a reader's section copied under the book's lock, and
// the function that encodes the copy (SectionCopier).
type laterSection struct {
	name   string
	encode func() ([]byte, error)
}

func snapRes(r *Reservation) snapReservation {
	sr := snapReservation{ID: r.ID, RequestID: r.RequestID, RequestHash: r.RequestHash,
		Balances: append([]events.BalanceRef(nil), r.Balances...), OpenedAt: r.OpenedAt, ExpiresAt: r.ExpiresAt,
		Status: r.Status, Late: r.Late, AfterExpiry: r.AfterExpiry, Pricing: r.Pricing}
	for _, p := range r.Parts {
		sr.Parts = append(sr.Parts, snapPart(p))
	}
	return sr
}

func (sr *snapReservation) reservation() *Reservation {
	r := &Reservation{ID: sr.ID, RequestID: sr.RequestID, RequestHash: sr.RequestHash, Balances: sr.Balances,
		Parts: make([]Part, 0, len(sr.Parts)), OpenedAt: sr.OpenedAt, ExpiresAt: sr.ExpiresAt, Status: sr.Status, Late: sr.Late, AfterExpiry: sr.AfterExpiry, Pricing: sr.Pricing}
	for _, p := range sr.Parts {
		r.Parts = append(r.Parts, Part(p))
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
// st.Seq. It reads versions 1, 2 and 3.
func bookFromSnapshot(layout streams.Layout, retention, expiredKeep time.Duration, st *snapshotState) (*book, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSnapshotInvalid, fmt.Sprintf(format, args...))
	}
	if !snapshotReadable(st.Version) {
		return nil, bad("version %d, want 1 to %d", st.Version, SnapshotVersion)
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
		loc, err := events.LoadZone(rev.TZ)
		if err != nil {
			return nil, bad("budget %s: %v", sb.Key, err)
		}
		if loc == time.UTC {
			loc = nil
		}
		arm := st.BudgetArms[sb.Key]
		r := sb.Retirement
		if r != nil {
			if !rev.Retired {
				return nil, bad("budget %s: a retirement of a budget that is not retired", sb.Key)
			}
			if r.At != nil {
				// The tombstone's definition, with the event it was
				// retired by, as the fold hands it.
				rev.Events = events.Events{events.BudgetRetired{Budget: rev.Budget, Reason: r.Reason, At: *r.At}}
			}
		}
		b.setBudgetArm(sb.Key, sb.Rev, &rev, loc, &arm)
		if r != nil && r.Last != nil {
			l := r.Last
			ref := events.BalanceRef{Scope: rev.Budget.Scope, Period: rev.Budget.Period, Instance: l.Instance, Unit: rev.Budget.Unit}
			if l.Instance == "" || l.Rev == 0 || l.Rev > st.Seq {
				return nil, bad("budget %s: last balance %q at %d", sb.Key, l.Instance, l.Rev)
			}
			last := &lastBalance{key: streams.BalanceKey(ref), ref: ref, rev: l.Rev, spent: l.Spent}
			if l.Overrun != nil {
				last.overrun = *l.Overrun
			}
			b.budgets[sb.Key].last = last
		}
		b.heads.Set(sb.Key, gate.Head{Valid: sb.Rev, Hash: sb.Hash, Chained: rev.Chained()})
	}
	if err := loadDefs(b, "pricing", st.Prices, st.Seq, events.DecodePricingRevision,
		func(r *events.PricingRevision) string { return streams.PricingKey(r.Model) }, b.setPricing); err != nil {
		return nil, bad("%v", err)
	}
	decodeDefault := func(data []byte) (events.DefaultRevision, error) {
		r, err := events.DecodeDefaultRevision(data)
		if err == nil {
			_, err = events.LoadZone(r.TZ)
		}
		return r, err
	}
	if err := loadDefs(b, "default", st.Defaults, st.Seq, decodeDefault,
		func(r *events.DefaultRevision) string { return streams.DefaultKey(r.Kind, r.Period) }, b.setDefault); err != nil {
		return nil, bad("%v", err)
	}
	if t := st.Trust; t != nil {
		rev, err := events.DecodeTrustRevision(t.Revision)
		if err != nil {
			return nil, bad("trust: %v", err)
		}
		if t.Key != streams.TrustKey || t.Rev == 0 || t.Rev > st.Seq {
			return nil, bad("trust revision of %s at %d", t.Key, t.Rev)
		}
		b.trust = &gate.Revision{Seq: t.Rev, Key: t.Key, Kind: gate.KindTrust, Hash: t.Hash, Signer: rev.By, Trust: &rev}
		b.heads.Set(t.Key, gate.Head{Valid: t.Rev, Hash: t.Hash, Chained: true})
	}
	if err := loadDefs(b, "API key", st.APIKeys, st.Seq, events.DecodeAPIKeyRevision,
		func(r *events.APIKeyRevision) string { return streams.APIKeyKey(r.ID) }, b.setAPIKey); err != nil {
		return nil, bad("%v", err)
	}
	if err := loadDefs(b, "tenant limits", st.TenantLimits, st.Seq, events.DecodeTenantLimitsRevision,
		func(r *events.TenantLimitsRevision) string { return streams.TenantLimitsKey(r.Tenant) }, b.setTenantLimits); err != nil {
		return nil, bad("%v", err)
	}
	for _, k := range st.LaneRevs {
		if !layout.HasLane(k.Key) || k.Rev == 0 || k.Rev > st.Seq {
			return nil, bad("lane %s at %d", k.Key, k.Rev)
		}
		b.heads.Set(k.Key, gate.Head{Valid: k.Rev, Hash: k.Hash, Chained: true})
	}
	for _, k := range st.Skipped {
		valid, _ := b.valid(k.Key)
		if !(streams.IsLaneKey(k.Key) || streams.IsBudgetKey(k.Key) || streams.IsPricingKey(k.Key) || streams.IsDefaultKey(k.Key) || streams.IsTrustKey(k.Key) || streams.IsAPIKeyKey(k.Key) || streams.IsTenantLimitsKey(k.Key)) ||
			k.Rev <= valid || k.Rev > st.Seq {
			return nil, bad("skipped revision %d of %s", k.Rev, k.Key)
		}
		hd := b.heads.Get(k.Key)
		hd.Seen = k.Rev
		b.heads.Set(k.Key, hd)
	}
	// Balances first (the window's entries point at them), their open
	// reservations last (they may be in the window: a close over two
	// lanes that a snapshot splits).
	bals := make([]*balance, len(st.Balances))
	for i, sb := range st.Balances {
		if streams.BalanceKey(sb.Ref) != sb.Key || sb.Rev > st.Seq || b.balances[sb.Key] != nil {
			return nil, bad("balance %s at %d", sb.Key, sb.Rev)
		}
		bals[i] = &balance{key: sb.Key, ref: sb.Ref, self: []events.BalanceRef{sb.Ref}, rev: sb.Rev, unit: sb.Unit,
			limit: sb.Limit, spent: sb.Spent, reserved: sb.Reserved, overrun: sb.Overrun, alerted: sb.Alerted, arm: sb.Arm, open: make(map[string]*Reservation, len(sb.Open))}
		if sb.Exposure != nil {
			bals[i].exposure = *sb.Exposure
		}
		if sb.ExpiredAt != nil {
			bals[i].expiredAt = *sb.ExpiredAt
		}
		if sb.LastAt != nil {
			bals[i].lastAt = *sb.LastAt
		}
		if b.prunable(sb.Ref) {
			// Stamped as the snapshot says; a revision it did not stamp
			// waits for the follower, which folds on from the snapshot.
			if sb.StampedAt != nil {
				bals[i].stampedSeq, bals[i].stampedAt = sb.Rev, *sb.StampedAt
				b.short[sb.Key] = bals[i]
			} else {
				b.queueUnknownStamp(bals[i], sb.Rev)
			}
		}
		b.balances[sb.Key] = bals[i]
		b.indexBalance(bals[i])
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
			b.openChanged(r, 1)
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
	if st.Version >= 3 {
		r := st.windowAhead
		if r == nil {
			r = newSectionReader(st.window)
		}
		if len(st.Closed)+len(st.Expired) > 0 || st.WindowSize != r.left() {
			return nil, bad("version 3 with queues in its JSON, or a window section of %d bytes (window_size %d)", r.left(), st.WindowSize)
		}
		if err := b.loadWindow(r, bals, st.Version); err != nil {
			return nil, fmt.Errorf("%w: window: %w", ErrSnapshotInvalid, err)
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
	for i, sl := range st.Learned {
		k := learn.Key{Scope: sl.Scope, Model: sl.Model}
		if len(sl.Costs) == 0 || len(sl.Costs) > events.MaxLearnWindow || b.learned.Window(k) != nil ||
			i > 0 && (st.Learned[i-1].Scope > sl.Scope || st.Learned[i-1].Scope == sl.Scope && st.Learned[i-1].Model >= sl.Model) {
			return nil, bad("learned window of %s %s: %d costs, or out of order", sl.Scope, sl.Model, len(sl.Costs))
		}
		if b.scopeRetired(sl.Scope) {
			// Written before a retirement dropped its scope's windows.
			continue
		}
		b.learned.Set(k, learn.WindowOf(sl.Costs))
	}
	for _, sv := range st.Voids {
		if sv.RequestID == "" || b.voids[sv.RequestID] != nil {
			return nil, bad("void of request %q twice", sv.RequestID)
		}
		v := &Reservation{RequestID: sv.RequestID, OpenedAt: sv.VoidedAt, Status: events.StatusVoided}
		b.voids[sv.RequestID] = v
		b.voided = append(b.voided, closedRes{v, sv.At})
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
		// Every reservation has both ids (the gate refuses an event
		// without them), and the window writes one that fits compact,
		// where an empty id is refused: taking one here would make the
		// book's next snapshot one no replica loads.
		if c.ID == "" {
			return errors.New("an empty id")
		}
		if c.Reservation.RequestID == "" {
			return fmt.Errorf("reservation %s has an empty request id", c.ID)
		}
		// Nor a balance twice, as loadMore refuses in a compact entry
		// (one that fits is written compact by the next snapshot).
		for i, ref := range c.Reservation.Balances {
			if slices.Contains(c.Reservation.Balances[:i], ref) {
				return fmt.Errorf("reservation %s in balance %s twice", c.ID, streams.BalanceKey(ref))
			}
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
	b.win.add(which, r, b.balances, c.At)
	return nil
}

// encodeSnapshot returns st's encoding: header line, then body (version 3:
// the JSON line, then the window section), signed by signer for bucket
// (version 4; nil: unsigned).
func encodeSnapshot(st *snapshotState, bucket string, signer *signing.Signer) ([]byte, error) {
	if err := st.finish(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("ledger: encoding snapshot: %w", err)
	}
	if st.Version >= 3 {
		if bytes.IndexByte(body, '\n') >= 0 {
			return nil, errors.New("ledger: encoding snapshot: a newline in the JSON line")
		}
		body = append(append(body, '\n'), st.window...)
	}
	sum := sha256.Sum256(body)
	hd := snapshotHeader{Format: SnapshotFormat, Version: st.Version, Seq: st.Seq, Size: len(body), SHA256: hex.EncodeToString(sum[:])}
	if signer != nil && st.Version >= 4 {
		hd.Signer, hd.Sig = gate.SignSnapshot(signer, hd.id(bucket))
	}
	h, err := json.Marshal(hd)
	if err != nil {
		return nil, fmt.Errorf("ledger: encoding snapshot: %w", err)
	}
	out := make([]byte, 0, len(h)+1+len(body))
	out = append(append(append(out, h...), '\n'), body...)
	return out, nil
}

// parseSnapshotHeader decodes a snapshot's header line and checks its
// format and version. Errors wrap ErrSnapshotInvalid.
func parseSnapshotHeader(line []byte) (snapshotHeader, error) {
	var h snapshotHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return h, fmt.Errorf("%w: header: %v", ErrSnapshotInvalid, err)
	}
	if h.Format != SnapshotFormat || !snapshotReadable(h.Version) {
		return h, fmt.Errorf("%w: format %q version %d, want %q version 1 to %d", ErrSnapshotInvalid, h.Format, h.Version, SnapshotFormat, SnapshotVersion)
	}
	return h, nil
}

// checkName checks that the snapshot named name is the one its header
// (whose signature covers its sequence, not its name) says it is: a
// snapshot copied under another name would otherwise be loaded as of
// that name's sequence, and the revisions between skipped.
func (h snapshotHeader) checkName(name string) error {
	if seq, ok := streams.SnapshotSeq(name); !ok || seq != h.Seq {
		return fmt.Errorf("%w: named %s, its header says sequence %d (copied under another name?)", ErrSnapshotInvalid, name, h.Seq)
	}
	return nil
}

// decodeSnapshot checks data's header and digest and decodes its body.
// Errors wrap ErrSnapshotInvalid.
func decodeSnapshot(data []byte) (*snapshotState, error) {
	st, _, err := decodeSnapshotHeader(data)
	return st, err
}

// decodeSnapshotHeader is decodeSnapshot that also returns the header
// (whose signature the caller checks).
func decodeSnapshotHeader(data []byte) (*snapshotState, snapshotHeader, error) {
	st, h, ahead, err := decodeSnapshotAhead(wholeObject(data), nil)
	if err == nil {
		err = ahead.check(h)
	}
	if err != nil {
		return nil, h, err
	}
	if r := st.windowAhead; r != nil {
		st.window, st.windowAhead = r.b, nil
	}
	return st, h, nil
}

// wholeObject is an object all of whose bytes are there.
type wholeObject []byte

func (o wholeObject) Wait(int) ([]byte, error) { return o, io.EOF }
func (o wholeObject) Size() int                { return len(o) }
func (o wholeObject) All() ([]byte, error)     { return o, nil }

// snapshotAhead is a snapshot being decoded while it arrives
// (decodeSnapshotAhead).
type snapshotAhead struct {
	o objectAhead
	// sum is the SHA-256 of the body, hashed as it arrives by a
	// goroutine of its own (nil: reading failed first).
	sum chan []byte
}

// decodeSnapshotAhead is decodeSnapshotHeader for a snapshot object still
// arriving: it waits for the header and the JSON line and decodes them, and
// leaves the window section (version 3 on) to bookFromSnapshot, which reads
// it as it arrives (st.windowAhead). The body's digest is computed as it
// arrives; check compares it with the header's once all of it did, and
// until then the book built from it is not to be trusted.
//
// Why: a replica's restart after a graceful stop is mostly this snapshot's
// load. Reading a 100 MB object took 200-300 ms, and decoding only began
// after it; hashing the body took another 100 ms of the decoding
// goroutine.
//
// checkHeader (nil: none), the caller's check of the header's name and
// signature, runs before any of the body is decoded: decoding JSON
// allocates many times its size (a reservation "{}," is 3 bytes and a
// struct of about 200), so a body nobody trusted signed could otherwise
// make its reader allocate gigabytes from an object of tens of MB.
func decodeSnapshotAhead(o objectAhead, checkHeader func(snapshotHeader) error) (*snapshotState, snapshotHeader, *snapshotAhead, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSnapshotInvalid, fmt.Sprintf(format, args...))
	}
	// line waits for the newline at or after from: the index past it.
	line := func(from int, what string) (int, error) {
		for scanned := from; ; {
			buf, err := o.Wait(scanned + 64<<10)
			if i := bytes.IndexByte(buf[scanned:], '\n'); i >= 0 {
				return scanned + i + 1, nil
			}
			scanned = len(buf)
			if errors.Is(err, io.EOF) {
				return 0, bad("no %s line (%d bytes)", what, len(buf))
			}
			if err != nil {
				return 0, fmt.Errorf("%w: reading: %w", ErrSnapshotInvalid, err)
			}
		}
	}
	hl, err := line(0, "header")
	if err != nil {
		return nil, snapshotHeader{}, nil, err
	}
	buf, _ := o.Wait(hl)
	h, err := parseSnapshotHeader(buf[:hl-1])
	if err != nil {
		return nil, h, nil, err
	}
	if body := o.Size() - hl; body != h.Size {
		return nil, h, nil, bad("body of %d bytes, header says %d (truncated?)", body, h.Size)
	}
	if checkHeader != nil {
		if err := checkHeader(h); err != nil {
			return nil, h, nil, err
		}
	}
	a := &snapshotAhead{o: o, sum: make(chan []byte, 1)}
	go a.hash(hl)
	st := &snapshotState{}
	end := o.Size()
	if h.Version >= 3 {
		if end, err = line(hl, "JSON"); err != nil {
			return nil, h, a, a.checkFirst(h, err)
		}
		end-- // the newline
	} else if _, err := o.All(); err != nil {
		return nil, h, a, fmt.Errorf("%w: reading: %w", ErrSnapshotInvalid, err)
	}
	if end-hl > jsonAheadMax {
		// A large JSON line is decoded once the body is known to be the
		// one signed (see jsonAheadMax).
		if err := a.check(h); err != nil {
			return nil, h, a, err
		}
	}
	buf, _ = o.Wait(end)
	if err := json.Unmarshal(buf[hl:end], st); err != nil {
		return nil, h, a, a.checkFirst(h, bad("body: %v", err))
	}
	if st.Seq != h.Seq || st.Version != h.Version {
		return nil, h, a, a.checkFirst(h, bad("body at seq %d version %d, header says seq %d version %d", st.Seq, st.Version, h.Seq, h.Version))
	}
	if h.Version >= 3 {
		buf, _ = o.Wait(end + 1)
		st.windowAhead = &sectionReader{src: buf, b: buf[end+1:], end: o.Size(), ahead: o}
		st.windowAhead.step.entry, st.windowAhead.step.tables = entryAhead, tablesAhead
		st.windowAhead.verify = func() error { return a.check(h) }
	}
	return st, h, a, nil
}

// jsonAheadMax bounds the JSON line decodeSnapshotAhead decodes before the
// body's digest is checked. Decoding JSON allocates many times its size
// ("{}," is a reservation of about 200 bytes): a genuine signed header
// replayed over a forged body of the same size (anyone who may write the
// bucket can write one under the snapshot's own name) made a replica
// decode up to 65 times the snapshot's size before the digest failed,
// gigabytes for a snapshot of tens of MB, at every start. Below the bound
// the overlap of reading and decoding is kept (the window section, most of
// a large snapshot, is binary, with counts checked against the bytes
// left); above it the JSON waits for the whole body, its read time.
const jsonAheadMax = 4 << 20

// hash hashes the object's bytes from the body's first (at from) on as
// they arrive.
func (a *snapshotAhead) hash(from int) {
	h := sha256.New()
	for at := from; ; {
		buf, err := a.o.Wait(at + 1<<20)
		h.Write(buf[at:])
		at = len(buf)
		if errors.Is(err, io.EOF) {
			a.sum <- h.Sum(nil)
			return
		}
		if err != nil {
			a.sum <- nil
			return
		}
	}
}

// checkFirst is the digest's error if the body is not the one signed (a
// body changed after it was signed may fail to decode in any way), else
// err.
func (a *snapshotAhead) checkFirst(h snapshotHeader, err error) error {
	if cerr := a.check(h); cerr != nil {
		return cerr
	}
	return err
}

// check waits for the whole body and compares its digest with the
// header's.
func (a *snapshotAhead) check(h snapshotHeader) error {
	sum := <-a.sum
	a.sum <- sum // check may be asked again
	if sum == nil {
		_, err := a.o.All()
		return fmt.Errorf("%w: reading: %w", ErrSnapshotInvalid, err)
	}
	if hex.EncodeToString(sum) != h.SHA256 {
		return fmt.Errorf("%w: digest mismatch", ErrSnapshotInvalid)
	}
	return nil
}

// optTime is t, or nil for the zero time (a snapshot field left out).
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
