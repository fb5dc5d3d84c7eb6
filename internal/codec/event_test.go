package codec_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
)

// reflectEncode is encoding/json over the event embedded next to its type.
// The hand-written encoder must match it byte for byte.
func reflectEncode(t *testing.T, e events.Event) []byte {
	t.Helper()
	var v any
	switch e := e.(type) {
	case events.BudgetDefined:
		v = struct {
			Type events.Type `json:"type"`
			events.BudgetDefined
		}{e.EventType(), e}
	case events.ReservationOpened:
		v = struct {
			Type events.Type `json:"type"`
			events.ReservationOpened
		}{e.EventType(), e}
	case events.ReservationSettled:
		v = struct {
			Type events.Type `json:"type"`
			events.ReservationSettled
		}{e.EventType(), e}
	case events.ReservationReleased:
		v = struct {
			Type events.Type `json:"type"`
			events.ReservationReleased
		}{e.EventType(), e}
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestAppend_MatchesEncodingJSON: for awkward strings (HTML characters,
// control characters, U+2028, invalid UTF-8, non-ASCII), odd times and
// empty or nil collections, the append encoder writes what encoding/json
// writes.
func TestAppend_MatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "plain", `quote" back\slash`, "<script>&amp;", "tab\tnl\ncr\r\x00\x1f\x7f",
		"line\u2028para\u2029", "bad\xffutf8\xc3", "été 日本 🙂", "\b\f"}
	times := []time.Time{
		time.Date(2026, 11, 30, 12, 34, 56, 123456789, time.UTC),
		time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 30, 23, 59, 59, 100, time.FixedZone("x", -5*3600)),
		{},
	}
	ref := events.BalanceRef{Scope: "org:acme", Period: events.PeriodDay, Instance: "2026-11-30"}
	n := 0
	for i, s := range strs {
		at := times[i%len(times)]
		meta := map[string]string{"k": s, "z<": s + "x", "a": ""}
		if i%3 == 0 {
			meta = nil
		}
		var balances []events.BalanceRef
		if i%2 == 0 {
			balances = []events.BalanceRef{ref, {Scope: "user:u", Period: events.PeriodMonth, Instance: "2026-11"}}
		} else if i%3 == 1 {
			balances = []events.BalanceRef{}
		}
		evs := []events.Event{
			events.BudgetDefined{Budget: events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}, Limit: events.MustMoney("100.50"), Unit: s, At: at},
			events.ReservationOpened{ReservationID: "rsv_" + s, RequestID: s, RequestHash: "h", Balance: ref,
				Amount: events.MustMoney("0.000000001"), Unit: "USD", Balances: balances, ExpiresAt: at.Add(time.Minute), At: at, Metadata: meta},
			events.ReservationSettled{ReservationID: s, Balance: ref, Reserved: events.MustMoney("1"), Actual: events.MustMoney("1000000"),
				Overrun: events.MustMoney("999999"), Late: i%2 == 0, AfterExpiry: i%3 == 0, At: at},
			events.ReservationReleased{ReservationID: s, Balance: ref, Reserved: events.Zero, Reason: s, At: at},
		}
		for _, e := range evs {
			got, err := codec.AppendEvent(nil, e)
			require.NoError(t, err)
			require.Equal(t, string(reflectEncode(t, e)), string(got), "event %T with %q", e, s)
			n++
		}
		rev := events.BalanceRevision{Schema: events.SchemaBalance, Balance: ref, Unit: s, Limit: events.MustMoney("5"),
			Spent: events.MustMoney("1.5"), Reserved: events.Zero, Overrun: events.MustMoney("0.1").Sub(events.MustMoney("0.2")),
			Open: int64(i) - 3, Events: evs}
		if i == 0 {
			rev.Events = nil
		}
		want, err := json.Marshal(&rev)
		require.NoError(t, err)
		got, err := codec.AppendBalance(nil, &rev)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), fmt.Sprintf("revision %d", i))
	}
	require.Equal(t, len(strs)*4, n)
}

func BenchmarkAppendEventOpened(b *testing.B) {
	e := goldenEvent(b, events.TypeReservationOpened)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = codec.AppendEvent(buf[:0], e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendBalance: a group commit's balance revision, as the
// committer writes it (into a reused buffer).
func BenchmarkAppendBalance(b *testing.B) {
	rev := groupCommitRevision(b)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = codec.AppendBalance(buf[:0], &rev); err != nil {
			b.Fatal(err)
		}
	}
}
