package ledger

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestWindow_CompactOnlyWhatASnapshotLoads: the window keeps compact only
// reservations its version 5 snapshot writes in a form the loader takes
// back. An admit of 8 scopes, each with a money and a count budget in
// every period, holds 96 balances (more than the 64 more parts a compact
// entry may name); a quote with no model, or token counts outside
// 0..events.MaxTokens, is not one loadWindow accepts. Kept compact, such
// an entry made every snapshot written while it was in the window one that
// no replica loads.
func TestWindow_CompactOnlyWhatASnapshotLoads(t *testing.T) {
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	var bals []*balance
	for s := 0; s < events.MaxScopes; s++ {
		for _, p := range events.Periods {
			for _, unit := range []string{"", "requests"} {
				ref := events.BalanceRef{Scope: events.Scope(fmt.Sprintf("team:t%d", s)), Period: p, Instance: "2026-11", Unit: unit}
				bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, open: map[string]*Reservation{}}
				bk.balances[bl.key] = bl
				bals = append(bals, bl)
			}
		}
	}
	sort.Slice(bals, func(i, j int) bool { return bals[i].key < bals[j].key })
	mk := func(n int, q *events.PriceQuote) *Reservation {
		r := &Reservation{ID: "rsv_" + uuid.NewString(), RequestID: uuid.NewString(), RequestHash: fmt.Sprintf("%032x", n),
			OpenedAt: bookT0, ExpiresAt: bookT0.Add(time.Minute), Status: events.StatusSettled, Pricing: q}
		for _, bl := range bals[:n] {
			r.Balances = append(r.Balances, bl.ref)
			r.Parts = append(r.Parts, Part{Key: bl.key, Unit: "USD", Amount: events.MustMoney("0.01"), Actual: events.MustMoney("0.005")})
		}
		return r
	}
	priced := func(model string, in, out int64) *events.PriceQuote {
		return &events.PriceQuote{Model: model, Version: 1, Unit: "USD", Input: events.MustMoney("1"), Output: events.MustMoney("2"),
			InputTokens: in, MaxOutputTokens: out}
	}
	rs := []*Reservation{
		mk(len(bals), nil),
		mk(1, priced("", 10, 10)),
		mk(2, priced("m", -1, 10)),
		mk(3, priced("m", 10, events.MaxTokens+1)),
		mk(3, priced("m", 10, events.MaxTokens)), // compact: it loads
	}
	require.Greater(t, len(bals), 1+maxMoreParts)
	for _, r := range rs {
		bk.win.add(winClosed, r, bk.balances, bookT0)
	}
	got, _ := roundTrip(t, bk, 1, 5)
	require.Equal(t, bookView(bk), bookView(got))
	for _, r := range rs {
		g, ok := got.get(r.ID)
		require.True(t, ok)
		require.Equal(t, reservationText(r), reservationText(g))
	}
}
