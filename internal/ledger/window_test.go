package ledger

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
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
// differs as text. With the hashes narrowed to 6 bits (narrow), most
// probes meet slots whose fingerprint equals the key's but whose key does
// not, and runs are long: a probe that trusted the fingerprint alone would
// return the wrong reservation, and one that stopped at it would miss.
func TestWindow_Model(t *testing.T) {
	t.Parallel() // its own server or none; see main_test.go
	t.Run("full hash", func(t *testing.T) { testWindowModel(t, ^uint64(0)) })
	t.Run("narrow", func(t *testing.T) { testWindowModel(t, 0x3f) })
}

func testWindowModel(t *testing.T, hashMask uint64) {
	rng := rand.New(rand.NewPCG(1, 2))
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	bk.win.hashMask = hashMask
	var usedReqs []string
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
	cached := events.MustMoney("0.125")
	quotes := []events.PriceQuote{
		{Model: "gpt-x", Version: 7, Unit: "USD", Input: events.MustMoney("2.5"), Output: events.MustMoney("10"), CachedInput: &cached},
		{Model: "gpt-x", Version: 9, Unit: "USD", Input: events.MustMoney("2"), Output: events.MustMoney("8")},
		{Model: "claude", Version: 3, Unit: "EUR", Input: events.MustMoney("3"), Output: events.MustMoney("15")},
	}
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
			rid := ids(rng.IntN(1 << 30))
			if len(usedReqs) > 0 && rng.IntN(8) == 0 {
				rid = usedReqs[rng.IntN(len(usedReqs))] // a request id reused: the newer reservation wins
			} else if len(usedReqs) < 512 {
				usedReqs = append(usedReqs, rid)
			} else {
				usedReqs[rng.IntN(len(usedReqs))] = rid
			}
			r := &Reservation{ID: ids(rng.IntN(1 << 30)), RequestID: rid, RequestHash: fmt.Sprintf("%032x", rng.Uint64()),
				Balances: b1.self, Parts: []Part{{Key: b1.key, Unit: "USD", Amount: events.MustMoney(a), Actual: *amt}},
				OpenedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Minute), Status: events.StatusSettled, Late: rng.IntN(3) == 0}
			if rng.IntN(5) == 0 {
				b2 := bal(4 + rng.IntN(2))
				r.Balances = []events.BalanceRef{b1.ref, b2.ref}
				r.Parts = append(r.Parts, Part{Key: b2.key, Unit: "requests", Amount: events.MoneyFromInt(1)})
				if rng.IntN(3) == 0 {
					b3 := bal(6)
					r.Balances = append(r.Balances, b3.ref)
					r.Parts = append(r.Parts, Part{Key: b3.key, Unit: "USD", Amount: events.MustMoney(a), Actual: *amt})
				}
			}
			if rng.IntN(4) == 0 {
				q := quotes[rng.IntN(len(quotes))]
				q.InputTokens, q.MaxOutputTokens = rng.Int64N(events.MaxTokens+1), rng.Int64N(events.MaxTokens+1)
				r.Pricing = &q
			}
			if rng.IntN(40) == 0 {
				// A part with a ceiling: kept whole.
				c := events.MustMoney("3")
				r.Parts[0].Ceiling = &c
			}
			if rng.IntN(7) == 0 {
				r.RequestHash = "short"
			}
			which := winClosed
			if rng.IntN(4) == 0 {
				which, r.Status = winExpired, events.StatusExpired
			}
			// A reused request id now names r; the reservation it named
			// before is still found by its own id.
			bk.win.add(which, r, bk.balances, now)
			model[r.ID] = entry{r, which, now}
			reqs[r.RequestID] = r.ID
		case op < 8 && len(model) > 0:
			for id := range model {
				_, h, ok := bk.win.get(id, false)
				require.True(t, ok)
				got := bk.win.take(h)
				require.Equal(t, model[id].r.ID, got.ID)
				if reqs[got.RequestID] == id {
					delete(reqs, got.RequestID)
				}
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
				require.Equal(t, reservationText(e.r), reservationText(got), "step %d", step)
			}
			for rid, id := range reqs {
				got, ok := bk.byRequest(rid)
				require.True(t, ok, "step %d: request %s", step, rid)
				require.Equal(t, id, got.ID)
			}
		}
	}
}

