package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
)

// The window section of a version 3 snapshot (its layout is in
// snapshot.go's comment): the idempotency window's two rings, written
// from the compact entries as they are (no Reservation is built for a
// compact entry, either way) and read back into entries directly.

// entry tag bits.
const (
	tagStatus   = 0x03 // 1 settled, 2 released, 3 expired (winStatuses); 0: full form
	tagLate     = 0x04
	tagHash     = 0x08 // the request hash is 16 bytes (else a string)
	tagIDShift  = 4    // bits 4-5: the id's kind (idExt, idUUID, idRsv)
	tagReqShift = 6    // bits 6-7: the request id's kind
	// minEntry is the fewest bytes an entry takes (a full one: tag, at,
	// length, "{}"), which bounds what a count may claim.
	minEntry = 5
)

// appendWindow appends the window section of w for a snapshot of version
// (3 to 5): its units, its quotes (version 5) and its rings' live entries.
// balIdx gives each balance's index in the snapshot's balances; an entry
// whose balances are not all there is written whole, as is one with more
// parts or a quote before version 5.
func (w *window) appendWindow(dst []byte, balIdx map[*balance]int, version int) ([]byte, []windowWhole, error) {
	dst = binary.AppendUvarint(dst, uint64(len(w.units)))
	for _, u := range w.units {
		dst = appendString(dst, u)
	}
	if version >= 5 {
		dst = binary.AppendUvarint(dst, uint64(len(w.quotes)))
		for i := range w.quotes {
			raw, err := json.Marshal(&w.quotes[i])
			if err != nil {
				return nil, nil, fmt.Errorf("ledger: snapshot of price quote %s: %w", w.quotes[i].Model, err)
			}
			dst = appendString(dst, string(raw))
		}
	}
	var whole []windowWhole
	for which := range w.rings {
		rg := &w.rings[which]
		live := 0
		for i := 0; i < rg.n; i++ {
			if rg.at(rg.head+uint64(i)).flags&flagDead == 0 {
				live++
			}
		}
		dst = binary.AppendUvarint(dst, uint64(live))
		var prev int64
		for i := 0; i < rg.n; i++ {
			e := rg.at(rg.head + uint64(i))
			if e.flags&flagDead != 0 {
				continue
			}
			dst, whole = w.appendEntry(dst, whole, e, prev, balIdx, version >= 5)
			prev = e.at
		}
	}
	return dst, whole, nil
}

