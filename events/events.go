package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// Type is an event's explicit, versioned type. It is written into every
// encoded event; decoding switches on it. A released type is frozen by the
// golden files in testdata/: a breaking change is a new version.
type Type string

// Event types.
const (
	TypeBudgetDefined       Type = "budget.defined.v1"
	TypeBudgetDefinedV2     Type = "budget.defined.v2"
	TypeReservationOpened   Type = "reservation.opened.v1"
	TypeReservationSettled  Type = "reservation.settled.v1"
	TypeReservationReleased Type = "reservation.released.v1"
	TypeRequestVoided       Type = "request.voided.v1"
	TypeBudgetRetired       Type = "budget.retired.v1"
)

// Event is one past-tense fact in the book of record.
type Event interface{ EventType() Type }

// BudgetDefined: a budget's limit and unit were set (created or changed).
type BudgetDefined struct {
	Budget BudgetRef `json:"budget"`
	Limit  Money     `json:"limit"`
	Unit   string    `json:"unit"`
	At     time.Time `json:"at"`
}

// BudgetDefinedV2: a budget's whole definition was set (created or
// changed). It supersedes BudgetDefined (v1), which readers upcast with
// AsBudgetDefinedV2; writers emit only v2.
//
// Every field but Budget, Limit, Unit and At is optional and omitted when
// zero, so a v1 definition upcast to v2 encodes as v2 with the v1 fields
// only. FixedSlot is the fixed amount a money budget reserves per admit
// (a fixed reservation slot R). Thresholds leave room for alerts (fractions of the
// limit): budget.put does not set them yet, and a fold carries them as
// they are. Pricing and per-kind defaults need no field here: they are
// definitions of their own keys.
type BudgetDefinedV2 struct {
	Budget BudgetRef `json:"budget"`
	Limit  Money     `json:"limit"`
	Unit   string    `json:"unit"`
	// TZ is the IANA time zone the period's calendar runs in ("" is UTC).
	TZ string `json:"tz,omitempty"`
	// Disabled: every admit that names the budget is denied with
	// ReasonBudgetDisabled.
	Disabled bool `json:"disabled,omitempty"`
	// FixedSlot, when set, is reserved per admit in this budget instead of
	// the requested amount.
	FixedSlot *Money `json:"fixed_slot,omitempty"`
	// Thresholds are alert thresholds, fractions of the limit in (0, 1].
	Thresholds []Money `json:"thresholds,omitempty"`
	// ExposureCap, when set, is the most that settles above their
	// reservations may add to the budget in a period instance: an admit
	// whose ceiling would take the balance's exposure past it is denied
	// (ReasonExposureCap), and a settle is charged at most its ceiling.
	ExposureCap *Money `json:"exposure_cap,omitempty"`
	// Learn, when set, makes requests priced from a model reserve by
	// observed cost (see LearnRule).
	Learn *LearnRule `json:"learn,omitempty"`
	// Changed names the fields this definition changed from the previous
	// one, in the order limit, unit, tz, disabled, fixed_slot,
	// thresholds, exposure_cap, learn; empty for a new budget.
	Changed []string `json:"changed,omitempty"`
	// FromDefault, when set, is the revision of the kind's default
	// (DefaultDefined) this budget was created from on the scope's first
	// admit; 0 for a budget put for the scope itself.
	FromDefault uint64    `json:"from_default,omitempty"`
	At          time.Time `json:"at"`
}

// AsBudgetDefinedV2 upcasts a budget definition event: a BudgetDefinedV2
// as it is, a BudgetDefined (v1) as a v2 with no time zone (UTC), enabled,
// no fixed slot and no thresholds. It reports false for any other event.
func AsBudgetDefinedV2(e Event) (BudgetDefinedV2, bool) {
	switch e := e.(type) {
	case BudgetDefinedV2:
		return e, true
	case BudgetDefined:
		return BudgetDefinedV2{Budget: e.Budget, Limit: e.Limit, Unit: e.Unit, At: e.At}, true
	}
	return BudgetDefinedV2{}, false
}

