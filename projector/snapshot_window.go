package projector

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// A version 3 ledger snapshot carries the idempotency window in a binary
// section after its JSON line (package ledger documents the layout in
// snapshot.go). decodeWindow reads it from that layout alone, into the
// same queue entries a version 2 snapshot's JSON holds.

// snapBalRef is what a window entry takes from the balance it names.
type snapBalRef struct {
	Key string
	Ref events.BalanceRef
}

// window section entry tag bits and statuses.
const (
	winTagStatus = 0x03
	winTagLate   = 0x04
	winTagHash   = 0x08
)

// winMaxQuotes is the most price quotes a section's table may hold: the
// ledger's window holds no more (package ledger's maxQuotes; a quote past
// it keeps its reservation whole), and its loader refuses a table of more.
const winMaxQuotes = 1 << 20

// winMaxUnits is the most distinct units a section may name (package
// ledger's window.intern).
const winMaxUnits = 1<<16 - 1

var winStatusNames = [...]string{1: events.StatusSettled, 2: events.StatusReleased, 3: events.StatusExpired}

// winReader reads the section; its first error sticks.
type winReader struct {
	b   []byte
	err error
}

func (r *winReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *winReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errors.New("truncated"))
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *winReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errors.New("truncated"))
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *winReader) take(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail(errors.New("truncated"))
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *winReader) str() string {
	s := r.take(r.uvarint())
	if !utf8.Valid(s) {
		r.fail(errors.New("a string is not UTF-8"))
	}
	return string(s)
}