func (w *window) appendEntry(dst []byte, whole []windowWhole, e *winEntry, prev int64, balIdx map[*balance]int, more bool) ([]byte, []windowWhole) {
	bi, ok := balIdx[e.bal]
	var m *winMore
	if e.ext != nil {
		m = e.ext.more
	}
	if m != nil {
		ok = ok && more
		for _, p := range m.parts {
			_, in := balIdx[p.bal]
			ok = ok && in
		}
	}
	if (e.ext != nil && e.ext.res != nil) || !ok || e.status == 0 {
		// Written whole, as its reservation's JSON: only a copy is taken
		// here, under the book's lock; finishWindow encodes it after.
		dst = append(dst, 0)
		dst = binary.AppendVarint(dst, e.at-prev)
		return dst, append(whole, windowWhole{off: len(dst), res: snapRes(w.reservation(e))})
	}
	tag := e.status | e.idKind<<tagIDShift | e.reqKind<<tagReqShift
	if e.flags&flagLate != 0 {
		tag |= tagLate
	}
	if e.flags&flagHash != 0 {
		tag |= tagHash
	}
	dst = append(dst, tag)
	dst = binary.AppendVarint(dst, e.at-prev)
	var ext winExt
	if e.ext != nil {
		ext = *e.ext
	}
	dst = appendID(dst, e.idKind, &e.id, ext.id)
	dst = appendID(dst, e.reqKind, &e.req, ext.req)
	if e.flags&flagHash != 0 {
		dst = append(dst, e.hash[:]...)
	} else {
		dst = appendString(dst, ext.hash)
	}
	dst = binary.AppendVarint(dst, e.opened-e.at)
	dst = binary.AppendVarint(dst, e.expires-e.opened)
	dst = binary.AppendUvarint(dst, uint64(bi))
	dst = binary.AppendUvarint(dst, uint64(e.unit))
	dst = binary.AppendVarint(dst, e.amount)
	dst = append(dst, byte(e.amountExp))
	dst = binary.AppendVarint(dst, e.actual)
	dst = append(dst, byte(e.actualExp))
	if !more {
		return dst, whole
	}
	var flags byte
	if m != nil && len(m.parts) > 0 {
		flags |= moreParts
	}
	if m != nil && m.quote > 0 {
		flags |= moreQuote
	}
	dst = append(dst, flags)
	if flags&moreParts != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(m.parts)))
		for _, p := range m.parts {
			dst = binary.AppendUvarint(dst, uint64(balIdx[p.bal]))
			dst = binary.AppendUvarint(dst, uint64(p.unit))
			dst = binary.AppendVarint(dst, p.amount)
			dst = append(dst, byte(p.amountExp))
			dst = binary.AppendVarint(dst, p.actual)
			dst = append(dst, byte(p.actualExp))
		}
	}
	if flags&moreQuote != 0 {
		dst = binary.AppendUvarint(dst, uint64(m.quote-1))
		dst = binary.AppendUvarint(dst, uint64(m.inputTokens))
		dst = binary.AppendUvarint(dst, uint64(m.maxOutput))
	}
	return dst, whole
}

// The flags byte after a compact entry (version 5): what follows it.
const (
	moreParts = 0x01 // the parts after the first
	moreQuote = 0x02 // the price quote
	// maxMoreParts bounds the parts a compact entry may name after its
	// first (an admit names at most events.MaxScopes scopes, each a
	// balance, and a fixed slot or count adds none).
	maxMoreParts = 64
)

// windowWhole is an entry of the window section written whole (a
// reservation held in several balances, priced from a model, or of a
// balance the snapshot does not hold): a copy of its reservation, taken
// under the book's lock, and the offset in the section, right after the
// entry's tag and time, where its JSON goes. Encoding that JSON for every
// such entry under the lock held every admit for seconds with 100,000 of
// them in the window, so finishWindow does it after the lock.
type windowWhole struct {
	off int
	res snapReservation
}

// finishWindow returns the window section sec with each whole entry's JSON
// inserted at its offset (whole in section order).
func finishWindow(sec []byte, whole []windowWhole) ([]byte, error) {
	if len(whole) == 0 {
		return sec, nil
	}
	raws := make([][]byte, len(whole))
	n := len(sec)
	for i := range whole {
		raw, err := json.Marshal(&whole[i].res)
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot of reservation %s: %w", whole[i].res.ID, err)
		}
		raws[i] = raw
		n += binary.MaxVarintLen64 + len(raw)
	}
	out := make([]byte, 0, n)
	at := 0
	for i, wh := range whole {
		out = append(out, sec[at:wh.off]...)
		out = binary.AppendUvarint(out, uint64(len(raws[i])))
		out = append(out, raws[i]...)
		at = wh.off
	}
	return append(out, sec[at:]...), nil
}

// snapEntryBytes is about what appendEntry writes for an entry (66.5 in
// BenchmarkSnapshotWindow, with UUIDs; a text request id adds its length).
const snapEntryBytes = 72

// sectionBytes is room for n entries' window section: as many bytes an
// entry as the last section written (or loaded) took, an eighth more, and
// at least snapEntryBytes. An entry held in three balances and priced
// takes about 96 B: sized for 72, a section of a million of them grew by
// append under the book's lock, copied over and over (40% of a 420 ms
// copy).
func (w *window) sectionBytes(n int) int {
	per := max(snapEntryBytes*16, w.perEntry.Load()*9/8)
	return int(per * int64(n) / 16)
}

