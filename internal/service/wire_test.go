package service_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// rawCall sends body to an endpoint and returns the reply body as a
// generic JSON object, to check field names as they are on the wire.
func (h *harness) rawCall(endpoint string, body any) map[string]any {
	h.t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		data, err = json.Marshal(body)
		require.NoError(h.t, err)
	}
	msg, err := h.nc.Request(h.env.Layout.Endpoint(endpoint), data, 10*time.Second)
	require.NoError(h.t, err)
	var out map[string]any
	require.NoError(h.t, json.Unmarshal(msg.Data, &out), string(msg.Data))
	return out
}

// requireRefusal checks a refusal that concerns a reservation: its code,
// and the reservation's id and state as fields of the error object.
func requireRefusal(t *testing.T, e *events.Error, code events.Code, id, status string) {
	t.Helper()
	require.NotNil(t, e, "expected %s", code)
	require.Equal(t, code, e.Code, e.Message)
	require.Equal(t, id, e.ReservationID, e.Message)
	require.Equal(t, status, e.Status, e.Message)
	require.NotEmpty(t, e.Message)
}

// TestRefusal_CarriesStatus: every refusal that concerns a reservation
// (already_settled, already_released, idempotency_mismatch) names the
// reservation and its state as fields, not only in prose; unknown_reservation
// has no state to name.
func TestRefusal_CarriesStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "10", "USD")
	admit := func(rid string) events.AdmitReply {
		r, e := h.admit(events.AdmitRequest{RequestID: rid, Scopes: []string{"org:acme"}, Amount: "1", TTL: "1m"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		return r
	}
	settled, released, open, expired := admit("s"), admit("r"), admit("o"), admit("e")
	_, e := h.settle(settled.ReservationID, "0.5")
	require.Nil(t, e)
	_, e = h.release(released.ReservationID)
	require.Nil(t, e)
	h.clock.now.Add(2 * time.Minute) // past every TTL above: expire one
	cr, err := h.replicas[0].Settler.Expire(ctxT(t), expired.ReservationID)
	require.NoError(t, err)
	require.Equal(t, events.StatusExpired, cr.Status)
	h.clock.now.Add(-2 * time.Minute)

	_, e = h.release(settled.ReservationID)
	requireRefusal(t, e, events.CodeAlreadySettled, settled.ReservationID, events.StatusSettled)
	_, e = h.settle(settled.ReservationID, "0.6")
	requireRefusal(t, e, events.CodeAlreadySettled, settled.ReservationID, events.StatusSettled)
	_, e = h.settle(released.ReservationID, "0.5")
	requireRefusal(t, e, events.CodeAlreadyReleased, released.ReservationID, events.StatusReleased)

	mismatch := func(rid string) *events.Error {
		_, e := h.admit(events.AdmitRequest{RequestID: rid, Scopes: []string{"org:acme"}, Amount: "2", TTL: "1m"})
		return e
	}
	requireRefusal(t, mismatch("o"), events.CodeIdempotencyMismatch, open.ReservationID, events.StatusOpen)
	requireRefusal(t, mismatch("s"), events.CodeIdempotencyMismatch, settled.ReservationID, events.StatusSettled)
	requireRefusal(t, mismatch("r"), events.CodeIdempotencyMismatch, released.ReservationID, events.StatusReleased)
	requireRefusal(t, mismatch("e"), events.CodeIdempotencyMismatch, expired.ReservationID, events.StatusExpired)

	// On the wire: {"error":{"code","message","reservation_id","status"}}.
	got := h.rawCall(streams.EndpointRelease, events.ReleaseRequest{ReservationID: settled.ReservationID})
	require.Equal(t, map[string]any{
		"code":           "already_settled",
		"message":        got["error"].(map[string]any)["message"],
		"reservation_id": settled.ReservationID,
		"status":         "settled",
	}, got["error"])

	// A refusal about no reservation in particular names none.
	_, e = h.settle("rsv_nope", "1")
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnknownReservation, e.Code)
	require.Empty(t, e.Status)
	require.Empty(t, e.ReservationID)
	got = h.rawCall(streams.EndpointSettle, events.SettleRequest{ReservationID: "rsv_nope", Actual: "1"})
	require.Len(t, got["error"], 2, "unknown_reservation is {code, message}")
}

