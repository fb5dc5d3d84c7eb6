package codec_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/soak"
)

// strictLane is the slow way the projector reads a lane revision: the
// strict decoder (unknown fields refused, nothing after the object), then
// the upcaster.
func strictLane(data []byte) (events.LaneRevision, error) {
	var rev events.LaneRevision
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&rev); err != nil {
		return rev, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return rev, errors.New("data after the revision")
	}
	return rev, events.UpcastLane(&rev)
}

// requireSameAsSlow checks that when the canonical reader takes data, both
// slow decoders take it too, with the same revision and the same verdict.
func requireSameAsSlow(t testing.TB, data []byte) (taken bool) {
	fast, ok, ferr := codec.DecodeCanonicalLane(data)
	if !ok {
		return false
	}
	slow, serr := strictLane(data)
	if (ferr == nil) != (serr == nil) {
		t.Fatalf("canonical reader says %v, strict decoder %v, for %s", ferr, serr, data)
	}
	if ferr != nil {
		return true
	}
	require.Equal(t, slow, fast, "canonical reader and strict decoder differ for %s", data)
	loose, lerr := codec.DecodeLane(data)
	require.NoError(t, lerr)
	require.Equal(t, slow, loose)
	public, perr := events.DecodeLaneRevision(data)
	require.NoError(t, perr)
	require.Equal(t, slow, public)
	return true
}

// randomLane is a lane revision as the ledger could write it: one to four
// balances, each with one to six events of the kinds a lane carries, with
// and without the optional fields.
func randomLane(r *rand.Rand) events.LaneRevision {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).Add(time.Duration(r.Int64N(int64(time.Hour))))
	money := func() events.Money {
		return events.MustMoney(fmt.Sprintf("%d.%0*d", r.IntN(1000), 1+r.IntN(9), r.IntN(1000)))
	}
	ref := func(i int) events.BalanceRef {
		b := events.BalanceRef{Scope: events.Scope(fmt.Sprintf("team:t-%d", i)), Period: events.PeriodDay, Instance: "2026-11-30"}
		if r.IntN(4) == 0 {
			b.Unit = "tokens"
		}
		return b
	}
	rev := events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: r.Uint64N(1 << 40), PrevHash: events.HashPayload([]byte{byte(r.IntN(256))})}}
	if r.IntN(5) == 0 {
		rev.Schema, rev.Chain = events.SchemaLaneV1, events.Chain{}
	}
	for b := range 1 + r.IntN(4) {
		br := events.BalanceRevision{Schema: events.SchemaBalance, Balance: ref(b), Unit: "USD", Limit: money(),
			Spent: money(), Reserved: money(), Overrun: money(), Open: r.Int64N(100) - 1}
		for e := range 1 + r.IntN(6) {
			id := fmt.Sprintf("rsv_%d_%d", b, e)
			switch r.IntN(4) {
			case 0, 1:
				o := events.ReservationOpened{ReservationID: id, RequestID: fmt.Sprintf("req-ü-%d", e), RequestHash: events.HashPayload([]byte(id)),
					Balance: br.Balance, Amount: money(), Unit: "USD", ExpiresAt: at.Add(time.Minute), At: at}
				if r.IntN(2) == 0 {
					o.Balances = []events.BalanceRef{br.Balance, ref(9)}
				}
				if r.IntN(3) == 0 {
					o.Metadata = map[string]string{"model": "gpt-x", "route": "chat ✓"}
				}
				if r.IntN(3) == 0 {
					o.Pricing = &events.PriceQuote{Model: "gpt-x", Version: 3, Unit: "USD", Input: money(), Output: money(), InputTokens: 1200, MaxOutputTokens: 4000}
					if r.IntN(2) == 0 {
						c := money()
						o.Pricing.CachedInput = &c
					}
				}
				br.Events = append(br.Events, o)
			case 2:
				s := events.ReservationSettled{ReservationID: id, Balance: br.Balance, Reserved: money(), Actual: money(), Overrun: money(),
					Late: r.IntN(3) == 0, AfterExpiry: r.IntN(3) == 0, At: at.Add(time.Second)}
				if r.IntN(3) == 0 {
					s.Usage = &events.Usage{InputTokens: 1200, OutputTokens: 31, CachedInputTokens: int64(r.IntN(2)) * 100, PriceVersion: 3}
				}
				br.Events = append(br.Events, s)
			default:
				br.Events = append(br.Events, events.ReservationReleased{ReservationID: id, Balance: br.Balance, Reserved: money(),
					Reason: events.ReasonExpired, At: at.Add(2 * time.Second)})
			}
		}
		rev.Balances = append(rev.Balances, br)
	}
	return rev
}

