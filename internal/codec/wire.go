package codec

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
)

// Hand-written codecs of the hot path's wire bodies: admit, settle and
// release requests and their replies, and batch replies. Each encoder
// writes exactly the bytes encoding/json writes for the same value, and
// each decoder either fills exactly what encoding/json would or declines
// (returns false), leaving the input to encoding/json, which then decides,
// with its own error messages. The fuzz tests in wire_test.go hold them
// to that.

// AppendAdmitRequest appends r as encoding/json would encode it.
func AppendAdmitRequest(b []byte, r *events.AdmitRequest) []byte {
	b = append(b, `{"request_id":`...)
	b = appendString(b, r.RequestID)
	b = append(b, `,"scopes":`...)
	b = appendStrings(b, r.Scopes)
	b = appendKey(b, "amount")
	b = appendString(b, r.Amount)
	if r.Unit != "" {
		b = appendKey(b, "unit")
		b = appendString(b, r.Unit)
	}
	if r.TTL != "" {
		b = appendKey(b, "ttl")
		b = appendString(b, r.TTL)
	}
	if len(r.Metadata) > 0 {
		b = appendKey(b, "metadata")
		b = appendStringMap(b, r.Metadata)
	}
	if r.Mode != "" {
		b = appendKey(b, "mode")
		b = appendString(b, r.Mode)
	}
	if r.Brief {
		b = append(b, `,"brief":true`...)
	}
	if r.Model != "" {
		b = appendKey(b, "model")
		b = appendString(b, r.Model)
	}
	b = appendInt(b, "input_tokens", r.InputTokens)
	b = appendInt(b, "input_chars", r.InputChars)
	b = appendInt(b, "max_output_tokens", r.MaxOutputTokens)
	b = appendInt(b, "count", r.Count)
	if r.Retry {
		b = append(b, `,"retry":true`...)
	}
	return append(b, '}')
}

// appendInt appends ,"key":n unless n is 0 (an omitempty integer field).
func appendInt(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	b = appendKey(b, key)
	return strconv.AppendInt(b, n, 10)
}

// AppendSettleRequest appends r as encoding/json would encode it.
func AppendSettleRequest(b []byte, r *events.SettleRequest) []byte {
	b = append(b, `{"reservation_id":`...)
	b = appendString(b, r.ReservationID)
	if r.Actual != "" {
		b = appendKey(b, "actual")
		b = appendString(b, r.Actual)
	}
	b = appendInt(b, "input_tokens", r.InputTokens)
	b = appendInt(b, "output_tokens", r.OutputTokens)
	b = appendInt(b, "cached_input_tokens", r.CachedInputTokens)
	if r.Note != "" {
		b = appendKey(b, "note")
		b = appendString(b, r.Note)
	}
	return append(b, '}')
}

// AppendReleaseRequest appends r as encoding/json would encode it.
func AppendReleaseRequest(b []byte, r *events.ReleaseRequest) []byte {
	b = append(b, `{"reservation_id":`...)
	b = appendString(b, r.ReservationID)
	return append(b, '}')
}

func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// AppendAdmitReply appends r as encoding/json would encode it.
func AppendAdmitReply(b []byte, r *events.AdmitReply) []byte {
	b = append(b, `{"admitted":`...)
	b = appendBool(b, r.Admitted)
	b = appendKey(b, "request_id")
	b = appendString(b, r.RequestID)
	if r.ReservationID != "" {
		b = appendKey(b, "reservation_id")
		b = appendString(b, r.ReservationID)
	}
	if r.Amount != "" {
		b = appendKey(b, "amount")
		b = appendString(b, r.Amount)
	}
	if r.Unit != "" {
		b = appendKey(b, "unit")
		b = appendString(b, r.Unit)
	}
	if len(r.Balances) > 0 {
		b = appendKey(b, "balances")
		b = appendRefs(b, r.Balances)
	}
	if r.ExpiresAt != nil {
		b = appendKey(b, "expires_at")
		b = appendTime(b, *r.ExpiresAt)
	}
	if r.Status != "" {
		b = appendKey(b, "status")
		b = appendString(b, r.Status)
	}
	if r.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	if d := r.Denial; d != nil {
		b = appendKey(b, "denial")
		b = appendDenial(b, d)
	}
	if r.Mode != "" {
		b = appendKey(b, "mode")
		b = appendString(b, r.Mode)
	}
	if len(r.Budgets) > 0 {
		b = appendKey(b, "budgets")
		b = append(b, '[')
		for i := range r.Budgets {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendBudgetUse(b, &r.Budgets[i])
		}
		b = append(b, ']')
	}
	if r.Pricing != nil {
		// A priced admit: off the fast path's common case, encoding/json
		// writes the quote.
		data, _ := json.Marshal(r.Pricing)
		b = appendKey(b, "pricing")
		b = append(b, data...)
	}
	return append(b, '}')
}

