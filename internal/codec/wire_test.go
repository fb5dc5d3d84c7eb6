package codec

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
)

// The fast request decoders decode exactly what the strict decoder does,
// or decline: for any body, DecodeRequest (fast path first) and
// decodeRequestSlow give the same value and the same error.
func FuzzDecodeRequestFast(f *testing.F) {
	for _, s := range []string{
		`{"request_id":"r1","scopes":["org:acme","user:u1"],"amount":"0.05","unit":"USD","ttl":"30s","metadata":{"model":"gpt-4o"},"mode":"check"}`,
		`{"reservation_id":"rsv_1","actual":"0.01"}`,
		`{"reservation_id":"rsv_1"}`,
		`{"request_id":"r1","scopes":[],"amount":"1","metadata":{},"brief":true}`,
		`{"request_id":"r1","scopes":["org:a"],"amount":"1","retry":true}`,
		`{"brief":false}`,
		`{"brief":"yes"}`,
		`{"request_id":"r1","request_id":"r2"}`,
		`{"REQUEST_ID":"r1"}`,
		`{"request_id":"\u00e9","scopes":null}`,
		` { "amount" : "1" } `,
		`{"amount":1}`,
		`{"scopes":["a",1]}`,
		`{"metadata":{"a":"1","a":"2"}}`,
		`{"actual":"1"} x`,
		"{\"unit\":\"\xff\"}",
		`{"reservation_id":"a","actual":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(fast, slow any) {
			ef, es := DecodeRequest(data, fast), decodeRequest(data, slow, false)
			if (ef == nil) != (es == nil) || (ef != nil && ef.Error() != es.Error()) {
				t.Fatalf("%q: errors differ: fast %v, slow %v", data, ef, es)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%q: values differ: fast %#v, slow %#v", data, fast, slow)
			}
		}
		check(&events.AdmitRequest{}, &events.AdmitRequest{})
		check(&events.SettleRequest{}, &events.SettleRequest{})
		check(&events.ReleaseRequest{}, &events.ReleaseRequest{})
		check(&events.AdmitRequest{RequestID: "x", Scopes: []string{"y"}}, &events.AdmitRequest{RequestID: "x", Scopes: []string{"y"}})
	})
}

// The append encoders write the bytes encoding/json writes.
func FuzzAppendWire(f *testing.F) {
	f.Add("r1", "org:acme", "0.05", "USD", "30s", "model", "<gpt&4o>\u2028", true, int64(1764590400123456789))
	f.Add("", "", "", "", "", "", "", false, int64(0))
	f.Add("\x00\xff\"\\", "é", "1e3", "\t", "\n", "k", "v", true, int64(-1))
	f.Fuzz(func(t *testing.T, a, b, c, d, e, k, v string, flag bool, nanos int64) {
		at := time.Unix(0, nanos).UTC()
		if at.Year() < 0 || at.Year() > 9999 {
			at = time.Unix(0, 0)
		}
		same := func(name string, got []byte, val any) {
			want, err := json.Marshal(val)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("%s:\n got %s\nwant %s", name, got, want)
			}
		}
		var md map[string]string
		if flag {
			md = map[string]string{k: v, v: a}
		}
		var scopes []string
		if a != "" {
			scopes = []string{b, c}
		}
		ar := events.AdmitRequest{RequestID: a, Scopes: scopes, Amount: b, Unit: c, TTL: d, Metadata: md, Mode: e, Brief: flag}
		same("admit request", AppendAdmitRequest(nil, &ar), ar)
		ar.Model, ar.InputTokens, ar.InputChars, ar.MaxOutputTokens, ar.Count = k, nanos, -nanos, nanos%1000, nanos%7
		same("priced admit request", AppendAdmitRequest(nil, &ar), ar)
		sr := events.SettleRequest{ReservationID: a, Actual: b}
		same("settle request", AppendSettleRequest(nil, &sr), sr)
		sr = events.SettleRequest{ReservationID: a, Actual: b, InputTokens: nanos, OutputTokens: nanos % 5, CachedInputTokens: -nanos}
		same("settle request with usage", AppendSettleRequest(nil, &sr), sr)
		rr := events.ReleaseRequest{ReservationID: c}
		same("release request", AppendReleaseRequest(nil, &rr), rr)

		refs := []events.BalanceRef{{Scope: events.Scope(a), Period: events.Period(b), Instance: c}}
		if !flag {
			refs = nil
		}
		reply := events.AdmitReply{Admitted: flag, RequestID: a, ReservationID: b, Amount: c, Unit: d, Balances: refs, Status: e, Replayed: flag, Mode: k}
		if flag {
			reply.ExpiresAt = &at
			reply.Budgets = []events.BudgetUse{{Scope: events.Scope(a), Period: events.Period(b), Instance: c, Unit: d, Limit: e, Amount: k, Spent: v, Reserved: a, Available: b}}
		} else {
			reply.Denial = &events.Denial{Reason: events.Code(a), Message: b, Scope: events.Scope(c), Period: events.Period(d), Instance: e, Unit: k, Limit: v, Spent: a, Reserved: "", Requested: c}
		}
		same("admit reply", AppendAdmitReply(nil, &reply), reply)
		if flag {
			reply.Pricing = &events.PriceQuote{Model: k, Version: uint64(nanos & 0xffff), Unit: d, Input: events.MustMoney("2.5"), Output: events.MustMoney("10"), InputTokens: nanos, MaxOutputTokens: 3}
		} else {
			reply.Denial.Model = v
			reset := at.UTC()
			reply.Denial.ResetsAt = &reset
		}
		same("admit reply with pricing or model", AppendAdmitReply(nil, &reply), reply)
		cr := events.CloseReply{ReservationID: a, Status: b, Reserved: c, Actual: d, Overrun: e, Late: flag, Balances: refs, Replayed: !flag}
		same("close reply", AppendCloseReply(nil, &cr), cr)
		cr.Usage = &events.Usage{InputTokens: nanos, OutputTokens: 2, PriceVersion: 9}
		same("close reply with usage", AppendCloseReply(nil, &cr), cr)
		alongside := []events.BalanceRef{{Scope: events.Scope(a), Period: events.Period(b), Instance: c, Unit: d}}
		cr.Balances = alongside
		same("close reply with a unit ref", AppendCloseReply(nil, &cr), cr)
		cr.Budgets = []events.BudgetClose{{Scope: events.Scope(a), Period: events.Period(b), Instance: c, Unit: d, Reserved: e, Actual: k, Overrun: v}, {Scope: events.Scope(b)}}
		same("close reply with budgets", AppendCloseReply(nil, &cr), cr)
		er := events.ErrorReply{Error: &events.Error{Code: events.Code(a), Message: b, ReservationID: c, Status: d}}
		same("error reply", AppendErrorReply(nil, &er), er)
		same("nil error reply", AppendErrorReply(nil, &events.ErrorReply{}), events.ErrorReply{})

		// And the reply decoders read them back as encoding/json does.
		var got, want events.AdmitReply
		data := AppendAdmitReply(nil, &reply)
		if err := DecodeAdmitReply(data, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("admit reply %s decoded as %#v, want %#v", data, got, want)
		}
	})
}

// The reply decoders decode what json.Unmarshal does, and fail when it
// fails.
func FuzzDecodeReplies(f *testing.F) {
	for _, s := range []string{
		`{"admitted":true,"request_id":"r","reservation_id":"rsv_1","amount":"0.05","unit":"USD","balances":[{"scope":"org:a","period":"month","instance":"2026-11"}],"expires_at":"2026-12-01T05:00:00.123Z","status":"open","budgets":[{"scope":"org:a","period":"month","instance":"2026-11","unit":"USD","limit":"1","amount":"0.05","spent":"0","reserved":"0.05","available":"0.95"}]}`,
		`{"admitted":false,"request_id":"r","denial":{"reason":"limit_reached","message":"m","scope":"org:a","period":"month"}}`,
		`{"admitted":false,"request_id":"r","denial":{"reason":"limit_reached","message":"m","scope":"org:a","period":"month","resets_at":"2027-01-01T05:00:00Z"}}`,
		`{"admitted":false,"request_id":"r","denial":{"reason":"limit_reached","resets_at":"2027-01-01 05:00"}}`,
		`{"reservation_id":"rsv_1","status":"settled","reserved":"0.05","actual":"0.04","balances":[{"scope":"org:a","period":"month","instance":"2026-11"}],"replayed":true}`,
		`{"admitted":true,"admitted":false}`,
		`{"expires_at":"not a time"}`,
		`{"balances":null}`,
		`{"items":[{"a":1},{"b":"]"}]}`,
		`{"items":[{},"x"]}`,
		`{"items":[]}`,
		`{"items":[{}{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ga, wa events.AdmitReply
		eg, ew := DecodeAdmitReply(data, &ga), json.Unmarshal(data, &wa)
		if (eg == nil) != (ew == nil) || (eg == nil && !reflect.DeepEqual(ga, wa)) {
			t.Fatalf("admit reply %q: got %#v (%v), want %#v (%v)", data, ga, eg, wa, ew)
		}
		var gc, wc events.CloseReply
		eg, ew = DecodeCloseReply(data, &gc), json.Unmarshal(data, &wc)
		if (eg == nil) != (ew == nil) || (eg == nil && !reflect.DeepEqual(gc, wc)) {
			t.Fatalf("close reply %q: got %#v (%v), want %#v (%v)", data, gc, eg, wc, ew)
		}
		items, eg := DecodeBatchReply(data)
		var wb events.BatchReply
		ew = json.Unmarshal(data, &wb)
		if (eg == nil) != (ew == nil) || (eg == nil && !reflect.DeepEqual(items, wb.Items)) {
			t.Fatalf("batch reply %q: got %q (%v), want %q (%v)", data, items, eg, wb.Items, ew)
		}
		// SplitBatchReply agrees with encoding/json on every reply
		// encoding/json accepts; what it accepts beyond that has an
		// item that is not valid JSON (which its caller's strict decoder
		// then refuses).
		if split, es := SplitBatchReply(data); ew == nil {
			if es != nil || !reflect.DeepEqual(split, wb.Items) {
				t.Fatalf("split batch reply %q: got %q (%v), want %q", data, split, es, wb.Items)
			}
		} else if es == nil && !slices.ContainsFunc(split, func(it json.RawMessage) bool { return !json.Valid(it) }) {
			t.Fatalf("split batch reply %q: accepted %q, every item valid, where encoding/json says %v", data, split, ew)
		}
		if eg == nil && strings.HasPrefix(string(data), batchReplyHead) {
			raw := make([][]byte, len(items))
			for i, it := range items {
				raw[i] = it
			}
			_ = EncodeBatchReply(raw)
		}
	})
}

// The hand-written codecs know every field of their types: a field added to
// one of them must be added to its encoder and decoder too (this test
// fails until the counts here are updated with them).
func TestWireCodec_KnowsEveryField(t *testing.T) {
	for typ, n := range map[reflect.Type]int{
		reflect.TypeOf(events.AdmitRequest{}):   14,
		reflect.TypeOf(events.SettleRequest{}):  6,
		reflect.TypeOf(events.ReleaseRequest{}): 1,
		reflect.TypeOf(events.AdmitReply{}):     13,
		reflect.TypeOf(events.CloseReply{}):     11,
		reflect.TypeOf(events.Denial{}):         12,
		reflect.TypeOf(events.BudgetUse{}):      9,
		reflect.TypeOf(events.BalanceRef{}):     4,
		reflect.TypeOf(events.Error{}):          5,
	} {
		if typ.NumField() != n {
			t.Errorf("%s has %d fields; internal/codec/wire.go encodes and decodes %d: update AppendX, fastX/DecodeX and this count", typ, typ.NumField(), n)
		}
	}
}

// DecodeBatch's fast split returns the items encoding/json finds.
func FuzzDecodeBatch(f *testing.F) {
	for _, s := range []string{`{"items":[{"a":"]"},{}]}`, `{"items":[{}],"items":[{}]}`, `{"items":["x",{}]}`, `{"items":[]}`, `{"items":[{}{}]}`, `{"items":[{"a":tru},{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := DecodeBatch(data)
		// SplitBatch returns what DecodeBatch returns, except that it may
		// accept a batch DecodeBatch refuses only for an item that is not
		// valid JSON.
		split, serr := SplitBatch(data)
		switch {
		case err == nil && (serr != nil || !reflect.DeepEqual(split, items)):
			t.Fatalf("%q: SplitBatch %q, %v; DecodeBatch %q", data, split, serr, items)
		case err != nil && serr == nil:
			invalid := false
			for _, it := range split {
				invalid = invalid || !json.Valid(it)
			}
			if !invalid {
				t.Fatalf("%q: SplitBatch accepted what DecodeBatch refuses (%v), with every item valid", data, err)
			}
		case err != nil && serr != nil && err.Error() != serr.Error():
			t.Fatalf("%q: errors differ: DecodeBatch %v, SplitBatch %v", data, err, serr)
		}
		if err != nil {
			return
		}
		var req events.BatchRequest
		if err := json.Unmarshal(data, &req); err != nil {
			t.Fatalf("%q: DecodeBatch accepted what encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(items, req.Items) {
			t.Fatalf("%q: items %q, encoding/json %q", data, items, req.Items)
		}
	})
}

// A batch reply of 12 admit replies, split with every item checked
// (DecodeBatchReply) and without (SplitBatchReply, the client's).
func BenchmarkBatchReplySplit(b *testing.B) {
	item := []byte(`{"admitted":true,"request_id":"req-0123456789","reservation_id":"rsv_01a22faa-e425-7707-8645-84d4c635d5b1","amount":"0.000001","unit":"USD","balances":[{"scope":"org:bench","period":"month","instance":"2026-12"}],"expires_at":"2026-12-01T03:34:48.405451142Z","budgets":[{"scope":"org:bench","period":"month","instance":"2026-12","unit":"USD","limit":"1000000000000","spent":"0.5","reserved":"0.000064","available":"999999999999.499936"}]}`)
	items := make([][]byte, 12)
	for i := range items {
		items[i] = item
	}
	data := EncodeBatchReply(items)
	for _, c := range []struct {
		name  string
		split func([]byte) ([]json.RawMessage, error)
	}{{"checked", DecodeBatchReply}, {"unchecked", SplitBatchReply}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if got, err := c.split(data); err != nil || len(got) != 12 {
					b.Fatal(len(got), err)
				}
			}
		})
	}
}

// A full metadata map (MaxMetadata entries) is decoded on the fast path:
// a tenant's admits with as much metadata as the API allows must not cost
// the reflective decoder (the tenant flood test sends such admits).
func TestFastAdmitRequest_FullMetadata(t *testing.T) {
	meta := map[string]string{}
	for i := range events.MaxMetadata {
		meta[strings.Repeat("k", i+1)] = strings.Repeat("x", 250)
	}
	data, err := json.Marshal(events.AdmitRequest{RequestID: "r1", Scopes: []string{"team:a"}, Amount: "0.01", TTL: "24h", Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	var fast, slow events.AdmitRequest
	if !fastAdmitRequest(data, &fast) {
		t.Fatalf("the fast path declined an admit with %d metadata entries", events.MaxMetadata)
	}
	if err := decodeRequestSlow(data, &slow); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast %+v, slow %+v", fast, slow)
	}
}
