package service_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// rsvID matches reservation ids, which differ between a batch item and its
// single-request twin.
var rsvID = regexp.MustCompile(`rsv_[0-9a-f-]+`)

// normalize makes an answer of the batch run comparable with its twin's:
// the twin's scope and ids are named "singl" where the batch's say "batch",
// and reservation ids and expiry times are blanked.
func normalize(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	s := strings.ReplaceAll(string(raw), "batch", "singl")
	s = rsvID.ReplaceAllString(s, "rsv_X")
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m), s)
	delete(m, "expires_at")
	return m
}

// batchCall sends items to a batch endpoint and returns the raw item
// answers.
func batchCall(t *testing.T, h *harness, endpoint string, items ...string) []json.RawMessage {
	t.Helper()
	body := `{"items":[` + strings.Join(items, ",") + `]}`
	msg, err := h.nc.Request(h.env.Layout.Endpoint(endpoint), []byte(body), 10*time.Second)
	require.NoError(t, err)
	require.Empty(t, msg.Header.Get("Nats-Service-Error"), string(msg.Data))
	var rep events.BatchReply
	require.NoError(t, json.Unmarshal(msg.Data, &rep), string(msg.Data))
	require.Len(t, rep.Items, len(items))
	return rep.Items
}

// singleCall sends one request body to a single endpoint and returns the
// raw answer.
func singleCall(t *testing.T, h *harness, endpoint, body string) json.RawMessage {
	t.Helper()
	msg, err := h.nc.Request(h.env.Layout.Endpoint(endpoint), []byte(body), 10*time.Second)
	require.NoError(t, err)
	return msg.Data
}

// TestBatch_EachItemAsItsSingleTwin sends admits, settles and releases
// as batches mixing admitted, denied, invalid and replayed items, and the
// same requests one by one on a twin budget: every item is answered as its
// twin, and the two budgets end identical.
func TestBatch_EachItemAsItsSingleTwin(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	// Items of one batch are decided concurrently, in no set order, as
	// concurrent single requests are; so each item whose answer shows a
	// balance has a budget of its own.
	for _, who := range []string{"batch", "singl"} {
		for _, sfx := range []string{"", "-2", "-d", "-c"} {
			h.putBudget("org:"+who+sfx, "month", "1.00", "USD")
		}
		_, e := h.admit(events.AdmitRequest{RequestID: who + "-pre", Scopes: []string{"org:" + who}, Amount: "0.10"})
		require.Nil(t, e)
	}
	admits := func(who string) []string {
		return []string{
			`{"request_id":"` + who + `-a1","scopes":["org:` + who + `"],"amount":"0.30"}`,
			`{"request_id":"` + who + `-a2","scopes":["org:` + who + `-2"],"amount":"0.40","ttl":"30s"}`,
			`{"request_id":"` + who + `-d","scopes":["org:` + who + `-d"],"amount":"2.00"}`,     // limit_reached
			`{"request_id":"` + who + `-u","scopes":["org:` + who + `-none"],"amount":"0.01"}`,  // unknown_budget
			`{"request_id":"` + who + `-i","scopes":["org:` + who + `"],"amount":"-1"}`,         // invalid_amount
			`{"request_id":"` + who + `-f","scopes":["org:` + who + `"],"amount":"0.01","x":1}`, // unknown field
			`"not an object"`, // invalid_request
			`{"request_id":"` + who + `-pre","scopes":["org:` + who + `"],"amount":"0.10"}`,                // replay
			`{"request_id":"` + who + `-pre","scopes":["org:` + who + `"],"amount":"0.20"}`,                // idempotency_mismatch
			`{"request_id":"` + who + `-c","scopes":["org:` + who + `-c"],"amount":"0.05","mode":"check"}`, // check
		}
	}
	seq0, _ := h.streamState()
	got := batchCall(t, h, streams.EndpointAdmitBatch, admits("batch")...)
	seq1, _ := h.streamState()
	var twin []json.RawMessage
	for _, body := range admits("singl") {
		twin = append(twin, singleCall(t, h, streams.EndpointAdmit, body))
	}
	seq2, _ := h.streamState()
	for i := range got {
		require.Equal(t, normalize(t, twin[i]), normalize(t, got[i]), "admit item %d: batch %s, single %s", i, got[i], twin[i])
	}
	require.LessOrEqual(t, seq1-seq0, seq2-seq1, "the batch's admits fold into at most as many revisions as the singles'")
	require.Positive(t, seq1-seq0)

	ids := map[string]string{}
	for _, who := range []string{"batch", "singl"} {
		for _, k := range []string{"a1", "a2", "pre"} {
			var r events.AdmitReply
			e := h.call(streams.EndpointAdmit, events.AdmitRequest{RequestID: who + "-" + k, Scopes: []string{"org:" + who + map[string]string{"a2": "-2"}[k]},
				Amount: map[string]string{"a1": "0.30", "a2": "0.40", "pre": "0.10"}[k],
				TTL:    map[string]string{"a2": "30s"}[k]}, &r)
			require.Nil(t, e)
			require.True(t, r.Replayed)
			ids[who+"-"+k] = r.ReservationID
		}
	}
	sameBudgets := func() {
		for _, sfx := range []string{"", "-2", "-d", "-c"} {
			require.Equal(t, h.budget("org:singl"+sfx, "month"), renamed(h.budget("org:batch"+sfx, "month")), sfx)
		}
	}
	sameBudgets()

	settles := func(who string) []string {
		return []string{
			`{"reservation_id":"` + ids[who+"-a1"] + `","actual":"0.25"}`,
			`{"reservation_id":"` + ids[who+"-a1"] + `","actual":"0.25"}`,                   // replay of the item before
			`{"reservation_id":"` + ids[who+"-pre"] + `","actual":"abc"}`,                   // invalid_amount
			`{"reservation_id":"rsv_00000000-0000-0000-0000-000000000000","actual":"0.01"}`, // unknown_reservation
		}
	}
	got = batchCall(t, h, streams.EndpointSettleBatch, settles("batch")...)
	twin = twin[:0]
	for _, body := range settles("singl") {
		twin = append(twin, singleCall(t, h, streams.EndpointSettle, body))
	}
	// The two settles of one reservation in one batch race: one of them
	// settles, the other is its replay, in either order.
	if normalize(t, got[0])["replayed"] == true {
		got[0], got[1] = got[1], got[0]
	}
	for i := range got {
		require.Equal(t, normalize(t, twin[i]), normalize(t, got[i]), "settle item %d: batch %s, single %s", i, got[i], twin[i])
	}

	releases := func(who string) []string {
		return []string{
			`{"reservation_id":"` + ids[who+"-a2"] + `"}`,
			`{"reservation_id":"` + ids[who+"-a1"] + `"}`, // already_settled
			`{"reservation_id":""}`,                       // invalid
		}
	}
	got = batchCall(t, h, streams.EndpointReleaseBatch, releases("batch")...)
	twin = twin[:0]
	for _, body := range releases("singl") {
		twin = append(twin, singleCall(t, h, streams.EndpointRelease, body))
	}
	for i := range got {
		require.Equal(t, normalize(t, twin[i]), normalize(t, got[i]), "release item %d: batch %s, single %s", i, got[i], twin[i])
	}
	sameBudgets()
	b := h.budget("org:batch", "month")
	require.Equal(t, "0.25", b.Spent)
	require.Equal(t, "0.1", b.Reserved)
	require.EqualValues(t, 1, b.Open)
	require.Equal(t, "0", h.budget("org:batch-2", "month").Reserved)
}