// BudgetRetired: a budget was retired for good (a budget per agent run,
// once the run is over). Every admit that names it from then on is denied
// (ReasonBudgetRetired), a default never creates it again and a put of it
// is refused (CodeBudgetRetired). Its reservations still open settle,
// release and expire as before; each of its balances leaves the
// replicas' memory once nothing can change it any more (nothing open, and
// its last reservation out of the idempotency window), and its numbers
// stay in the stream. The revision that carries it states the budget's
// last definition, with Retired set.
type BudgetRetired struct {
	Budget BudgetRef `json:"budget"`
	// Reason is the caller's note, at most MaxRetireReasonLen bytes.
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// MaxRetireReasonLen bounds BudgetRetired.Reason.
const MaxRetireReasonLen = 200

// ReservationOpened: Amount was reserved in one balance. A reservation across
// several budgets is one ReservationOpened per balance, all committed in one
// atomic write and sharing ReservationID; Balances lists them all.
type ReservationOpened struct {
	ReservationID string            `json:"reservation_id"`
	RequestID     string            `json:"request_id"`
	RequestHash   string            `json:"request_hash"`
	Balance       BalanceRef        `json:"balance"`
	Amount        Money             `json:"amount"`
	Unit          string            `json:"unit"`
	Balances      []BalanceRef      `json:"balances"`
	ExpiresAt     time.Time         `json:"expires_at"`
	At            time.Time         `json:"at"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// Pricing is set when the amount was priced from a model: the price
	// version and prices used and the token counts priced (the amount is
	// Pricing.MaxCost() in a money balance).
	Pricing *PriceQuote `json:"pricing,omitempty"`
	// Ceiling, when set, is the most the reservation may settle at in this
	// balance, above Amount: a learned reservation's priced maximum. Its
	// Ceiling - Amount counts in the balance's exposure while it is open
	// (BalanceRevision.Exposure); without it the ceiling is Amount.
	Ceiling *Money `json:"ceiling,omitempty"`
}

// ReservationSettled: the reservation closed with its actual cost. Spent
// grows by Actual. Reserved is the amount the reservation held in this
// balance; it leaves reserved now unless AfterExpiry, when the sweeper had
// already returned it. Overrun is the money spent beyond what was reserved,
// recorded in full, never clamped: max(0, Actual-Reserved), or all of Actual
// when AfterExpiry (nothing was reserved for it any more). Late is set when
// the settle arrived after ExpiresAt.
type ReservationSettled struct {
	ReservationID string     `json:"reservation_id"`
	Balance       BalanceRef `json:"balance"`
	Reserved      Money      `json:"reserved"`
	Actual        Money      `json:"actual"`
	Overrun       Money      `json:"overrun"`
	Late          bool       `json:"late,omitempty"`
	AfterExpiry   bool       `json:"after_expiry,omitempty"`
	At            time.Time  `json:"at"`
	// Usage is set when the settle gave usage instead of an amount: Actual
	// is its cost at the reservation's price version.
	Usage *Usage `json:"usage,omitempty"`
	// Excess, in a budget with an exposure cap, is the part of the
	// caller's actual cost above what the budget may be charged (the
	// reservation's ceiling, or after expiry the budget's headroom):
	// recorded, never counted in Actual, Spent or Overrun, so that spent
	// never passes limit + exposure cap.
	Excess *Money `json:"excess,omitempty"`
	// Note is the settle's note (SettleRequest.Note), "" for none.
	Note string `json:"note,omitempty"`
}

// Release reasons.
const (
	ReasonReleased = "released" // the caller gave it back
	ReasonExpired  = "expired"  // the sweeper released it after ExpiresAt
	ReasonVoided   = "voided"   // its request id was voided (see RequestVoided)
)

// ReservationReleased: the whole reservation went back to the budget.
type ReservationReleased struct {
	ReservationID string     `json:"reservation_id"`
	Balance       BalanceRef `json:"balance"`
	Reserved      Money      `json:"reserved"`
	Reason        string     `json:"reason"`
	At            time.Time  `json:"at"`
}

// RequestVoided: request id RequestID was voided, a tombstone. No admit
// with that request id may reserve while the ledger remembers the
// tombstone (its idempotency window); an admit of it is answered
// CodeRequestVoided. A void is written into one balance of each scope of
// the void that has a budget (Balance), so it lands in every commit lane
// an admit of those scopes writes, under the same compare-and-set; it
// changes no number of the balance. ReservationID names the reservation
// the void released (with a ReservationReleased of reason ReasonVoided in
// the same revision), empty when the admit had not landed.
type RequestVoided struct {
	RequestID     string     `json:"request_id"`
	Balance       BalanceRef `json:"balance"`
	Scopes        []Scope    `json:"scopes"`
	ReservationID string     `json:"reservation_id,omitempty"`
	At            time.Time  `json:"at"`
}

func (BudgetDefined) EventType() Type       { return TypeBudgetDefined }
func (BudgetDefinedV2) EventType() Type     { return TypeBudgetDefinedV2 }
func (ReservationOpened) EventType() Type   { return TypeReservationOpened }
func (ReservationSettled) EventType() Type  { return TypeReservationSettled }
func (ReservationReleased) EventType() Type { return TypeReservationReleased }
func (RequestVoided) EventType() Type       { return TypeRequestVoided }
func (BudgetRetired) EventType() Type       { return TypeBudgetRetired }

// TimeOf returns when event e happened (its At; the zero time for an
// event without one).
func TimeOf(e Event) time.Time {
	switch e := e.(type) {
	case ReservationOpened:
		return e.At
	case ReservationSettled:
		return e.At
	case ReservationReleased:
		return e.At
	case RequestVoided:
		return e.At
	case ThresholdCrossed:
		return e.At
	case BudgetDefined:
		return e.At
	case BudgetDefinedV2:
		return e.At
	case BudgetRetired:
		return e.At
	case DefaultDefined:
		return e.At
	case PricingDefined:
		return e.At
	}
	return time.Time{}
}

// BalanceEvent is an event of one balance: what a lane revision's balance
// carries.
type BalanceEvent interface {
	Event
	// BalanceOf returns the balance the event belongs to.
	BalanceOf() BalanceRef
}

func (e ReservationOpened) BalanceOf() BalanceRef   { return e.Balance }
func (e ReservationSettled) BalanceOf() BalanceRef  { return e.Balance }
func (e ReservationReleased) BalanceOf() BalanceRef { return e.Balance }
func (e RequestVoided) BalanceOf() BalanceRef       { return e.Balance }
func (e ThresholdCrossed) BalanceOf() BalanceRef    { return e.Balance }

// EncodeEvent writes e as a JSON object with its "type" first, then its
// fields as encoding/json writes them. An event of a type eventTypes does
// not list is an error (CodeInternal).
func EncodeEvent(e Event) ([]byte, error) {
	if e == nil {
		return nil, Errorf(CodeInternal, "unknown event %T", e)
	}
	typ := e.EventType()
	if k, ok := eventTypes[typ]; !ok || reflect.TypeOf(e) != k.goType {
		return nil, Errorf(CodeInternal, "unknown event %T", e)
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("encoding event %s", typ), Err: err}
	}
	// What encoding/json writes for the event embedded next to its type,
	// struct{Type Type `json:"type"`; E}: the type, then the event's fields.
	out := make([]byte, 0, len(`{"type":"",`)+len(typ)+len(body))
	out = append(out, `{"type":"`...)
	out = append(out, typ...)
	out = append(out, '"')
	if len(body) > len(`{}`) {
		out = append(out, ',')
	}
	return append(out, body[1:]...), nil
}

// DecodeEvent reads one encoded event strictly: its type must be one
// eventTypes lists, and it may hold only "type" and the fields of that
// type's event. An unknown type is an error.
func DecodeEvent(b []byte) (Event, error) {
	var head struct {
		Type Type `json:"type"`
	}
	if t, ok := sniffType(b); ok {
		head.Type = t
	} else if err := json.Unmarshal(b, &head); err != nil {
		return nil, &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("event: %v", err), Err: err}
	}
	k, ok := eventTypes[head.Type]
	if !ok {
		return nil, Errorf(CodeInvalidRequest, "unknown event type %q", head.Type)
	}
	e, err := k.decode(b)
	if err != nil {
		return nil, &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("event %s: %v", head.Type, err), Err: err}
	}
	return e, nil
}

// sniffType reads the type of an encoded event written as AppendEvent
// writes it, "type" first ({"type":"reservation.opened.v1",...}), without
// decoding the rest: the strict decode that follows reads the whole
// object anyway. ok is false for anything else (another key order, an
// escape, a second "type" key anywhere), which is then read the slow way.
func sniffType(b []byte) (Type, bool) {
	const pre = `{"type":"`
	if len(b) < len(pre) || string(b[:len(pre)]) != pre {
		return "", false
	}
	for i := len(pre); i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			if i+1 >= len(b) || (b[i+1] != ',' && b[i+1] != '}') || bytes.Count(b, []byte(`"type"`)) != 1 {
				return "", false
			}
			return Type(b[len(pre):i]), true
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return "", false
		}
	}
	return "", false
}