// sized records that a window section of n entries took size bytes.
func (w *window) sized(size, n int) {
	if n > 0 {
		w.perEntry.Store(int64(size) * 16 / int64(n))
	}
}

func appendID(dst []byte, kind uint8, b *[16]byte, text string) []byte {
	if kind != idExt {
		return append(dst, b[:]...)
	}
	return appendString(dst, text)
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// sectionReader reads a window section; its first error sticks, and every
// read after it returns zero values.
type sectionReader struct {
	b   []byte
	err error
	// src holds the section, src[:end], whole or (ahead set: the snapshot
	// object is still arriving) as far as it arrived; b ends where src
	// does, or at end.
	src   []byte
	end   int
	ahead objectAhead
	// broken is the read of the object that failed, if one did.
	broken error
	// step is how far ahead of an entry (and of the units and quotes
	// tables) more waits for bytes: entryAhead and tablesAhead, but
	// tests make them small.
	step struct{ entry, tables int }
	// verify, while set, checks the body's digest (decodeSnapshotAhead):
	// loadWindow calls it, once, when the entries it decoded cost more
	// memory than a genuine section's would (aheadAlloc).
	verify func() error
}

// objectAhead is what decoding a snapshot while it arrives needs of the
// object (streams.ObjectAhead).
type objectAhead interface {
	// Wait returns the bytes arrived once there are n or no more will
	// come, and io.EOF once all did (another error: reading failed).
	Wait(n int) ([]byte, error)
	// Size is the object's size.
	Size() int
	// All waits for the whole object.
	All() ([]byte, error)
}

// newSectionReader reads section data, whole.
func newSectionReader(data []byte) *sectionReader {
	return &sectionReader{b: data, src: data, end: len(data)}
}

// pos is the offset in src of the next byte to read (before an error).
func (r *sectionReader) pos() int { return min(len(r.src), r.end) - len(r.b) }

// left is how many bytes of the section are after pos, arrived or not.
func (r *sectionReader) left() int { return r.end - r.pos() }

// arrived reports whether the whole section is in src.
func (r *sectionReader) arrived() bool { return len(r.src) >= r.end }

// more makes at least want bytes (or the rest of the section) readable in
// b, waiting for them to arrive; a read of the object that failed first is
// r's error.
func (r *sectionReader) more(want int) {
	if r.ahead == nil || r.err != nil || len(r.b) >= want || r.arrived() {
		return
	}
	pos := r.pos()
	target := min(pos+want, r.end)
	buf, err := r.ahead.Wait(target)
	r.src = buf
	r.b = buf[pos:min(len(buf), r.end)]
	if len(buf) < target {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		r.broken = fmt.Errorf("reading the snapshot: %w", err)
		r.fail(r.broken)
	}
}

// cause is err, or the failed read of the object that made it.
func (r *sectionReader) cause(err error) error {
	if r.broken != nil {
		return r.broken
	}
	return err
}

// retry reports whether a read that failed truncated at pos may succeed
// once the rest of the section arrived, and if so rewinds to pos and
// waits for all of it.
func (r *sectionReader) retry(pos int) bool {
	if r.ahead == nil || r.err != errTruncated || r.arrived() {
		return false
	}
	r.err, r.b = nil, r.src[pos:min(len(r.src), r.end)]
	r.more(r.end - pos)
	return r.err == nil
}

// Read ahead of the decoder while the object arrives: about a fifth of a
// second's worth, so that the decoder waits only when it catches up.
const (
	// entryAhead bounds what one window entry needs; an entry longer
	// than this (a whole one) is read again once the section arrived.
	entryAhead = 64 << 10
	// tablesAhead is the same for the units and quotes tables.
	tablesAhead = 1 << 20
)

// A window section is decoded ahead of its digest while its entries cost
// (windowLoad.cost) at most aheadAlloc times the bytes they were read
// from, past the first aheadFree bytes; then its digest is checked first.
// A genuine header replayed over a forged body of its size, packed with
// the shortest entries (text ids of a few bytes, each a string of its
// own), allocated 8.2x the body's bytes before the digest failed; a
// genuine body of UUID ids costs 2.4x by this count, one whose request
// ids are texts of 10 bytes 3.9x, so those decode as they arrive
// (TestSnapshot_CostlyWindowWaitsForDigest).
const (
	aheadAlloc = 5
	aheadFree  = 1 << 20
	// What an entry costs as it loads: a compact one (its ring slot, its
	// index and its pending handle), its winExt, a part of it, a whole
	// one (a Reservation, its maps and strings; plus twice its JSON).
	costCompact = 160
	costExt     = 80
	costPart    = 40
	costWhole   = 600
)

var errTruncated = errors.New("truncated")

func (r *sectionReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *sectionReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *sectionReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *sectionReader) byte() byte {
	if len(r.b) < 1 {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *sectionReader) fixed16(dst *[16]byte) {
	if len(r.b) < 16 {
		r.fail(errTruncated)
		return
	}
	copy(dst[:], r.b[:16])
	r.b = r.b[16:]
}

// bytes reads a length-prefixed byte string (a view into the section).
func (r *sectionReader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail(errTruncated)
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// text reads a length-prefixed UTF-8 string.
func (r *sectionReader) text() string {
	b := r.bytes()
	if !utf8.Valid(b) {
		r.fail(errors.New("a string is not UTF-8"))
		return ""
	}
	return string(b)
}

// id reads an id of kind into *b (compact) or, for idExt, as a non-empty
// UTF-8 text, which is made compact if it is a UUID (as window.compact
// makes it); it returns the kind it stored and the text.
func (r *sectionReader) id(kind uint8, b *[16]byte) (uint8, string) {
	switch kind {
	case idUUID, idRsv:
		r.fixed16(b)
		return kind, ""
	case idExt:
		s := r.text()
		if s == "" {
			r.fail(errors.New("an empty id"))
			return idExt, ""
		}
		if c, k, ok := compactID(s); ok {
			*b = c
			return k, ""
		}
		return idExt, s
	}
	r.fail(fmt.Errorf("id kind %d", kind))
	return idExt, ""
}

// money reads a compact amount, which must be one a stored amount's JSON
// could hold (events.Money.UnmarshalJSON): at most
// events.MaxFractionDigits digits after the point and
// events.MaxIntegerDigits before it.
func (r *sectionReader) money() (int64, int8) {
	coef := r.varint()
	exp := int8(r.byte())
	if r.err != nil {
		return 0, 0
	}
	abs := uint64(coef)
	if coef < 0 {
		abs = uint64(^coef) + 1
	}
	// At most MaxIntegerDigits-exp digits: abs < 10^(MaxIntegerDigits-exp),
	// which any int64 is when that is 19 or more. (Counting the digits by
	// division was a sixth of loading a window.)
	k := events.MaxIntegerDigits - int(exp)
	if int(exp) < -events.MaxFractionDigits || k < 0 || k < len(pow10) && abs >= pow10[k] {
		r.fail(fmt.Errorf("amount %d×10^%d is out of range", coef, exp))
		return 0, 0
	}
	return coef, exp
}

// loadWindow reads the window section of a snapshot of version (3 to 5)
// into b's window. bals are the book's balances in the snapshot's order
// (an entry names its balance by index). The book's balances and open
// reservations are loaded; balances' open sets are not (they may name a
// window entry).
func (b *book) loadWindow(r *sectionReader, bals []*balance, version int) error {
	// The units and quotes tables are read again, whole, if they are
	// longer than what arrived (interning is idempotent).
	r.more(r.step.tables)
	start := r.pos()
	units, quotes, err := b.loadTables(r, version)
	if err != nil && r.retry(start) {
		units, quotes, err = b.loadTables(r, version)
	}
	if err != nil {
		return r.cause(err)
	}
	ld := windowLoad{units: units, quotes: quotes, bals: bals, more: version >= 5}
	for which, name := range []string{"closed", "expired"} {
		r.more(binary.MaxVarintLen64)
		n := r.uvarint()
		if r.err != nil {
			return fmt.Errorf("%s: %w", name, r.err)
		}
		if n > uint64(r.left()/minEntry) {
			return fmt.Errorf("%s: %d entries in %d bytes", name, n, r.left())
		}
		ld.pending = slices.Grow(ld.pending, int(n))
		var prev int64
		for i := uint64(0); i < n; i++ {
			if r.verify != nil && ld.cost > aheadAlloc*(r.pos()-start)+aheadFree {
				// Costlier than a genuine section: decoded no
				// further before the body is known to be the one
				// signed.
				err := r.verify()
				if r.verify = nil; err != nil {
					return err
				}
			}
			r.more(r.step.entry)
			at, p := r.pos(), prev
			err := b.loadEntry(r, which, &prev, &ld)
			if err != nil && r.retry(at) {
				// An entry longer than entryAhead, read again once
				// the whole section arrived.
				prev = p
				err = b.loadEntry(r, which, &prev, &ld)
			}
			if err != nil {
				return r.cause(fmt.Errorf("%s entry %d: %w", name, i, err))
			}
		}
	}
	r.more(r.left())
	if r.err == nil && r.left() > 0 {
		return fmt.Errorf("%d bytes after the window", r.left())
	}
	if r.err != nil {
		return r.err
	}
	if err := b.indexPending(&ld); err != nil {
		return err
	}
	b.win.sized(r.end-start, b.win.rings[winClosed].n+b.win.rings[winExpired].n)
	// A compact entry's id must not be a reservation the snapshot lists
	// (whole entries are checked as they load): checked once for each of
	// those, fewer than the window's entries.
	for id := range b.reservations {
		if _, _, ok := b.win.get(id, false); ok {
			return fmt.Errorf("reservation %s twice", id)
		}
	}
	return nil
}

// loadTables reads the window section's units and (version 5) price
// quotes into the window's tables, and returns the window's indexes of
// them in the section's order.
func (b *book) loadTables(r *sectionReader, version int) ([]uint16, []uint32, error) {
	nu := r.uvarint()
	if r.err != nil {
		return nil, nil, fmt.Errorf("units: %w", r.err)
	}
	if nu > uint64(r.left()) {
		return nil, nil, fmt.Errorf("%d units in %d bytes", nu, r.left())
	}
	units := make([]uint16, nu)
	for i := range units {
		s := r.text()
		if r.err != nil {
			return nil, nil, fmt.Errorf("unit %d: %w", i, r.err)
		}
		u, ok := b.win.intern(s)
		if !ok {
			return nil, nil, errors.New("too many units")
		}
		units[i] = u
	}
	if version < 5 {
		return units, nil, nil
	}
	nq := r.uvarint()
	if r.err != nil {
		return nil, nil, fmt.Errorf("price quotes: %w", r.err)
	}
	if nq > uint64(r.left()) || nq > maxQuotes {
		return nil, nil, fmt.Errorf("%d price quotes in %d bytes", nq, r.left())
	}
	quotes := make([]uint32, nq)
	for i := range quotes {
		raw := r.bytes()
		if r.err != nil {
			return nil, nil, fmt.Errorf("price quote %d: %w", i, r.err)
		}
		// A str, as every one of the section (json.Marshal writes valid
		// UTF-8); json.Unmarshal alone would take a string of invalid
		// bytes as U+FFFD.
		if !utf8.Valid(raw) {
			return nil, nil, fmt.Errorf("price quote %d: not UTF-8", i)
		}
		var q events.PriceQuote
		if err := json.Unmarshal(raw, &q); err != nil {
			return nil, nil, fmt.Errorf("price quote %d: %w", i, err)
		}
		if q.Model == "" || q.InputTokens != 0 || q.MaxOutputTokens != 0 {
			return nil, nil, fmt.Errorf("price quote %d: not a quote's prices", i)
		}
		if quotes[i] = b.win.internQuote(q); quotes[i] == 0 {
			return nil, nil, errors.New("too many price quotes")
		}
	}
	return units, quotes, nil
}

// indexPending indexes the compact entries read since the last call (see
// window.index).
func (b *book) indexPending(ld *windowLoad) error {
	if h, ok := b.win.index(ld.pending); !ok {
		return fmt.Errorf("reservation %s twice", b.win.entry(h).idText())
	}
	ld.pending = ld.pending[:0]
	return nil
}

// windowLoad is what loadEntry reads entries against: the window's indexes
// of the section's units and quotes (1 + index), the snapshot's balances,
// and whether a compact entry ends with its flags byte (version 5).
type windowLoad struct {
	units  []uint16
	quotes []uint32
	bals   []*balance
	more   bool
	// pending are the handles of the compact entries read and not yet
	// indexed.
	pending []uint32
	// extras is a slab the next entries' winExtras are taken from.
	extras []winExtra
	// cost estimates the bytes the entries read so far allocated (see
	// aheadAlloc).
	cost int
}

// extraSlab is how many winExtras a loader allocates at once.
const extraSlab = 256

// newMore is newMore for entries read from a snapshot: their winExtras
// come from slabs. A million of them, one allocation each, took a fifth
// of loading a million gateway-shaped entries (malloc and the GC's scan of
// a million small objects). A slab lives while any of its entries does;
// its entries are consecutive in the window, which forgets them in about
// that order.
func (ld *windowLoad) newMore(n int) (*winExt, *winMore) {
	if n > len(winExtra{}.parts) {
		return newMore(n)
	}
	if len(ld.extras) == 0 {
		ld.extras = make([]winExtra, extraSlab)
	}
	x := &ld.extras[0]
	ld.extras = ld.extras[1:]
	return x.init(n)
}

// loadEntry reads one entry of ring which (stamped prev + its delta) into
// the window.
func (b *book) loadEntry(r *sectionReader, which int, prev *int64, ld *windowLoad) error {
	units, bals := ld.units, ld.bals
	tag := r.byte()
	at := *prev + r.varint()
	*prev = at
	if r.err != nil {
		return r.err
	}
	if tag&tagStatus == 0 {
		if tag != 0 {
			return fmt.Errorf("tag %#x", tag)
		}
		raw := r.bytes()
		if r.err != nil {
			return r.err
		}
		ld.cost += costWhole + 2*len(raw)
		var sr snapReservation
		if err := json.Unmarshal(raw, &sr); err != nil {
			return err
		}
		// Indexed in the order read: a whole entry's request id may be a
		// compact one's.
		if err := b.indexPending(ld); err != nil {
			return err
		}
		return b.loadClosed(2, which, snapClosed{ID: sr.ID, At: time.Unix(0, at).UTC(), Reservation: &sr})
	}
	e := winEntry{status: tag & tagStatus, at: at}
	if tag&tagLate != 0 {
		e.flags |= flagLate
	}
	var ext winExt
	e.idKind, ext.id = r.id(tag>>tagIDShift&3, &e.id)
	e.reqKind, ext.req = r.id(tag>>tagReqShift&3, &e.req)
	if tag&tagHash != 0 {
		r.fixed16(&e.hash)
		e.flags |= flagHash
	} else {
		ext.hash = r.text()
		if len(ext.hash) == 32 && isLowerHex(ext.hash) {
			// As window.compact keeps it.
			var c [16]byte
			for i := range c {
				hi, _ := lowerHex(ext.hash[2*i])
				lo, _ := lowerHex(ext.hash[2*i+1])
				c[i] = hi<<4 | lo
			}
			e.hash, ext.hash = c, ""
			e.flags |= flagHash
		}
	}
	e.opened = at + r.varint()
	e.expires = e.opened + r.varint()
	bi, ui := r.uvarint(), r.uvarint()
	e.amount, e.amountExp = r.money()
	e.actual, e.actualExp = r.money()
	if r.err != nil {
		return r.err
	}
	if bi >= uint64(len(bals)) || ui >= uint64(len(units)) {
		return fmt.Errorf("balance %d of %d, unit %d of %d", bi, len(bals), ui, len(units))
	}
	e.bal, e.unit = bals[bi], units[ui]
	var xext *winExt
	if ld.more {
		var err error
		if xext, err = loadMore(r, ld, e.bal); err != nil {
			return err
		}
	}
	e.setExt(ext, xext)
	ld.cost += costCompact
	if e.ext != nil {
		ld.cost += costExt + len(ext.id) + len(ext.req) + len(ext.hash)
		if e.ext.more != nil {
			ld.cost += costPart * len(e.ext.more.parts)
		}
	}
	ld.pending = append(ld.pending, b.win.pushEntry(which, &e))
	return nil
}

// loadMore reads the flags byte after a compact entry (version 5) and what
// it says follows, into a winExt whose more holds it (newMore); nil when
// nothing does. first is the entry's own balance: no part names it again,
// nor one another's (no admit names a scope twice, and a reservation in
// one balance twice would be counted there twice if taken back into the
// book).
func loadMore(r *sectionReader, ld *windowLoad, first *balance) (*winExt, error) {
	flags := r.byte()
	if r.err != nil {
		return nil, r.err
	}
	if flags&^(moreParts|moreQuote) != 0 {
		return nil, fmt.Errorf("flags %#x", flags)
	}
	if flags == 0 {
		return nil, nil
	}
	var n uint64
	if flags&moreParts != 0 {
		n = r.uvarint()
		if r.err != nil {
			return nil, r.err
		}
		if n == 0 || n > maxMoreParts {
			return nil, fmt.Errorf("%d more parts", n)
		}
	}
	ext, m := ld.newMore(int(n))
	if n > 0 {
		m.parts = m.parts[:n]
		for i := range m.parts {
			p := &m.parts[i]
			bi, ui := r.uvarint(), r.uvarint()
			p.amount, p.amountExp = r.money()
			p.actual, p.actualExp = r.money()
			if r.err != nil {
				return nil, r.err
			}
			if bi >= uint64(len(ld.bals)) || ui >= uint64(len(ld.units)) {
				return nil, fmt.Errorf("part %d: balance %d of %d, unit %d of %d", i+1, bi, len(ld.bals), ui, len(ld.units))
			}
			p.bal, p.unit = ld.bals[bi], ld.units[ui]
			if p.bal == first || slices.ContainsFunc(m.parts[:i], func(o winPart) bool { return o.bal == p.bal }) {
				return nil, fmt.Errorf("part %d: balance %s twice", i+1, p.bal.key)
			}
		}
	}
	if flags&moreQuote != 0 {
		qi, in, out := r.uvarint(), r.uvarint(), r.uvarint()
		if r.err != nil {
			return nil, r.err
		}
		if qi >= uint64(len(ld.quotes)) || in > events.MaxTokens || out > events.MaxTokens {
			return nil, fmt.Errorf("quote %d of %d, %d input tokens, %d output tokens", qi, len(ld.quotes), in, out)
		}
		m.quote, m.inputTokens, m.maxOutput = ld.quotes[qi], int64(in), int64(out)
	}
	return ext, nil
}

// pow10 are the powers of ten an int64 can be compared with: 10^0 to
// 10^18.
var pow10 = func() (p [19]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()