func appendRefs(b []byte, refs []events.BalanceRef) []byte {
	if refs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, r := range refs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRef(b, r)
	}
	return append(b, ']')
}

func appendDenial(b []byte, d *events.Denial) []byte {
	b = append(b, `{"reason":`...)
	b = appendString(b, string(d.Reason))
	b = appendKey(b, "message")
	b = appendString(b, d.Message)
	b = appendKey(b, "scope")
	b = appendString(b, string(d.Scope))
	for _, f := range [...]struct{ k, v string }{
		{"period", string(d.Period)}, {"instance", d.Instance}, {"unit", d.Unit}, {"limit", d.Limit},
		{"spent", d.Spent}, {"reserved", d.Reserved}, {"requested", d.Requested}, {"model", d.Model},
	} {
		if f.v != "" {
			b = appendKey(b, f.k)
			b = appendString(b, f.v)
		}
	}
	if d.ResetsAt != nil {
		b = appendKey(b, "resets_at")
		b = appendTime(b, *d.ResetsAt)
	}
	return append(b, '}')
}

func appendBudgetUse(b []byte, u *events.BudgetUse) []byte {
	b = append(b, `{"scope":`...)
	b = appendString(b, string(u.Scope))
	for _, f := range [...]struct{ k, v string }{
		{"period", string(u.Period)}, {"instance", u.Instance}, {"unit", u.Unit}, {"limit", u.Limit},
		{"amount", u.Amount}, {"spent", u.Spent}, {"reserved", u.Reserved}, {"available", u.Available},
	} {
		b = appendKey(b, f.k)
		b = appendString(b, f.v)
	}
	return append(b, '}')
}

// AppendCloseReply appends r as encoding/json would encode it.
func AppendCloseReply(b []byte, r *events.CloseReply) []byte {
	b = append(b, `{"reservation_id":`...)
	b = appendString(b, r.ReservationID)
	b = appendKey(b, "status")
	b = appendString(b, r.Status)
	b = appendKey(b, "reserved")
	b = appendString(b, r.Reserved)
	if r.Actual != "" {
		b = appendKey(b, "actual")
		b = appendString(b, r.Actual)
	}
	if r.Overrun != "" {
		b = appendKey(b, "overrun")
		b = appendString(b, r.Overrun)
	}
	if r.Excess != "" {
		b = appendKey(b, "excess")
		b = appendString(b, r.Excess)
	}
	if r.Late {
		b = append(b, `,"late":true`...)
	}
	b = appendKey(b, "balances")
	b = appendRefs(b, r.Balances)
	if r.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	if r.Usage != nil {
		data, _ := json.Marshal(r.Usage)
		b = appendKey(b, "usage")
		b = append(b, data...)
	}
	if len(r.Budgets) > 0 {
		// Several budgets: off the common case, encoding/json writes them.
		data, _ := json.Marshal(r.Budgets)
		b = appendKey(b, "budgets")
		b = append(b, data...)
	}
	return append(b, '}')
}

// AppendErrorReply appends r as encoding/json would encode it.
func AppendErrorReply(b []byte, r *events.ErrorReply) []byte {
	e := r.Error
	if e == nil {
		return append(b, `{"error":null}`...)
	}
	b = append(b, `{"error":{"code":`...)
	b = appendString(b, string(e.Code))
	b = appendKey(b, "message")
	b = appendString(b, e.Message)
	if e.ReservationID != "" {
		b = appendKey(b, "reservation_id")
		b = appendString(b, e.ReservationID)
	}
	if e.Status != "" {
		b = appendKey(b, "status")
		b = appendString(b, e.Status)
	}
	return append(b, "}}"...)
}