// eventTypes lists every event type of the book of record with its Go
// type: adding an event type is one line here (and its EventType method).
// Each entry decodes the event next to its "type" key, and nothing else.
var eventTypes = map[Type]eventType{
	TypeBudgetDefined: typed(func(v *struct {
		typeKey
		BudgetDefined
	}) *BudgetDefined {
		return &v.BudgetDefined
	}),
	TypeBudgetDefinedV2: typed(func(v *struct {
		typeKey
		BudgetDefinedV2
	}) *BudgetDefinedV2 {
		return &v.BudgetDefinedV2
	}),
	TypeReservationOpened: typed(func(v *struct {
		typeKey
		ReservationOpened
	}) *ReservationOpened {
		return &v.ReservationOpened
	}),
	TypeReservationSettled: typed(func(v *struct {
		typeKey
		ReservationSettled
	}) *ReservationSettled {
		return &v.ReservationSettled
	}),
	TypeReservationReleased: typed(func(v *struct {
		typeKey
		ReservationReleased
	}) *ReservationReleased {
		return &v.ReservationReleased
	}),
	TypeRequestVoided: typed(func(v *struct {
		typeKey
		RequestVoided
	}) *RequestVoided {
		return &v.RequestVoided
	}),
	TypeBudgetRetired: typed(func(v *struct {
		typeKey
		BudgetRetired
	}) *BudgetRetired {
		return &v.BudgetRetired
	}),
	TypeThresholdCrossed: typed(func(v *struct {
		typeKey
		ThresholdCrossed
	}) *ThresholdCrossed {
		return &v.ThresholdCrossed
	}),
	TypeDefaultDefined: typed(func(v *struct {
		typeKey
		DefaultDefined
	}) *DefaultDefined {
		return &v.DefaultDefined
	}),
	TypePricingDefined: typed(func(v *struct {
		typeKey
		PricingDefined
	}) *PricingDefined {
		return &v.PricingDefined
	}),
	TypeAPIKeyDefined: typed(func(v *struct {
		typeKey
		APIKeyDefined
	}) *APIKeyDefined {
		return &v.APIKeyDefined
	}),
	TypeTenantLimitsDefined: typed(func(v *struct {
		typeKey
		TenantLimitsDefined
	}) *TenantLimitsDefined {
		return &v.TenantLimitsDefined
	}),
}