func renamed(v events.BudgetView) events.BudgetView {
	v.Scope = events.Scope(strings.ReplaceAll(string(v.Scope), "batch", "singl"))
	return v
}

// TestBatch_Envelope: a malformed batch is refused as a whole, with the
// usual error reply, and changes nothing.
//
// An item that is not valid JSON fails the whole batch too, before any
// other item is acted on: here the valid admit beside it would reserve
// (and write) if it were answered, which the unchanged stream rules out.
func TestBatch_Envelope(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "1.00", "USD")
	seq0, _ := h.streamState()
	tooMany := `{"items":[` + strings.Repeat(`{},`, events.MaxBatchItems) + `{}]}`
	valid := `{"request_id":"env-1","scopes":["org:acme"],"amount":"0.10"}`
	for body, code := range map[string]events.Code{
		`{"items":[` + valid + `,{"a":tru}]}`:         events.CodeInvalidRequest,
		`{"items":[{"amount":"0.1",},` + valid + `]}`: events.CodeInvalidRequest,
		`{"items":[` + valid + `,{"a":"\q"}]}`:        events.CodeInvalidRequest,
		`[]`:                                          events.CodeInvalidRequest,
		`{"items":[]}`:                                events.CodeInvalidRequest,
		`{"items":{}}`:                                events.CodeInvalidRequest,
		`{"items":[],"x":1}`:                          events.CodeInvalidRequest,
		`{"items":[{}],"items":[]}`:                   events.CodeInvalidRequest,
		tooMany:                                       events.CodeInvalidRequest,
		`{"items":[` + strings.Repeat(" ", events.MaxBatchPayloadBytes) + `{}]}`: events.CodePayloadTooLarge,
	} {
		e := h.call(streams.EndpointAdmitBatch, []byte(body), nil)
		require.NotNil(t, e, body[:min(len(body), 40)])
		require.Equal(t, code, e.Code, body[:min(len(body), 40)])
	}
	seq1, _ := h.streamState()
	require.Equal(t, seq0, seq1)
}