// reader is a minimal JSON reader for the fast decoders: it accepts only
// plain values (strings without escapes, valid UTF-8, no control
// characters; true, false; arrays; objects) and reports anything else as
// not ok, so the caller declines.
type reader struct {
	b  []byte
	i  int
	ok bool
	// share makes str return substrings of one copy of b (shared, made
	// on first use): a reply's strings then cost one allocation, not one
	// each, and keep one another alive. The ids a caller may keep long
	// after the reply (own) are copies of their own.
	share  bool
	shared string
}

func (r *reader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\r', '\n':
			r.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (r *reader) peek() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *reader) expect(c byte) bool {
	if r.peek() != c {
		r.ok = false
		return false
	}
	r.i++
	return true
}

// raw returns the bytes of the next string, quotes excluded.
func (r *reader) raw() []byte {
	if !r.expect('"') {
		return nil
	}
	start := r.i
	ascii := true
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			if !ascii && !utf8.Valid(s) {
				r.ok = false
			}
			return s
		case c == '\\' || c < 0x20:
			r.ok = false
			return nil
		case c >= utf8.RuneSelf:
			ascii = false
		}
		r.i++
	}
	r.ok = false
	return nil
}

func (r *reader) str() string {
	if r.share {
		return r.sub()
	}
	return r.own()
}

// own returns the next string, a copy of its own.
func (r *reader) own() string {
	s := r.raw()
	if !r.ok {
		return ""
	}
	return string(s)
}

// sub returns the next string as a substring of r.shared.
func (r *reader) sub() string {
	s := r.raw()
	if !r.ok || len(s) == 0 {
		return ""
	}
	if r.shared == "" {
		r.shared = string(r.b)
	}
	end := r.i - 1 // raw leaves r.i past the closing quote
	return r.shared[end-len(s) : end]
}

func (r *reader) boolean() bool {
	r.ws()
	switch {
	case bytes.HasPrefix(r.b[r.i:], []byte("true")):
		r.i += 4
		return true
	case bytes.HasPrefix(r.b[r.i:], []byte("false")):
		r.i += 5
		return false
	}
	r.ok = false
	return false
}

// object reads an object, calling field for each key with the reader at
// its value; field reads the value (or sets ok false). Keys must be
// unique; seen is scratch space.
func (r *reader) object(field func(key []byte)) {
	if !r.expect('{') {
		return
	}
	if r.peek() == '}' {
		r.i++
		return
	}
	// Room for every key of a request (the widest, an admit's, has 9)
	// and of a full metadata map (MaxMetadata): a wider object is left
	// to encoding/json, which refuses what must be refused.
	var seen [max(events.MaxMetadata, 12)][]byte
	n := 0
	for r.ok {
		key := r.raw()
		if !r.ok || !r.expect(':') {
			r.ok = false
			return
		}
		for _, k := range seen[:min(n, len(seen))] {
			if bytes.Equal(k, key) {
				r.ok = false
				return
			}
		}
		if n >= len(seen) {
			r.ok = false
			return
		}
		seen[n] = key
		n++
		field(key)
		if !r.ok {
			return
		}
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			r.i++
			return
		default:
			r.ok = false
			return
		}
	}
}

// array reads an array, calling elem with the reader at each element.
func (r *reader) array(elem func()) {
	if !r.expect('[') {
		return
	}
	if r.peek() == ']' {
		r.i++
		return
	}
	for r.ok {
		elem()
		if !r.ok {
			return
		}
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			r.i++
			return
		default:
			r.ok = false
			return
		}
	}
}

// end reports whether only spaces are left and everything was ok.
func (r *reader) end() bool {
	r.ws()
	return r.ok && r.i == len(r.b)
}

func (r *reader) strings() []string {
	out := []string{}
	r.array(func() { out = append(out, r.str()) })
	return out
}

// fastAdmitRequest decodes data into v as DecodeRequest would, or
// declines.
func fastAdmitRequest(data []byte, v *events.AdmitRequest) bool {
	if v.Metadata != nil {
		return false // encoding/json would merge into it
	}
	out := *v
	r := reader{b: data, ok: true}
	r.object(func(key []byte) {
		switch string(key) {
		case "request_id":
			out.RequestID = r.str()
		case "scopes":
			out.Scopes = r.strings()
		case "amount":
			out.Amount = r.str()
		case "unit":
			out.Unit = r.str()
		case "ttl":
			out.TTL = r.str()
		case "mode":
			out.Mode = r.str()
		case "brief":
			out.Brief = r.boolean()
		case "retry":
			out.Retry = r.boolean()
		case "metadata":
			m := map[string]string{}
			r.object(func(k []byte) { m[string(k)] = r.str() })
			out.Metadata = m
		default:
			r.ok = false
		}
	})
	if !r.end() {
		return false
	}
	*v = out
	return true
}

