package ledger

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// v3Book is a book whose idempotency window holds every shape an entry
// can have: compact ids and hashes; ids, request ids and hashes of other
// shapes (an upper-case UUID, an empty hash); a request id closed twice
// (the newer names it); a reservation expired then settled late (a dead
// entry in the expired ring); one over two balances closed in one of
// them (open in the other: a whole entry the balance points at); one
// priced from a model; one whose expiry is past 2262 (no Unix
// nanoseconds); amounts at both ends of what a stored amount holds.
func v3Book(t testing.TB) (*book, uint64) {
	layout := streams.Default()
	b := newBook(layout, time.Hour, 48*time.Hour)
	other := events.BalanceRef{Scope: "org:c", Period: events.PeriodMonth, Instance: "2026-11"}
	bl := map[events.BalanceRef]*balance{}
	for _, ref := range []events.BalanceRef{bookBal, other} {
		x := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, unit: "USD", open: map[string]*Reservation{}}
		b.balances[x.key] = x
		bl[ref] = x
	}
	type res struct {
		id, req, hash, amount string
		refs                  []events.BalanceRef
		expires               time.Time
		pricing               *events.PriceQuote
	}
	open := func(seq uint64, r res) {
		if r.refs == nil {
			r.refs = []events.BalanceRef{bookBal}
		}
		if r.expires.IsZero() {
			r.expires = bookT0.Add(time.Minute)
		}
		if r.amount == "" {
			r.amount = "0.30"
		}
		for _, ref := range r.refs {
			b.applyEvent(bl[ref], bl[ref].key, seq, events.ReservationOpened{ReservationID: r.id, RequestID: r.req, RequestHash: r.hash,
				Balance: ref, Amount: events.MustMoney(r.amount), Unit: "USD", Balances: r.refs, ExpiresAt: r.expires, At: bookT0, Pricing: r.pricing})
		}
	}
	settle := func(seq uint64, id, actual string, ref events.BalanceRef, late bool) {
		b.applyEvent(bl[ref], bl[ref].key, seq, events.ReservationSettled{ReservationID: id, Balance: ref, Reserved: events.MustMoney("0.30"),
			Actual: events.MustMoney(actual), Overrun: events.Zero, AfterExpiry: late, Late: late, At: bookT0})
	}
	release := func(seq uint64, id string, reason string) {
		b.applyEvent(bl[bookBal], bl[bookBal].key, seq, events.ReservationReleased{ReservationID: id, Balance: bookBal, Reserved: events.MustMoney("0.30"),
			Reason: reason, At: bookT0})
	}
	hash := "0123456789abcdef0123456789abcdef"
	u := func(i int) string { return fmt.Sprintf("00000000-0000-0000-0000-%012d", i) }
	open(1, res{id: "rsv_" + u(1), req: u(101), hash: hash})
	open(1, res{id: "rsv_" + u(2), req: u(102), hash: hash, amount: "123456789012345678"})
	open(1, res{id: "plain-id", req: "req-plain", hash: "not hex"})
	open(1, res{id: "rsv_" + u(4), req: "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", hash: ""})
	open(1, res{id: "rsv_" + u(5), req: "again", hash: hash})
	open(1, res{id: "late", req: u(106), hash: hash})
	open(1, res{id: "two", req: u(107), hash: hash, refs: []events.BalanceRef{bookBal, other}})
	open(1, res{id: "priced", req: u(108), hash: hash, pricing: &events.PriceQuote{Model: "m", Version: 1, Unit: "USD",
		Input: events.MustMoney("0.001"), Output: events.MustMoney("0.002"), InputTokens: 10, MaxOutputTokens: 100}})
	open(1, res{id: "far", req: u(109), hash: hash, expires: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)})
	open(1, res{id: "still-open", req: u(110), hash: hash})
	open(1, res{id: "tardy", req: u(111), hash: hash})
	settle(2, "rsv_"+u(1), "0.000000000001", bookBal, false)
	settle(2, "rsv_"+u(2), "0", bookBal, false)
	release(2, "plain-id", events.ReasonReleased)
	settle(2, "rsv_"+u(4), "0.5", bookBal, false)
	settle(2, "rsv_"+u(5), "0.1", bookBal, false)
	release(2, "late", events.ReasonExpired)
	settle(2, "priced", "0.25", bookBal, false)
	release(2, "far", events.ReasonExpired)
	b.forgetUntil(2, bookT0.Add(time.Second))
	open(3, res{id: "rsv_" + u(11), req: "again", hash: hash}) // the request id again
	settle(3, "rsv_"+u(11), "0.2", bookBal, false)
	settle(3, "late", "0.5", bookBal, true)
	// Late, but before the sweeper released it: compact, with the late
	// bit ("late" above, settled after the release, is kept whole).
	b.applyEvent(bl[bookBal], bl[bookBal].key, 3, events.ReservationSettled{ReservationID: "tardy", Balance: bookBal, Reserved: events.MustMoney("0.30"),
		Actual: events.MustMoney("0.4"), Overrun: events.MustMoney("0.1"), Late: true, At: bookT0})
	settle(3, "two", "0.3", bookBal, false) // closed in bookBal, still open in other
	b.forgetUntil(3, bookT0.Add(2*time.Second))
	b.heads.Set(layout.LaneKey(bookBal), gate.Head{Valid: 3, Chained: true})
	require.Equal(t, 11, b.win.len())
	return b, 3
}

