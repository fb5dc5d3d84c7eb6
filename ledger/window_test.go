package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestWindow_Model drives the window with random closes, forgets and
// take-backs against a plain map model: every lookup, by id and by
// request id, must give back the reservation that went in, field for
// field, and nothing that was forgotten or taken. Ids mix the compact
// shapes (UUIDs, "rsv_" + UUID, with upper-case and malformed look-alikes
// that must not be compacted) with arbitrary text; amounts mix compact
// and huge ones; some reservations hold two balances. How we know it can
// fail: an entry written with one hash and looked up with another (a
// compacted id hashed as text) is not found; a backward shift that skips
// a slot loses entries; a materialized amount "0.20" read back as "0.2"
// differs as text.
func TestWindow_Model(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	bal := func(i int) *balance {
		ref := events.BalanceRef{Scope: events.Scope(fmt.Sprintf("org:w%d", i)), Period: events.PeriodMonth, Instance: "2026-11"}
		key := streams.BalanceKey(ref)
		if bl := bk.balances[key]; bl != nil {
			return bl
		}
		bl := &balance{key: key, ref: ref, self: []events.BalanceRef{ref}, open: map[string]*Reservation{}}
		bk.balances[key] = bl
		return bl
	}
	ids := func(j int) string {
		switch j % 5 {
		case 0:
			return "rsv_" + uuid.NewString()
		case 1:
			return uuid.NewString()
		case 2:
			return "RSV_" + uuid.NewString()
		case 3:
			u := []byte(uuid.NewString())
			u[0] = 'G'
			return string(u)
		}
		return fmt.Sprintf("id-%d", j)
	}
	amounts := []string{"0.20", "0.2", "1", "0", "123456789012345678.000000000001", "7e3"}
	type entry struct {
		r     *Reservation
		which int
		at    time.Time
	}
	model := map[string]entry{}
	reqs := map[string]string{}
	now := bookT0
	for step := 0; step < 20_000; step++ {
		now = now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		switch op := rng.IntN(10); {
		case op < 7:
			b1 := bal(rng.IntN(4))
			amt, _ := new(events.Money), 0
			*amt = events.MustMoney(map[bool]string{true: "0.25", false: "1"}[rng.IntN(2) == 0])
			a := amounts[rng.IntN(len(amounts))]
			if a == "7e3" {
				a = "7000"
			}
			r := &Reservation{ID: ids(rng.IntN(1 << 30)), RequestID: ids(rng.IntN(1 << 30)), RequestHash: fmt.Sprintf("%032x", rng.Uint64()),
				Balances: b1.self, Parts: []Part{{Key: b1.key, Unit: "USD", Amount: events.MustMoney(a), Actual: *amt}},
				OpenedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Minute), Status: events.StatusSettled, Late: rng.IntN(3) == 0}
			if rng.IntN(5) == 0 {
				b2 := bal(4 + rng.IntN(2))
				r.Balances = []events.BalanceRef{b1.ref, b2.ref}
				r.Parts = append(r.Parts, Part{Key: b2.key, Unit: "requests", Amount: events.MoneyFromInt(1)})
			}
			if rng.IntN(7) == 0 {
				r.RequestHash = "short"
			}
			which := winClosed
			if rng.IntN(4) == 0 {
				which, r.Status = winExpired, events.StatusExpired
			}
			if old, ok := reqs[r.RequestID]; ok {
				delete(model, old)
			}
			bk.win.add(which, r, bk.windowBalance(r), now)
			model[r.ID] = entry{r, which, now}
			reqs[r.RequestID] = r.ID
		case op < 8 && len(model) > 0:
			for id := range model {
				_, h, ok := bk.win.get(id, false)
				require.True(t, ok)
				got := bk.win.take(h)
				require.Equal(t, model[id].r.ID, got.ID)
				delete(reqs, got.RequestID)
				delete(model, id)
				break
			}
		default:
			before := now.Add(-time.Duration(rng.IntN(600)) * time.Second)
			which := rng.IntN(2)
			bk.win.forget(which, before)
			for id, e := range model {
				if e.which == which && e.at.Before(before) {
					delete(model, id)
					if reqs[e.r.RequestID] == id {
						delete(reqs, e.r.RequestID)
					}
				}
			}
		}
		if step%500 == 0 || step == 19_999 {
			require.Equal(t, len(model), bk.win.len(), "step %d", step)
			for id, e := range model {
				got, ok := bk.get(id)
				require.True(t, ok, "step %d: %s", step, id)
				require.Equal(t, fmt.Sprintf("%+v", *e.r), fmt.Sprintf("%+v", *got), "step %d", step)
			}
			for rid, id := range reqs {
				got, ok := bk.byRequest(rid)
				require.True(t, ok, "step %d: request %s", step, rid)
				require.Equal(t, id, got.ID)
			}
		}
	}
}

// TestCompactID: canonical UUIDs (bare or after "rsv_") compact and come
// back as the same text; anything else does not compact.
func TestCompactID(t *testing.T) {
	for _, s := range []string{uuid.NewString(), "rsv_" + uuid.NewString(), "00000000-0000-0000-0000-000000000000"} {
		b, kind, ok := compactID(s)
		require.True(t, ok, s)
		require.Equal(t, s, idText(b, kind))
	}
	for _, s := range []string{"", "rsv_", "x", "A0000000-0000-0000-0000-000000000000", "000000000000-0000-0000-0000-00000000",
		"rsv-00000000-0000-0000-0000-000000000000", "{00000000-0000-0000-0000-000000000000}", "urn:uuid:00000000-0000-0000-0000-00",
		// A dash where a digit belongs (it once read past the end).
		"00000000-0000-0000-0000-0000000000-0", "00000000-0000-0000-0000--00000000000", "00000000-0000-0000-0000-00000-000000"} {
		_, _, ok := compactID(s)
		require.False(t, ok, s)
	}
}