// fastSettleRequest decodes data into v as DecodeRequest would, or
// declines.
func fastSettleRequest(data []byte, v *events.SettleRequest) bool {
	out := *v
	r := reader{b: data, ok: true}
	r.object(func(key []byte) {
		switch string(key) {
		case "reservation_id":
			out.ReservationID = r.str()
		case "actual":
			out.Actual = r.str()
		case "note":
			out.Note = r.str()
		default:
			r.ok = false
		}
	})
	if !r.end() {
		return false
	}
	*v = out
	return true
}

// fastReleaseRequest decodes data into v as DecodeRequest would, or
// declines.
func fastReleaseRequest(data []byte, v *events.ReleaseRequest) bool {
	out := *v
	r := reader{b: data, ok: true}
	r.object(func(key []byte) {
		switch string(key) {
		case "reservation_id":
			out.ReservationID = r.str()
		default:
			r.ok = false
		}
	})
	if !r.end() {
		return false
	}
	*v = out
	return true
}

func (r *reader) ref() events.BalanceRef {
	var b events.BalanceRef
	r.object(func(key []byte) {
		switch string(key) {
		case "scope":
			b.Scope = events.Scope(r.str())
		case "period":
			b.Period = events.Period(r.str())
		case "instance":
			b.Instance = r.str()
		default:
			r.ok = false
		}
	})
	return b
}

func (r *reader) refs() []events.BalanceRef {
	out := []events.BalanceRef{}
	r.array(func() { out = append(out, r.ref()) })
	return out
}

// DecodeAdmitReply decodes an admit reply into a zero v, as
// json.Unmarshal would.
func DecodeAdmitReply(data []byte, v *events.AdmitReply) error {
	var out events.AdmitReply
	r := reader{b: data, ok: true, share: true}
	r.object(func(key []byte) {
		switch string(key) {
		case "admitted":
			out.Admitted = r.boolean()
		case "request_id":
			out.RequestID = r.own()
		case "reservation_id":
			out.ReservationID = r.own()
		case "amount":
			out.Amount = r.str()
		case "unit":
			out.Unit = r.str()
		case "balances":
			out.Balances = r.refs()
		case "expires_at":
			start := r.i
			r.raw()
			if r.ok {
				t := new(time.Time)
				if err := t.UnmarshalJSON(bytes.TrimLeft(data[start:r.i], " \t\r\n")); err != nil {
					r.ok = false
				}
				out.ExpiresAt = t
			}
		case "status":
			out.Status = r.str()
		case "replayed":
			out.Replayed = r.boolean()
		case "mode":
			out.Mode = r.str()
		case "denial":
			d := &events.Denial{}
			r.object(func(k []byte) {
				s := r.str()
				switch string(k) {
				case "reason":
					d.Reason = events.Code(s)
				case "message":
					d.Message = s
				case "scope":
					d.Scope = events.Scope(s)
				case "period":
					d.Period = events.Period(s)
				case "instance":
					d.Instance = s
				case "unit":
					d.Unit = s
				case "limit":
					d.Limit = s
				case "spent":
					d.Spent = s
				case "reserved":
					d.Reserved = s
				case "requested":
					d.Requested = s
				case "model":
					d.Model = s
				case "resets_at":
					// s had no escapes (raw refuses them): quoted, it is
					// the token encoding/json reads.
					t := new(time.Time)
					if err := t.UnmarshalJSON([]byte(`"` + s + `"`)); err != nil {
						r.ok = false
					}
					d.ResetsAt = t
				default:
					r.ok = false
				}
			})
			out.Denial = d
		case "budgets":
			us := []events.BudgetUse{}
			r.array(func() {
				var u events.BudgetUse
				r.object(func(k []byte) {
					s := r.str()
					switch string(k) {
					case "scope":
						u.Scope = events.Scope(s)
					case "period":
						u.Period = events.Period(s)
					case "instance":
						u.Instance = s
					case "unit":
						u.Unit = s
					case "limit":
						u.Limit = s
					case "amount":
						u.Amount = s
					case "spent":
						u.Spent = s
					case "reserved":
						u.Reserved = s
					case "available":
						u.Available = s
					default:
						r.ok = false
					}
				})
				us = append(us, u)
			})
			out.Budgets = us
		default:
			r.ok = false
		}
	})
	if r.end() {
		*v = out
		return nil
	}
	*v = events.AdmitReply{}
	return json.Unmarshal(data, v)
}