// v5Book is v3Book with the entries version 5 writes compact with more
// parts and a price quote: "pair" released in both its balances, and
// "both" priced from a model and settled in both (in its other balance
// at a quote whose prices differ from "priced"'s, so the section's table
// holds two). (v3Book's "two" is still open in one balance, so stays
// whole.)
func v5Book(t testing.TB) (*book, uint64) {
	b, _ := v3Book(t)
	other := events.BalanceRef{Scope: "org:c", Period: events.PeriodMonth, Instance: "2026-11"}
	refs := []events.BalanceRef{bookBal, other}
	quote := &events.PriceQuote{Model: "m", Version: 2, Unit: "USD",
		Input: events.MustMoney("0.003"), Output: events.MustMoney("0.004"), InputTokens: 7, MaxOutputTokens: 70}
	for i, id := range []string{"rsv_00000000-0000-0000-0000-000000000021", "pair"} {
		var pricing *events.PriceQuote
		if i == 0 {
			pricing = quote
		}
		for _, ref := range refs {
			bl := b.balances[streams.BalanceKey(ref)]
			b.applyEvent(bl, bl.key, 4, events.ReservationOpened{ReservationID: id, RequestID: fmt.Sprintf("00000000-0000-0000-0000-%012d", 120+i),
				RequestHash: "0123456789abcdef0123456789abcdef", Balance: ref, Amount: events.MustMoney("0.30"), Unit: "USD",
				Balances: refs, ExpiresAt: bookT0.Add(time.Minute), At: bookT0, Pricing: pricing})
		}
	}
	for _, ref := range refs {
		bl := b.balances[streams.BalanceKey(ref)]
		b.applyEvent(bl, bl.key, 5, events.ReservationSettled{ReservationID: "rsv_00000000-0000-0000-0000-000000000021", Balance: ref,
			Reserved: events.MustMoney("0.30"), Actual: events.MustMoney("0.1"), Overrun: events.Zero, At: bookT0})
		b.applyEvent(bl, bl.key, 5, events.ReservationReleased{ReservationID: "pair", Balance: ref, Reserved: events.MustMoney("0.30"),
			Reason: events.ReasonReleased, At: bookT0})
	}
	b.forgetUntil(5, bookT0.Add(3*time.Second))
	b.heads.Set(b.layout.LaneKey(bookBal), gate.Head{Valid: 5, Chained: true})
	require.Equal(t, 13, b.win.len())
	return b, 5
}

