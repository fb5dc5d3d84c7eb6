package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestSnapshot_CostlyWindowWaitsForDigest: a snapshot whose window
// section's entries cost more memory than a genuine one's (a genuine
// header replayed over a forged body of its size, packed with the
// shortest entries) fails its digest before most of the section is
// decoded; a body of genuine entries, UUID request ids or short texts, is
// decoded as it arrives, its digest checked after; and a costly body
// whose digest is right loads whole. How it can fail: without the bound,
// every forged entry was decoded first: 200,000 of them allocated 8.2x
// the body's bytes (the bound below is 3x), and bookFromSnapshot returned
// no error (the digest is checked afterwards).
func TestSnapshot_CostlyWindowWaitsForDigest(t *testing.T) {
	const n = 200_000
	// snapshot is that of a window of n entries, its header's digest not
	// its body's unless genuine. ids: "uuid" as the replicas write them,
	// "text" with request ids that are texts of 10 bytes, "short" with
	// every id a short text and no request hash, the densest form.
	snapshot := func(ids string, genuine bool) []byte {
		bk := newBook(streams.Default(), 24*time.Hour, time.Hour)
		ref := events.BalanceRef{Scope: "team:a", Period: events.PeriodMonth, Instance: "2026-11"}
		bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, open: map[string]*Reservation{}}
		bk.balances[bl.key] = bl
		for i := range n {
			r := &Reservation{ID: "rsv_" + uuid.NewString(), RequestID: uuid.NewString(), RequestHash: fmt.Sprintf("%032x", i),
				OpenedAt: bookT0, ExpiresAt: bookT0.Add(time.Minute), Status: events.StatusSettled,
				Balances: bl.self, Parts: []Part{{Key: bl.key, Unit: "USD", Amount: events.MustMoney("0.01"), Actual: events.MustMoney("0.005")}}}
			switch ids {
			case "text":
				r.RequestID = fmt.Sprintf("req_%06d", i)
			case "short":
				r.ID, r.RequestID, r.RequestHash = fmt.Sprintf("%x", i), fmt.Sprintf("%x", i), ""
			}
			bk.win.add(winClosed, r, bk.balances, bookT0.Add(time.Duration(i)))
		}
		_, data := roundTrip(t, bk, 1, 5)
		if genuine {
			return data
		}
		hl := 0
		for data[hl] != '\n' {
			hl++
		}
		var h snapshotHeader
		require.NoError(t, json.Unmarshal(data[:hl], &h))
		sum := sha256.Sum256([]byte(h.SHA256))
		h.SHA256 = hex.EncodeToString(sum[:])
		line, err := json.Marshal(h)
		require.NoError(t, err)
		return append(line, data[hl:]...)
	}
	load := func(data []byte, genuine bool) (alloc uint64, err error) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		st, h, ahead, err := decodeSnapshotAhead(wholeObject(data), nil)
		require.NoError(t, err)
		_, err = bookFromSnapshot(streams.Default(), 24*time.Hour, time.Hour, st)
		runtime.ReadMemStats(&m1)
		if genuine {
			require.NoError(t, ahead.check(h))
		} else {
			require.ErrorContains(t, ahead.check(h), "digest mismatch")
		}
		return m1.TotalAlloc - m0.TotalAlloc, err
	}

	dense := snapshot("short", false)
	alloc, err := load(dense, false)
	require.ErrorIs(t, err, ErrSnapshotInvalid)
	require.ErrorContains(t, err, "digest mismatch")
	t.Logf("short ids: %d entries in %d bytes, %d allocated before the digest failed (%.1fx)", n, len(dense), alloc, float64(alloc)/float64(len(dense)))
	require.Less(t, alloc, 3*uint64(len(dense)))

	for _, ids := range []string{"uuid", "text"} {
		data := snapshot(ids, false)
		alloc, err = load(data, false)
		require.NoError(t, err, "%s ids are decoded as they arrive", ids)
		t.Logf("%s ids: %d entries in %d bytes, %d allocated (%.1fx)", ids, n, len(data), alloc, float64(alloc)/float64(len(data)))
	}

	_, err = load(snapshot("short", true), true)
	require.NoError(t, err, "a costly body whose digest is right loads")
}