// DecodeCloseReply decodes a settle or release reply into a zero v, as
// json.Unmarshal would.
func DecodeCloseReply(data []byte, v *events.CloseReply) error {
	var out events.CloseReply
	r := reader{b: data, ok: true, share: true}
	r.object(func(key []byte) {
		switch string(key) {
		case "reservation_id":
			out.ReservationID = r.own()
		case "status":
			out.Status = r.str()
		case "reserved":
			out.Reserved = r.str()
		case "actual":
			out.Actual = r.str()
		case "overrun":
			out.Overrun = r.str()
		case "excess":
			out.Excess = r.str()
		case "late":
			out.Late = r.boolean()
		case "balances":
			out.Balances = r.refs()
		case "replayed":
			out.Replayed = r.boolean()
		default:
			r.ok = false
		}
	})
	if r.end() {
		*v = out
		return nil
	}
	*v = events.CloseReply{}
	return json.Unmarshal(data, v)
}

// batchReplyHead is how EncodeBatchReply starts.
const batchReplyHead = `{"items":[`

// DecodeBatchReply returns the items of a batch reply, as json.Unmarshal
// into a BatchReply would (each item's bytes as they are in data).
func DecodeBatchReply(data []byte) ([]json.RawMessage, error) {
	if items, ok := splitBatchReply(data, true); ok {
		return items, nil
	}
	var rep events.BatchReply
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, err
	}
	return rep.Items, nil
}

// SplitBatchReply returns the items of a batch reply as DecodeBatchReply
// does, but checks only the envelope and the items' nesting, not that
// each item is valid JSON: for a caller that decodes every item with a
// strict decoder anyway (DecodeAdmitReply, DecodeCloseReply,
// encoding/json), which then refuses an invalid one, where
// DecodeBatchReply would refuse the whole reply. It saves checking every
// item's bytes twice.
func SplitBatchReply(data []byte) ([]json.RawMessage, error) {
	if items, ok := splitBatchReply(data, false); ok {
		return items, nil
	}
	return DecodeBatchReply(data)
}

// strSpecial marks the bytes inside a JSON string that end a run of plain
// ones: the closing quote, a backslash and the control characters.
var strSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// splitBatchReply splits {"items":[{...},{...}]} into its objects, or
// declines; with validate, it also declines unless every object is valid
// JSON.
func splitBatchReply(data []byte, validate bool) ([]json.RawMessage, bool) {
	if !bytes.HasPrefix(data, []byte(batchReplyHead)) || !bytes.HasSuffix(data, []byte("]}")) {
		return nil, false
	}
	body := data[len(batchReplyHead) : len(data)-2]
	items := make([]json.RawMessage, 0, 16)
	depth, inStr, start := 0, false, 0
	for i := 0; i < len(body); i++ {
		if inStr {
			// Skip the string's plain bytes at once: only a quote, a
			// backslash or a control character needs a look.
			for i < len(body) && !strSpecial[body[i]] {
				i++
			}
			if i == len(body) {
				break
			}
			switch c := body[i]; {
			case c == '\\':
				// The escaped byte, whatever it is; a backslash at the very
				// end leaves inStr set, which the check after the loop
				// refuses.
				i++
			case c == '"':
				inStr = false
			default: // a control character
				return nil, false
			}
			continue
		}
		switch c := body[i]; c {
		case '"':
			inStr = true
		case '{', '[':
			if depth == 0 && (c != '{' || i != start) {
				return nil, false
			}
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return nil, false
			}
			if depth == 0 {
				items = append(items, json.RawMessage(body[start:i+1]))
			}
		case ',':
			if depth == 0 {
				if len(items) == 0 || i != start+len(items[len(items)-1]) {
					return nil, false
				}
				start = i + 1
			}
		default:
			if depth == 0 {
				return nil, false
			}
		}
	}
	if depth != 0 || inStr || (len(body) > 0 && (len(items) == 0 || start+len(items[len(items)-1]) != len(body))) {
		return nil, false
	}
	if validate {
		for _, it := range items {
			if !json.Valid(it) {
				return nil, false
			}
		}
	}
	return items, true
}