// roundTrip encodes b's snapshot in version and loads it back.
func roundTrip(t testing.TB, b *book, seq uint64, version int) (*book, []byte) {
	t.Helper()
	st, err := b.snapshotAs(seq, version)
	require.NoError(t, err)
	data, err := encodeSnapshot(st, "", nil)
	require.NoError(t, err)
	dec, err := decodeSnapshot(data)
	require.NoError(t, err)
	got, err := bookFromSnapshot(b.layout, b.retention, b.expiredKeep, dec)
	require.NoError(t, err)
	return got, data
}

// TestSnapshot_Version3LoadsAsVersion2: the version 3 snapshot of a book
// whose window holds every shape of entry loads into the same book as its
// version 2 snapshot, and as the book itself; so does a replica's book
// loaded from it and snapshotted again. How it can fail: a field the
// window section drops or mangles (a stamp, an id kind, the late flag, a
// request id named by the older of two reservations, a dead entry written
// out) makes the books' views differ.
func TestSnapshot_Version3LoadsAsVersion2(t *testing.T) {
	b, seq := v3Book(t)
	want := bookView(b)
	v2, data2 := roundTrip(t, b, seq, 2)
	v3, data3 := roundTrip(t, b, seq, 3)
	require.Equal(t, want, bookView(v2))
	require.Equal(t, want, bookView(v3))
	again, _ := roundTrip(t, v3, seq, 3)
	require.Equal(t, want, bookView(again))
	require.Less(t, len(data3), len(data2))
	// Version 5 writes the priced entry compact too (its quote in the
	// section's table), and loads into the same book.
	v5, data5 := roundTrip(t, b, seq, 5)
	require.Equal(t, want, bookView(v5))
	require.Less(t, len(data5), len(data3))
	again, _ = roundTrip(t, v5, seq, 5)
	require.Equal(t, want, bookView(again))
	r, ok := v3.byRequest("again")
	require.True(t, ok)
	require.Equal(t, "rsv_00000000-0000-0000-0000-000000000011", r.ID)
	// The compact entries are compact again (the priced one too, once
	// loaded), the others whole: two (its other balance's open set names
	// it), far (a time past 2262) and late (settled after the sweeper
	// released it, which the compact form has no bit for).
	for _, bk := range []*book{v3, v5} {
		whole := 0
		for _, rg := range bk.win.rings {
			for i := 0; i < rg.n; i++ {
				if e := rg.at(rg.head + uint64(i)); e.ext != nil && e.ext.res != nil {
					whole++
				}
			}
		}
		require.Equal(t, 3, whole, "two, far, late")
	}
}

// TestSnapshot_Version5MoreParts: v5Book's version 5 snapshot loads into
// the same book, its entries over two balances compact with their second
// part in more, the priced one with its quote from the section's table
// of two. How it can fail: v5Book stops making the entries the fuzz
// seeds (FuzzSnapshotV3) are meant to hold (a change to what the window
// keeps compact), or a part or a quote is lost on the way.
func TestSnapshot_Version5MoreParts(t *testing.T) {
	b, seq := v5Book(t)
	got, _ := roundTrip(t, b, seq, 5)
	require.Equal(t, bookView(b), bookView(got))
	require.Len(t, got.win.quotes, 2)
	more := map[string]*winMore{}
	for _, rg := range got.win.rings {
		for i := 0; i < rg.n; i++ {
			if e := rg.at(rg.head + uint64(i)); e.ext != nil && e.ext.more != nil {
				more[e.idText()] = e.ext.more
			}
		}
	}
	require.Len(t, more, 3, "pair, both, priced")
	require.Len(t, more["pair"].parts, 1)
	require.Zero(t, more["pair"].quote)
	m := more["rsv_00000000-0000-0000-0000-000000000021"]
	require.Len(t, m.parts, 1)
	require.NotZero(t, m.quote)
	require.EqualValues(t, 7, m.inputTokens)
}

// section is a hand-made window section (see snapshot.go's layout).
type section struct{ b []byte }

