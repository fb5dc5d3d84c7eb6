package projector

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// winSection is a hand-made window section (package ledger's snapshot.go
// documents the layout).
func winSection(entries ...[]byte) []byte {
	b := binary.AppendUvarint(nil, 1)
	b = append(binary.AppendUvarint(b, 3), "USD"...)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = append(b, e...)
	}
	return binary.AppendUvarint(b, 0) // no expired entries
}

// winEntry is a compact settled, late entry of reservation "rsv_" + the
// UUID 00..0n, request id req, stamped 1 ns after the previous entry.
func winCompact(n byte, req string) []byte {
	b := []byte{1 | 1<<2 | 2<<4} // settled, late, id "rsv_" + 16 bytes, request id a string
	b = binary.AppendVarint(b, 1)
	id := make([]byte, 16)
	id[15] = n
	b = append(b, id...)
	b = append(binary.AppendUvarint(b, uint64(len(req))), req...)
	b = append(binary.AppendUvarint(b, 1), 'h')
	b = binary.AppendVarint(b, -5)   // opened 5 ns before the stamp
	b = binary.AppendVarint(b, 60e9) // expires a minute later
	b = binary.AppendUvarint(b, 0)   // balance 0
	b = binary.AppendUvarint(b, 0)   // unit 0
	b = append(binary.AppendVarint(b, 25), 0xfe)
	return append(binary.AppendVarint(b, 2), 0xff)
}

var winBals = []snapBalRef{{Key: "balance.org.a.month.2026-11", Ref: events.BalanceRef{Scope: "org:a", Period: events.PeriodMonth, Instance: "2026-11"}}}

// TestDecodeWindow reads a hand-made section as the ledger writes one, and
// refuses a truncated one. How it can fail: a field read in the wrong
// order or with the wrong base shows in the decoded entry.
func TestDecodeWindow(t *testing.T) {
	qs, err := decodeWindow(winSection(winCompact(1, "req-1"), winCompact(2, "req-2")), winBals, 3)
	require.NoError(t, err)
	require.Len(t, qs[0], 2)
	require.Empty(t, qs[1])
	c := qs[0][1]
	require.Equal(t, "rsv_00000000-0000-0000-0000-000000000002", c.ID)
	require.EqualValues(t, 2, c.At.UnixNano())
	r := c.Reservation
	require.Equal(t, events.StatusSettled, r.Status)
	require.True(t, r.Late)
	require.Equal(t, "req-2", r.RequestID)
	require.EqualValues(t, -3, r.OpenedAt.UnixNano())
	require.EqualValues(t, 60e9-3, r.ExpiresAt.UnixNano())
	require.Equal(t, []events.BalanceRef{winBals[0].Ref}, r.Balances)
	require.Equal(t, "USD", r.Parts[0].Unit)
	require.Equal(t, winBals[0].Key, r.Parts[0].Key)
	require.Equal(t, "0.25", r.Parts[0].Amount.String())
	require.Equal(t, "0.2", r.Parts[0].Actual.String())
	good := winSection(winCompact(1, "req-1"))
	for n := 0; n < len(good); n++ {
		_, err := decodeWindow(good[:n], winBals, 3)
		require.Error(t, err, "truncated to %d bytes", n)
	}
}

// FuzzDecodeWindow: the auditor's window decoder never panics on any
// section, read as version 3 and as version 5 (seeded with a version 5
// section whose entries have a quote, a second part, or neither). Run it
// with
//
//	go test -run '^$' -fuzz FuzzDecodeWindow -fuzztime 30s ./projector/
func FuzzDecodeWindow(f *testing.F) {
	f.Add(winSection(winCompact(1, "req-1"), winCompact(2, "req-2")))
	f.Add(winSection([]byte{0, 2, 2, '{', '}'}))
	part := []byte{1, 1, 0, 0, 50, 0xfe, 0, 0} // one more part: balance 0, unit 0, 0.25, 0
	f.Add(winSectionV5([]string{"USD"}, []string{winQuote}, append(winCompact(1, "req-1"), 2, 0, 10, 100),
		append(winCompact(2, "req-2"), part...), append(winCompact(3, "req-3"), 0),
		winFull(`{"id":"x","request_id":"r","status":"settled"}`)))
	f.Fuzz(func(t *testing.T, sec []byte) {
		decodeWindow(sec, winBals, 3)
		decodeWindow(sec, winBals, 5)
	})
}

