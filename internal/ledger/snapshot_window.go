package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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

// appendWindow appends the window section of w: its units and its rings'
// live entries. balIdx gives each balance's index in the snapshot's
// balances; an entry whose balance is not there is written whole.
func (w *window) appendWindow(dst []byte, balIdx map[*balance]int) ([]byte, []windowWhole, error) {
	dst = binary.AppendUvarint(dst, uint64(len(w.units)))
	for _, u := range w.units {
		dst = appendString(dst, u)
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
			dst, whole = w.appendEntry(dst, whole, e, prev, balIdx)
			prev = e.at
		}
	}
	return dst, whole, nil
}

func (w *window) appendEntry(dst []byte, whole []windowWhole, e *winEntry, prev int64, balIdx map[*balance]int) ([]byte, []windowWhole) {
	bi, ok := balIdx[e.bal]
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
	return dst, whole
}

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
}

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
	digits := 0
	for ; abs > 0; abs /= 10 {
		digits++
	}
	if int(exp) < -events.MaxFractionDigits || digits+int(exp) > events.MaxIntegerDigits {
		r.fail(fmt.Errorf("amount %d×10^%d is out of range", coef, exp))
		return 0, 0
	}
	return coef, exp
}

// loadWindow reads a version 3 window section into b's window. bals are
// the book's balances in the snapshot's order (an entry names its balance
// by index). The book's balances and open reservations are loaded;
// balances' open sets are not (they may name a window entry).
func (b *book) loadWindow(data []byte, bals []*balance) error {
	r := &sectionReader{b: data}
	nu := r.uvarint()
	if nu > uint64(len(r.b)) {
		return fmt.Errorf("%d units in %d bytes", nu, len(r.b))
	}
	units := make([]uint16, nu)
	for i := range units {
		s := r.text()
		if r.err != nil {
			return fmt.Errorf("unit %d: %w", i, r.err)
		}
		u, ok := b.win.intern(s)
		if !ok {
			return errors.New("too many units")
		}
		units[i] = u
	}
	for which, name := range []string{"closed", "expired"} {
		n := r.uvarint()
		if r.err != nil {
			return fmt.Errorf("%s: %w", name, r.err)
		}
		if n > uint64(len(r.b)/minEntry) {
			return fmt.Errorf("%s: %d entries in %d bytes", name, n, len(r.b))
		}
		b.win.reserve(int(n))
		var prev int64
		for i := uint64(0); i < n; i++ {
			if err := b.loadEntry(r, which, &prev, units, bals); err != nil {
				return fmt.Errorf("%s entry %d: %w", name, i, err)
			}
		}
	}
	if r.err == nil && len(r.b) > 0 {
		return fmt.Errorf("%d bytes after the window", len(r.b))
	}
	return r.err
}

// loadEntry reads one entry of ring which (stamped prev + its delta) into
// the window.
func (b *book) loadEntry(r *sectionReader, which int, prev *int64, units []uint16, bals []*balance) error {
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
		var sr snapReservation
		if err := json.Unmarshal(raw, &sr); err != nil {
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
	if ext != (winExt{}) {
		e.ext = &ext
	}
	if len(b.reservations) > 0 {
		dup := b.reservations[ext.id] != nil
		if e.idKind != idExt {
			var buf [40]byte
			dup = b.reservations[string(appendIDText(buf[:0], e.id, e.idKind))] != nil // no copy for a map index
		}
		if dup {
			return fmt.Errorf("reservation %s twice", e.idText())
		}
	}
	if !b.win.addEntry(which, &e) {
		return fmt.Errorf("reservation %s twice", e.idText())
	}
	return nil
}
