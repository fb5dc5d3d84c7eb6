package codec

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
)

// Reading lane revisions is most of what a replay costs: a whole fold at
// start-up, an audit, an export. The revisions are written by
// AppendLane in one canonical form (fixed key order, no
// spaces, no escapes in the strings this ledger writes), so a reader that
// takes exactly that form, byte by byte, decodes them without reflection.
//
// canonicalLane is that reader. It is a fast path, never a second
// definition of the format: it accepts a strict subset of what the
// encoding/json decoders accept (the canonical key order and nothing else;
// strings without escapes or control characters, in valid UTF-8; numbers in
// JSON's grammar) and builds exactly what they build from it. Anything
// else (another key order, an unknown field, a space, an escape, an event
// type it does not know) makes it decline, and the caller decodes the slow
// way, which then accepts or rejects the revision as before.
// FuzzCanonicalLane holds it to that: whatever it accepts, the strict
// decoder accepts with the same result.

// canon reads one canonical encoding. ok turns false at the first byte it
// does not take, and stays false.
type canon struct {
	b  []byte
	i  int
	ok bool
}

// lit consumes s, which must come next.
func (c *canon) lit(s string) bool {
	if !c.ok || len(c.b)-c.i < len(s) || string(c.b[c.i:c.i+len(s)]) != s {
		c.ok = false
		return false
	}
	c.i += len(s)
	return true
}

// maybe consumes s if it comes next.
func (c *canon) maybe(s string) bool {
	if c.ok && len(c.b)-c.i >= len(s) && string(c.b[c.i:c.i+len(s)]) == s {
		c.i += len(s)
		return true
	}
	return false
}

// next reports whether b comes next, without consuming it.
func (c *canon) next(b byte) bool { return c.ok && c.i < len(c.b) && c.b[c.i] == b }

// raw returns the bytes of the next string, quotes excluded: a string
// with no escape and no control character, in valid UTF-8 (what
// encoding/json decodes to the same bytes).
func (c *canon) raw() []byte {
	if !c.lit(`"`) {
		return nil
	}
	start := c.i
	ascii := true
	for c.i < len(c.b) {
		ch := c.b[c.i]
		switch {
		case ch == '"':
			s := c.b[start:c.i]
			c.i++
			if !ascii && !utf8.Valid(s) {
				c.ok = false
			}
			return s
		case ch == '\\' || ch < 0x20:
			c.ok = false
			return nil
		case ch >= utf8.RuneSelf:
			ascii = false
		}
		c.i++
	}
	c.ok = false
	return nil
}

func (c *canon) str() string {
	s := c.raw()
	if !c.ok {
		return ""
	}
	return string(s)
}

// number returns the next JSON number's text if it is an integer in
// JSON's grammar (-?(0|[1-9][0-9]*)); anything else declines.
func (c *canon) number() []byte {
	if !c.ok {
		return nil
	}
	start := c.i
	if c.i < len(c.b) && c.b[c.i] == '-' {
		c.i++
	}
	digits := c.i
	for c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
		c.i++
	}
	n := c.i - digits
	if n == 0 || (n > 1 && c.b[digits] == '0') {
		c.ok = false
		return nil
	}
	if c.i < len(c.b) && (c.b[c.i] == '.' || c.b[c.i] == 'e' || c.b[c.i] == 'E') {
		c.ok = false
		return nil
	}
	return c.b[start:c.i]
}

func (c *canon) uint64() uint64 {
	s := c.number()
	if !c.ok {
		return 0
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		c.ok = false
	}
	return v
}

func (c *canon) int64() int64 {
	s := c.number()
	if !c.ok {
		return 0
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		c.ok = false
	}
	return v
}

// money reads a stored amount as events.Money.UnmarshalJSON does.
func (c *canon) money() events.Money {
	start := c.i
	s := c.raw()
	if !c.ok {
		return events.Money{}
	}
	var m events.Money
	var err error
	if len(s) > 0 && s[0] == '-' {
		// A negative amount (rare): Money.UnmarshalJSON itself, on the
		// quoted string.
		err = m.UnmarshalJSON(c.b[start:c.i])
	} else {
		m, err = events.ParseMoney(string(s))
	}
	if err != nil {
		c.ok = false
		return events.Money{}
	}
	return m
}