// TestDecodeWindow_Version5 reads a hand-made version 5 section: its table
// of price quotes, a compact entry with a second part and a quote, and
// one with neither (its flags byte 0); a flags byte with an unknown bit,
// a part or quote index out of range, and every truncation are refused.
// How it can fail: a part, a quote or a token count read in the wrong
// order, or not at all, shows in the decoded reservation.
func TestDecodeWindow_Version5(t *testing.T) {
	bals := append(winBals[:1:1], snapBalRef{Key: "balance.user.u.day.2026-11-30",
		Ref: events.BalanceRef{Scope: "user:u", Period: events.PeriodDay, Instance: "2026-11-30"}})
	quote := `{"model":"gpt-x","version":7,"unit":"USD","input":"2.5","output":"10","input_tokens":0,"max_output_tokens":0}`
	section := func(entries ...[]byte) []byte {
		b := binary.AppendUvarint(nil, 1)
		b = append(binary.AppendUvarint(b, 3), "USD"...)
		b = binary.AppendUvarint(b, 1)
		b = append(binary.AppendUvarint(b, uint64(len(quote))), quote...)
		b = binary.AppendUvarint(b, uint64(len(entries)))
		for _, e := range entries {
			b = append(b, e...)
		}
		return binary.AppendUvarint(b, 0)
	}
	more := func(flags byte, bi, qi uint64) []byte {
		b := []byte{flags}
		if flags&1 != 0 {
			b = binary.AppendUvarint(b, 1)
			b = binary.AppendUvarint(b, bi)
			b = binary.AppendUvarint(b, 0)
			b = append(binary.AppendVarint(b, 25), 0xfe)
			b = append(binary.AppendVarint(b, 0), 0)
		}
		if flags&2 != 0 {
			b = binary.AppendUvarint(b, qi)
			b = binary.AppendUvarint(b, 1800)
			b = binary.AppendUvarint(b, 1024)
		}
		return b
	}
	good := section(append(winCompact(1, "req-1"), more(3, 1, 0)...), append(winCompact(2, "req-2"), 0))
	qs, err := decodeWindow(good, bals, 5)
	require.NoError(t, err)
	require.Len(t, qs[0], 2)
	r := qs[0][0].Reservation
	require.Equal(t, []events.BalanceRef{bals[0].Ref, bals[1].Ref}, r.Balances)
	require.Len(t, r.Parts, 2)
	require.Equal(t, bals[1].Key, r.Parts[1].Key)
	require.Equal(t, "0.25", r.Parts[1].Amount.String())
	require.NotNil(t, r.Pricing)
	require.Equal(t, "gpt-x", r.Pricing.Model)
	require.EqualValues(t, 7, r.Pricing.Version)
	require.Equal(t, "10", r.Pricing.Output.String())
	require.EqualValues(t, 1800, r.Pricing.InputTokens)
	require.EqualValues(t, 1024, r.Pricing.MaxOutputTokens)
	r = qs[0][1].Reservation
	require.Len(t, r.Parts, 1)
	require.Nil(t, r.Pricing)

	for name, sec := range map[string][]byte{
		"unknown flag":  section(append(winCompact(1, "req-1"), 4)),
		"part balance":  section(append(winCompact(1, "req-1"), more(1, 2, 0)...)),
		"quote index":   section(append(winCompact(1, "req-1"), more(2, 0, 1)...)),
		"no flags byte": section(winCompact(1, "req-1")),
	} {
		_, err := decodeWindow(sec, bals, 5)
		require.Error(t, err, name)
	}
	for n := 0; n < len(good); n++ {
		_, err := decodeWindow(good[:n], bals, 5)
		require.Error(t, err, "truncated to %d bytes", n)
	}
}

// winSectionV5 is a hand-made version 5 section: units, quotes (their
// JSON), the closed entries and no expired one.
func winSectionV5(units, quotes []string, entries ...[]byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(units)))
	for _, u := range units {
		b = append(binary.AppendUvarint(b, uint64(len(u))), u...)
	}
	b = binary.AppendUvarint(b, uint64(len(quotes)))
	for _, q := range quotes {
		b = append(binary.AppendUvarint(b, uint64(len(q))), q...)
	}
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = append(b, e...)
	}
	return binary.AppendUvarint(b, 0)
}

// winAmount is winCompact(n, req) with its amount coef×10^exp (winCompact
// ends with its amount and its actual, two bytes each).
func winAmount(n byte, req string, coef int64, exp int8) []byte {
	b := winCompact(n, req)
	tail := append([]byte(nil), b[len(b)-2:]...)
	b = append(binary.AppendVarint(b[:len(b)-4], coef), byte(exp))
	return append(b, tail...)
}

// winFull is an entry in full form: the reservation's JSON.
func winFull(res string) []byte {
	b := binary.AppendVarint([]byte{0}, 1)
	return append(binary.AppendUvarint(b, uint64(len(res))), res...)
}

// winQuote is a quote the ledger writes in a section's table: a model's
// prices, its token counts 0.
const winQuote = `{"model":"gpt-x","version":7,"unit":"USD","input":"2.5","output":"10","input_tokens":0,"max_output_tokens":0}`