func (s *section) u(v uint64) *section            { s.b = binary.AppendUvarint(s.b, v); return s }
func (s *section) v(v int64) *section             { s.b = binary.AppendVarint(s.b, v); return s }
func (s *section) raw(b ...byte) *section         { s.b = append(s.b, b...); return s }
func (s *section) str(x string) *section          { return s.u(uint64(len(x))).raw([]byte(x)...) }
func (s *section) id16(x string) *section         { c, _, _ := compactID(x); return s.raw(c[:]...) }
func (s *section) money(c int64, e int8) *section { return s.v(c).raw(byte(e)) }

// entry appends a compact settled entry of reservation "rsv_"+uuid i.
func (s *section) entry(i int, bal, unit uint64) *section {
	id := fmt.Sprintf("rsv_00000000-0000-0000-0000-%012d", i)
	return s.raw(1|idRsv<<tagIDShift).v(1).id16(id).str(fmt.Sprintf("req-%d", i)).str("h").
		v(-5).v(60e9).u(bal).u(unit).money(25, -2).money(2, -1)
}

// withSection returns the encoding of a version 3 snapshot of b with its
// window section replaced by sec, re-hashed: it passes the digest, so the
// window decoder's own checks are what refuses it.
func withSection(t testing.TB, b *book, seq uint64, sec []byte) []byte {
	return withSectionAs(t, b, seq, sec, 3)
}

// withSectionAs is withSection for a snapshot of version (3 to 5).
func withSectionAs(t testing.TB, b *book, seq uint64, sec []byte, version int) []byte {
	st, err := b.snapshotAs(seq, version)
	require.NoError(t, err)
	st.window, st.WindowSize = sec, len(sec)
	data, err := encodeSnapshot(st, "", nil)
	require.NoError(t, err)
	return data
}

// loadV3 decodes and loads data; it must not panic, and an error must be
// ErrSnapshotInvalid.
func loadV3(t testing.TB, data []byte) (*book, error) {
	st, err := decodeSnapshot(data)
	if err == nil {
		var b *book
		b, err = bookFromSnapshot(streams.Default(), time.Hour, 48*time.Hour, st)
		if err == nil {
			return b, nil
		}
	}
	if !errors.Is(err, ErrSnapshotInvalid) {
		t.Fatalf("error %v is not ErrSnapshotInvalid", err)
	}
	return nil, err
}

// withWindow loads a copy of the decoded snapshot st with its window
// section replaced by sec (as withSection and loadV3 would, without
// encoding and decoding the rest again): it must not panic, and an error
// must be ErrSnapshotInvalid. st itself is left as it was.
func withWindow(t testing.TB, st *snapshotState, sec []byte) (*book, error) {
	c := *st
	c.window, c.WindowSize = sec, len(sec)
	b, err := bookFromSnapshot(streams.Default(), time.Hour, 48*time.Hour, &c)
	if err != nil && !errors.Is(err, ErrSnapshotInvalid) {
		t.Fatalf("error %v is not ErrSnapshotInvalid", err)
	}
	return b, err
}