// reservationText is r's fields as text, its price quote's included.
func reservationText(r *Reservation) string {
	c := *r
	c.Pricing = nil
	q, _ := json.Marshal(r.Pricing)
	parts := make([]string, len(c.Parts))
	for i, p := range c.Parts {
		parts[i] = fmt.Sprintf("%s %s %s %s %v", p.Key, p.Unit, p.Amount, p.Actual, p.Ceiling)
	}
	c.Parts = nil
	return fmt.Sprintf("%+v parts=%q pricing=%s", c, parts, q)
}

// TestWindow_CompactSeveralBalancesAndPriced: a reservation held in several
// balances and priced from a model, what an LLM gateway's admits make, is
// kept compact (its other parts and its quote beside the entry, the
// quote's prices once in the window's table), not whole, and comes back
// the same; one with a ceiling is kept whole. How it can fail: such a
// reservation kept whole again (ext.res set) costs about 1 KB in the window
// and a JSON entry in every snapshot.
func TestWindow_CompactSeveralBalancesAndPriced(t *testing.T) {
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	var bals []*balance
	for i, scope := range []string{"key:k1", "team:t1", "user:u1"} {
		ref := events.BalanceRef{Scope: events.Scope(scope), Period: events.PeriodMonth, Instance: "2026-11"}
		if i == 2 {
			ref.Period, ref.Instance = events.PeriodDay, "2026-11-30"
		}
		bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, open: map[string]*Reservation{}}
		bk.balances[bl.key] = bl
		bals = append(bals, bl)
	}
	q := events.PriceQuote{Model: "gpt-x", Version: 12, Unit: "USD", Input: events.MustMoney("2.5"), Output: events.MustMoney("10"),
		InputTokens: 1800, MaxOutputTokens: 1024}
	mk := func(i int) *Reservation {
		r := &Reservation{ID: "rsv_" + uuid.NewString(), RequestID: uuid.NewString(), RequestHash: fmt.Sprintf("%032x", i),
			OpenedAt: bookT0, ExpiresAt: bookT0.Add(time.Minute), Status: events.StatusSettled, Pricing: new(q)}
		r.Pricing.InputTokens += int64(i)
		for _, bl := range bals {
			r.Balances = append(r.Balances, bl.ref)
			r.Parts = append(r.Parts, Part{Key: bl.key, Unit: "USD", Amount: events.MustMoney("0.01474"), Actual: events.MustMoney("0.0061")})
		}
		return r
	}
	var rs []*Reservation
	for i := range 3 {
		r := mk(i)
		rs = append(rs, r)
		bk.win.add(winClosed, r, bk.balances, bookT0)
	}
	withCeiling := mk(3)
	c := events.MustMoney("0.02")
	withCeiling.Parts[1].Ceiling = &c
	bk.win.add(winClosed, withCeiling, bk.balances, bookT0)

	require.Len(t, bk.win.quotes, 1, "one model and version: its prices once")
	for i, r := range rs {
		_, h, ok := bk.win.get(r.ID, false)
		require.True(t, ok)
		e := bk.win.entry(h)
		require.True(t, e.ext != nil && e.ext.res == nil && e.ext.more != nil, "reservation %d kept compact", i)
		require.Len(t, e.ext.more.parts, 2)
		got, ok := bk.get(r.ID)
		require.True(t, ok)
		require.Equal(t, reservationText(r), reservationText(got))
	}
	_, h, ok := bk.win.get(withCeiling.ID, false)
	require.True(t, ok)
	require.Same(t, withCeiling, bk.win.entry(h).ext.res, "a part with a ceiling: kept whole")

	// A version 5 snapshot writes them compact and loads them compact,
	// into the same book; version 4 writes them whole, as JSON.
	v5, data5 := roundTrip(t, bk, 1, 5)
	require.Equal(t, bookView(bk), bookView(v5))
	_, data4 := roundTrip(t, bk, 1, 4)
	require.Less(t, len(data5), len(data4)-3*400, "three entries' JSON not written")
	for i, r := range rs {
		_, h, ok := v5.win.get(r.ID, false)
		require.True(t, ok)
		e := v5.win.entry(h)
		require.True(t, e.ext != nil && e.ext.res == nil && e.ext.more != nil, "reservation %d loaded compact", i)
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

// BenchmarkWindow_Lookup looks up request ids in a window of N closed
// reservations (default 500,000; SPENDGATE_WINDOW=N for another size), as
// every admit does before it reserves: "miss" with fresh ids (the common
// case, a new request), "hit" with ids the window holds (a retry), and
// "close" adds one closed reservation and forgets the oldest (the
// follower's work per close). Request ids are UUIDs (as the Go client
// makes them) or free text (as the bench's callers send them). Run it with
//
//	go test -run '^$' -bench BenchmarkWindow_Lookup ./internal/ledger/
func BenchmarkWindow_Lookup(b *testing.B) {
	n := 500_000
	if v, err := strconv.Atoi(os.Getenv("SPENDGATE_WINDOW")); err == nil && v > 0 {
		n = v
	}
	for _, shape := range []string{"uuid", "text"} {
		reqID := func(j int) string {
			if shape == "uuid" {
				return uuid.NewString()
			}
			return fmt.Sprintf("0a1b2c3d-hot64-3-c-%d-%d", j%64, j)
		}
		bk := newBook(streams.Default(), time.Hour, time.Hour)
		ref := events.BalanceRef{Scope: "org:w", Period: events.PeriodMonth, Instance: "2026-11"}
		bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, unit: "USD", open: map[string]*Reservation{}}
		bk.balances[bl.key] = bl
		held := make([]string, 0, n)
		closeOne := func(j int) {
			at := bookT0.Add(time.Duration(j) * time.Microsecond)
			r := &Reservation{ID: "rsv_" + uuid.NewString(), RequestID: reqID(j), RequestHash: fmt.Sprintf("%032x", j),
				Balances: bl.self, Parts: []Part{{Key: bl.key, Unit: "USD", Amount: events.MustMoney("0.25"), Actual: events.MustMoney("0.2")}},
				OpenedAt: at, ExpiresAt: at.Add(time.Hour), Status: events.StatusSettled}
			bk.win.add(winClosed, r, bk.balances, at)
			if len(held) < cap(held) {
				held = append(held, r.RequestID)
			}
		}
		for j := 0; j < n; j++ {
			closeOne(j)
		}
		fresh := make([]string, 4096)
		for i := range fresh {
			fresh[i] = reqID(n + 1_000_000 + i)
		}
		b.Run(shape+"/miss", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, _, ok := bk.win.get(fresh[i%len(fresh)], true); ok {
					b.Fatal("a fresh id was found")
				}
			}
		})
		b.Run(shape+"/hit", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, _, ok := bk.win.get(held[(i*7919)%len(held)], true); !ok {
					b.Fatal("a held id was not found")
				}
			}
		})
		j := n // the next close's index, across the sub-benchmark's runs
		b.Run(shape+"/close", func(b *testing.B) {
			for b.Loop() {
				closeOne(j)
				bk.win.forget(winClosed, bookT0.Add(time.Duration(j-n+1)*time.Microsecond))
				j++
			}
		})
	}
}

