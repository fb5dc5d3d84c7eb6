package codec_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/stretchr/testify/require"
)

// requireCode checks that err is an *events.Error with code.
func requireCode(t testing.TB, err error, code events.Code) {
	t.Helper()
	require.Error(t, err)
	var e *events.Error
	require.True(t, errors.As(err, &e), "error %v (%T) is not an *events.Error", err, err)
	require.Equal(t, code, e.Code, "error: %v", err)
}

const validAdmit = `{
  "request_id": "req-42",
  "scopes": ["org:acme", "user:u-17", "key:k_9"],
  "amount": "0.05",
  "unit": "USD",
  "ttl": "30s",
  "metadata": {"model": "gpt-x", "route": "chat"}
}`

func TestDecodeRequest_AdmitRequest(t *testing.T) {
	var req events.AdmitRequest
	require.NoError(t, codec.DecodeRequest([]byte(validAdmit), &req))
	require.Equal(t, events.AdmitRequest{
		RequestID: "req-42",
		Scopes:    []string{"org:acme", "user:u-17", "key:k_9"},
		Amount:    "0.05",
		Unit:      "USD",
		TTL:       "30s",
		Metadata:  map[string]string{"model": "gpt-x", "route": "chat"},
	}, req)

	// Optional fields may be left out; trailing whitespace is not data.
	var min events.AdmitRequest
	require.NoError(t, codec.DecodeRequest([]byte(`{"request_id":"r","scopes":["org:a"],"amount":"1"}`+" \r\n\t"), &min))
	require.Equal(t, events.AdmitRequest{RequestID: "r", Scopes: []string{"org:a"}, Amount: "1"}, min)

	// An empty object decodes; validation of the values is the caller's job.
	var empty events.AdmitRequest
	require.NoError(t, codec.DecodeRequest([]byte(`{}`), &empty))
	require.Equal(t, events.AdmitRequest{}, empty)
}

func TestDecodeRequest_OtherRequests(t *testing.T) {
	var s events.SettleRequest
	require.NoError(t, codec.DecodeRequest([]byte(`{"reservation_id":"rsv_1","actual":"0.04"}`), &s))
	require.Equal(t, events.SettleRequest{ReservationID: "rsv_1", Actual: "0.04"}, s)

	var r events.ReleaseRequest
	require.NoError(t, codec.DecodeRequest([]byte(`{"reservation_id":"rsv_1"}`), &r))
	require.Equal(t, events.ReleaseRequest{ReservationID: "rsv_1"}, r)

	var p events.BudgetPutRequest
	require.NoError(t, codec.DecodeRequest([]byte(`{"scope":"org:acme","period":"month","limit":"100","unit":"USD"}`), &p))
	require.Equal(t, events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "100", Unit: "USD"}, p)

	// A field of another request is unknown here.
	requireCode(t, codec.DecodeRequest([]byte(`{"reservation_id":"rsv_1","actual":"1"}`), &r), events.CodeInvalidRequest)
}