// TestSnapshot_Version3CorruptWindow: a window section that is wrong
// inside a valid digest (re-hashed after corrupting it) is refused as
// ErrSnapshotInvalid, never a panic: every truncation, a trailing byte,
// and hand-made sections with an index out of range, a bad id kind or
// tag, a string that is not UTF-8, an empty id (or request id, in full
// form), an amount out of range, a count larger than the bytes, a
// reservation twice. Every single-byte
// flip of a real section loads or is refused, without a panic. How it can
// fail: a decoder that trusts a count or an index panics (index out of
// range, makeslice) or loads a book the snapshot did not describe.
func TestSnapshot_Version3CorruptWindow(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	b, seq := v3Book(t)
	st, err := b.snapshotAs(seq, 3)
	require.NoError(t, err)
	good := st.window
	_, err = loadV3(t, withSection(t, b, seq, good))
	require.NoError(t, err)
	_, err = loadV3(t, withSection(t, b, seq, append(append([]byte(nil), good...), 0)))
	require.ErrorContains(t, err, "after the window")
	// The truncations and flips (three loads a byte of the section) meet
	// the window decoder through one decoded snapshot whose section is
	// replaced (withWindow): the JSON line and the digest around a section
	// are the same bytes each time but window_size, and their encoding and
	// decoding are what the loads above and the hand-made sections below
	// run. Encoding and decoding them again for each of the ~2,000 loads
	// was two thirds of the test's CPU.
	dec, err := decodeSnapshot(withSection(t, b, seq, good))
	require.NoError(t, err)
	_, err = withWindow(t, dec, good)
	require.NoError(t, err, "the decoded snapshot loads with its own section")
	for n := 0; n < len(good); n++ {
		_, err := withWindow(t, dec, good[:n])
		require.Error(t, err, "truncated to %d of %d bytes", n, len(good))
	}
	for i := range good {
		for _, bit := range []byte{0x01, 0x80} {
			c := append([]byte(nil), good...)
			c[i] ^= bit
			withWindow(t, dec, c)
		}
	}

	// Hand-made sections replace the window: org:c's open set no longer
	// names the window's "two".
	delete(b.balances[streams.BalanceKey(events.BalanceRef{Scope: "org:c", Period: events.PeriodMonth, Instance: "2026-11"})].open, "two")
	ok := func() *section { return (&section{}).u(1).str("USD") }
	pad := make([]byte, 20) // past the count's bound: the entry's own check refuses it
	// Balance 0 is org:b's (balances are sorted by key).
	_, err = loadV3(t, withSection(t, b, seq, ok().u(1).entry(1, 0, 0).u(0).b))
	require.NoError(t, err, "the hand-made section is valid")
	for name, c := range map[string]struct {
		sec  []byte
		want string
	}{
		"balance index":  {ok().u(1).entry(1, 2, 0).u(0).b, "balance 2 of 2"},
		"unit index":     {ok().u(1).entry(1, 0, 1).u(0).b, "unit 1 of 1"},
		"id twice":       {ok().u(2).entry(1, 0, 0).entry(1, 0, 0).u(0).b, "twice"},
		"id of the book": {ok().u(1).raw(1).v(1).str("still-open").str("r").str("h").v(0).v(0).u(0).u(0).money(1, 0).money(1, 0).u(0).b, "twice"},
		"id kind 3":      {ok().u(1).raw(1 | 3<<tagIDShift).v(1).raw(pad...).b, "id kind 3"},
		"empty id":       {ok().u(1).raw(1).v(1).str("").raw(pad...).b, "empty id"},
		"not UTF-8":      {ok().u(1).raw(1).v(1).str("a\xffb").raw(pad...).b, "not UTF-8"},
		"unit not UTF-8": {(&section{}).u(1).str("\xc3").b, "not UTF-8"},
		"full form tag":  {ok().u(1).raw(0x10).v(1).str("{}").raw(pad...).b, "tag 0x10"},
		"full form JSON": {ok().u(1).raw(0).v(1).str("{").raw(pad...).b, "window"},
		"full form open": {ok().u(1).raw(0).v(1).str(`{"id":"x","request_id":"r","status":"open","balances":[],"parts":[]}`).u(0).b, "not a closed reservation"},
		// An empty id or request id loaded in full form was written
		// compact by the book's next snapshot, which no replica could
		// load ("an empty id"): found by FuzzSnapshotV3.
		"full form no id":         {ok().u(1).raw(0).v(1).str(`{"id":"","request_id":"r","status":"settled"}`).u(0).b, "empty id"},
		"full form no request id": {ok().u(1).raw(0).v(1).str(`{"id":"x","request_id":"","status":"settled"}`).u(0).b, "empty request id"},
		"amount exponent":         {ok().u(1).raw(1).v(1).str("a").str("b").str("h").v(0).v(0).u(0).u(0).money(1, 19).money(1, 0).u(0).b, "out of range"},
		"amount digits":           {ok().u(1).raw(1).v(1).str("a").str("b").str("h").v(0).v(0).u(0).u(0).money(1, 0).money(1234567890123, 6).u(0).b, "out of range"},
		"amount fraction":         {ok().u(1).raw(1).v(1).str("a").str("b").str("h").v(0).v(0).u(0).u(0).money(1, -13).money(1, 0).u(0).b, "out of range"},
		"count":                   {ok().u(1 << 40).b, "entries in"},
		"units count":             {(&section{}).u(1 << 40).b, "units in"},
		"no queues":               {ok().b, "truncated"},
	} {
		_, err := loadV3(t, withSection(t, b, seq, c.sec))
		require.ErrorContains(t, err, c.want, name)
	}
}