// uuidText is the canonical text of a 16-byte UUID.
func uuidText(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func (r *winReader) id(kind byte) string {
	switch kind {
	case 0:
		s := r.str()
		if s == "" && r.err == nil {
			r.fail(errors.New("an empty id"))
		}
		return s
	case 1:
		return uuidText(r.take(16))
	case 2:
		return "rsv_" + uuidText(r.take(16))
	}
	r.fail(fmt.Errorf("id kind %d", kind))
	return ""
}

// money reads an amount as coefficient and exponent. It refuses, as the
// ledger's loader does, one a stored amount's JSON could not hold (more
// than events.MaxFractionDigits digits after the point or
// events.MaxIntegerDigits before it): the replay's amounts are such, so
// any other is not one a replica wrote.
func (r *winReader) money() events.Money {
	coef := r.varint()
	exp := r.take(1)
	if r.err != nil {
		return events.Zero
	}
	e := int(int8(exp[0]))
	abs := uint64(coef)
	if coef < 0 {
		abs = -abs // 2^63 for the least int64, as uint64 holds it
	}
	digits := 0
	for ; abs > 0; abs /= 10 {
		digits++
	}
	if e < -events.MaxFractionDigits || digits+e > events.MaxIntegerDigits {
		r.fail(fmt.Errorf("amount %d×10^%d is out of range", coef, e))
		return events.Zero
	}
	return events.MoneyFromCompact(coef, int8(e))
}

// decodeWindow reads the window section of a snapshot of version (3 to 5)
// into its closed and expired queues; bals are the snapshot's balances, in
// its order.
func decodeWindow(data []byte, bals []snapBalRef, version int) ([2][]snapFullQ, error) {
	var qs [2][]snapFullQ
	r := &winReader{b: data}
	units := make([]string, 0, min(r.uvarint(), uint64(len(data))))
	distinct := map[string]bool{}
	for i := 0; i < cap(units) && r.err == nil; i++ {
		u := r.str()
		units = append(units, u)
		// The ledger's window names a unit by a uint16 index into its
		// table, which holds winMaxUnits; its loader refuses a section
		// of more distinct units (one named again is the same).
		if distinct[u] = true; len(distinct) > winMaxUnits {
			r.fail(fmt.Errorf("%d distinct units, the ledger's table holds %d", len(distinct), winMaxUnits))
		}
	}
	// Version 5: the price quotes' prices, which a compact entry names by
	// index with its token counts.
	var quotes []events.PriceQuote
	if version >= 5 && r.err == nil {
		nq := r.uvarint()
		if nq > winMaxQuotes {
			r.fail(fmt.Errorf("%d price quotes, the ledger's table holds %d", nq, winMaxQuotes))
		}
		quotes = make([]events.PriceQuote, 0, min(nq, uint64(len(r.b))))
		for i := 0; i < cap(quotes) && r.err == nil; i++ {
			var q events.PriceQuote
			if err := json.Unmarshal([]byte(r.str()), &q); err != nil && r.err == nil {
				r.fail(fmt.Errorf("price quote %d: %v", i, err))
			}
			// The table holds a model's prices; the token counts are each
			// entry's. The ledger's loader refuses any other quote.
			if r.err == nil && (q.Model == "" || q.InputTokens != 0 || q.MaxOutputTokens != 0) {
				r.fail(fmt.Errorf("price quote %d: not a model's prices (model %q, token counts %d, %d)", i, q.Model, q.InputTokens, q.MaxOutputTokens))
			}
			quotes = append(quotes, q)
		}
	}
	// A reservation is once in the window (in one ring), as the ledger's
	// loader requires: two entries of one id would be two answers to its
	// replays. Ids are compared as text, which is the ledger's comparison
	// too (a compact id is the canonical text of its 16 bytes).
	seen := map[string]bool{}
	for q, name := range []string{"closed", "expired"} {
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.fail(fmt.Errorf("%s: %d entries in %d bytes", name, n, len(r.b)))
		}
		var at int64
		for i := uint64(0); i < n && r.err == nil; i++ {
			tag := r.take(1)
			at += r.varint()
			if r.err != nil {
				break
			}
			c := snapFullQ{At: time.Unix(0, at).UTC()}
			if tag[0]&winTagStatus == 0 {
				raw := r.take(r.uvarint())
				if r.err != nil {
					break
				}
				if tag[0] != 0 {
					return qs, fmt.Errorf("window: %s entry %d: tag %#x", name, i, tag[0])
				}
				c.Reservation = &snapFullRes{}
				if err := json.Unmarshal(raw, c.Reservation); err != nil {
					return qs, fmt.Errorf("window: %s entry %d: %v", name, i, err)
				}
				// The window holds closed reservations only; the
				// ledger's loader refuses any other (an open one, or
				// JSON without a status: null, {}).
				if s := c.Reservation.Status; s != events.StatusSettled && s != events.StatusReleased && s != events.StatusExpired {
					return qs, fmt.Errorf("window: %s entry %d: reservation %s is not a closed reservation (status %q)", name, i, c.Reservation.ID, s)
				}
				// Nor one in a balance twice (see more).
				for k, ref := range c.Reservation.Balances {
					if slices.Contains(c.Reservation.Balances[:k], ref) {
						return qs, fmt.Errorf("window: %s entry %d: reservation %s in balance %s twice", name, i, c.Reservation.ID, streams.BalanceKey(ref))
					}
				}
				// Nor one without both ids, as a compact entry is (no
				// reservation lacks them).
				if c.Reservation.ID == "" {
					return qs, fmt.Errorf("window: %s entry %d: an empty id", name, i)
				}
				if c.Reservation.RequestID == "" {
					return qs, fmt.Errorf("window: %s entry %d: reservation %s has an empty request id", name, i, c.Reservation.ID)
				}
				c.ID = c.Reservation.ID
				if seen[c.ID] {
					return qs, fmt.Errorf("window: %s entry %d: reservation %s twice", name, i, c.ID)
				}
				seen[c.ID] = true
				qs[q] = append(qs[q], c)
				continue
			}
			res := &snapFullRes{Status: winStatusNames[tag[0]&winTagStatus], Late: tag[0]&winTagLate != 0}
			res.ID = r.id(tag[0] >> 4 & 3)
			res.RequestID = r.id(tag[0] >> 6 & 3)
			if tag[0]&winTagHash != 0 {
				r.take(16)
			} else {
				r.str()
			}
			opened := at + r.varint()
			expires := opened + r.varint()
			bi, ui := r.uvarint(), r.uvarint()
			amount, actual := r.money(), r.money()
			if r.err != nil {
				break
			}
			if bi >= uint64(len(bals)) || ui >= uint64(len(units)) {
				return qs, fmt.Errorf("window: %s entry %d: balance %d of %d, unit %d of %d", name, i, bi, len(bals), ui, len(units))
			}
			res.OpenedAt, res.ExpiresAt = time.Unix(0, opened).UTC(), time.Unix(0, expires).UTC()
			res.Balances = []events.BalanceRef{bals[bi].Ref}
			res.Parts = append(res.Parts, snapFullPart{Key: bals[bi].Key, Unit: units[ui], Amount: amount, Actual: actual})
			if version >= 5 {
				if err := r.more(res, bi, bals, units, quotes); err != nil {
					return qs, fmt.Errorf("window: %s entry %d: %v", name, i, err)
				}
				if r.err != nil {
					break
				}
			}
			if seen[res.ID] {
				return qs, fmt.Errorf("window: %s entry %d: reservation %s twice", name, i, res.ID)
			}
			seen[res.ID] = true
			c.ID, c.Reservation = res.ID, res
			qs[q] = append(qs[q], c)
		}
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail(fmt.Errorf("%d bytes after the window", len(r.b)))
	}
	if r.err != nil {
		return qs, fmt.Errorf("window: %v", r.err)
	}
	return qs, nil
}