// typeKey is the "type" key an encoded event holds beside its fields.
type typeKey struct {
	Type Type `json:"type"`
}

// eventType is one event type of eventTypes.
type eventType struct {
	goType reflect.Type
	decode func(b []byte) (Event, error)
}

// typed makes the eventTypes entry of the event E that field picks out of
// W, a struct of a typeKey and E: decode reads W strictly (no unknown
// field, nothing after the object) and returns its E.
func typed[W any, E Event](field func(*W) *E) eventType {
	return eventType{
		goType: reflect.TypeFor[E](),
		decode: func(b []byte) (Event, error) {
			var w W
			d := json.NewDecoder(bytes.NewReader(b))
			d.DisallowUnknownFields()
			if err := d.Decode(&w); err != nil {
				return nil, err
			}
			if len(bytes.TrimSpace(b[d.InputOffset():])) > 0 {
				return nil, errors.New("unexpected data after the event")
			}
			return *field(&w), nil
		},
	}
}

// Events is a list of events that encodes each with its type.
type Events []Event

// MarshalJSON encodes every event with EncodeEvent.
func (es Events) MarshalJSON() ([]byte, error) {
	if es == nil {
		return []byte("null"), nil
	}
	b := []byte{'['}
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		data, err := EncodeEvent(e)
		if err != nil {
			return nil, err
		}
		b = append(b, data...)
	}
	return append(b, ']'), nil
}

// UnmarshalJSON decodes every event with DecodeEvent.
func (es *Events) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Events, len(raw))
	for i, r := range raw {
		e, err := DecodeEvent(r)
		if err != nil {
			return err
		}
		out[i] = e
	}
	*es = out
	return nil
}