// TestAdmit_ReplayStatus: a new admission says status open; a replay (same
// request id and body) says what became of the reservation since.
func TestAdmit_ReplayStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "10", "USD")
	req := func(rid string) events.AdmitRequest {
		return events.AdmitRequest{RequestID: rid, Scopes: []string{"org:acme"}, Amount: "1", TTL: "1m"}
	}
	admit := func(rid string) events.AdmitReply {
		r, e := h.admit(req(rid))
		require.Nil(t, e)
		require.True(t, r.Admitted)
		return r
	}
	replay := func(rid, id, status string) {
		t.Helper()
		r := admit(rid)
		require.True(t, r.Replayed)
		require.Equal(t, id, r.ReservationID)
		require.Equal(t, status, r.Status)
	}

	first := admit("a")
	require.False(t, first.Replayed)
	require.Equal(t, events.StatusOpen, first.Status)
	replay("a", first.ReservationID, events.StatusOpen)

	_, e := h.settle(first.ReservationID, "0.4")
	require.Nil(t, e)
	replay("a", first.ReservationID, events.StatusSettled)
	// On the wire, next to "replayed".
	got := h.rawCall(streams.EndpointAdmit, req("a"))
	require.Equal(t, true, got["admitted"])
	require.Equal(t, true, got["replayed"])
	require.Equal(t, "settled", got["status"])

	rel := admit("b")
	_, e = h.release(rel.ReservationID)
	require.Nil(t, e)
	replay("b", rel.ReservationID, events.StatusReleased)

	exp := admit("c")
	h.clock.now.Add(2 * time.Minute)
	n, err := h.replicas[0].Sweeper.Pass(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	replay("c", exp.ReservationID, events.StatusExpired)

	// A denial has no reservation, so no status.
	d, e := h.admit(events.AdmitRequest{RequestID: "big", Scopes: []string{"org:acme"}, Amount: "100"})
	require.Nil(t, e)
	require.False(t, d.Admitted)
	require.Empty(t, d.Status)
	got = h.rawCall(streams.EndpointAdmit, events.AdmitRequest{RequestID: "big", Scopes: []string{"org:acme"}, Amount: "100"})
	require.NotContains(t, got, "status")
}

// TestBudgetGet_ScopeOnly: budget.get with a period reads one budget (a
// BudgetView); with only a scope it lists that scope's budgets (a
// BudgetListReply, in period order); a scope without budgets is
// unknown_budget either way.
func TestBudgetGet_ScopeOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "10", "USD")
	h.putBudget("org:acme", "day", "1", "USD")
	h.putBudget("org:other", "month", "5", "USD")
	r, e := h.admit(events.AdmitRequest{RequestID: "a", Scopes: []string{"org:acme"}, Amount: "0.25"})
	require.Nil(t, e)
	require.True(t, r.Admitted)

	var list events.BudgetListReply
	require.Nil(t, h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:acme"}, &list))
	require.Len(t, list.Budgets, 2)
	periods := []events.Period{list.Budgets[0].Period, list.Budgets[1].Period}
	require.ElementsMatch(t, []events.Period{events.PeriodMonth, events.PeriodDay}, periods)
	for _, v := range list.Budgets {
		require.Equal(t, events.Scope("org:acme"), v.Scope)
		require.Equal(t, h.budget("org:acme", string(v.Period)), v, "the list holds the same view as a get with the period")
		require.Equal(t, "0.25", v.Reserved)
	}
	// The same list through an explicit empty period, and the raw shape.
	got := h.rawCall(streams.EndpointBudgetGet, []byte(`{"scope":"org:acme","period":""}`))
	require.Len(t, got["budgets"], 2)
	require.Len(t, got, 1, "a scope-only get replies {\"budgets\":[...]}")

	// With a period: one BudgetView, as before.
	v := h.budget("org:acme", "month")
	require.Equal(t, events.PeriodMonth, v.Period)
	require.Equal(t, "10", v.Limit)

	e = h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:ghost"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnknownBudget, e.Code)
	e = h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:a*"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeInvalidIdentifier, e.Code)
}