// TestSnapshot_Version5CorruptWindow: a version 5 section that is wrong
// in what version 5 adds (the table of quotes, an entry's flags byte, its
// more parts and its quote) is refused as ErrSnapshotInvalid: a quote
// that is not UTF-8 text or not a model's prices, a table of more than
// maxQuotes, an unknown flag, no more parts or more than maxMoreParts, a
// part's or a quote's index out of range, token counts past
// events.MaxTokens, a balance named twice by an entry (compact or in full
// form: no admit names a scope twice). How it can fail: the loader takes a section no
// replica writes (the projector's decoder, which refuses each, and it
// then disagree on what a snapshot holds) or panics on it.
func TestSnapshot_Version5CorruptWindow(t *testing.T) {
	b, seq := v5Book(t)
	for _, bl := range b.balances {
		delete(bl.open, "two") // hand-made sections leave it out
	}
	quote := `{"model":"m","version":1,"unit":"USD","input":"0.001","output":"0.002","input_tokens":0,"max_output_tokens":0}`
	head := func(quotes ...string) *section {
		s := (&section{}).u(1).str("USD").u(uint64(len(quotes)))
		for _, q := range quotes {
			s.str(q)
		}
		return s
	}
	// An entry (balance 0) whose flags byte says a part (balance 1) and
	// the quote follow.
	withMore := func(s *section, n, bal, qi, in uint64) []byte {
		s.u(1).entry(1, 0, 0).raw(moreParts | moreQuote).u(n)
		for i := uint64(0); i < n; i++ {
			s.u(bal).u(0).money(25, -2).money(0, 0)
		}
		return s.u(qi).u(in).u(100).u(0).b
	}
	_, err := loadV3(t, withSectionAs(t, b, seq, withMore(head(quote), 1, 1, 0, 10), 5))
	require.NoError(t, err, "the hand-made section is valid")
	for name, c := range map[string]struct {
		sec  []byte
		want string
	}{
		"quote not UTF-8":             {head("{\"model\":\"m\xff\"}").u(0).u(0).b, "not UTF-8"},
		"quote without model":         {head(`{"input":"1","output":"1"}`).u(0).u(0).b, "not a quote's prices"},
		"quote with tokens":           {head(`{"model":"m","input_tokens":1}`).u(0).u(0).b, "not a quote's prices"},
		"quote null":                  {head(`null`).u(0).u(0).b, "not a quote's prices"},
		"quotes count":                {(&section{}).u(0).u(maxQuotes + 1).raw(make([]byte, maxQuotes+1)...).b, "price quotes"},
		"unknown flag":                {head(quote).u(1).entry(1, 0, 0).raw(4).u(0).b, "flags 0x4"},
		"no more parts":               {withMore(head(quote), 0, 1, 0, 10), "0 more parts"},
		"too many parts":              {withMore(head(quote), maxMoreParts+1, 1, 0, 10), "65 more parts"},
		"part balance":                {withMore(head(quote), 1, 2, 0, 10), "balance 2 of 2"},
		"quote index":                 {withMore(head(quote), 1, 1, 1, 10), "quote 1 of 1"},
		"input tokens":                {withMore(head(quote), 1, 1, 0, events.MaxTokens+1), "input tokens"},
		"part in the entry's balance": {withMore(head(quote), 1, 0, 0, 10), "twice"},
		"two parts in one balance":    {withMore(head(quote), 2, 1, 0, 10), "twice"},
		"full form in one balance twice": {head().u(1).raw(0).v(1).str(`{"id":"x","request_id":"r","status":"settled","balances":[` +
			`{"scope":"org:b","period":"month","instance":"2026-11"},{"scope":"org:b","period":"month","instance":"2026-11"}]}`).u(0).b, "twice"},
	} {
		_, err := loadV3(t, withSectionAs(t, b, seq, c.sec, 5))
		require.ErrorContains(t, err, c.want, name)
	}
}