// Revision schemas. Writers emit the current ones (SchemaLane,
// SchemaBudget: version 2); decoders also accept version 1 through the
// upcasters DecodeLaneRevision and DecodeBudgetRevision.
const (
	SchemaLane    = "lane.v2"
	SchemaBalance = "balance.v1"
	SchemaBudget  = "budget.v2"
	// SchemaLaneV1 and SchemaBudgetV1 are the first, unchained versions:
	// no prev, no prev_hash.
	SchemaLaneV1   = "lane.v1"
	SchemaBudgetV1 = "budget.v1"
)

// LaneRevision is the value of a lane key in the ledger bucket: every
// balance that this revision changed, each after the revision, with the
// events the revision applied to it, in balance key order. The KV stream
// keeps every revision, so the stream is the book of record: folding the
// events of all revisions in stream order yields exactly the numbers that
// the last revision naming each balance states.
//
// Since lane.v2 a revision also names the revision it follows (see
// Chain): a reader that folds revisions of one key in stream order never
// folds past a gap or a fork.
type LaneRevision struct {
	Schema string `json:"schema"`
	Chain
	Balances []BalanceRevision `json:"balances"`
}

// Chain ties a version-2 revision to the previous valid revision of the same
// key.
//
// Prev is the stream sequence of that previous revision (0 for the first
// revision of the key) and PrevHash the lowercase hex SHA-256 of its exact
// payload bytes as stored ("" for the first). A reader that folds a key
// checks that Prev is the last revision of the key it folded and that
// PrevHash is the hash of that revision's bytes; anything else is a gap (a
// revision it never saw), a fork (a different history) or a replay, and it
// skips that revision, naming the sequence.
//
// Design notes, fixed now for three future needs:
//   - Signatures go in message headers over the payload bytes, so the
//     payload needs no change for them. The chain is over valid revisions:
//     a forged revision that fails its signature is skipped, and the next
//     valid revision names the last valid one (its Prev skips the forgery).
//   - A stable id for each event of a future feed is
//     "<stream seq>-<index of the event in its revision>" (see EventID).
//   - A leaner payload is left to JetStream's S2 stream compression, to be
//     measured, rather than a new encoding.
//
// A version-1 revision carries no chain; it is upcast with a zero Chain,
// and the chain is checked from the first version-2 revision of a key on
// (that revision names the last version-1 revision it follows).
type Chain struct {
	Prev     uint64 `json:"prev"`
	PrevHash string `json:"prev_hash"`
}

// Chained reports whether the revision carries a chain (version 2).
func (r *LaneRevision) Chained() bool { return r.Schema == SchemaLane }

// Chained reports whether the revision carries a chain (version 2).
func (r *BudgetRevision) Chained() bool { return r.Schema == SchemaBudget }