// BenchmarkWindow_Grow adds closed reservations to a window that only
// grows, as a replica's does for the first day after a start (nothing is
// old enough to forget): the ring's growth is paid there. Run it with
//
//	go test -run '^$' -bench BenchmarkWindow_Grow ./internal/ledger/
func BenchmarkWindow_Grow(b *testing.B) {
	bk := newBook(streams.Default(), time.Hour, time.Hour)
	ref := events.BalanceRef{Scope: "org:w", Period: events.PeriodMonth, Instance: "2026-11"}
	bl := &balance{key: streams.BalanceKey(ref), ref: ref, self: []events.BalanceRef{ref}, unit: "USD", open: map[string]*Reservation{}}
	bk.balances[bl.key] = bl
	rs := make([]*Reservation, 4096)
	for i := range rs {
		at := bookT0.Add(time.Duration(i) * time.Microsecond)
		rs[i] = &Reservation{RequestHash: fmt.Sprintf("%032x", i), Balances: bl.self,
			Parts:    []Part{{Key: bl.key, Unit: "USD", Amount: events.MustMoney("0.25"), Actual: events.MustMoney("0.2")}},
			OpenedAt: at, ExpiresAt: at.Add(time.Hour), Status: events.StatusSettled}
	}
	for i := 0; b.Loop(); i++ {
		r := rs[i%len(rs)]
		r.ID, r.RequestID = "rsv_"+strconv.Itoa(i), "req-"+strconv.Itoa(i)
		bk.win.add(winClosed, r, bk.balances, r.OpenedAt)
	}
}