// A brief admit is answered without the per-budget balances, and is
// otherwise the same request: its retry without brief is a replay.
func TestAdmit_Brief(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "1.00", "USD")
	r, e := h.admit(events.AdmitRequest{RequestID: "b1", Scopes: []string{"org:acme"}, Amount: "0.10", Brief: true})
	require.Nil(t, e)
	require.True(t, r.Admitted)
	require.Empty(t, r.Budgets)
	require.NotEmpty(t, r.Balances)
	full, e := h.admit(events.AdmitRequest{RequestID: "b2", Scopes: []string{"org:acme"}, Amount: "0.10"})
	require.Nil(t, e)
	require.Len(t, full.Budgets, 1)
	again, e := h.admit(events.AdmitRequest{RequestID: "b1", Scopes: []string{"org:acme"}, Amount: "0.10"})
	require.Nil(t, e)
	require.True(t, again.Replayed)
	require.Equal(t, r.ReservationID, again.ReservationID)
	require.Equal(t, "0.2", h.budget("org:acme", "month").Reserved)
}

// A batch on a tenant's subject acts for that tenant, item by item, as the
// tenant's single requests do: its budgets, its request ids, its
// reservations only; replies name scopes as the tenant sent them.
func TestBatch_Tenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, tenant := range []string{"acme", "globex"} {
		var v events.BudgetView
		require.Nil(t, h.tcall(tenant, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:search", Period: "day", Limit: "1", Unit: "USD"}, &v))
	}
	send := func(tenant, endpoint string, items ...string) []json.RawMessage {
		body := `{"items":[` + strings.Join(items, ",") + `]}`
		msg, err := h.nc.Request(h.env.Layout.TenantEndpoint(tenant, endpoint), []byte(body), 10*time.Second)
		require.NoError(t, err)
		var rep events.BatchReply
		require.NoError(t, json.Unmarshal(msg.Data, &rep), string(msg.Data))
		return rep.Items
	}
	got := send("acme", streams.EndpointAdmitBatch,
		`{"request_id":"r1","scopes":["team:search"],"amount":"0.4"}`,
		`{"request_id":"r2","scopes":["team:search"],"amount":"0.4"}`)
	var a1, a2 events.AdmitReply
	require.NoError(t, json.Unmarshal(got[0], &a1))
	require.NoError(t, json.Unmarshal(got[1], &a2))
	require.True(t, a1.Admitted && a2.Admitted)
	require.Equal(t, "r1", a1.RequestID)
	require.Equal(t, events.Scope("team:search"), a1.Balances[0].Scope)

	// globex cannot close acme's reservations, even in a batch.
	got = send("globex", streams.EndpointReleaseBatch, `{"reservation_id":"`+a1.ReservationID+`"}`)
	var er events.ErrorReply
	require.NoError(t, json.Unmarshal(got[0], &er))
	require.Equal(t, events.CodeUnknownReservation, er.Error.Code)
	// acme can; globex's budget is untouched.
	got = send("acme", streams.EndpointSettleBatch, `{"reservation_id":"`+a1.ReservationID+`","actual":"0.3"}`)
	var cr events.CloseReply
	require.NoError(t, json.Unmarshal(got[0], &cr))
	require.Equal(t, events.StatusSettled, cr.Status)
	require.Equal(t, events.Scope("team:search"), cr.Balances[0].Scope)
	var va, vg events.BudgetView
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search", Period: "day"}, &va))
	require.Nil(t, h.tcall("globex", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search", Period: "day"}, &vg))
	require.Equal(t, "0.3", va.Spent)
	require.Equal(t, "0.4", va.Reserved)
	require.Equal(t, "0", vg.Reserved)
}

// TestBatch_MixedEachItemAsItsSingleTwin sends admits, settles and
// releases mixed in one message of the batch endpoint ({"admit":{...}}),
// beside items whose envelope is wrong, and the same requests one by one
// on a twin budget: every item is answered as its twin, a wrong envelope
// as invalid_request without touching its siblings, and the budgets end
// identical. The same message on a tenant's subject acts for the tenant.
func TestBatch_MixedEachItemAsItsSingleTwin(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ids := map[string]string{}
	for _, who := range []string{"batch", "singl"} {
		for _, sfx := range []string{"", "-2", "-d"} {
			h.putBudget("org:"+who+sfx, "month", "1.00", "USD")
		}
		for _, k := range []string{"s", "r"} {
			r, e := h.admit(events.AdmitRequest{RequestID: who + "-pre-" + k, Scopes: []string{"org:" + who + "-2"}, Amount: "0.10"})
			require.Nil(t, e)
			ids[who+"-"+k] = r.ReservationID
		}
	}
	// kind is "" for the single endpoints, or the item's kind to wrap it.
	items := func(who string) [][2]string {
		return [][2]string{
			{"admit", `{"request_id":"` + who + `-a1","scopes":["org:` + who + `"],"amount":"0.30"}`},
			{"admit", `{"request_id":"` + who + `-d","scopes":["org:` + who + `-d"],"amount":"2.00"}`}, // limit_reached
			{"admit", `{"request_id":"` + who + `-f","scopes":["org:` + who + `"],"amount":"0.01","x":1}`},
			{"settle", `{"reservation_id":"` + ids[who+"-s"] + `","actual":"0.05"}`},
			{"settle", `{"reservation_id":"` + ids[who+"-r"] + `","actual":"abc"}`}, // invalid_amount
			{"release", `{"reservation_id":"` + ids[who+"-r"] + `"}`},
			{"release", `{"reservation_id":"rsv_00000000-0000-0000-0000-000000000000"}`}, // unknown_reservation
		}
	}
	var wrapped []string
	for _, it := range items("batch") {
		wrapped = append(wrapped, `{"`+it[0]+`":`+it[1]+`}`)
	}
	bad := []string{
		`{"void":{"request_id":"batch-a1"}}`,
		`{"admit":{"request_id":"batch-x","scopes":["org:batch"],"amount":"0.01"},"settle":{}}`,
		`{"admit":"x"}`,
		`{}`,
		`[1]`,
	}
	seq0, _ := h.streamState()
	got := batchCall(t, h, streams.EndpointBatch, append(wrapped, bad...)...)
	for i, it := range items("singl") {
		twin := singleCall(t, h, it[0], it[1])
		require.Equal(t, normalize(t, twin), normalize(t, got[i]), "item %d: batch %s, single %s", i, got[i], twin)
	}
	for i := len(wrapped); i < len(got); i++ {
		var er events.ErrorReply
		require.NoError(t, json.Unmarshal(got[i], &er), string(got[i]))
		require.NotNil(t, er.Error, string(got[i]))
		require.Equal(t, events.CodeInvalidRequest, er.Error.Code, string(got[i]))
	}
	for _, sfx := range []string{"", "-2", "-d"} {
		require.Equal(t, h.budget("org:singl"+sfx, "month"), renamed(h.budget("org:batch"+sfx, "month")), sfx)
	}
	b := h.budget("org:batch-2", "month")
	require.Equal(t, "0.05", b.Spent)
	require.Equal(t, "0", b.Reserved)
	require.Equal(t, "0.3", h.budget("org:batch", "month").Reserved, "the two-key item reserved nothing")

	// A message of nothing but wrong envelopes writes nothing.
	seq1, _ := h.streamState()
	require.Greater(t, seq1, seq0)
	batchCall(t, h, streams.EndpointBatch, bad...)
	seq2, _ := h.streamState()
	require.Equal(t, seq1, seq2)

	// On a tenant's subject: the tenant's budgets and reservations only.
	for _, tenant := range []string{"acme", "globex"} {
		var v events.BudgetView
		require.Nil(t, h.tcall(tenant, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:search", Period: "day", Limit: "1", Unit: "USD"}, &v))
	}
	send := func(tenant string, items ...string) []json.RawMessage {
		body := `{"items":[` + strings.Join(items, ",") + `]}`
		msg, err := h.nc.Request(h.env.Layout.TenantEndpoint(tenant, streams.EndpointBatch), []byte(body), 10*time.Second)
		require.NoError(t, err)
		var rep events.BatchReply
		require.NoError(t, json.Unmarshal(msg.Data, &rep), string(msg.Data))
		require.Len(t, rep.Items, len(items))
		return rep.Items
	}
	tg := send("acme", `{"admit":{"request_id":"t1","scopes":["team:search"],"amount":"0.4"}}`)
	var a events.AdmitReply
	require.NoError(t, json.Unmarshal(tg[0], &a))
	require.True(t, a.Admitted, string(tg[0]))
	tg = send("globex", `{"release":{"reservation_id":"`+a.ReservationID+`"}}`, `{"admit":{"request_id":"t1","scopes":["team:search"],"amount":"0.7"}}`)
	var er events.ErrorReply
	require.NoError(t, json.Unmarshal(tg[0], &er))
	require.Equal(t, events.CodeUnknownReservation, er.Error.Code)
	var ga events.AdmitReply
	require.NoError(t, json.Unmarshal(tg[1], &ga))
	require.True(t, ga.Admitted && !ga.Replayed, "globex's request id t1 is its own: %s", tg[1])
	var va events.BudgetView
	require.Nil(t, h.tcall("acme", streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "team:search", Period: "day"}, &va))
	require.Equal(t, "0.4", va.Reserved)
}