// HashPayload returns the PrevHash that a revision following the revision
// whose payload is data must carry: hex SHA-256 of data.
func HashPayload(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// EventID is the stable id of the index-th event (from 0) of the revision
// at stream sequence seq: "<seq>-<index>".
func EventID(seq uint64, index int) string {
	return strconv.FormatUint(seq, 10) + "-" + strconv.Itoa(index)
}

// ChainError is a revision that does not follow the last revision of its
// key that the reader folded: a gap (a revision the reader never saw) or a
// fork (another history).
type ChainError struct {
	// Seq is the stream sequence of the revision that broke the chain.
	Seq uint64
	// Key is the KV key.
	Key string
	// Prev and PrevHash are what the revision names; WantPrev and
	// WantHash what the reader folded last.
	Prev, WantPrev     uint64
	PrevHash, WantHash string
}

// Error names the sequence, the key and what differs.
func (e *ChainError) Error() string {
	if e.Prev != e.WantPrev {
		return fmt.Sprintf("revision %d of %s follows revision %d, but the last revision folded is %d: a gap or a fork", e.Seq, e.Key, e.Prev, e.WantPrev)
	}
	return fmt.Sprintf("revision %d of %s names the hash %q of revision %d, which hashes to %q: a fork", e.Seq, e.Key, e.PrevHash, e.Prev, e.WantHash)
}

// CheckChain checks that a revision at seq of key naming c follows the
// revision lastSeq whose payload hashes to lastHash ("" and 0 when none was
// folded). It returns a *ChainError if not.
func CheckChain(key string, seq uint64, c Chain, lastSeq uint64, lastHash string) error {
	if c.Prev != lastSeq || c.PrevHash != lastHash {
		return &ChainError{Seq: seq, Key: key, Prev: c.Prev, WantPrev: lastSeq, PrevHash: c.PrevHash, WantHash: lastHash}
	}
	return nil
}

// UpcastLane accepts a decoded lane revision of version 1 or 2. A version-1
// revision must carry no chain fields; it keeps its schema (so Chained
// reports false) and a zero Chain.
func UpcastLane(r *LaneRevision) error {
	switch r.Schema {
	case SchemaLane:
		return nil
	case SchemaLaneV1:
		if r.Chain != (Chain{}) {
			return fmt.Errorf("events: %s revision with chain fields", SchemaLaneV1)
		}
		return nil
	}
	return fmt.Errorf("events: schema %q under a lane key, want %q or %q", r.Schema, SchemaLane, SchemaLaneV1)
}

// UpcastBudget is UpcastLane for budget revisions.
func UpcastBudget(r *BudgetRevision) error {
	switch r.Schema {
	case SchemaBudget:
		return nil
	case SchemaBudgetV1:
		if r.Chain != (Chain{}) {
			return fmt.Errorf("events: %s revision with chain fields", SchemaBudgetV1)
		}
		return nil
	}
	return fmt.Errorf("events: schema %q under a budget key, want %q or %q", r.Schema, SchemaBudget, SchemaBudgetV1)
}

// DecodeLaneRevision decodes a lane revision of version 1 or 2 (see
// UpcastLane).
func DecodeLaneRevision(data []byte) (LaneRevision, error) {
	var r LaneRevision
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	return r, UpcastLane(&r)
}

// DecodeBudgetRevision decodes a budget revision of version 1 or 2.
func DecodeBudgetRevision(data []byte) (BudgetRevision, error) {
	var r BudgetRevision
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	return r, UpcastBudget(&r)
}

// BalanceRevision is one balance in a LaneRevision: the balance after the
// revision and the events that the revision applied to it.
type BalanceRevision struct {
	Schema   string     `json:"schema"`
	Balance  BalanceRef `json:"balance"`
	Unit     string     `json:"unit"`
	Limit    Money      `json:"limit"`
	Spent    Money      `json:"spent"`
	Reserved Money      `json:"reserved"`
	Overrun  Money      `json:"overrun"`
	Open     int64      `json:"open"`
	// Exposure is the most the open reservations of the balance may still
	// add above what they hold: the sum of Ceiling - Amount over them (see
	// ReservationOpened.Ceiling); omitted when zero.
	Exposure *Money `json:"exposure,omitempty"`
	Events   Events `json:"events"`
}

// BudgetRevision is the value of a budget definition key. Since budget.v2
// it names the revision it follows (see Chain). It states the definition
// after the revision: Limit and Unit always; TZ, Disabled, FixedSlot and
// Thresholds when set (omitted when zero, so a revision of a plain budget
// is byte for byte what it was before they existed). A revision whose
// event is a BudgetDefinedV2 states exactly that event's definition.
type BudgetRevision struct {
	Schema string `json:"schema"`
	Chain
	Budget     BudgetRef `json:"budget"`
	Limit      Money     `json:"limit"`
	Unit       string    `json:"unit"`
	TZ         string    `json:"tz,omitempty"`
	Disabled   bool      `json:"disabled,omitempty"`
	FixedSlot  *Money    `json:"fixed_slot,omitempty"`
	Thresholds []Money   `json:"thresholds,omitempty"`
	// ExposureCap and Learn are the BudgetDefinedV2's.
	ExposureCap *Money     `json:"exposure_cap,omitempty"`
	Learn       *LearnRule `json:"learn,omitempty"`
	// FromDefault is the FromDefault of the revision's BudgetDefinedV2.
	FromDefault uint64 `json:"from_default,omitempty"`
	// Retired: the budget is retired (see BudgetRetired), for good: the
	// revision that retires it carries a BudgetRetired, and no revision
	// follows it.
	Retired bool   `json:"retired,omitempty"`
	Events  Events `json:"events"`
}