// TestWindow_IndexBatchIsAddOneByOne: a snapshot's entries are pushed to
// their rings and indexed in batches sorted by home slot (window.index),
// where the fold adds them one by one (window.add). The two must find the
// same reservation for every id and request id: a request id reused names
// the later entry, within one batch, across batches and across the two
// rings; and an id already indexed (by an earlier batch or the same one)
// must be refused. With the hash narrowed to 6 bits every key collides
// with many others, so probe runs wrap around the table. How it can fail:
// an unstable sort (an earlier entry of a reused request id sorted after
// the later one wins the slot), a duplicate id placed beside the first
// instead of refused, or a probe that stops at the first matching
// fingerprint of another key.
func TestWindow_IndexBatchIsAddOneByOne(t *testing.T) {
	for _, mask := range []uint64{^uint64(0), 0x3f} {
		t.Run(fmt.Sprintf("mask %#x", mask), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			one, batch := newWindow(), newWindow()
			one.hashMask, batch.hashMask = mask, mask
			bal := &balance{key: streams.BalanceKey(bookBal), ref: bookBal, self: []events.BalanceRef{bookBal}, open: map[string]*Reservation{}}
			bals := map[string]*balance{bal.key: bal}
			var reqs, ids []string
			var pending []uint32
			for j := 0; j < 5000; j++ {
				req := uuid.NewString()
				if j%3 == 0 {
					req = fmt.Sprintf("req-%d", j) // not compact
				}
				if len(reqs) > 0 && rng.IntN(4) == 0 {
					req = reqs[rng.IntN(len(reqs))]
				}
				reqs = append(reqs, req)
				id := "rsv_" + uuid.NewString()
				if j%5 == 0 {
					id = fmt.Sprintf("id-%d", j)
				}
				ids = append(ids, id)
				r := &Reservation{ID: id, RequestID: req, RequestHash: fmt.Sprintf("%032x", j), Balances: bal.self,
					Parts:    []Part{{Key: bal.key, Unit: "USD", Amount: events.MustMoney("0.25")}},
					OpenedAt: bookT0, ExpiresAt: bookT0.Add(time.Minute), Status: events.StatusSettled}
				which := winClosed
				if j >= 4000 {
					which, r.Status = winExpired, events.StatusExpired
				}
				at := bookT0.Add(time.Duration(j) * time.Millisecond)
				one.add(which, r, bals, at)
				e := batch.compact(r, bals)
				e.at = at.UnixNano()
				pending = append(pending, batch.pushEntry(which, &e))
				if rng.IntN(700) == 0 || j == 4999 {
					_, ok := batch.index(pending)
					require.True(t, ok, "entry %d", j)
					pending = pending[:0]
				}
			}
			require.Equal(t, one.len(), batch.len())
			require.Equal(t, one.byReq.n, batch.byReq.n)
			for _, id := range ids {
				r1, _, ok1 := one.get(id, false)
				r2, _, ok2 := batch.get(id, false)
				require.True(t, ok1 && ok2, id)
				require.Equal(t, r1.ID, r2.ID)
			}
			for _, req := range reqs {
				r1, _, ok1 := one.get(req, true)
				r2, _, ok2 := batch.get(req, true)
				require.True(t, ok1 && ok2, req)
				require.Equal(t, r1.ID, r2.ID, "request %s", req)
			}
			// An id indexed already, by an earlier batch or the same one,
			// is refused and named.
			fresh := "rsv_" + uuid.NewString()
			for _, twice := range [][]string{{ids[10]}, {fresh, fresh}} {
				var hs []uint32
				for _, id := range twice {
					r := &Reservation{ID: id, RequestID: uuid.NewString(), RequestHash: "h", Balances: bal.self,
						Parts: []Part{{Key: bal.key, Unit: "USD", Amount: events.MustMoney("1")}}, Status: events.StatusSettled}
					e := batch.compact(r, bals)
					hs = append(hs, batch.pushEntry(winClosed, &e))
				}
				h, ok := batch.index(hs)
				require.False(t, ok, "id %s", twice[0])
				require.Equal(t, twice[0], batch.entry(h).idText())
			}
		})
	}
}