// time reads a time as time.Time.UnmarshalJSON does (RFC 3339).
func (c *canon) time() time.Time {
	start := c.i
	c.raw()
	if !c.ok {
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalJSON(c.b[start:c.i]); err != nil {
		c.ok = false
	}
	return t
}

// ref reads a BalanceRef as appendRef writes it.
func (c *canon) ref() events.BalanceRef {
	var r events.BalanceRef
	c.lit(`{"scope":`)
	r.Scope = events.Scope(c.str())
	c.lit(`,"period":`)
	r.Period = events.Period(c.str())
	c.lit(`,"instance":`)
	r.Instance = c.str()
	if c.maybe(`,"unit":`) {
		r.Unit = c.str()
	}
	c.lit(`}`)
	return r
}

// refs reads a list of BalanceRef, or null (nil), as encoding/json would.
func (c *canon) refs() []events.BalanceRef {
	if c.maybe(`null`) {
		return nil
	}
	out := []events.BalanceRef{}
	c.lit(`[`)
	if c.maybe(`]`) {
		return out
	}
	for c.ok {
		out = append(out, c.ref())
		if !c.maybe(`,`) {
			break
		}
	}
	c.lit(`]`)
	return out
}

// metadata reads a string map written by appendStringMap. A key seen
// twice declines (encoding/json would keep the last).
func (c *canon) metadata() map[string]string {
	m := map[string]string{}
	c.lit(`{`)
	if c.maybe(`}`) {
		return m
	}
	for c.ok {
		k := c.str()
		c.lit(`:`)
		v := c.str()
		if _, dup := m[k]; dup {
			c.ok = false
		}
		m[k] = v
		if !c.maybe(`,`) {
			break
		}
	}
	c.lit(`}`)
	return m
}

// quote reads a PriceQuote as json.Marshal writes it.
func (c *canon) quote() *events.PriceQuote {
	q := &events.PriceQuote{}
	c.lit(`{"model":`)
	q.Model = c.str()
	c.lit(`,"version":`)
	q.Version = c.uint64()
	c.lit(`,"unit":`)
	q.Unit = c.str()
	c.lit(`,"input":`)
	q.Input = c.money()
	c.lit(`,"output":`)
	q.Output = c.money()
	if c.maybe(`,"cached_input":`) {
		m := c.money()
		q.CachedInput = &m
	}
	c.lit(`,"input_tokens":`)
	q.InputTokens = c.int64()
	c.lit(`,"max_output_tokens":`)
	q.MaxOutputTokens = c.int64()
	c.lit(`}`)
	return q
}

// usage reads a Usage as json.Marshal writes it.
func (c *canon) usage() *events.Usage {
	u := &events.Usage{}
	c.lit(`{"input_tokens":`)
	u.InputTokens = c.int64()
	c.lit(`,"output_tokens":`)
	u.OutputTokens = c.int64()
	if c.maybe(`,"cached_input_tokens":`) {
		u.CachedInputTokens = c.int64()
	}
	c.lit(`,"price_version":`)
	u.PriceVersion = c.uint64()
	c.lit(`}`)
	return u
}

// event reads one event as AppendEvent writes the hot ones (opened,
// settled, released); any other type declines.
func (c *canon) event() events.Event {
	switch {
	case c.maybe(`{"type":"` + string(events.TypeReservationOpened) + `","reservation_id":`):
		var e events.ReservationOpened
		e.ReservationID = c.str()
		c.lit(`,"request_id":`)
		e.RequestID = c.str()
		c.lit(`,"request_hash":`)
		e.RequestHash = c.str()
		c.lit(`,"balance":`)
		e.Balance = c.ref()
		c.lit(`,"amount":`)
		e.Amount = c.money()
		c.lit(`,"unit":`)
		e.Unit = c.str()
		c.lit(`,"balances":`)
		e.Balances = c.refs()
		c.lit(`,"expires_at":`)
		e.ExpiresAt = c.time()
		c.lit(`,"at":`)
		e.At = c.time()
		if c.maybe(`,"metadata":`) {
			e.Metadata = c.metadata()
		}
		if c.maybe(`,"pricing":`) {
			e.Pricing = c.quote()
		}
		if c.maybe(`,"ceiling":`) {
			m := c.money()
			e.Ceiling = &m
		}
		c.lit(`}`)
		return e
	case c.maybe(`{"type":"` + string(events.TypeReservationSettled) + `","reservation_id":`):
		var e events.ReservationSettled
		e.ReservationID = c.str()
		c.lit(`,"balance":`)
		e.Balance = c.ref()
		c.lit(`,"reserved":`)
		e.Reserved = c.money()
		c.lit(`,"actual":`)
		e.Actual = c.money()
		c.lit(`,"overrun":`)
		e.Overrun = c.money()
		e.Late = c.maybe(`,"late":true`)
		e.AfterExpiry = c.maybe(`,"after_expiry":true`)
		c.lit(`,"at":`)
		e.At = c.time()
		if c.maybe(`,"usage":`) {
			e.Usage = c.usage()
		}
		if c.maybe(`,"excess":`) {
			m := c.money()
			e.Excess = &m
		}
		if c.maybe(`,"note":`) {
			e.Note = c.str()
		}
		c.lit(`}`)
		return e
	case c.maybe(`{"type":"` + string(events.TypeReservationReleased) + `","reservation_id":`):
		var e events.ReservationReleased
		e.ReservationID = c.str()
		c.lit(`,"balance":`)
		e.Balance = c.ref()
		c.lit(`,"reserved":`)
		e.Reserved = c.money()
		c.lit(`,"reason":`)
		e.Reason = c.str()
		c.lit(`,"at":`)
		e.At = c.time()
		c.lit(`}`)
		return e
	}
	c.ok = false
	return nil
}

// balance reads a BalanceRevision as AppendBalance writes it. A null or
// empty event list declines (rare, and events.Events.UnmarshalJSON's
// handling of null is its own).
func (c *canon) balance(r *events.BalanceRevision) {
	c.lit(`{"schema":`)
	r.Schema = c.str()
	c.lit(`,"balance":`)
	r.Balance = c.ref()
	c.lit(`,"unit":`)
	r.Unit = c.str()
	c.lit(`,"limit":`)
	r.Limit = c.money()
	c.lit(`,"spent":`)
	r.Spent = c.money()
	c.lit(`,"reserved":`)
	r.Reserved = c.money()
	c.lit(`,"overrun":`)
	r.Overrun = c.money()
	c.lit(`,"open":`)
	r.Open = c.int64()
	if c.maybe(`,"exposure":`) {
		m := c.money()
		r.Exposure = &m
	}
	c.lit(`,"events":[`)
	if c.next(']') {
		c.ok = false
		return
	}
	for c.ok {
		r.Events = append(r.Events, c.event())
		if !c.maybe(`,`) {
			break
		}
	}
	c.lit(`]}`)
}

// canonicalLane decodes data into r if it is a lane revision in the
// canonical form, with what encoding/json (strict or not) would build from
// it; it reports false, with r in no defined state, for anything else.
// It does not check the schema (events.UpcastLane does).
func canonicalLane(data []byte, r *events.LaneRevision) bool {
	c := canon{b: data, ok: true}
	c.lit(`{"schema":`)
	r.Schema = c.str()
	if c.maybe(`,"prev":`) {
		r.Prev = c.uint64()
		c.lit(`,"prev_hash":`)
		r.PrevHash = c.str()
	}
	c.lit(`,"balances":[`)
	if c.next(']') {
		c.ok = false // an empty lane revision is malformed: let the slow path say so
		return false
	}
	for c.ok {
		r.Balances = append(r.Balances, events.BalanceRevision{})
		c.balance(&r.Balances[len(r.Balances)-1])
		if !c.maybe(`,`) {
			break
		}
	}
	c.lit(`]}`)
	return c.ok && c.i == len(c.b)
}

// DecodeCanonicalLane decodes data as a lane revision of version 1 or 2
// (see events.UpcastLane) if it is in the canonical form AppendLane
// writes, without reflection: ok is false for any other form, which the
// caller then decodes the slow way (DecodeLane, or a strict
// decoder). When ok, rev and err are what the slow way gives.
func DecodeCanonicalLane(data []byte) (rev events.LaneRevision, ok bool, err error) {
	if !canonicalLane(data, &rev) {
		return events.LaneRevision{}, false, nil
	}
	return rev, true, events.UpcastLane(&rev)
}

// DecodeLane decodes a lane revision as events.DecodeLaneRevision does,
// reading the canonical form the ledger writes without reflection
// (DecodeCanonicalLane) and any other form through encoding/json.
func DecodeLane(data []byte) (events.LaneRevision, error) {
	if r, ok, err := DecodeCanonicalLane(data); ok {
		return r, err
	}
	return events.DecodeLaneRevision(data)
}
