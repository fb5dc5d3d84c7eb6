package ledger

import (
	"encoding/hex"
	"hash/maphash"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// The idempotency window holds the closed reservations a replica still
// answers replays for: a settle, release or admit retried within the
// retention gets the answer it got the first time. There may be hundreds
// of thousands of them (15 minutes at 1,000 closes a second), so each is
// kept compact, in one winEntry of 112 bytes plus two 4-byte index slots:
//
//   - ids as 16 bytes when they are UUIDs in their canonical text (a
//     reservation id is "rsv_" + a UUID; the client's request ids are
//     UUIDs), the request hash as its 16 bytes;
//   - one balance (a pointer to the book's balance, which holds the ref
//     and key), the unit as an index into the window's table of units,
//     the amount and actual as int64 coefficient and int8 exponent
//     (events.Money.Compact), times as Unix nanoseconds, the status as a
//     small code;
//   - a reservation in several balances, or priced from a model (what an
//     LLM gateway's admits are: a key, a team and a user, priced), keeps
//     its other parts in the same compact form and its price quote as an
//     index into the window's table of quotes (their prices; the token
//     counts beside it) in a winMore, about 100 bytes more, not the
//     whole Reservation (about 1 KB);
//   - anything that does not fit (an id of another shape, a part with a
//     ceiling, more than 1+maxMoreParts parts, a quote without a model or
//     with token counts outside 0..events.MaxTokens, a time outside
//     1678..2262, a status other than the three)
//     goes to a winExt beside the entry: the strings that did not fit, or
//     the whole Reservation.
//
// Entries live in two FIFO rings, closed and expired (their retentions
// differ), in the order their closes were stamped, and are forgotten from
// the front. Two open-addressing tables of uint32 handles index them by
// reservation id and by request id. A materialized Reservation is built
// on each lookup; its text (ids, amounts, times, status) is the original,
// byte for byte.
//
// Each table slot holds the handle and the low 32 bits of its key's hash:
// a probe compares that fingerprint and reads the entry (a cache miss, in
// a window of a million entries) only when it matches, and growing or
// shifting a table never reads an entry or hashes a key again.

// window statuses, as codes (0 means the status lives in ext.res).
var winStatuses = [...]string{1: events.StatusSettled, 2: events.StatusReleased, 3: events.StatusExpired}

func winStatus(s string) uint8 {
	for i, v := range winStatuses {
		if i > 0 && v == s {
			return uint8(i)
		}
	}
	return 0
}

// id kinds of a compact id.
const (
	idExt  = 0 // not compact: the text is in ext
	idUUID = 1 // a canonical UUID
	idRsv  = 2 // "rsv_" + a canonical UUID
)

// entry flags
const (
	flagHash = 1 << 0 // hash holds the request hash (32 hex characters)
	flagLate = 1 << 1
	flagDead = 1 << 2 // taken back into the book (see book.rehydrate)
)

type winEntry struct {
	id, req, hash           [16]byte
	at, opened, expires     int64
	amount, actual          int64
	bal                     *balance
	ext                     *winExt
	amountExp, actualExp    int8
	idKind, reqKind, status uint8
	flags                   uint8
	unit                    uint16
}

// winExt holds what a winEntry cannot: texts that are not UUIDs or hex
// hashes, the parts after the first and the price quote (more), or (res)
// a whole reservation.
type winExt struct {
	id, req, hash string
	more          *winMore
	res           *Reservation
}

// winMore is the rest of a compact reservation held in several balances
// or priced from a model.
type winMore struct {
	// parts are the reservation's parts after the entry's own, in the
	// order of its balances.
	parts []winPart
	// quote is 1 + the index of the price quote in the window's table of
	// quotes (0: not priced); inputTokens and maxOutput its token counts.
	quote                  uint32
	inputTokens, maxOutput int64
}

// winExtra is a winExt and its winMore in one allocation, with room for
// two more parts (a reservation in three balances, what a gateway's admit
// of a key, a team and a user makes): a window of a million such entries
// allocates a million objects, not three million.
type winExtra struct {
	ext   winExt
	more  winMore
	parts [2]winPart
}

// newMore returns a winMore with room for n more parts, and the winExt
// allocated with it (whose more is set).
func newMore(n int) (*winExt, *winMore) { return new(winExtra).init(n) }

// init makes x a winExt whose more has room for n more parts.
func (x *winExtra) init(n int) (*winExt, *winMore) {
	x.ext.more = &x.more
	if n <= len(x.parts) {
		x.more.parts = x.parts[:0]
	} else {
		x.more.parts = make([]winPart, 0, n)
	}
	return &x.ext, &x.more
}

// winPart is one part of a reservation, as a winEntry holds its first.
type winPart struct {
	bal                  *balance
	amount, actual       int64
	amountExp, actualExp int8
	unit                 uint16
}

// window is the idempotency window: see above.
type window struct {
	rings       [2]ring // winClosed, winExpired
	byID, byReq table
	seed        maphash.Seed
	// hashMask is ANDed into every key's hash: all ones, but tests narrow
	// it to force long probe runs and equal fingerprints of other keys.
	hashMask uint64
	units    []string
	unitIdx  map[string]uint16
	// quotes are the price quotes of the entries priced from a model,
	// without their token counts (one per model and price version),
	// quoteIdx their indexes by quoteKey.
	quotes   []events.PriceQuote
	quoteIdx map[string]uint32
	// perEntry is the bytes an entry took in the last window section
	// written or loaded, in sixteenths (see sectionBytes); atomic, as
	// snapshots copy the book under its read lock only.
	perEntry atomic.Int64
}

// maxQuotes bounds the window's table of quotes; a reservation whose quote
// does not fit is kept whole.
const maxQuotes = 1 << 20

const (
	winClosed  = 0
	winExpired = 1
	// handleBits is how many bits of a handle hold the ring position; the
	// bit above names the ring.
	handleBits = 30
	handleMask = 1<<handleBits - 1
	// emptySlot is a free table slot. A used slot's low 32 bits are a
	// handle, whose top bit is never set, so no used slot equals it.
	emptySlot = ^uint64(0)
)

func newWindow() *window {
	return &window{seed: maphash.MakeSeed(), hashMask: ^uint64(0), unitIdx: map[string]uint16{}, quoteIdx: map[string]uint32{}}
}

// len is the number of closed reservations the window holds.
func (w *window) len() int { return w.byID.n }

// ring is a FIFO of entries addressed by absolute position, held in
// chunks of ringChunk entries: it grows by a chunk and shrinks by one as
// its head passes it, so an entry is never copied once pushed and the
// spare room is at most a chunk at either end.
type ring struct {
	chunks [][]winEntry // chunks[0] holds positions first*ringChunk onwards
	first  uint64
	head   uint64 // absolute position of the first live entry
	n      int
	spare  []winEntry // a chunk the head passed, zeroed, for the next push
}

// ringChunk is the entries of a ring chunk (about 64 KB of them).
const ringChunk = 512

func (r *ring) at(abs uint64) *winEntry {
	return &r.chunks[abs/ringChunk-r.first][abs%ringChunk]
}

func (r *ring) push(e winEntry) uint64 {
	abs := r.head + uint64(r.n)
	if len(r.chunks) == 0 {
		r.first = abs / ringChunk
	}
	if abs/ringChunk-r.first == uint64(len(r.chunks)) {
		c := r.spare
		if r.spare = nil; c == nil {
			c = make([]winEntry, ringChunk)
		}
		r.chunks = append(r.chunks, c)
	}
	*r.at(abs) = e
	r.n++
	return abs
}

func (r *ring) pop() {
	*r.at(r.head) = winEntry{}
	r.head++
	r.n--
	if r.head/ringChunk > r.first {
		// The head left chunks[0], every entry of which was popped (and
		// zeroed): it becomes the spare.
		r.spare = r.chunks[0]
		r.chunks[0] = nil
		r.chunks = r.chunks[1:]
		r.first++
	}
}

// handle names an entry: its ring and position.
func handleOf(which int, abs uint64) uint32 {
	return uint32(which)<<handleBits | uint32(abs&handleMask)
}

func (w *window) entry(h uint32) *winEntry {
	r := &w.rings[h>>handleBits]
	abs := r.head + uint64((h-uint32(r.head))&handleMask)
	return r.at(abs)
}

// table is an open-addressing hash table (linear probing, backward-shift
// deletion) of handles, each with its key's fingerprint (see slotOf).
type table struct {
	slots []uint64
	n     int
}

// slotOf is the slot of handle h whose key hashes to hash: the low 32 bits
// of the hash above the handle. A table never has more than 1<<32 slots,
// so the fingerprint holds every bit of the hash that picks a key's home
// slot (hash & mask).
func slotOf(h uint32, hash uint64) uint64 { return uint64(uint32(hash))<<32 | uint64(h) }

// winKey is a key looked up in a table: its text, its hash and, when it is
// a compact id, its 16 bytes and kind (idExt when it is not one).
type winKey struct {
	s    string
	hash uint64
	b    [16]byte
	kind uint8
}

func (w *window) key(s string) winKey {
	k := winKey{s: s}
	var ok bool
	if k.b, k.kind, ok = compactID(s); ok {
		k.hash = w.hashCompact(k.b, k.kind)
	} else {
		k.kind, k.hash = idExt, maphash.String(w.seed, s)&w.hashMask
	}
	return k
}

// hashID is the hash of id s: it depends only on its text.
func (w *window) hashID(s string) uint64 { return w.key(s).hash }

func (w *window) hashCompact(b [16]byte, kind uint8) uint64 {
	var buf [17]byte
	copy(buf[:], b[:])
	buf[16] = kind
	return maphash.Bytes(w.seed, buf[:]) & w.hashMask
}

// keyHash is the hash of entry e's reservation id (req false) or request
// id (req true).
func (w *window) keyHash(e *winEntry, req bool) uint64 {
	if req {
		if e.reqKind != idExt {
			return w.hashCompact(e.req, e.reqKind)
		}
		return w.hashID(e.reqText())
	}
	if e.idKind != idExt {
		return w.hashCompact(e.id, e.idKind)
	}
	return w.hashID(e.idText())
}

func (e *winEntry) idText() string {
	switch {
	case e.idKind != idExt:
		return idText(e.id, e.idKind)
	case e.ext.res != nil:
		return e.ext.res.ID
	}
	return e.ext.id
}

func (e *winEntry) reqText() string {
	switch {
	case e.reqKind != idExt:
		return idText(e.req, e.reqKind)
	case e.ext.res != nil:
		return e.ext.res.RequestID
	}
	return e.ext.req
}

// matches reports whether e's id (or request id) is k.
func (e *winEntry) matches(k *winKey, req bool) bool {
	kind, b := e.idKind, &e.id
	if req {
		kind, b = e.reqKind, &e.req
	}
	if kind == idExt {
		// Not compact, or widened (see shared): compare the text.
		if req {
			return e.reqText() == k.s
		}
		return e.idText() == k.s
	}
	return k.kind == kind && k.b == *b
}

func (w *window) find(t *table, k *winKey, req bool) (uint32, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	fp := uint32(k.hash)
	for i := k.hash & mask; ; i = (i + 1) & mask {
		sl := t.slots[i]
		if sl == emptySlot {
			return 0, false
		}
		if uint32(sl>>32) == fp && w.entry(uint32(sl)).matches(k, req) {
			return uint32(sl), true
		}
	}
}

// insert puts handle h, whose key hashes to hash, into t.
func (w *window) insert(t *table, h uint32, hash uint64) {
	if 4*(t.n+1) > 3*len(t.slots) {
		w.rehash(t, max(16, 2*len(t.slots)))
	}
	t.place(slotOf(h, hash))
	t.n++
}

func (t *table) place(sl uint64) {
	mask := uint64(len(t.slots) - 1)
	i := sl >> 32 & mask
	for t.slots[i] != emptySlot {
		i = (i + 1) & mask
	}
	t.slots[i] = sl
}

func (w *window) rehash(t *table, size int) {
	old := t.slots
	t.slots = make([]uint64, size)
	for i := range t.slots {
		t.slots[i] = emptySlot
	}
	for _, sl := range old {
		if sl != emptySlot {
			t.place(sl)
		}
	}
}

// remove takes handle h, whose key hashes to hash, out of t, if it is
// there.
func (w *window) remove(t *table, h uint32, hash uint64) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := hash & mask
	for uint32(t.slots[i]) != h {
		if t.slots[i] == emptySlot {
			return
		}
		i = (i + 1) & mask
	}
	// Backward shift: move up every later entry of the run whose home is
	// not in (i, j].
	for j := (i + 1) & mask; t.slots[j] != emptySlot; j = (j + 1) & mask {
		home := t.slots[j] >> 32 & mask
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = emptySlot
	t.n--
	if len(t.slots) > 64 && 8*t.n < len(t.slots) {
		w.rehash(t, len(t.slots)/2)
	}
}

// removeEntry takes handle h out of both tables.
func (w *window) removeEntry(h uint32) {
	e := w.entry(h)
	w.remove(&w.byID, h, w.keyHash(e, false))
	w.remove(&w.byReq, h, w.keyHash(e, true))
}

// add puts closed reservation r, stamped at, into ring which; bals are the
// book's balances by key (an entry points at those its parts are in). A
// request id already in the window now names r (the newer reservation
// wins, as in the book's request map).
func (w *window) add(which int, r *Reservation, bals map[string]*balance, at time.Time) {
	e := w.compact(r, bals)
	e.at = at.UnixNano()
	r0 := &w.rings[which]
	abs := r0.push(e)
	h := handleOf(which, abs)
	req := w.key(r.RequestID)
	if old, ok := w.find(&w.byReq, &req, true); ok {
		w.remove(&w.byReq, old, req.hash)
	}
	w.insert(&w.byID, h, w.keyHash(&e, false))
	w.insert(&w.byReq, h, req.hash)
}

// pushEntry puts e (a compact entry read from a snapshot, stamped) at the
// end of ring which and returns its handle. The entry is not indexed yet:
// index does that for a batch of them.
func (w *window) pushEntry(which int, e *winEntry) uint32 {
	return handleOf(which, w.rings[which].push(*e))
}

// index puts the entries of handles hs (pushed by pushEntry, in that order)
// into both tables, as add would put their reservations one by one: a
// request id already in the window (or earlier in hs) then names the later
// entry. It returns the handle of an entry whose id the window holds
// already, and false; the tables are then left as they are, to be dropped
// with the book being loaded.
//
// Why a batch: a snapshot's window is read into empty tables of 2^21
// slots (16 MB each) per million entries, and a key's home slot is random,
// so each insert missed the cache and the TLB, about 250 ns apiece: half of
// loading a million entries. In the order of their home slots the inserts
// walk each table once.
func (w *window) index(hs []uint32) (uint32, bool) {
	sls := make([]uint64, len(hs))
	tmp := make([]uint64, len(hs))
	for _, req := range []bool{false, true} {
		t := &w.byID
		if req {
			t = &w.byReq
		}
		size := max(16, len(t.slots))
		for 4*(t.n+len(hs)) > 3*size {
			size *= 2
		}
		if size != len(t.slots) {
			w.rehash(t, size)
		}
		for i, h := range hs {
			sls[i] = slotOf(h, w.keyHash(w.entry(h), req))
		}
		mask := uint64(len(t.slots) - 1)
		sortByHome(sls, tmp, mask)
		for _, sl := range sls {
			i := sl >> 32 & mask
			for ; t.slots[i] != emptySlot; i = (i + 1) & mask {
				if t.slots[i]>>32 == sl>>32 && w.entry(uint32(t.slots[i])).sameKey(w.entry(uint32(sl)), req) {
					break
				}
			}
			if t.slots[i] == emptySlot {
				t.n++
			} else if !req {
				return uint32(sl), false
			}
			// A request id already in the window now names the later
			// entry: its slot is reused (the key, hence the probe
			// sequence, is the same).
			t.slots[i] = sl
		}
	}
	return 0, true
}

// sortByHome sorts slots sls by their home slot in a table of mask+1
// slots (sl>>32 & mask), keeping the order of slots of the same home (a
// least significant digit radix sort, 11 bits a pass); tmp is scratch of
// the same length.
func sortByHome(sls, tmp []uint64, mask uint64) {
	const digit = 11
	var count [1 << digit]int
	src, dst := sls, tmp
	for shift := 0; mask>>shift != 0; shift += digit {
		clear(count[:])
		for _, sl := range src {
			count[(sl>>32&mask)>>shift&(1<<digit-1)]++
		}
		sum := 0
		for d, c := range count {
			count[d], sum = sum, sum+c
		}
		for _, sl := range src {
			d := (sl >> 32 & mask) >> shift & (1<<digit - 1)
			dst[count[d]] = sl
			count[d]++
		}
		src, dst = dst, src
	}
	if len(sls) > 0 && &src[0] != &sls[0] {
		copy(sls, src)
	}
}

// sameKey reports whether e and o have the same id (req false) or request
// id (req true).
func (e *winEntry) sameKey(o *winEntry, req bool) bool {
	k1, b1, k2, b2 := e.idKind, &e.id, o.idKind, &o.id
	if req {
		k1, b1, k2, b2 = e.reqKind, &e.req, o.reqKind, &o.req
	}
	if k1 != idExt && k2 != idExt {
		return k1 == k2 && *b1 == *b2
	}
	if req {
		return e.reqText() == o.reqText()
	}
	return e.idText() == o.idText()
}

// intern returns the index of unit in the window's table of units, adding
// it; false when the table is full.
func (w *window) intern(unit string) (uint16, bool) {
	u, ok := w.unitIdx[unit]
	if !ok {
		if len(w.units) >= 1<<16-1 {
			return 0, false
		}
		u = uint16(len(w.units))
		w.units = append(w.units, unit)
		w.unitIdx[unit] = u
	}
	return u, true
}

// internQuote returns 1 + the index of q's prices (q without its token
// counts) in the window's table of quotes, adding them; 0 when the table
// is full.
func (w *window) internQuote(q events.PriceQuote) uint32 {
	q.InputTokens, q.MaxOutputTokens = 0, 0
	k := quoteKey(q)
	i, ok := w.quoteIdx[k]
	if !ok {
		if len(w.quotes) >= maxQuotes {
			return 0
		}
		i = uint32(len(w.quotes))
		w.quotes = append(w.quotes, q)
		w.quoteIdx[k] = i
	}
	return i + 1
}

// quoteKey names a quote's model, version, unit and prices.
func quoteKey(q events.PriceQuote) string {
	cached := "-"
	if q.CachedInput != nil {
		cached = q.CachedInput.String()
	}
	return q.Model + "\x00" + strconv.FormatUint(q.Version, 10) + "\x00" + q.Unit + "\x00" +
		q.Input.String() + "\x00" + q.Output.String() + "\x00" + cached
}

// take removes the entry h from both indexes, leaving a dead entry in its
// ring, and returns its reservation.
func (w *window) take(h uint32) *Reservation {
	e := w.entry(h)
	r := w.reservation(e)
	w.removeEntry(h)
	e.flags |= flagDead
	e.ext, e.bal = nil, nil
	return r
}

// forget drops the entries of ring which stamped before t.
func (w *window) forget(which int, before time.Time) {
	r := &w.rings[which]
	b := before.UnixNano()
	for r.n > 0 {
		e := r.at(r.head)
		if e.at >= b {
			return
		}
		if e.flags&flagDead == 0 {
			w.removeEntry(handleOf(which, r.head))
		}
		r.pop()
	}
}

// each calls f with every live entry of ring which, in stamp order.
func (w *window) each(which int, f func(r *Reservation, at time.Time)) {
	rg := &w.rings[which]
	for i := 0; i < rg.n; i++ {
		e := rg.at(rg.head + uint64(i))
		if e.flags&flagDead == 0 {
			f(w.reservation(e), time.Unix(0, e.at).UTC())
		}
	}
}

// get returns the reservation with id (req false) or request id (req
// true) and its handle.
func (w *window) get(s string, req bool) (*Reservation, uint32, bool) {
	t := &w.byID
	if req {
		t = &w.byReq
	}
	k := w.key(s)
	h, ok := w.find(t, &k, req)
	if !ok {
		return nil, 0, false
	}
	return w.reservation(w.entry(h)), h, true
}

// shared returns the entry h's reservation as one the book may keep a
// pointer to and change in place: the entry is widened to hold it whole.
func (w *window) shared(h uint32) *Reservation {
	e := w.entry(h)
	if e.ext != nil && e.ext.res != nil {
		return e.ext.res
	}
	r := w.reservation(e)
	e.ext = &winExt{res: r}
	e.idKind, e.reqKind = idExt, idExt
	return r
}

// compact makes the entry for r; bals are the book's balances by key. A
// reservation whose parts are not all in balances of the book (by key and
// ref) is kept whole.
func (w *window) compact(r *Reservation, bals map[string]*balance) winEntry {
	whole := winEntry{ext: &winExt{res: r}, status: winStatus(r.Status)}
	e := winEntry{status: winStatus(r.Status)}
	if e.status == 0 || len(r.Parts) == 0 || len(r.Parts) != len(r.Balances) || len(r.Parts) > 1+maxMoreParts || r.AfterExpiry {
		// (A settle after the sweeper released the reservation is rare:
		// the compact form has no bit for it.)
		return whole
	}
	var ok3, ok4 bool
	e.opened, ok3 = unixNanos(r.OpenedAt)
	e.expires, ok4 = unixNanos(r.ExpiresAt)
	if !ok3 || !ok4 {
		return whole
	}
	var xext *winExt // allocated with more
	var more *winMore
	if len(r.Parts) > 1 || r.Pricing != nil {
		xext, more = newMore(len(r.Parts) - 1)
	}
	for i := range r.Parts {
		p, ok := w.compactPart(r, i, bals)
		switch {
		case !ok:
			return whole
		case i == 0:
			e.bal, e.unit = p.bal, p.unit
			e.amount, e.amountExp, e.actual, e.actualExp = p.amount, p.amountExp, p.actual, p.actualExp
		default:
			more.parts = append(more.parts, p)
		}
	}
	if q := r.Pricing; q != nil {
		// Only a quote a snapshot's loadWindow takes back: a model, and
		// token counts in 0..events.MaxTokens.
		if q.Model == "" || q.InputTokens < 0 || q.InputTokens > events.MaxTokens || q.MaxOutputTokens < 0 || q.MaxOutputTokens > events.MaxTokens {
			return whole
		}
		if more.quote = w.internQuote(*q); more.quote == 0 {
			return whole
		}
		more.inputTokens, more.maxOutput = q.InputTokens, q.MaxOutputTokens
	}
	if r.Late {
		e.flags |= flagLate
	}
	var ext winExt
	if b, kind, ok := compactID(r.ID); ok {
		e.id, e.idKind = b, kind
	} else {
		ext.id = r.ID
	}
	if b, kind, ok := compactID(r.RequestID); ok {
		e.req, e.reqKind = b, kind
	} else {
		ext.req = r.RequestID
	}
	if len(r.RequestHash) == 32 && isLowerHex(r.RequestHash) {
		hex.Decode(e.hash[:], []byte(r.RequestHash))
		e.flags |= flagHash
	} else {
		ext.hash = r.RequestHash
	}
	e.setExt(ext, xext)
	return e
}

// setExt points e at what it cannot hold: ext's texts, in xext (the
// winExt allocated with more parts or a quote) when there is one, in a
// winExt of their own when any is set.
func (e *winEntry) setExt(ext winExt, xext *winExt) {
	switch {
	case xext != nil:
		xext.id, xext.req, xext.hash = ext.id, ext.req, ext.hash
		e.ext = xext
	case ext != (winExt{}):
		e.ext = new(ext)
	}
}

// compactPart is r's part i as a winPart; false if it does not fit one (a
// ceiling, an amount Compact cannot split, a balance the book does not
// hold under the part's key and ref, a full table of units), or if the
// balance's open set still names r (a reservation closed in one lane and
// not yet in another): the book keeps a pointer to it, which must be the
// window's (see shared).
func (w *window) compactPart(r *Reservation, i int, bals map[string]*balance) (winPart, bool) {
	var wp winPart
	p := &r.Parts[i]
	bl := bals[p.Key]
	if p.Ceiling != nil || bl == nil || bl.ref != r.Balances[i] || bl.open[r.ID] != nil {
		return wp, false
	}
	var ok1, ok2, ok3 bool
	wp.amount, wp.amountExp, ok1 = p.Amount.Compact()
	wp.actual, wp.actualExp, ok2 = p.Actual.Compact()
	wp.unit, ok3 = w.intern(p.Unit)
	wp.bal = bl
	return wp, ok1 && ok2 && ok3
}

// reservation builds the Reservation entry e holds (e's own when it holds
// one whole: the caller must not change it).
func (w *window) reservation(e *winEntry) *Reservation {
	if e.ext != nil && e.ext.res != nil {
		return e.ext.res
	}
	r := &Reservation{
		ID: e.idText(), RequestID: e.reqText(),
		Balances: e.bal.self,
		Parts: []Part{{Key: e.bal.key, Unit: w.units[e.unit],
			Amount: events.MoneyFromCompact(e.amount, e.amountExp), Actual: events.MoneyFromCompact(e.actual, e.actualExp)}},
		OpenedAt: time.Unix(0, e.opened).UTC(), ExpiresAt: time.Unix(0, e.expires).UTC(),
		Status: winStatuses[e.status], Late: e.flags&flagLate != 0,
	}
	if e.ext != nil && e.ext.more != nil {
		m := e.ext.more
		if len(m.parts) > 0 {
			r.Balances = make([]events.BalanceRef, 1, 1+len(m.parts))
			r.Balances[0] = e.bal.ref
			for _, p := range m.parts {
				r.Balances = append(r.Balances, p.bal.ref)
				r.Parts = append(r.Parts, Part{Key: p.bal.key, Unit: w.units[p.unit],
					Amount: events.MoneyFromCompact(p.amount, p.amountExp), Actual: events.MoneyFromCompact(p.actual, p.actualExp)})
			}
		}
		if m.quote > 0 {
			q := w.quotes[m.quote-1]
			q.InputTokens, q.MaxOutputTokens = m.inputTokens, m.maxOutput
			r.Pricing = &q
		}
	}
	switch {
	case e.flags&flagHash != 0:
		r.RequestHash = hex.EncodeToString(e.hash[:])
	case e.ext != nil:
		r.RequestHash = e.ext.hash
	}
	return r
}

// unixNanos returns t as Unix nanoseconds if that gives t back exactly
// (in UTC, in 1678..2262).
func unixNanos(t time.Time) (int64, bool) {
	if t.Location() != time.UTC {
		return 0, false
	}
	n := t.UnixNano()
	return n, time.Unix(0, n).Equal(t)
}

// compactID returns s as 16 bytes when it is a canonical lowercase UUID
// (kind idUUID) or "rsv_" followed by one (idRsv).
func compactID(s string) ([16]byte, uint8, bool) {
	kind := uint8(idUUID)
	if len(s) == 40 && s[:4] == "rsv_" {
		s, kind = s[4:], idRsv
	}
	var b [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return b, 0, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++ // the dashes checked above; one anywhere else is not hex
			continue
		}
		hi, ok1 := lowerHex(s[i])
		lo, ok2 := lowerHex(s[i+1])
		if !ok1 || !ok2 {
			return b, 0, false
		}
		b[j] = hi<<4 | lo
		j++
		i += 2
	}
	return b, kind, true
}

func idText(b [16]byte, kind uint8) string {
	var buf [40]byte
	return string(appendIDText(buf[:0], b, kind))
}

// appendIDText appends the text of compact id b of kind.
func appendIDText(out []byte, b [16]byte, kind uint8) []byte {
	if kind == idRsv {
		out = append(out, "rsv_"...)
	}
	const digits = "0123456789abcdef"
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if _, ok := lowerHex(s[i]); !ok {
			return false
		}
	}
	return true
}

// windowBalance returns the book's balance a single-balance reservation r
// holds, or nil.
func (b *book) windowBalance(r *Reservation) *balance {
	if len(r.Balances) != 1 {
		return nil
	}
	return b.balances[streams.BalanceKey(r.Balances[0])]
}