func TestDecodeRequest_Rejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		code events.Code
	}{
		{"empty body", ``, events.CodeInvalidRequest},
		{"whitespace only", "  \n", events.CodeInvalidRequest},
		{"malformed", `{`, events.CodeInvalidRequest},
		{"missing value", `{"request_id":}`, events.CodeInvalidRequest},
		{"trailing comma", `{"request_id":"r",}`, events.CodeInvalidRequest},
		{"single quotes", `{'request_id':'r'}`, events.CodeInvalidRequest},
		{"not JSON", `request_id=r`, events.CodeInvalidRequest},
		{"invalid UTF-8 outside strings", "{\xff}", events.CodeInvalidRequest},
		{"unknown field", `{"request_id":"r","scopes":["org:a"],"amount":"1","priority":9}`, events.CodeInvalidRequest},
		{"unknown field only", `{"bogus":true}`, events.CodeInvalidRequest},
		{"trailing object", `{}{}`, events.CodeInvalidRequest},
		{"trailing object after space", "{} {}", events.CodeInvalidRequest},
		{"trailing garbage", `{"request_id":"r"}x`, events.CodeInvalidRequest},
		{"trailing bracket", `{}]`, events.CodeInvalidRequest},
		{"trailing number", `{} 1`, events.CodeInvalidRequest},
		{"trailing string", `{} ""`, events.CodeInvalidRequest},
		{"array", `[]`, events.CodeInvalidRequest},
		{"string", `"request"`, events.CodeInvalidRequest},
		{"number", `42`, events.CodeInvalidRequest},
		{"bool", `true`, events.CodeInvalidRequest},
		{"amount as number", `{"amount":0.05}`, events.CodeInvalidRequest},
		{"request_id as number", `{"request_id":42}`, events.CodeInvalidRequest},
		{"scopes as string", `{"scopes":"org:acme"}`, events.CodeInvalidRequest},
		{"scopes of numbers", `{"scopes":[1,2]}`, events.CodeInvalidRequest},
		{"ttl as number", `{"ttl":30}`, events.CodeInvalidRequest},
		{"metadata as list", `{"metadata":["a"]}`, events.CodeInvalidRequest},
		{"metadata value not string", `{"metadata":{"a":1}}`, events.CodeInvalidRequest},
		{"metadata value object", `{"metadata":{"a":{}}}`, events.CodeInvalidRequest},
		{"over MaxPayloadBytes", `{"request_id":"` + strings.Repeat("a", events.MaxPayloadBytes) + `"}`, events.CodePayloadTooLarge},
		{"one byte over MaxPayloadBytes", `{}` + strings.Repeat(" ", events.MaxPayloadBytes-1), events.CodePayloadTooLarge},
		{"malformed and too large", strings.Repeat("{", events.MaxPayloadBytes+1), events.CodePayloadTooLarge},
		{"1 MB", strings.Repeat("x", 1<<20), events.CodePayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req events.AdmitRequest
			var err error
			require.NotPanics(t, func() { err = codec.DecodeRequest([]byte(tt.in), &req) })
			requireCode(t, err, tt.code)
			require.Equal(t, tt.code, events.CodeOf(err))
			// The wire form is {code, message}; the cause stays out of it.
			b, jerr := json.Marshal(events.ErrorReply{Error: asError(t, err)})
			require.NoError(t, jerr)
			var reply map[string]map[string]any
			require.NoError(t, json.Unmarshal(b, &reply))
			require.Equal(t, string(tt.code), reply["error"]["code"])
			require.NotEmpty(t, reply["error"]["message"])
			require.Len(t, reply["error"], 2)
		})
	}
}

func TestDecodeRequest_PayloadLimit(t *testing.T) {
	// Exactly MaxPayloadBytes is allowed.
	body := `{"request_id":"r"}`
	body += strings.Repeat(" ", events.MaxPayloadBytes-len(body))
	require.Len(t, body, events.MaxPayloadBytes)
	var req events.AdmitRequest
	require.NoError(t, codec.DecodeRequest([]byte(body), &req))
	require.Equal(t, "r", req.RequestID)

	// The limit is checked before decoding: nothing is written into v.
	var big events.AdmitRequest
	err := codec.DecodeRequest([]byte(body+" "), &big)
	requireCode(t, err, events.CodePayloadTooLarge)
	require.Equal(t, events.AdmitRequest{}, big)
}

func TestDecodeRequest_Cause(t *testing.T) {
	var req events.AdmitRequest
	err := codec.DecodeRequest([]byte(`{"amount":0.05}`), &req)
	requireCode(t, err, events.CodeInvalidRequest)
	var typeErr *json.UnmarshalTypeError
	require.True(t, errors.As(err, &typeErr), "the json error is kept as the cause")
	require.Equal(t, "amount", typeErr.Field)

	err = codec.DecodeRequest([]byte(`{`), &req)
	requireCode(t, err, events.CodeInvalidRequest)
	require.True(t, errors.Is(err, &events.Error{Code: events.CodeInvalidRequest}))
	require.False(t, errors.Is(err, &events.Error{Code: events.CodePayloadTooLarge}))
}

func asError(t *testing.T, err error) *events.Error {
	t.Helper()
	var e *events.Error
	require.True(t, errors.As(err, &e))
	return e
}