// FuzzSnapshotV3 loads arbitrary window sections (inside a valid digest,
// so that the decoder, not the digest, meets them) in a snapshot of
// version 3 and of version 5 (whose compact entries end with more parts
// and a price quote, read against the section's table of quotes): loading
// never panics, an error is ErrSnapshotInvalid, and a section that loads
// gives a book whose own snapshot of that version loads into the same
// book. The seeds are the sections of v5Book (entries over two balances,
// priced ones, whole ones) in both versions and hand-made ones; the
// book's open sets name no window entry, so a section without one loads.
// Run it with
//
//	go test -run '^$' -fuzz FuzzSnapshotV3 -fuzztime 30s ./internal/ledger/
func FuzzSnapshotV3(f *testing.F) {
	b, seq := v5Book(f)
	for _, bl := range b.balances {
		delete(bl.open, "two") // still in the window, whole
	}
	for _, version := range []int{3, 5} {
		st, err := b.snapshotAs(seq, version)
		require.NoError(f, err)
		f.Add(st.window)
	}
	quote := `{"model":"m","version":1,"unit":"USD","input":"0.001","output":"0.002","input_tokens":0,"max_output_tokens":0}`
	f.Add((&section{}).u(1).str("USD").u(1).entry(1, 0, 0).u(1).entry(2, 1, 0).b)
	// Version 5: an entry with a second part (balance 1) and the quote,
	// one with neither.
	f.Add((&section{}).u(1).str("USD").u(1).str(quote).u(2).entry(1, 0, 0).raw(moreParts|moreQuote).
		u(1).u(1).u(0).money(25, -2).money(0, 0).u(0).u(10).u(100).entry(2, 1, 0).raw(0).u(0).b)
	f.Add((&section{}).u(0).u(0).u(0).b)
	f.Add((&section{}).u(0).u(0).u(0).u(0).b)
	f.Fuzz(func(t *testing.T, sec []byte) {
		for _, version := range []int{3, 5} {
			got, err := loadV3(t, withSectionAs(t, b, seq, sec, version))
			if err != nil {
				continue
			}
			again, _ := roundTrip(t, got, seq, version)
			require.Equal(t, bookView(got), bookView(again), "version %d", version)
		}
	})
}

