package projector

import (
	"encoding/binary"
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
	qs, err := decodeWindow(winSection(winCompact(1, "req-1"), winCompact(2, "req-2")), winBals)
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
		_, err := decodeWindow(good[:n], winBals)
		require.Error(t, err, "truncated to %d bytes", n)
	}
}

// FuzzDecodeWindow: the auditor's window decoder never panics on any
// section. Run it with
//
//	go test -run '^$' -fuzz FuzzDecodeWindow -fuzztime 30s ./projector/
func FuzzDecodeWindow(f *testing.F) {
	f.Add(winSection(winCompact(1, "req-1"), winCompact(2, "req-2")))
	f.Add(winSection([]byte{0, 2, 2, '{', '}'}))
	f.Fuzz(func(t *testing.T, sec []byte) {
		decodeWindow(sec, winBals)
	})
}
