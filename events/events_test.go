package events_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// update rewrites the golden files in testdata/: go test ./events -update.
// Released versions are frozen: rewrite a golden only for a new version.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var (
	fixedAt      = time.Date(2026, 11, 30, 12, 34, 56, 123456789, time.UTC)
	fixedExpires = fixedAt.Add(events.DefaultTTL)

	balOrg  = events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	balUser = events.BalanceRef{Scope: "user:u-17", Period: events.PeriodDay, Instance: "2026-11-30"}
	balKey  = events.BalanceRef{Scope: "key:k_9", Period: events.PeriodLifetime, Instance: "all"}
)

// goldenEvents are fully populated, deterministic values of every event type.
func goldenEvents() []events.Event {
	return []events.Event{
		events.BudgetDefined{
			Budget: events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth},
			Limit:  events.MustMoney("100.5"),
			Unit:   "USD",
			At:     fixedAt,
		},
		events.ReservationOpened{
			ReservationID: "rsv_01JDXKQ7ZC3V8M9N2P4R6T8W0Y",
			RequestID:     "req-42",
			RequestHash:   "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			Balance:       balOrg,
			Amount:        events.MustMoney("0.05"),
			Unit:          "USD",
			Balances:      []events.BalanceRef{balOrg, balUser, balKey},
			ExpiresAt:     fixedExpires,
			At:            fixedAt,
			Metadata:      map[string]string{"model": "gpt-x", "route": "chat"},
		},
		events.ReservationSettled{
			ReservationID: "rsv_01JDXKQ7ZC3V8M9N2P4R6T8W0Y",
			Balance:       balOrg,
			Reserved:      events.MustMoney("0.05"),
			Actual:        events.MustMoney("0.070000001"),
			Overrun:       events.MustMoney("0.020000001"),
			Late:          true,
			At:            fixedExpires.Add(time.Second),
		},
		events.ReservationReleased{
			ReservationID: "rsv_01JDXKQ7ZC3V8M9N2P4R6T8W0Y",
			Balance:       balUser,
			Reserved:      events.MustMoney("0.05"),
			Reason:        events.ReasonExpired,
			At:            fixedExpires.Add(2 * time.Second),
		},
		goldenDefinedV2(),
		events.RequestVoided{
			RequestID:     "req-42",
			Balance:       balOrg,
			Scopes:        []events.Scope{"org:acme", "user:u-17"},
			ReservationID: "rsv_01JDXKQ7ZC3V8M9N2P4R6T8W0Y",
			At:            fixedExpires.Add(3 * time.Second),
		},
	}
}

// goldenDefinedV2 is a fully populated budget.defined.v2.
func goldenDefinedV2() events.BudgetDefinedV2 {
	slot := events.MustMoney("1")
	return events.BudgetDefinedV2{
		Budget:     events.BudgetRef{Scope: "org:acme", Period: events.PeriodWeek},
		Limit:      events.MustMoney("100.5"),
		Unit:       "USD",
		TZ:         "Europe/Berlin",
		Disabled:   true,
		FixedSlot:  &slot,
		Thresholds: []events.Money{events.MustMoney("0.5"), events.MustMoney("0.8"), events.MustMoney("1")},
		Changed:    []string{"limit", "tz", "disabled"},
		At:         fixedAt,
	}
}

func goldenBalanceRevision() events.BalanceRevision {
	evs := goldenEvents()
	return events.BalanceRevision{
		Schema:   events.SchemaBalance,
		Balance:  balOrg,
		Unit:     "USD",
		Limit:    events.MustMoney("100.5"),
		Spent:    events.MustMoney("12.070000001"),
		Reserved: events.MustMoney("0.35"),
		Overrun:  events.MustMoney("0.020000001"),
		Open:     7,
		Events:   events.Events{evs[1], evs[2]},
	}
}

// goldenBudgetRevision is the budget.v1 golden value.
func goldenBudgetRevision() events.BudgetRevision {
	return events.BudgetRevision{
		Schema: events.SchemaBudgetV1,
		Budget: events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth},
		Limit:  events.MustMoney("100.5"),
		Unit:   "USD",
		Events: events.Events{goldenEvents()[0]},
	}
}

// golden compares got with testdata/name, or rewrites it under -update. A
// golden file holds exactly got followed by one newline.
func golden(t *testing.T, name string, got []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	want := append(append([]byte(nil), got...), '\n')
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, want, 0o644))
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./events -update once to create it")
	require.Equal(t, string(b), string(want), "%s changed: a released version is frozen; make a new version instead", path)
	return b
}

func TestEncodeEvent_Golden(t *testing.T) {
	seen := map[events.Type]bool{}
	for _, e := range goldenEvents() {
		typ := e.EventType()
		seen[typ] = true
		t.Run(string(typ), func(t *testing.T) {
			got, err := events.EncodeEvent(e)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(got, []byte(`{"type":"`+string(typ)+`",`)), "type comes first: %s", got)

			b := golden(t, string(typ)+".json", got)

			back, err := events.DecodeEvent(b)
			require.NoError(t, err)
			require.Equal(t, e, back)
			require.Equal(t, typ, back.EventType())

			// Encoding the decoded value reproduces the golden bytes.
			again, err := events.EncodeEvent(back)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again))
		})
	}
	for _, typ := range []events.Type{
		events.TypeBudgetDefined, events.TypeBudgetDefinedV2, events.TypeReservationOpened,
		events.TypeReservationSettled, events.TypeReservationReleased, events.TypeRequestVoided,
	} {
		require.True(t, seen[typ], "no golden value for %s", typ)
	}
}