// TestDecodeWindow_RefusesWhatTheLedgerRefuses: each section here is one
// the ledger's loader (internal/ledger, loadWindow) refuses, so the
// audit's decoder must refuse it too: an auditor that reads what no
// replica would load vouches for a snapshot no replica can restart from.
// Every section differs from one the decoder reads (the first case) in
// one check. How it can fail: a check the ledger's loader makes and this
// decoder does not (an amount out of a stored amount's range, a quote
// that is not a model's prices, more quotes or units than the ledger's
// tables hold, an entry in full form that is not a closed reservation,
// lacks an id or a request id, or holds a field of the wrong type, an
// entry that names a balance twice, a reservation twice in the window)
// lets its section decode without an error.
func TestDecodeWindow_RefusesWhatTheLedgerRefuses(t *testing.T) {
	units, quotes := []string{"USD"}, []string{winQuote}
	_, err := decodeWindow(winSectionV5(units, quotes, append(winAmount(1, "req-1", 123456789012345678, 0), 0)), winBals, 5)
	require.NoError(t, err, "the largest amount, and a section like the cases'")
	_, err = decodeWindow(winSectionV5(units, quotes, append(winAmount(1, "req-1", 1, -12), 0)), winBals, 5)
	require.NoError(t, err, "the smallest amount")
	// inBoth names reservation 1 in the closed ring and in the expired
	// one (its last byte, the expired ring's count 0, replaced).
	inBoth := winSectionV5(units, quotes, append(winCompact(1, "req-1"), 0))
	inBoth = append(append(inBoth[:len(inBoth)-1], 1), append(winCompact(1, "req-2"), 0)...)
	bals := append(winBals[:1:1], snapBalRef{Key: "balance.user.u.day.2026-11-30",
		Ref: events.BalanceRef{Scope: "user:u", Period: events.PeriodDay, Instance: "2026-11-30"}})
	_, err = decodeWindow(winSectionV5(units, quotes, append(winCompact(1, "req-1"), 1, 1, 1, 0, 50, 0xfe, 0, 0)), bals, 5)
	require.NoError(t, err, "a part in another balance")
	for name, c := range map[string]struct {
		sec  []byte
		want string
	}{
		"amount of 19 digits":            {winSectionV5(units, quotes, append(winAmount(1, "req-1", 1234567890123456789, 0), 0)), "out of range"},
		"amount of 18 digits × 10":       {winSectionV5(units, quotes, append(winAmount(1, "req-1", 123456789012345678, 1), 0)), "out of range"},
		"amount of 13 fraction digits":   {winSectionV5(units, quotes, append(winAmount(1, "req-1", 1, -13), 0)), "out of range"},
		"amount exponent 127":            {winSectionV5(units, quotes, append(winAmount(1, "req-1", 0, 127), 0)), "out of range"},
		"least amount":                   {winSectionV5(units, quotes, append(winAmount(1, "req-1", -1<<63, 0), 0)), "out of range"},
		"quote without a model":          {winSectionV5(units, []string{`{"version":7,"unit":"USD","input":"2.5","output":"10"}`}), "quote 0"},
		"quote null":                     {winSectionV5(units, []string{`null`}), "quote 0"},
		"quote with input tokens":        {winSectionV5(units, []string{`{"model":"m","input":"1","output":"1","input_tokens":5}`}), "quote 0"},
		"quote with output tokens":       {winSectionV5(units, []string{`{"model":"m","input":"1","output":"1","max_output_tokens":5}`}), "quote 0"},
		"full form open":                 {winSectionV5(units, quotes, winFull(`{"id":"x","request_id":"r","status":"open"}`)), "not a closed reservation"},
		"full form without a status":     {winSectionV5(units, quotes, winFull(`{"id":"x","request_id":"r"}`)), "not a closed reservation"},
		"full form null":                 {winSectionV5(units, quotes, winFull(`null`)), "not a closed reservation"},
		"full form voided":               {winSectionV5(units, quotes, winFull(`{"id":"x","request_id":"r","status":"voided"}`)), "not a closed reservation"},
		"full form without an id":        {winSectionV5(units, quotes, winFull(`{"request_id":"r","status":"settled"}`)), "empty id"},
		"full form without a request id": {winSectionV5(units, quotes, winFull(`{"id":"x","status":"settled"}`)), "empty request id"},
		"full form request hash":         {winSectionV5(units, quotes, winFull(`{"id":"x","request_id":"r","status":"settled","request_hash":5}`)), "request_hash"},
		"full form ceiling":              {winSectionV5(units, quotes, winFull(`{"id":"x","request_id":"r","status":"settled","parts":[{"ceiling":"x"}]}`)), "x"},
		"part in the entry's balance":    {winSectionV5(units, quotes, append(winCompact(1, "req-1"), 1, 1, 0, 0, 50, 0xfe, 0, 0)), "twice"},
		"two parts in one balance":       {winSectionV5(units, quotes, append(winCompact(1, "req-1"), 1, 2, 1, 0, 50, 0xfe, 0, 0, 1, 0, 50, 0xfe, 0, 0)), "twice"},
		"full form in one balance twice": {winSectionV5(units, quotes, winFull(`{"id":"x","request_id":"r","status":"settled","balances":[`+
			`{"scope":"org:a","period":"month","instance":"2026-11"},{"scope":"org:a","period":"month","instance":"2026-11"}]}`)), "twice"},
		"id twice": {winSectionV5(units, quotes, append(winCompact(1, "req-1"), 0), append(winCompact(1, "req-2"), 0)), "twice"},
		"id twice, once in full form": {winSectionV5(units, quotes, append(winCompact(1, "req-1"), 0),
			winFull(`{"id":"rsv_00000000-0000-0000-0000-000000000001","request_id":"r","status":"settled"}`)), "twice"},
		"id twice, once expired": {inBoth, "twice"},
	} {
		_, err := decodeWindow(c.sec, bals, 5)
		require.ErrorContains(t, err, c.want, name)
	}
	for _, status := range []string{events.StatusSettled, events.StatusReleased, events.StatusExpired} {
		full := `{"id":"x","request_id":"r","status":"` + status + `","request_hash":"h","parts":[{"key":"k","ceiling":"1"}]}`
		_, err := decodeWindow(winSectionV5(units, quotes, winFull(full)), winBals, 5)
		require.NoError(t, err, full)
	}
	// One unit more than the ledger's table holds (1<<16-1 units, as an
	// entry's uint16 index into it names them), refused; as many units
	// named again are one unit to the ledger, read.
	distinct, same := make([]string, 1<<16), make([]string, 1<<16)
	for i := range distinct {
		distinct[i], same[i] = strconv.Itoa(i), "USD"
	}
	_, err = decodeWindow(winSectionV5(distinct, nil), winBals, 5)
	require.ErrorContains(t, err, "units", "units past the ledger's table")
	_, err = decodeWindow(winSectionV5(distinct[:1<<16-1], nil), winBals, 5)
	require.NoError(t, err, "as many units as the ledger's table holds")
	_, err = decodeWindow(winSectionV5(same, nil), winBals, 5)
	require.NoError(t, err, "one unit named 1<<16 times")
	// One quote more than the ledger's table holds (1<<20, maxQuotes),
	// each a model's prices: 14 MB.
	many := make([]string, 1<<20+1)
	for i := range many {
		many[i] = `{"model":"m"}`
	}
	_, err = decodeWindow(winSectionV5(units, many), winBals, 5)
	require.ErrorContains(t, err, "price quotes", "quotes past the ledger's table")
}