// TestDecode_TypeErrorsNameTheField sends a value of the wrong JSON type
// for every field of every endpoint and requires an invalid_request whose
// message names the field in the API's words, never encoding/json's (Go
// types, struct fields), and an unchanged stream.
func TestDecode_TypeErrorsNameTheField(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "10", "USD")
	for _, tc := range []struct {
		endpoint, body, want string
	}{
		{streams.EndpointAdmit, `{"request_id":"r","scopes":["org:acme"],"amount":0.05}`, `amount must be a decimal string like "0.05", got a number`},
		{streams.EndpointAdmit, `{"request_id":7,"scopes":["org:acme"],"amount":"0.05"}`, `request_id must be a string, got a number`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":"org:acme","amount":"0.05"}`, `scopes must be an array of scope strings like ["org:acme"], got a string`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":[1],"amount":"0.05"}`, `scopes must be an array of scope strings like ["org:acme"]; it holds a number`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":["org:acme"],"amount":"0.05","unit":true}`, `unit must be a string like "USD", got a boolean`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":["org:acme"],"amount":"0.05","ttl":30}`, `ttl must be a duration string like "30s", got a number`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":["org:acme"],"amount":"0.05","metadata":{"n":1}}`, `metadata must be an object of string values like {"model":"gpt-4o"}; it holds a number`},
		{streams.EndpointSettle, `{"reservation_id":"rsv_1","actual":0.05}`, `actual must be a decimal string like "0.05", got a number`},
		{streams.EndpointSettle, `{"reservation_id":["rsv_1"],"actual":"0.05"}`, `reservation_id must be a string (the reservation_id an admit returned), got an array`},
		{streams.EndpointRelease, `{"reservation_id":{}}`, `reservation_id must be a string (the reservation_id an admit returned), got an object`},
		{streams.EndpointBudgetPut, `{"scope":"org:acme","period":"month","limit":5,"unit":"USD"}`, `limit must be a decimal string like "0.05", got a number`},
		{streams.EndpointBudgetPut, `{"scope":1,"period":"month","limit":"5","unit":"USD"}`, `scope must be a scope string like "org:acme", got a number`},
		{streams.EndpointBudgetGet, `{"scope":"org:acme","period":30}`, `period must be one of the strings "month", "week", "day", "hour", "minute" or "lifetime", got a number`},
		{streams.EndpointBudgetList, `{"kind":false}`, `kind must be a scope kind string like "org", got a boolean`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":["org:acme"],"amount":"0.05","count":1.5}`, `count must be a whole number of requests like 5, got 1.5`},
		{streams.EndpointSettle, `{"reservation_id":"rsv_1","actual":"0.05","note":7}`, `note must be a one-word string like "estimate", got a number`},
		{streams.EndpointBudgetList, `{"limit":"10"}`, `limit must be a whole number of budgets per page like 100 (absent or 0: 1000), got a string`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_tokens":100,"max_output_tokens":null}`, `max_output_tokens must be a whole number of tokens like 800, got null (JavaScript's JSON.stringify writes NaN and Infinity as null); leave the field out for 0`},
		{streams.EndpointSettle, `{"reservation_id":"rsv_1","input_tokens":10,"output_tokens":null}`, `output_tokens must be a whole number of tokens like 640, got null (JavaScript's JSON.stringify writes NaN and Infinity as null); leave the field out for 0`},
		{streams.EndpointBudgetList, `{"sort":1}`, `sort must be one of the strings "scope" or "utilization", got a number`},
		{streams.EndpointAdmit, `{"request_id":"r","scopes":["org:acme"],"amount":}`, `request body is not valid JSON (at byte 50): invalid character '}' looking for beginning of value`},
	} {
		t.Run(tc.endpoint+" "+tc.body, func(t *testing.T) {
			seq, msgs := h.streamState()
			e := h.call(tc.endpoint, []byte(tc.body), nil)
			require.NotNil(t, e)
			require.Equal(t, events.CodeInvalidRequest, e.Code)
			require.Equal(t, tc.want, e.Message)
			for _, internal := range []string{"json:", "Go ", "struct", "unmarshal", "events."} {
				require.NotContains(t, e.Message, internal)
			}
			seq2, msgs2 := h.streamState()
			require.Equal(t, seq, seq2)
			require.Equal(t, msgs, msgs2)
		})
	}
}

// TestRetention_CloseAfterIdleIsRemembered: a reservation that closes after
// the ledger was quiet for longer than the retention must still be
// remembered for the retention after it closed, so that a retried settle
// replays and a retried admit does not reserve again. Before the fix the
// close was stamped with the server time of the message folded before it
// (the admit, 1.5 s earlier here) and forgotten the moment the follower
// folded the settle: the retried settle answered unknown_reservation and
// the retried admit reserved again.
func TestRetention_CloseAfterIdleIsRemembered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{ledgerOpts: []ledger.Option{ledger.WithRetention(time.Second, time.Hour)}})
	h.putBudget("org:ret", "month", "100", "USD")
	req := events.AdmitRequest{RequestID: "idle-1", Scopes: []string{"org:ret"}, Amount: "1", TTL: "1m"}
	r1, e := h.admit(req)
	require.Nil(t, e)
	require.True(t, r1.Admitted)
	// Not a synchronization: the ledger must stay quiet for longer than
	// the retention, on the server's clock.
	time.Sleep(1500 * time.Millisecond)
	_, e = h.settle(r1.ReservationID, "1")
	require.Nil(t, e)
	c, e := h.settle(r1.ReservationID, "1")
	require.Nil(t, e, "a retried settle right after the settle replays")
	require.True(t, c.Replayed)
	r, e := h.admit(req)
	require.Nil(t, e)
	require.True(t, r.Replayed, "a retried admit right after the settle replays, reserving nothing")
	require.Equal(t, events.StatusSettled, r.Status)
}