// TestCanonicalLane_MatchesSlowDecoders: every revision the ledger's
// encoder writes with the hot event kinds is taken by the canonical reader
// and decodes to what the strict decoder and events.DecodeLaneRevision build. It
// fails if the reader drops or misreads a field (the comparison is of the
// whole decoded revision) or declines what it was written for. 500 random
// revisions (each kind of event, with and without each optional field,
// hundreds of times over); the soak step (soak.Long) runs 2,000.
func TestCanonicalLane_MatchesSlowDecoders(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 500
	if soak.Long() {
		n = 2000
	}
	for i := range n {
		rev := randomLane(r)
		data, err := codec.AppendLane(nil, &rev)
		require.NoError(t, err)
		require.True(t, requireSameAsSlow(t, data), "revision %d declined: %s", i, data)
		fast, _, err := codec.DecodeCanonicalLane(data)
		require.NoError(t, err)
		require.Equal(t, rev.Schema, fast.Schema)
		again, err := codec.AppendLane(nil, &fast)
		require.NoError(t, err)
		require.Equal(t, string(data), string(again))
	}
	// The frozen goldens, v1 and v2.
	for _, name := range []string{events.SchemaLane, events.SchemaLaneV1} {
		require.True(t, requireSameAsSlow(t, goldenFile(t, name+".json")), name)
	}
}

// TestCanonicalLane_Declines: forms the canonical reader does not take go
// the slow way, which keeps its own verdict.
func TestCanonicalLane_Declines(t *testing.T) {
	golden := goldenLaneRevision(t)
	data, err := codec.AppendLane(nil, &golden)
	require.NoError(t, err)
	for name, in := range map[string]string{
		"space":         string(bytes.Replace(data, []byte(`"schema":`), []byte(`"schema": `), 1)),
		"unknown field": string(bytes.Replace(data, []byte(`{"schema":`), []byte(`{"x":1,"schema":`), 1)),
		"upper key":     string(bytes.Replace(data, []byte(`"prev":`), []byte(`"Prev":`), 1)),
		"escape":        string(bytes.Replace(data, []byte(`"req-42"`), []byte(`"req-\u0034\u0032"`), 1)),
		"trailing":      string(data) + " ",
		"empty":         "",
		"no balances":   `{"schema":"lane.v2","prev":1,"prev_hash":"","balances":[]}`,
		"float prev":    string(bytes.Replace(data, []byte(`"prev":41`), []byte(`"prev":41.0`), 1)),
		"lead zero":     string(bytes.Replace(data, []byte(`"prev":41`), []byte(`"prev":041`), 1)),
		"late false":    string(bytes.Replace(data, []byte(`"late":true`), []byte(`"late":false`), 1)),
		"void event":    voidLane(t),
	} {
		_, ok, _ := codec.DecodeCanonicalLane([]byte(in))
		require.False(t, ok, name)
	}
	// Still decoded the slow way where that takes them.
	rev, err := codec.DecodeLane([]byte(voidLane(t)))
	require.NoError(t, err)
	require.IsType(t, events.RequestVoided{}, rev.Balances[0].Events[0])
}

func voidLane(t testing.TB) string {
	rev := goldenLaneRevision(t)
	rev.Balances = rev.Balances[:1]
	rev.Balances[0].Events = events.Events{goldenEvent(t, events.TypeRequestVoided)}
	data, err := codec.AppendLane(nil, &rev)
	require.NoError(t, err)
	return string(data)
}

// FuzzCanonicalLane: whatever the canonical reader takes, the strict
// decoder takes too, with the same revision.
func FuzzCanonicalLane(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		rev := randomLane(r)
		data, err := codec.AppendLane(nil, &rev)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		requireSameAsSlow(t, data)
	})
}

func BenchmarkDecodeLaneRevision(b *testing.B) {
	rev := events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: 41, PrevHash: events.HashPayload(nil)},
		Balances: []events.BalanceRevision{groupCommitRevision(b)}}
	data, err := codec.AppendLane(nil, &rev)
	require.NoError(b, err)
	b.Run("canonical", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := codec.DecodeCanonicalLane(data); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := strictLane(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