// BenchmarkSnapshotWindow measures a snapshot of a book whose idempotency
// window holds N settled reservations (default 250,000;
// SPENDGATE_WINDOW=N for another size) with ids as admit and the client
// make them, in version 2 (the window as JSON) and version 3 (the window
// section): bytes per window entry, the time to encode it (of which the
// copy of the book a replica makes under its read lock, when no commit
// can apply: s-locked), and the time to decode and load it into a book,
// per million entries. Run it with
//
//	go test -run '^$' -bench BenchmarkSnapshotWindow -benchtime 1x ./internal/ledger/
func BenchmarkSnapshotWindow(b *testing.B) {
	n := 250_000
	if v, err := strconv.Atoi(os.Getenv("SPENDGATE_WINDOW")); err == nil && v > 0 {
		n = v
	}
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	const budgets = 256
	var bals []*balance
	for j := 0; j < budgets; j++ {
		ref := events.BalanceRef{Scope: events.Scope(fmt.Sprintf("org:w%d", j)), Period: events.PeriodMonth, Instance: "2026-11"}
		bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, unit: "USD", open: map[string]*Reservation{}}
		bk.balances[bl.key] = bl
		bals = append(bals, bl)
	}
	for j := 0; j < n; j++ {
		bl := bals[j%budgets]
		h := uuid.New()
		id := "rsv_" + uuid.Must(uuid.NewV7()).String()
		at := bookT0.Add(time.Duration(j) * time.Millisecond)
		bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationOpened{ReservationID: id, RequestID: uuid.NewString(), RequestHash: hex.EncodeToString(h[:]),
			Balance: bl.ref, Amount: events.MustMoney("0.25"), Unit: "USD", Balances: bl.self, ExpiresAt: at.Add(time.Hour), At: at})
		bk.applyEvent(bl, bl.key, uint64(j+1), events.ReservationSettled{ReservationID: id, Balance: bl.ref,
			Reserved: events.MustMoney("0.25"), Actual: events.MustMoney("0.2"), Overrun: events.Zero, At: at})
		bk.forgetUntil(uint64(j+1), at)
	}
	if bk.win.len() != n {
		b.Fatalf("the window holds %d, want %d", bk.win.len(), n)
	}
	base := newBook(streams.Default(), time.Hour, time.Hour)
	for _, bl := range bals {
		base.balances[bl.key] = bl
	}
	empty, err := base.snapshotAs(uint64(n), 3)
	require.NoError(b, err)
	emptyData, err := encodeSnapshot(empty, "", nil)
	require.NoError(b, err)
	for _, version := range []int{2, 3} {
		b.Run(fmt.Sprintf("v%d", version), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				start := time.Now()
				st, err := bk.snapshotAs(uint64(n), version)
				require.NoError(b, err)
				copied := time.Since(start) // under the book's read lock in a replica
				data, err := encodeSnapshot(st, "", nil)
				require.NoError(b, err)
				enc := time.Since(start)
				start = time.Now()
				dec, err := decodeSnapshot(data)
				require.NoError(b, err)
				got, err := bookFromSnapshot(bk.layout, bk.retention, bk.expiredKeep, dec)
				require.NoError(b, err)
				load := time.Since(start)
				require.Equal(b, n, got.win.len())
				perM := 1e6 / float64(n)
				b.ReportMetric(float64(len(data)-len(emptyData))/float64(n), "B/window-entry")
				b.ReportMetric(copied.Seconds()*perM, "s-locked/M-entries")
				b.ReportMetric(enc.Seconds()*perM, "s-encode/M-entries")
				b.ReportMetric(load.Seconds()*perM, "s-load/M-entries")
			}
		})
	}
}

// TestSectionReader_MoneyRange: money compares with powers of ten where it
// counted digits; it must accept and refuse exactly what counting does, at
// every edge of every exponent a byte holds. How it can fail: an
// off-by-one in the power (refusing 10^k-1 or accepting 10^k), or an
// int64 whose 19 digits wrap the comparison (math.MinInt64).
func TestSectionReader_MoneyRange(t *testing.T) {
	digitsOK := func(coef int64, exp int8) bool {
		abs := uint64(coef)
		if coef < 0 {
			abs = uint64(^coef) + 1
		}
		digits := 0
		for ; abs > 0; abs /= 10 {
			digits++
		}
		return int(exp) >= -events.MaxFractionDigits && digits+int(exp) <= events.MaxIntegerDigits
	}
	coefs := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	for p := int64(1); p <= 1e18; p *= 10 {
		coefs = append(coefs, p, p-1, -p, 1-p, p+1)
	}
	accepted, refused := 0, 0
	for _, coef := range coefs {
		for e := -128; e < 128; e++ {
			exp := int8(e)
			r := &sectionReader{b: (&section{}).money(coef, exp).b}
			c, x := r.money()
			want := digitsOK(coef, exp)
			require.Equal(t, want, r.err == nil, "%d×10^%d", coef, exp)
			if want {
				require.Equal(t, coef, c)
				require.Equal(t, exp, x)
				accepted++
			} else {
				refused++
			}
		}
	}
	require.Positive(t, accepted)
	require.Positive(t, refused)
}
