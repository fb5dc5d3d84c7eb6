package service_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// badCase is one request that must be refused (or, for an unknown scope,
// denied) without changing the ledger.
type badCase struct {
	name     string
	endpoint string
	// body is a struct marshalled to JSON, or raw []byte sent as is.
	body any
	// code is the expected error code; empty when denial is set.
	code events.Code
	// denial is the expected denial reason of an admit that is a reply, not
	// an error.
	denial events.Code
}

// raw builds a request body from a format with raw bytes: %s arguments are
// inserted unescaped, so "\xff" reaches the service as an invalid UTF-8 byte
// inside a JSON string.
func raw(format string, args ...any) []byte { return []byte(fmt.Sprintf(format, args...)) }

// TestBadInput sends every kind of bad input the product brief lists to
// every endpoint over NATS request-reply and requires, for each: the exact
// stable error code with a non-empty message, an unchanged ledger stream
// (last sequence and message count) and an unchanged budget view (spent,
// reserved, open).
func TestBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "1.00", "USD")
	admitOK := func(rid, amount string) string {
		r, e := h.admit(events.AdmitRequest{RequestID: rid, Scopes: []string{"org:acme"}, Amount: amount})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		return r.ReservationID
	}
	// One reservation stays open; one is settled and one released, for the
	// already_settled and already_released cases.
	open := admitOK("setup-open", "0.10")
	settled := admitOK("setup-settled", "0.10")
	_, e := h.settle(settled, "0.02")
	require.Nil(t, e)
	released := admitOK("setup-released", "0.10")
	_, e = h.release(released)
	require.Nil(t, e)

	before := h.budget("org:acme", "month")
	require.Equal(t, "0.02", before.Spent)
	require.Equal(t, "0.1", before.Reserved)
	require.EqualValues(t, 1, before.Open)

	var (
		hundredKB = strings.Repeat("1", 100<<10)
		long30    = strings.Repeat("1234567890", 3)
		long129   = strings.Repeat("a", events.MaxIDLen+1)
		nineScope = []string{"org:a1", "org:a2", "org:a3", "org:a4", "org:a5", "org:a6", "org:a7", "org:a8", "org:a9"}
	)
	adm := func(mod func(*events.AdmitRequest)) events.AdmitRequest {
		r := events.AdmitRequest{RequestID: "bad-1", Scopes: []string{"org:acme"}, Amount: "0.05"}
		mod(&r)
		return r
	}
	amount := func(s string) events.AdmitRequest {
		return adm(func(r *events.AdmitRequest) { r.Amount = s })
	}
	rid := func(s string) events.AdmitRequest {
		return adm(func(r *events.AdmitRequest) { r.RequestID = s })
	}
	scopes := func(s ...string) events.AdmitRequest {
		return adm(func(r *events.AdmitRequest) { r.Scopes = s })
	}
	ttl := func(s string) events.AdmitRequest {
		return adm(func(r *events.AdmitRequest) { r.TTL = s })
	}
	unit := func(s string) events.AdmitRequest {
		return adm(func(r *events.AdmitRequest) { r.Unit = s })
	}
	meta := func(m map[string]string) events.AdmitRequest {
		return adm(func(r *events.AdmitRequest) { r.Metadata = m })
	}
	tooMany := map[string]string{}
	for i := 0; i <= events.MaxMetadata; i++ {
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	put := func(scope, period, limit, unit string) events.BudgetPutRequest {
		return events.BudgetPutRequest{Scope: scope, Period: period, Limit: limit, Unit: unit}
	}

	const (
		admitE   = streams.EndpointAdmit
		settleE  = streams.EndpointSettle
		releaseE = streams.EndpointRelease
		putE     = streams.EndpointBudgetPut
		getE     = streams.EndpointBudgetGet
		listE    = streams.EndpointBudgetList
	)
	cases := []badCase{
		// Amounts.
		{"admit/amount negative", admitE, amount("-1"), events.CodeInvalidAmount, ""},
		{"admit/amount zero", admitE, amount("0"), events.CodeInvalidAmount, ""},
		{"admit/amount zero decimal", admitE, amount("0.000"), events.CodeInvalidAmount, ""},
		{"admit/amount NaN", admitE, amount("NaN"), events.CodeInvalidAmount, ""},
		{"admit/amount Infinity", admitE, amount("Infinity"), events.CodeInvalidAmount, ""},
		{"admit/amount exponent bomb", admitE, amount("1e999999"), events.CodeInvalidAmount, ""},
		{"admit/amount small exponent", admitE, amount("5e-2"), events.CodeInvalidAmount, ""},
		{"admit/amount 30 digits", admitE, amount(long30), events.CodeInvalidAmount, ""},
		{"admit/amount 13 fraction digits", admitE, amount("0.0000000000001"), events.CodeInvalidAmount, ""},
		{"admit/amount 100kB", admitE, amount(hundredKB), events.CodePayloadTooLarge, ""},
		{"admit/amount empty", admitE, amount(""), events.CodeInvalidAmount, ""},
		{"admit/amount plus sign", admitE, amount("+1"), events.CodeInvalidAmount, ""},
		{"admit/amount spaces", admitE, amount(" 1 "), events.CodeInvalidAmount, ""},
		{"admit/amount hex", admitE, amount("0x10"), events.CodeInvalidAmount, ""},
		{"admit/amount comma", admitE, amount("0,05"), events.CodeInvalidAmount, ""},
		{"admit/amount JSON number", admitE, raw(`{"request_id":"n1","scopes":["org:acme"],"amount":0.05}`), events.CodeInvalidRequest, ""},
		// Body shape.
		{"admit/unknown field", admitE, raw(`{"request_id":"u1","scopes":["org:acme"],"amount":"0.05","dry_run":true}`), events.CodeInvalidRequest, ""},
		{"admit/case-folded key", admitE, raw(`{"request_id":"u1","scopes":["org:acme"],"AMOUNT":"0.05"}`), events.CodeInvalidRequest, ""},
		{"admit/duplicate key", admitE, raw(`{"request_id":"u1","scopes":["org:acme"],"amount":"0.05","amount":"0.01"}`), events.CodeInvalidRequest, ""},
		{"admit/malformed JSON", admitE, raw(`{"request_id":"u1","scopes":["org:acme"],"amount":`), events.CodeInvalidRequest, ""},
		{"admit/trailing data", admitE, raw(`{"request_id":"u1","scopes":["org:acme"],"amount":"0.05"} {}`), events.CodeInvalidRequest, ""},
		{"admit/trailing garbage", admitE, raw(`{"request_id":"u1","scopes":["org:acme"],"amount":"0.05"}x`), events.CodeInvalidRequest, ""},
		{"admit/null body", admitE, raw(`null`), events.CodeInvalidRequest, ""},
		{"admit/empty body", admitE, []byte{}, events.CodeInvalidRequest, ""},
		{"admit/array body", admitE, raw(`[]`), events.CodeInvalidRequest, ""},
		{"admit/string body", admitE, raw(`"admit"`), events.CodeInvalidRequest, ""},
		{"admit/scopes wrong type", admitE, raw(`{"request_id":"u1","scopes":"org:acme","amount":"0.05"}`), events.CodeInvalidRequest, ""},
		// Request ids.
		{"admit/request_id star", admitE, rid("*"), events.CodeInvalidIdentifier, ""},
		{"admit/request_id gt", admitE, rid(">"), events.CodeInvalidIdentifier, ""},
		{"admit/request_id dot", admitE, rid("a.b"), events.CodeInvalidIdentifier, ""},
		{"admit/request_id space", admitE, rid("a b"), events.CodeInvalidIdentifier, ""},
		{"admit/request_id invalid UTF-8", admitE, raw("{\"request_id\":\"r\xff1\",\"scopes\":[\"org:acme\"],\"amount\":\"0.05\"}"), events.CodeInvalidIdentifier, ""},
		{"admit/request_id non-ASCII", admitE, rid("réq"), events.CodeInvalidIdentifier, ""},
		{"admit/request_id empty", admitE, rid(""), events.CodeInvalidIdentifier, ""},
		{"admit/request_id missing", admitE, raw(`{"scopes":["org:acme"],"amount":"0.05"}`), events.CodeInvalidIdentifier, ""},
		{"admit/request_id 129 chars", admitE, rid(long129), events.CodeInvalidIdentifier, ""},
		// Scopes.
		{"admit/scope id star", admitE, scopes("org:*"), events.CodeInvalidIdentifier, ""},
		{"admit/scope id gt", admitE, scopes("org:>"), events.CodeInvalidIdentifier, ""},
		{"admit/scope id dot", admitE, scopes("org:a.b"), events.CodeInvalidIdentifier, ""},
		{"admit/scope id space", admitE, scopes("org:a b"), events.CodeInvalidIdentifier, ""},
		{"admit/scope invalid UTF-8", admitE, raw("{\"request_id\":\"s1\",\"scopes\":[\"org:\xffacme\"],\"amount\":\"0.05\"}"), events.CodeInvalidIdentifier, ""},
		{"admit/scope empty", admitE, scopes(""), events.CodeInvalidIdentifier, ""},
		{"admit/scope empty id", admitE, scopes("org:"), events.CodeInvalidIdentifier, ""},
		{"admit/scope empty kind", admitE, scopes(":acme"), events.CodeInvalidIdentifier, ""},
		{"admit/scope id 129 chars", admitE, scopes("org:" + long129), events.CodeInvalidIdentifier, ""},
		{"admit/scope kind 33 chars", admitE, scopes(strings.Repeat("k", events.MaxKindLen+1) + ":acme"), events.CodeInvalidIdentifier, ""},
		{"admit/scope without colon", admitE, scopes("acme"), events.CodeInvalidIdentifier, ""},
		{"admit/scope two colons", admitE, scopes("org:acme:x"), events.CodeInvalidIdentifier, ""},
		{"admit/scope upper-case kind", admitE, scopes("ORG:acme"), events.CodeInvalidIdentifier, ""},
		{"admit/scope kind starts with digit", admitE, scopes("1org:acme"), events.CodeInvalidIdentifier, ""},
		{"admit/scope one bad among good", admitE, scopes("org:acme", "user:*"), events.CodeInvalidIdentifier, ""},
		{"admit/too many scopes", admitE, scopes(nineScope...), events.CodeInvalidRequest, ""},
		// A scope twice (an earlier build admitted it, reserved once) is
		// refused, in any position.
		{"admit/scope twice", admitE, scopes("org:acme", "org:acme"), events.CodeInvalidRequest, ""},
		{"admit/scope twice among others", admitE, scopes("org:acme", "user:x", "org:acme"), events.CodeInvalidRequest, ""},
		{"admit/no scopes", admitE, scopes(), events.CodeInvalidRequest, ""},
		{"admit/scopes missing", admitE, raw(`{"request_id":"s2","amount":"0.05"}`), events.CodeInvalidRequest, ""},
		{"admit/unknown scope", admitE, scopes("org:ghost"), "", events.ReasonUnknownBudget},
		{"admit/unknown scope with known one", admitE, scopes("org:acme", "user:ghost"), "", events.ReasonUnknownBudget},
		// TTL.
		{"admit/ttl not a duration", admitE, ttl("abc"), events.CodeInvalidTTL, ""},
		{"admit/ttl zero", admitE, ttl("0s"), events.CodeInvalidTTL, ""},
		{"admit/ttl negative", admitE, ttl("-5s"), events.CodeInvalidTTL, ""},
		{"admit/ttl below minimum", admitE, ttl("1ms"), events.CodeInvalidTTL, ""},
		{"admit/ttl above maximum", admitE, ttl("25h"), events.CodeInvalidTTL, ""},
		{"admit/ttl huge", admitE, ttl("999999h"), events.CodeInvalidTTL, ""},
		{"admit/ttl overflow", admitE, ttl("99999999999h"), events.CodeInvalidTTL, ""},
		// Units.
		{"admit/unit unknown", admitE, unit("XYZ"), events.CodeInvalidUnit, ""},
		{"admit/unit lower case", admitE, unit("usd"), events.CodeInvalidUnit, ""},
		{"admit/unit requests", admitE, unit("requests"), events.CodeInvalidUnit, ""},
		// Metadata.
		{"admit/metadata too many entries", admitE, meta(tooMany), events.CodeInvalidMetadata, ""},
		{"admit/metadata oversized value", admitE, meta(map[string]string{"model": strings.Repeat("v", events.MaxMetaLen+1)}), events.CodeInvalidMetadata, ""},
		{"admit/metadata key with dot", admitE, meta(map[string]string{"a.b": "v"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata key with space", admitE, meta(map[string]string{"a b": "v"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata empty key", admitE, meta(map[string]string{"": "v"}), events.CodeInvalidMetadata, ""},
		// Values are one line of text: reports group by them and the
		// export and dashboard show them.
		{"admit/metadata value with newline", admitE, meta(map[string]string{"model": "gpt\nx"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata value with NUL", admitE, meta(map[string]string{"model": "gpt\x00"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata value with DEL", admitE, meta(map[string]string{"model": "gpt\x7f"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata value with a right-to-left override", admitE, meta(map[string]string{"team": "fin\u202eecna"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata value with an isolate", admitE, meta(map[string]string{"team": "a\u2067b\u2069"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata value with a right-to-left mark", admitE, meta(map[string]string{"team": "a\u200fb"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata value with C1", admitE, meta(map[string]string{"model": "gpt\u0085"}), events.CodeInvalidMetadata, ""},
		{"admit/metadata value invalid UTF-8", admitE, raw("{\"request_id\":\"m2\",\"scopes\":[\"org:acme\"],\"amount\":\"0.05\",\"metadata\":{\"model\":\"gpt\xff\"}}"), events.CodeInvalidMetadata, ""},
		{"admit/metadata wrong type", admitE, raw(`{"request_id":"m1","scopes":["org:acme"],"amount":"0.05","metadata":{"n":1}}`), events.CodeInvalidRequest, ""},

		// Settle.
		{"settle/unknown reservation", settleE, events.SettleRequest{ReservationID: "rsv_nope", Actual: "0.01"}, events.CodeUnknownReservation, ""},
		{"settle/actual negative", settleE, events.SettleRequest{ReservationID: open, Actual: "-0.01"}, events.CodeInvalidAmount, ""},
		{"settle/actual not a number", settleE, events.SettleRequest{ReservationID: open, Actual: "abc"}, events.CodeInvalidAmount, ""},
		{"settle/actual NaN", settleE, events.SettleRequest{ReservationID: open, Actual: "NaN"}, events.CodeInvalidAmount, ""},
		{"settle/actual Infinity", settleE, events.SettleRequest{ReservationID: open, Actual: "Infinity"}, events.CodeInvalidAmount, ""},
		{"settle/actual exponent bomb", settleE, events.SettleRequest{ReservationID: open, Actual: "1e999999"}, events.CodeInvalidAmount, ""},
		{"settle/actual 30 digits", settleE, events.SettleRequest{ReservationID: open, Actual: long30}, events.CodeInvalidAmount, ""},
		{"settle/actual 100kB", settleE, events.SettleRequest{ReservationID: open, Actual: hundredKB}, events.CodePayloadTooLarge, ""},
		{"settle/actual empty", settleE, events.SettleRequest{ReservationID: open}, events.CodeInvalidAmount, ""},
		{"settle/actual JSON number", settleE, raw(`{"reservation_id":%q,"actual":0.05}`, open), events.CodeInvalidRequest, ""},
		{"settle/reservation_id star", settleE, events.SettleRequest{ReservationID: "*", Actual: "0.01"}, events.CodeInvalidIdentifier, ""},
		{"settle/reservation_id gt", settleE, events.SettleRequest{ReservationID: ">", Actual: "0.01"}, events.CodeInvalidIdentifier, ""},
		{"settle/reservation_id dot", settleE, events.SettleRequest{ReservationID: "rsv.1", Actual: "0.01"}, events.CodeInvalidIdentifier, ""},
		{"settle/reservation_id space", settleE, events.SettleRequest{ReservationID: "rsv 1", Actual: "0.01"}, events.CodeInvalidIdentifier, ""},
		{"settle/reservation_id invalid UTF-8", settleE, raw("{\"reservation_id\":\"rsv_\xff\",\"actual\":\"0.01\"}"), events.CodeInvalidIdentifier, ""},
		{"settle/reservation_id empty", settleE, events.SettleRequest{Actual: "0.01"}, events.CodeInvalidIdentifier, ""},
		{"settle/reservation_id 129 chars", settleE, events.SettleRequest{ReservationID: long129, Actual: "0.01"}, events.CodeInvalidIdentifier, ""},
		{"settle/unknown field", settleE, raw(`{"reservation_id":%q,"actual":"0.01","usage":{}}`, open), events.CodeInvalidRequest, ""},
		{"settle/case-folded key", settleE, raw(`{"reservation_id":%q,"ACTUAL":"0.01"}`, open), events.CodeInvalidRequest, ""},
		{"settle/duplicate key", settleE, raw(`{"reservation_id":%q,"actual":"0.01","actual":"0.02"}`, open), events.CodeInvalidRequest, ""},
		{"settle/malformed JSON", settleE, raw(`{"reservation_id":`), events.CodeInvalidRequest, ""},
		{"settle/trailing data", settleE, raw(`{"reservation_id":%q,"actual":"0.01"}{}`, open), events.CodeInvalidRequest, ""},
		{"settle/null body", settleE, raw(`null`), events.CodeInvalidRequest, ""},
		{"settle/empty body", settleE, []byte{}, events.CodeInvalidRequest, ""},
		{"settle/settled with another actual", settleE, events.SettleRequest{ReservationID: settled, Actual: "0.03"}, events.CodeAlreadySettled, ""},
		{"settle/released", settleE, events.SettleRequest{ReservationID: released, Actual: "0.01"}, events.CodeAlreadyReleased, ""},

		// Release.
		{"release/unknown reservation", releaseE, events.ReleaseRequest{ReservationID: "rsv_nope"}, events.CodeUnknownReservation, ""},
		{"release/settled", releaseE, events.ReleaseRequest{ReservationID: settled}, events.CodeAlreadySettled, ""},
		{"release/reservation_id star", releaseE, events.ReleaseRequest{ReservationID: "*"}, events.CodeInvalidIdentifier, ""},
		{"release/reservation_id gt", releaseE, events.ReleaseRequest{ReservationID: ">"}, events.CodeInvalidIdentifier, ""},
		{"release/reservation_id dot", releaseE, events.ReleaseRequest{ReservationID: "rsv.1"}, events.CodeInvalidIdentifier, ""},
		{"release/reservation_id space", releaseE, events.ReleaseRequest{ReservationID: "rsv 1"}, events.CodeInvalidIdentifier, ""},
		{"release/reservation_id invalid UTF-8", releaseE, raw("{\"reservation_id\":\"rsv_\xff\"}"), events.CodeInvalidIdentifier, ""},
		{"release/reservation_id empty", releaseE, events.ReleaseRequest{}, events.CodeInvalidIdentifier, ""},
		{"release/reservation_id 129 chars", releaseE, events.ReleaseRequest{ReservationID: long129}, events.CodeInvalidIdentifier, ""},
		{"release/unknown field", releaseE, raw(`{"reservation_id":%q,"reason":"x"}`, open), events.CodeInvalidRequest, ""},
		{"release/case-folded key", releaseE, raw(`{"RESERVATION_ID":%q}`, open), events.CodeInvalidRequest, ""},
		{"release/duplicate key", releaseE, raw(`{"reservation_id":%q,"reservation_id":%q}`, open, open), events.CodeInvalidRequest, ""},
		{"release/malformed JSON", releaseE, raw(`{"reservation_id"`), events.CodeInvalidRequest, ""},
		{"release/trailing data", releaseE, raw(`{"reservation_id":%q} 1`, open), events.CodeInvalidRequest, ""},
		{"release/null body", releaseE, raw(`null`), events.CodeInvalidRequest, ""},
		{"release/empty body", releaseE, []byte{}, events.CodeInvalidRequest, ""},
		{"release/100kB", releaseE, events.ReleaseRequest{ReservationID: hundredKB}, events.CodePayloadTooLarge, ""},

		// Budget put.
		{"budget.put/period fortnight", putE, put("org:acme", "fortnight", "5", "USD"), events.CodeInvalidPeriod, ""},
		{"budget.put/period upper case", putE, put("org:acme", "Month", "5", "USD"), events.CodeInvalidPeriod, ""},
		{"budget.put/period empty", putE, put("org:acme", "", "5", "USD"), events.CodeInvalidPeriod, ""},
		{"budget.put/limit negative", putE, put("org:acme", "month", "-5", "USD"), events.CodeInvalidAmount, ""},
		{"budget.put/limit NaN", putE, put("org:acme", "month", "NaN", "USD"), events.CodeInvalidAmount, ""},
		{"budget.put/limit Infinity", putE, put("org:acme", "month", "Infinity", "USD"), events.CodeInvalidAmount, ""},
		{"budget.put/limit exponent bomb", putE, put("org:acme", "month", "1e999999", "USD"), events.CodeInvalidAmount, ""},
		{"budget.put/limit 30 digits", putE, put("org:acme", "month", long30, "USD"), events.CodeInvalidAmount, ""},
		{"budget.put/limit 100kB", putE, put("org:acme", "month", hundredKB, "USD"), events.CodePayloadTooLarge, ""},
		{"budget.put/limit empty with replace", putE, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Unit: "USD", Replace: true}, events.CodeInvalidAmount, ""},
		{"budget.put/limit empty to define", putE, put("org:new", "month", "", "USD"), events.CodeInvalidAmount, ""},
		{"budget.put/limit zero without allow_zero", putE, put("org:acme", "month", "0", "USD"), events.CodeInvalidAmount, ""},
		{"budget.put/tz unknown", putE, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "5", Unit: "USD", TZ: new("Mars/Olympus")}, events.CodeInvalidTZ, ""},
		{"budget.put/tz Local", putE, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "5", Unit: "USD", TZ: new("Local")}, events.CodeInvalidTZ, ""},
		{"budget.put/unit change with spend", putE, put("org:acme", "month", "1.00", "EUR"), events.CodeUnitChangeRefused, ""},
		{"budget.put/disabled not a boolean", putE, raw(`{"scope":"org:acme","period":"month","limit":"1","unit":"USD","disabled":"yes"}`), events.CodeInvalidRequest, ""},
		{"admit/mode unknown", admitE, adm(func(r *events.AdmitRequest) { r.Mode = "dry-run" }), events.CodeInvalidMode, ""},
		{"admit/check over the limit", admitE, adm(func(r *events.AdmitRequest) { r.Mode = events.ModeCheck; r.Amount = "5" }), "", events.ReasonLimitReached},
		{"budget.put/limit JSON number", putE, raw(`{"scope":"org:acme","period":"month","limit":5,"unit":"USD"}`), events.CodeInvalidRequest, ""},
		{"budget.put/unit lower case", putE, put("org:acme", "month", "5", "usd"), events.CodeInvalidUnit, ""},
		{"budget.put/unit unknown", putE, put("org:acme", "month", "5", "XYZ"), events.CodeInvalidUnit, ""},
		{"budget.put/unit empty with replace", putE, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "5", Replace: true}, events.CodeInvalidUnit, ""},
		{"budget.put/unit empty to define", putE, put("org:new", "month", "5", ""), events.CodeInvalidUnit, ""},
		{"budget.put/scope star", putE, put("org:a*", "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope gt", putE, put("org:>", "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope dot", putE, put("org:a.b", "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope space", putE, put("org:a b", "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope invalid UTF-8", putE, raw("{\"scope\":\"org:\xff\",\"period\":\"month\",\"limit\":\"5\",\"unit\":\"USD\"}"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope empty", putE, put("", "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope 129 chars", putE, put("org:"+long129, "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope without colon", putE, put("acme", "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/scope upper-case kind", putE, put("ORG:acme", "month", "5", "USD"), events.CodeInvalidIdentifier, ""},
		{"budget.put/unknown field", putE, raw(`{"scope":"org:acme","period":"month","limit":"5","unit":"USD","default":true}`), events.CodeInvalidRequest, ""},
		{"budget.put/case-folded key", putE, raw(`{"scope":"org:acme","period":"month","LIMIT":"5","unit":"USD"}`), events.CodeInvalidRequest, ""},
		{"budget.put/duplicate key", putE, raw(`{"scope":"org:acme","period":"month","limit":"5","limit":"6","unit":"USD"}`), events.CodeInvalidRequest, ""},
		{"budget.put/malformed JSON", putE, raw(`{"scope":"org:acme",`), events.CodeInvalidRequest, ""},
		{"budget.put/trailing data", putE, raw(`{"scope":"org:acme","period":"month","limit":"5","unit":"USD"}]`), events.CodeInvalidRequest, ""},
		{"budget.put/null body", putE, raw(`null`), events.CodeInvalidRequest, ""},
		{"budget.put/empty body", putE, []byte{}, events.CodeInvalidRequest, ""},

		// Budget get.
		{"budget.get/undefined budget", getE, events.BudgetGetRequest{Scope: "org:ghost", Period: "month"}, events.CodeUnknownBudget, ""},
		{"budget.get/undefined period", getE, events.BudgetGetRequest{Scope: "org:acme", Period: "day"}, events.CodeUnknownBudget, ""},
		{"budget.get/scope star", getE, events.BudgetGetRequest{Scope: "org:a*", Period: "month"}, events.CodeInvalidIdentifier, ""},
		{"budget.get/scope gt", getE, events.BudgetGetRequest{Scope: "org:>", Period: "month"}, events.CodeInvalidIdentifier, ""},
		{"budget.get/scope dot", getE, events.BudgetGetRequest{Scope: "org:a.b", Period: "month"}, events.CodeInvalidIdentifier, ""},
		{"budget.get/scope space", getE, events.BudgetGetRequest{Scope: "org: acme", Period: "month"}, events.CodeInvalidIdentifier, ""},
		{"budget.get/scope invalid UTF-8", getE, raw("{\"scope\":\"\xff:acme\",\"period\":\"month\"}"), events.CodeInvalidIdentifier, ""},
		{"budget.get/scope empty", getE, events.BudgetGetRequest{Period: "month"}, events.CodeInvalidIdentifier, ""},
		{"budget.get/scope 129 chars", getE, events.BudgetGetRequest{Scope: "org:" + long129, Period: "month"}, events.CodeInvalidIdentifier, ""},
		{"budget.get/period fortnight", getE, events.BudgetGetRequest{Scope: "org:acme", Period: "fortnight"}, events.CodeInvalidPeriod, ""},
		{"budget.get/unknown field", getE, raw(`{"scope":"org:acme","period":"month","at":"now"}`), events.CodeInvalidRequest, ""},
		{"budget.get/case-folded key", getE, raw(`{"SCOPE":"org:acme","period":"month"}`), events.CodeInvalidRequest, ""},
		{"budget.get/duplicate key", getE, raw(`{"scope":"org:acme","scope":"org:ghost","period":"month"}`), events.CodeInvalidRequest, ""},
		{"budget.get/malformed JSON", getE, raw(`{"scope":}`), events.CodeInvalidRequest, ""},
		{"budget.get/trailing data", getE, raw(`{"scope":"org:acme","period":"month"}{"scope":"org:acme"}`), events.CodeInvalidRequest, ""},
		{"budget.get/null body", getE, raw(`null`), events.CodeInvalidRequest, ""},
		{"budget.get/empty body", getE, []byte{}, events.CodeInvalidRequest, ""},
		{"budget.get/100kB", getE, events.BudgetGetRequest{Scope: "org:" + hundredKB, Period: "month"}, events.CodePayloadTooLarge, ""},

		// Budget list. (An empty body lists every budget: it is the one
		// endpoint whose request has no required field.)
		{"budget.list/kind with dot", listE, events.BudgetListRequest{Kind: "a.b"}, events.CodeInvalidIdentifier, ""},
		{"budget.list/kind star", listE, events.BudgetListRequest{Kind: "*"}, events.CodeInvalidIdentifier, ""},
		{"budget.list/kind gt", listE, events.BudgetListRequest{Kind: ">"}, events.CodeInvalidIdentifier, ""},
		{"budget.list/kind space", listE, events.BudgetListRequest{Kind: "o rg"}, events.CodeInvalidIdentifier, ""},
		{"budget.list/kind invalid UTF-8", listE, raw("{\"kind\":\"\xff\"}"), events.CodeInvalidIdentifier, ""},
		{"budget.list/kind too long", listE, events.BudgetListRequest{Kind: strings.Repeat("k", events.MaxKindLen+1)}, events.CodeInvalidIdentifier, ""},
		{"budget.list/unknown field", listE, raw(`{"kind":"org","page":10}`), events.CodeInvalidRequest, ""},
		{"budget.list/limit negative", listE, events.BudgetListRequest{Limit: -1}, events.CodeInvalidRequest, ""},
		{"budget.list/limit over max", listE, events.BudgetListRequest{Limit: events.MaxBudgetPage + 1}, events.CodeInvalidRequest, ""},
		{"budget.list/limit as string", listE, raw(`{"limit":"10"}`), events.CodeInvalidRequest, ""},
		{"budget.list/sort unknown", listE, events.BudgetListRequest{Sort: "spent"}, events.CodeInvalidRequest, ""},
		{"budget.list/cursor forged", listE, events.BudgetListRequest{Cursor: "e30"}, events.CodeInvalidRequest, ""},
		{"budget.list/case-folded key", listE, raw(`{"KIND":"org"}`), events.CodeInvalidRequest, ""},
		{"budget.list/duplicate key", listE, raw(`{"kind":"org","kind":"user"}`), events.CodeInvalidRequest, ""},
		{"budget.list/malformed JSON", listE, raw(`{"kind"`), events.CodeInvalidRequest, ""},
		{"budget.list/trailing data", listE, raw(`{"kind":"org"}"x"`), events.CodeInvalidRequest, ""},
		{"budget.list/null body", listE, raw(`null`), events.CodeInvalidRequest, ""},
		{"budget.list/100kB", listE, events.BudgetListRequest{Kind: hundredKB}, events.CodePayloadTooLarge, ""},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if b, ok := c.body.([]byte); ok && c.code == events.CodePayloadTooLarge {
				require.Greater(t, len(b), events.MaxPayloadBytes)
			}
			seq, msgs := h.streamState()
			var reply json.RawMessage
			got := h.call(c.endpoint, c.body, &reply)
			if c.denial != "" {
				require.Nil(t, got, "an unknown scope is a denial, not an error")
				var ar events.AdmitReply
				require.NoError(t, json.Unmarshal(reply, &ar))
				require.False(t, ar.Admitted, string(reply))
				require.NotNil(t, ar.Denial, string(reply))
				require.Equal(t, c.denial, ar.Denial.Reason)
				require.NotEmpty(t, ar.Denial.Message)
				require.Empty(t, ar.ReservationID)
			} else {
				require.NotNil(t, got, "expected %s, got reply %s", c.code, string(reply))
				require.Equal(t, c.code, got.Code, got.Message)
				require.NotEmpty(t, got.Message)
				require.NotContains(t, got.Message, "Go struct", "messages speak the API's words")
				require.NotContains(t, got.Message, "json:", "messages speak the API's words")
				if field, _, ok := strings.Cut(c.name[strings.Index(c.name, "/")+1:], " "); ok && c.code == events.CodeInvalidAmount &&
					(field == "amount" || field == "actual" || field == "limit") && !strings.Contains(c.name, "zero") {
					// A bad amount names the request's field, as it is
					// spelled in the body: a settle's "actual".
					require.True(t, strings.HasPrefix(got.Message, field+" "), "%q does not start with the field %q", got.Message, field)
				}
				if c.name == "admit/ttl above maximum" {
					require.True(t, strings.HasPrefix(got.Message, "ttl 25h is outside"), "the ttl as the caller wrote it: %q", got.Message)
				}
				switch c.code {
				case events.CodeAlreadySettled, events.CodeAlreadyReleased, events.CodeIdempotencyMismatch:
					require.NotEmpty(t, got.Status, "a refusal about a reservation names its state")
					require.NotEmpty(t, got.ReservationID)
				default:
					require.Empty(t, got.Status)
					require.Empty(t, got.ReservationID)
				}
			}
			seq2, msgs2 := h.streamState()
			require.Equal(t, seq, seq2, "stream last sequence moved")
			require.Equal(t, msgs, msgs2, "stream message count moved")
			require.Equal(t, before, h.budget("org:acme", "month"), "budget view changed")
		})
	}

	// The reservations keep their state after all of the above.
	_, e = h.settle(settled, "0.020")
	require.Nil(t, e, "the settled reservation still replays its own actual")
	r, e := h.release(released)
	require.Nil(t, e)
	require.True(t, r.Replayed)
	require.Equal(t, before, h.budget("org:acme", "month"))
}