// winSnapshot is a version 5 snapshot whose JSON line holds winBals and
// the reservations res (JSON), and whose window section is sec.
func winSnapshot(t *testing.T, res string, sec []byte) []byte {
	bals, err := json.Marshal([]map[string]any{{"key": winBals[0].Key, "ref": winBals[0].Ref}})
	require.NoError(t, err)
	line := fmt.Sprintf(`{"version":5,"seq":9,"lanes":1,"balances":%s,"reservations":%s,"window_size":%d}`, bals, res, len(sec))
	body := append([]byte(line+"\n"), sec...)
	sum := sha256.Sum256(body)
	h := fmt.Sprintf(`{"format":"spendgate.snapshot","version":5,"seq":9,"size":%d,"sha256":"%x"}`, len(body), sum)
	return append([]byte(h+"\n"), body...)
}

// TestDecodeSnapParts_ReservationInBookAndWindow: a reservation the JSON
// line holds (an open one) and the window section holds too is refused,
// as the ledger's loader refuses it (a replica would hold two states of
// one reservation); a window entry of another id is read. How it can
// fail: the decoder does not compare the window's ids with the book's,
// and reads the snapshot.
func TestDecodeSnapParts_ReservationInBookAndWindow(t *testing.T) {
	sec := winSectionV5([]string{"USD"}, nil, append(winCompact(1, "req-1"), 0))
	_, _, err := decodeSnapParts(winSnapshot(t, `[{"id":"other","status":"open"}]`, sec))
	require.NoError(t, err)
	_, _, err = decodeSnapParts(winSnapshot(t, `[{"id":"rsv_00000000-0000-0000-0000-000000000001","status":"open"}]`, sec))
	require.ErrorContains(t, err, "twice")
	full := winSectionV5([]string{"USD"}, nil, winFull(`{"id":"other","request_id":"r","status":"settled"}`))
	_, _, err = decodeSnapParts(winSnapshot(t, `[{"id":"other","status":"open"}]`, full))
	require.ErrorContains(t, err, "twice", "in full form")
}