// more reads what follows a compact entry in version 5: a flags byte, then
// (bit 0) the parts after the first, (bit 1) the price quote's index and
// token counts; it adds them to res. first is the index of the entry's
// own balance: a part names another, and no two parts one (as the
// ledger's loader requires; no admit names a scope twice, and res's
// parts, a map by balance, would keep one of two).
func (r *winReader) more(res *snapFullRes, first uint64, bals []snapBalRef, units []string, quotes []events.PriceQuote) error {
	flags := r.take(1)
	if r.err != nil {
		return nil
	}
	if flags[0]&^3 != 0 {
		return fmt.Errorf("flags %#x", flags[0])
	}
	if flags[0]&1 != 0 {
		n := r.uvarint()
		if n == 0 || n > 64 || n > uint64(len(r.b)) { // the ledger writes 1 to 64
			return fmt.Errorf("%d more parts in %d bytes", n, len(r.b))
		}
		named := []uint64{first}
		for j := uint64(0); j < n && r.err == nil; j++ {
			bi, ui := r.uvarint(), r.uvarint()
			amount, actual := r.money(), r.money()
			if r.err != nil {
				return nil
			}
			if bi >= uint64(len(bals)) || ui >= uint64(len(units)) {
				return fmt.Errorf("part %d: balance %d of %d, unit %d of %d", j+1, bi, len(bals), ui, len(units))
			}
			if slices.Contains(named, bi) {
				return fmt.Errorf("part %d: balance %s twice", j+1, bals[bi].Key)
			}
			named = append(named, bi)
			res.Balances = append(res.Balances, bals[bi].Ref)
			res.Parts = append(res.Parts, snapFullPart{Key: bals[bi].Key, Unit: units[ui], Amount: amount, Actual: actual})
		}
	}
	if flags[0]&2 != 0 {
		qi, in, out := r.uvarint(), r.uvarint(), r.uvarint()
		if r.err != nil {
			return nil
		}
		if qi >= uint64(len(quotes)) || in > events.MaxTokens || out > events.MaxTokens {
			return fmt.Errorf("quote %d of %d, %d input tokens, %d output tokens", qi, len(quotes), in, out)
		}
		q := quotes[qi]
		q.InputTokens, q.MaxOutputTokens = int64(in), int64(out)
		res.Pricing = &q
	}
	return nil
}