func TestBalanceRevision_Golden(t *testing.T) {
	rev := goldenBalanceRevision()
	got, err := json.Marshal(rev)
	require.NoError(t, err)
	b := golden(t, events.SchemaBalance+".json", got)

	var back events.BalanceRevision
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, rev, back)
}

func goldenLaneRevision() events.LaneRevision {
	a := goldenBalanceRevision()
	b := events.BalanceRevision{
		Schema: events.SchemaBalance, Balance: events.BalanceRef{Scope: "user:u-17", Period: "day", Instance: "2026-11-30"},
		Unit: "USD", Limit: events.MustMoney("5"), Spent: events.MustMoney("0"), Reserved: events.MustMoney("0.05"),
		Overrun: events.MustMoney("0"), Open: 1, Events: events.Events{goldenEvents()[1]},
	}
	return events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: 41, PrevHash: events.HashPayload([]byte("revision 41"))},
		Balances: []events.BalanceRevision{a, b}}
}

func TestLaneRevision_Golden(t *testing.T) {
	rev := goldenLaneRevision()
	got, err := json.Marshal(rev)
	require.NoError(t, err)
	b := golden(t, events.SchemaLane+".json", got)

	back, err := events.DecodeLaneRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, back)
	require.True(t, back.Chained())
}

// TestLaneRevision_V1Upcast: the frozen lane.v1 golden still decodes, as an
// unchained revision with the same balances.
func TestLaneRevision_V1Upcast(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", events.SchemaLaneV1+".json"))
	require.NoError(t, err)
	back, err := events.DecodeLaneRevision(b)
	require.NoError(t, err)
	want := goldenLaneRevision()
	want.Schema, want.Chain = events.SchemaLaneV1, events.Chain{}
	require.Equal(t, want, back)
	require.False(t, back.Chained())

	// A v1 revision carrying chain fields, or an unknown schema, is refused.
	_, err = events.DecodeLaneRevision([]byte(`{"schema":"lane.v1","prev":3,"balances":[]}`))
	require.Error(t, err)
	_, err = events.DecodeLaneRevision([]byte(`{"schema":"lane.v3","balances":[]}`))
	require.Error(t, err)
}

func goldenBudgetRevisionV2() events.BudgetRevision {
	rev := goldenBudgetRevision()
	rev.Schema = events.SchemaBudget
	rev.Chain = events.Chain{Prev: 7, PrevHash: events.HashPayload([]byte("revision 7"))}
	return rev
}

func TestBudgetRevision_Golden(t *testing.T) {
	rev := goldenBudgetRevisionV2()
	got, err := json.Marshal(rev)
	require.NoError(t, err)
	b := golden(t, events.SchemaBudget+".json", got)

	back, err := events.DecodeBudgetRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, back)
	require.True(t, back.Chained())
}

// TestBudgetRevision_V1Upcast: the frozen budget.v1 golden still decodes.
func TestBudgetRevision_V1Upcast(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", events.SchemaBudgetV1+".json"))
	require.NoError(t, err)
	back, err := events.DecodeBudgetRevision(b)
	require.NoError(t, err)
	require.Equal(t, goldenBudgetRevision(), back)
	require.False(t, back.Chained())
}

// TestCheckChain: the next revision follows the last folded one by sequence
// and hash; a skipped revision (gap) and another history (fork) are
// ChainErrors naming the sequence.
func TestCheckChain(t *testing.T) {
	h := events.HashPayload([]byte("x"))
	require.NoError(t, events.CheckChain("lane.0", 5, events.Chain{}, 0, ""))
	require.NoError(t, events.CheckChain("lane.0", 9, events.Chain{Prev: 5, PrevHash: h}, 5, h))
	var ce *events.ChainError
	err := events.CheckChain("lane.0", 9, events.Chain{Prev: 4, PrevHash: h}, 5, h)
	require.ErrorAs(t, err, &ce)
	require.EqualValues(t, 9, ce.Seq)
	require.Contains(t, err.Error(), "revision 9 of lane.0")
	err = events.CheckChain("lane.0", 9, events.Chain{Prev: 5, PrevHash: events.HashPayload([]byte("y"))}, 5, h)
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), "fork")
	require.Equal(t, "12-3", events.EventID(12, 3))
}

func TestEncodeEvent_Unknown(t *testing.T) {
	for _, e := range []events.Event{nil, &events.ReservationOpened{}, &events.BudgetDefined{}} {
		var b []byte
		var err error
		require.NotPanics(t, func() { b, err = events.EncodeEvent(e) })
		requireCode(t, err, events.CodeInternal)
		require.Nil(t, b)
	}
}