// TestDecodeRequest_TypeErrors: a value of the wrong JSON type is refused
// with invalid_request and a message that names the field by its JSON name
// and says what it must be, in the API's words; encoding/json's own text
// (Go types, struct fields) never reaches the message, only the cause.
func TestDecodeRequest_TypeErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		v    any
		want string
	}{
		{`{"amount":0.05}`, &events.AdmitRequest{}, `amount must be a decimal string like "0.05", got a number`},
		{`{"amount":1e999}`, &events.AdmitRequest{}, `amount must be a decimal string like "0.05", got a number`},
		{`{"amount":true}`, &events.AdmitRequest{}, `amount must be a decimal string like "0.05", got a boolean`},
		{`{"request_id":42}`, &events.AdmitRequest{}, `request_id must be a string, got a number`},
		{`{"scopes":"org:acme"}`, &events.AdmitRequest{}, `scopes must be an array of scope strings like ["org:acme"], got a string`},
		{`{"scopes":[1,2]}`, &events.AdmitRequest{}, `scopes must be an array of scope strings like ["org:acme"]; it holds a number`},
		{`{"max_open":1e3}`, &events.TenantLimitsPutRequest{}, `max_open must be a whole number of reservations like 10000 (0: no limit), got 1e3`},
		{`{"max_open":2.5}`, &events.TenantLimitsPutRequest{}, `max_open must be a whole number of reservations like 10000 (0: no limit), got 2.5`},
		{`{"ttl":30}`, &events.AdmitRequest{}, `ttl must be a duration string like "30s", got a number`},
		{`{"metadata":["a"]}`, &events.AdmitRequest{}, `metadata must be an object of string values like {"model":"gpt-4o"}, got an array`},
		{`{"metadata":{"a":{}}}`, &events.AdmitRequest{}, `metadata must be an object of string values like {"model":"gpt-4o"}; it holds an object`},
		{`{"actual":0}`, &events.SettleRequest{}, `actual must be a decimal string like "0.05", got a number`},
		{`{"limit":[]}`, &events.BudgetPutRequest{}, `limit must be a decimal string like "0.05", got an array`},
		{`{"period":1}`, &events.BudgetGetRequest{}, `period must be one of the strings "month", "week", "day", "hour", "minute" or "lifetime", got a number`},
		{`{"kind":{}}`, &events.BudgetListRequest{}, `kind must be a scope kind string like "org", got an object`},
		{`{"request_id":}`, &events.AdmitRequest{}, `request body is not valid JSON (at byte 15): invalid character '}' looking for beginning of value`},
		{`{"request_id":"r"}x`, &events.AdmitRequest{}, `request body is not valid JSON (at byte 19): invalid character 'x' after top-level value`},
		{`{"request_id":"r"`, &events.AdmitRequest{}, `request body is not valid JSON (at byte 17): unexpected end of JSON input`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			err := codec.DecodeRequest([]byte(tc.in), tc.v)
			requireCode(t, err, events.CodeInvalidRequest)
			e := asError(t, err)
			require.Equal(t, tc.want, e.Message)
			require.NotContains(t, e.Message, "json:")
			require.NotContains(t, e.Message, "Go ")
			require.Error(t, e.Err, "the decoder's error stays the cause")
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		validAdmit,
		`{"request_id":"r","scopes":["org:a"],"amount":"1"}`,
		``, `{}`, `{}{}`, `{} `, `null`, `[]`, `{"amount":0.05}`, `{"bogus":1}`,
		`{"metadata":{"a":1}}`, `{"scopes":"org:a"}`, "{\xff}", `{"request_id":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"request_id":"` + strings.Repeat("a", events.MaxPayloadBytes) + `"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req events.AdmitRequest
		err := codec.DecodeRequest(b, &req)
		if err == nil {
			if len(b) > events.MaxPayloadBytes {
				t.Fatalf("accepted %d bytes", len(b))
			}
			return
		}
		switch code := events.CodeOf(err); code {
		case events.CodeInvalidRequest:
		case events.CodePayloadTooLarge:
			if len(b) <= events.MaxPayloadBytes {
				t.Fatalf("%d bytes reported as too large", len(b))
			}
		default:
			t.Fatalf("DecodeRequest error %v has code %s", err, code)
		}
	})
}

func BenchmarkDecodeAdmitRequest(b *testing.B) {
	body := []byte(validAdmit)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var req events.AdmitRequest
		if err := codec.DecodeRequest(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// requestTypes are the request bodies of every endpoint a client may call.
var requestTypes = []any{
	&events.AdmitRequest{}, &events.SettleRequest{}, &events.ReleaseRequest{}, &events.VoidRequest{},
	&events.BudgetPutRequest{}, &events.BudgetGetRequest{}, &events.BudgetListRequest{}, &events.BudgetRetireRequest{},
	&events.PricingPutRequest{}, &events.PricingGetRequest{}, &events.ReportRequest{},
	&events.BatchRequest{}, &events.TenantLimitsPutRequest{}, &events.TenantLimitsGetRequest{},
	&events.APIKeyCreateRequest{}, &events.APIKeyRotateRequest{}, &events.APIKeyUpdateRequest{},
	&events.APIKeyIDRequest{}, &events.APIKeyResolveRequest{},
}

// Every field of every request, sent with a value of the wrong JSON type,
// is refused with a message that says what the field must be (a caller of
// another language reads it), never "of another type".
func TestDecodeRequest_EveryFieldSaysWhatItMustBe(t *testing.T) {
	for _, v := range requestTypes {
		rt := reflect.TypeOf(v).Elem()
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			bad := `1.5` // wrong for a string, bool, array, object and whole number alike
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.String {
				bad = `"x"` // items: an array of raw objects takes any element
			}
			t.Run(rt.Name()+"."+name, func(t *testing.T) {
				err := codec.DecodeRequest([]byte(`{"`+name+`":`+bad+`}`), reflect.New(rt).Interface())
				requireCode(t, err, events.CodeInvalidRequest)
				msg := asError(t, err).Message
				require.True(t, strings.HasPrefix(msg, name+" must be "), "message %q", msg)
				require.NotContains(t, msg, "of another type")
				switch ft.Kind() {
				case reflect.Int, reflect.Int64:
					require.Contains(t, msg, "whole number")
				}
			})
		}
	}
}

// A null where a whole number goes is refused: encoding/json would leave
// the field 0, which is what leaving it out means, so a JavaScript caller's
// NaN or Infinity (JSON.stringify writes both as null) would reserve or
// settle no tokens for it instead of being refused. A null elsewhere keeps
// meaning "left out".
func TestDecodeRequest_NullWholeNumber(t *testing.T) {
	for _, tc := range []struct {
		in string
		v  any
	}{
		{`{"request_id":"r","scopes":["org:a"],"model":"m","input_tokens":100,"max_output_tokens":null}`, &events.AdmitRequest{}},
		{`{"request_id":"r","scopes":["org:a"],"model":"m","input_tokens" : null}`, &events.AdmitRequest{}},
		{`{"request_id":"r","scopes":["org:a"],"amount":"1","count":null}`, &events.AdmitRequest{}},
		{`{"reservation_id":"rsv_1","input_tokens":10,"output_tokens":null}`, &events.SettleRequest{}},
		{`{"limit":null}`, &events.BudgetListRequest{}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			err := codec.DecodeRequest([]byte(tc.in), tc.v)
			requireCode(t, err, events.CodeInvalidRequest)
			require.Contains(t, asError(t, err).Message, "must be a whole number")
			require.Contains(t, asError(t, err).Message, "got null")
		})
	}
	for _, in := range []string{
		`{"request_id":"r","scopes":["org:a"],"amount":"1","ttl":null,"metadata":null}`,
		`{"request_id":"r","scopes":["org:a"],"amount":"1","metadata":{"count":"null"}}`,
	} {
		var req events.AdmitRequest
		require.NoError(t, codec.DecodeRequest([]byte(in), &req), in)
	}
	var tl events.TenantLimitsPutRequest // a pointer: null is "not set"
	require.NoError(t, codec.DecodeRequest([]byte(`{"tenant":"acme","max_open":null}`), &tl))
	require.Nil(t, tl.MaxOpen)
}