func TestDecodeEvent_Rejects(t *testing.T) {
	opened, err := events.EncodeEvent(goldenEvents()[1])
	require.NoError(t, err)
	body := strings.TrimPrefix(string(opened), `{"type":"reservation.opened.v1",`) // fields without the type
	require.NotEqual(t, string(opened), body)

	tests := []struct {
		name string
		in   string
	}{
		{"unknown type", `{"type":"reservation.opened.v2",` + body},
		{"unknown type, no body", `{"type":"reservation.reopened.v1"}`},
		{"unversioned type", `{"type":"reservation.opened",` + body},
		{"type in wrong case", `{"type":"Reservation.Opened.V1",` + body},
		{"missing type", `{` + body},
		{"empty type", `{"type":"",` + body},
		{"null type", `{"type":null,` + body},
		{"numeric type", `{"type":1,` + body},
		{"unknown field", `{"type":"reservation.opened.v1","extra":1,` + body},
		{"unknown field at the end", strings.TrimSuffix(string(opened), "}") + `,"extra":"x"}`},
		{"unknown nested field", `{"type":"reservation.released.v1","reservation_id":"r","balance":{"scope":"org:a","period":"month","instance":"2026-11","zone":"UTC"},"reserved":"1","reason":"released","at":"2026-11-30T00:00:00Z"}`},
		{"field of another type", `{"type":"reservation.released.v1","actual":"1"}`},
		{"empty input", ``},
		{"whitespace", "  \n"},
		{"null", `null`},
		{"array", `[]`},
		{"string", `"reservation.opened.v1"`},
		{"number", `1`},
		{"truncated", string(opened[:len(opened)/2])},
		{"trailing data", string(opened) + string(opened)},
		{"trailing garbage", string(opened) + `x`},
		{"amount as number", `{"type":"reservation.released.v1","reserved":0.05}`},
		{"amount with exponent", `{"type":"reservation.released.v1","reserved":"5e-2"}`},
		{"amount NaN", `{"type":"reservation.released.v1","reserved":"NaN"}`},
		{"amount too long", `{"type":"reservation.released.v1","reserved":"` + strings.Repeat("1", 1000) + `"}`},
		{"bad time", `{"type":"reservation.released.v1","at":"yesterday"}`},
		{"bool as string", `{"type":"reservation.settled.v1","late":"true"}`},
		{"metadata not strings", `{"type":"reservation.opened.v1","metadata":{"a":1}}`},
		{"balances not a list", `{"type":"reservation.opened.v1","balances":{}}`},
		{"invalid UTF-8 outside strings", "{\"type\":\"budget.defined.v1\"\xff}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e events.Event
			var err error
			require.NotPanics(t, func() { e, err = events.DecodeEvent([]byte(tt.in)) })
			requireCode(t, err, events.CodeInvalidRequest)
			require.Nil(t, e)
		})
	}
}

func TestDecodeEvent_MissingFieldsAreZero(t *testing.T) {
	// Decoding is strict about unknown fields, not about absent ones: the
	// producer is ours and the goldens freeze what it writes.
	e, err := events.DecodeEvent([]byte(`{"type":"reservation.released.v1"}`))
	require.NoError(t, err)
	require.Equal(t, events.ReservationReleased{}, e)
}

func TestEvents_JSON(t *testing.T) {
	evs := events.Events(goldenEvents())
	b, err := json.Marshal(evs)
	require.NoError(t, err)

	// Each element is exactly what EncodeEvent writes.
	var raw []json.RawMessage
	require.NoError(t, json.Unmarshal(b, &raw))
	require.Len(t, raw, len(evs))
	for i, e := range evs {
		enc, err := events.EncodeEvent(e)
		require.NoError(t, err)
		require.JSONEq(t, string(enc), string(raw[i]))
	}

	var back events.Events
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, evs, back)

	// Empty.
	b, err = json.Marshal(events.Events{})
	require.NoError(t, err)
	require.Equal(t, `[]`, string(b))
	require.NoError(t, json.Unmarshal(b, &back))
	require.Empty(t, back)

	// An unencodable event fails the whole list.
	_, err = json.Marshal(events.Events{evs[0], &events.ReservationOpened{}})
	require.Error(t, err)

	// An unknown or malformed element fails the whole list, without panicking.
	for _, bad := range []string{
		`[{"type":"nope.v1"}]`,
		`[` + string(raw[0]) + `,{"type":"reservation.opened.v1","extra":true}]`,
		`[` + string(raw[0]) + `,{}]`,
		`[1]`,
		`{}`,
		`"x"`,
		`[`,
	} {
		var got events.Events
		require.NotPanics(t, func() { err = json.Unmarshal([]byte(bad), &got) }, bad)
		require.Error(t, err, bad)
	}
}

func TestEventType(t *testing.T) {
	require.Equal(t, events.TypeBudgetDefined, events.BudgetDefined{}.EventType())
	require.Equal(t, events.TypeReservationOpened, events.ReservationOpened{}.EventType())
	require.Equal(t, events.TypeReservationSettled, events.ReservationSettled{}.EventType())
	require.Equal(t, events.TypeReservationReleased, events.ReservationReleased{}.EventType())
}
