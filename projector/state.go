package projector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/streams"
)

// Balance is the folded total of one balance: a budget in one period
// instance.
type Balance struct {
	// Ref names the balance; Key is its name in the book
	// (streams.BalanceKey), which is not a KV key. Lane is the KV key of
	// the lane whose revisions carry it (the lane that first named it: a
	// balance never moves between lanes).
	Ref  events.BalanceRef
	Key  string
	Lane string
	// Unit and Limit are those stated by the balance's last revision: a
	// revision carries the limit that applied when it was written (a limit
	// defined by a default needs no BudgetDefined, and a changed limit
	// lands on a balance at its next write), so the fold adopts them.
	Unit  string
	Limit events.Money
	// Spent is the sum of settled actual costs, Reserved the sum of the
	// amounts of the reservations open in this balance, Overrun the sum of
	// max(0, actual-reserved) over settles.
	Spent    events.Money
	Reserved events.Money
	Overrun  events.Money
	// Lowered is spent + reserved as they were when a revision stated a
	// limit below them (a limit lowered below what was already spent or
	// held), the largest such, zero if none: the balance may stay above
	// its limit by that much, plus its overrun, as no admit lands while it
	// is (Checker's end-state invariant). A fold that starts from a
	// snapshot takes a balance above its limit + overrun there as lowered.
	Lowered events.Money
	// Open is the number of reservations open in this balance.
	Open int64
	// Opened counts ReservationOpened events; Settled every settle
	// (including those after expiry); Released releases with reason
	// "released" or "voided"; Expired releases with reason "expired"; Late
	// settles marked late; Voided the RequestVoided tombstones written into
	// the balance.
	Opened, Settled, Released, Expired, Late, Voided int64
	// Revision is the stream sequence of the last lane revision that named
	// the balance, and Revisions how many lane revisions named it.
	Revision  uint64
	Revisions int64
	// Alerted are the alert thresholds crossed in this balance
	// (threshold.crossed.v1), in the order crossed, in arm generation
	// Arm (events.ThresholdCrossed.Arm: a crossing of a later generation
	// starts them anew).
	Alerted []events.Money
	Arm     uint64
	// Zones are the time zones the balance's instance is a date in, as
	// the admits into it were folded: the zone of the budget's definition
	// at each ReservationOpened's position in the stream ("UTC" for
	// none), or "?" for an admit whose time does not fall in the instance
	// in that zone (the zone changed between the admit's decision and
	// its write). Each once, in the order first seen; more than one only
	// if the zone changed during the instance.
	Zones []string
}

// ReservationPart is one reservation's lifecycle in one balance.
type ReservationPart struct {
	// Status is events.StatusOpen, StatusSettled, StatusReleased or
	// StatusExpired.
	Status string
	// Amount is what the reservation holds (or held) in this balance.
	Amount events.Money
	// Actual and Overrun are set by a settle.
	Actual  events.Money
	Overrun events.Money
	// Late: the settle arrived after the reservation's expiry.
	// AfterExpiry: the settle came after the sweeper had released it.
	Late, AfterExpiry bool
	// Seqs are the stream sequences of this part's events, ascending.
	Seqs []uint64
}

// Reservation is one reservation's lifecycle across all its balances.
type Reservation struct {
	// ID is the reservation id; RequestID the admit's idempotency key.
	ID        string
	RequestID string
	// Unit is the unit of the admit request: its money's when it names a
	// money budget and a count budget (requests), whatever the order.
	Unit string
	// Balances lists every balance the reservation was admitted in, as its
	// ReservationOpened events state.
	Balances []events.BalanceRef
	// Parts holds the lifecycle per balance, for every balance whose
	// ReservationOpened has been folded.
	Parts map[events.BalanceRef]ReservationPart
	// Status is StatusOpen while any part is open; otherwise
	// StatusSettled if any part was settled, else StatusExpired if any
	// expired, else StatusReleased.
	Status string
	// Late: a settle arrived after expiry. Expired: the sweeper released it
	// in some balance (a late settle may have followed).
	Late, Expired bool
	// OpenedAt, ExpiresAt come from ReservationOpened; ClosedAt is the At
	// of the last settle or release.
	OpenedAt, ExpiresAt, ClosedAt time.Time
	// Seqs are the stream sequences of the messages that carried its
	// events, ascending.
	Seqs []uint64
	// Pricing is the price quote of a reservation priced from a model.
	Pricing *events.PriceQuote
}

// Budget is a budget definition folded from BudgetDefined (v1, upcast)
// and BudgetDefinedV2 events.
type Budget struct {
	// Ref names the budget; Limit, Unit, TZ, Disabled, FixedSlot and
	// Thresholds are its last definition.
	Ref        events.BudgetRef
	Limit      events.Money
	Unit       string
	TZ         string
	Disabled   bool
	FixedSlot  *events.Money
	Thresholds []events.Money
	// ExposureCap and Learn are the definition's (kept for the budgets a
	// default creates, which must carry its own).
	ExposureCap *events.Money
	Learn       *events.LearnRule
	// DefinedAt is the At of the last BudgetDefined.
	DefinedAt time.Time
	// Definitions counts BudgetDefined events; Revision is the stream
	// sequence of the last one.
	Definitions int64
	Revision    uint64
	// FromDefault is the revision of the kind's default the budget was
	// created from (0: put for the scope itself).
	FromDefault uint64
	// Retired is set by a BudgetRetired, at RetiredAt (its At) in
	// revision RetiredRevision, with its Reason; no definition follows.
	Retired         bool
	RetiredAt       time.Time
	RetiredRevision uint64
	RetiredReason   string
}

// State is the fold of the ledger stream up to Position. The zero value is
// not usable: use NewState. A State is not safe for concurrent use;
// Projector guards its own.
type State struct {
	position uint64
	// at is the server time of the last message advance saw.
	at       time.Time
	events   int
	balances map[events.BalanceRef]*Balance
	lanes    map[string]uint64 // lane key -> seq of its last revision applied
	// hashes is the payload hash of the last revision applied of every
	// lane and budget key: what the next chained revision must name.
	hashes       map[string]string
	reservations map[string]*Reservation
	budgets      map[events.BudgetRef]*Budget
	// win, when set, forgets closed reservations (window.go).
	win     *window
	pricing pricingState
	// defaults holds every version of every kind's default budget, by
	// default key then revision (a budget created from one names it).
	defaults map[string]map[uint64]*Budget
	// locs caches the time zones loaded (zoneLoc); a clone shares it.
	locs *sync.Map
	// defaultRev is the last revision of each default key.
	defaultRev map[string]uint64
	// settings is the last revision of each API key and tenant limits
	// key: the operator's settings, which move no money, so the oracle
	// checks only that each decodes under its own key and that a
	// snapshot states the same last revision (its hash in hashes).
	settings map[string]uint64
	// voided holds the request ids RequestVoideds name, each with the
	// sequence of the last revision that voided it. Without a window it
	// holds every one; with one (window.go) a void is forgotten the
	// window's closed retention after it, as a replica forgets it.
	voided map[string]uint64
}

// NewState returns an empty State at position 0.
func NewState() *State {
	return &State{
		balances:     map[events.BalanceRef]*Balance{},
		lanes:        map[string]uint64{},
		hashes:       map[string]string{},
		reservations: map[string]*Reservation{},
		budgets:      map[events.BudgetRef]*Budget{},
		pricing:      pricingState{current: map[string]uint64{}, versions: map[string]map[uint64]*Price{}},
		defaults:     map[string]map[uint64]*Budget{},
		defaultRev:   map[string]uint64{},
		settings:     map[string]uint64{},
		voided:       map[string]uint64{},
		locs:         &sync.Map{},
	}
}

// Position is the stream sequence of the last message applied (0 before
// any).
func (s *State) Position() uint64 { return s.position }

// Events is the number of events folded.
func (s *State) Events() int { return s.events }

// Balance returns the totals of one balance.
func (s *State) Balance(ref events.BalanceRef) (Balance, bool) {
	b, ok := s.balances[ref]
	if !ok {
		return Balance{}, false
	}
	return *b, true
}

// Balances returns every balance, sorted by key.
func (s *State) Balances() []Balance {
	out := make([]Balance, 0, len(s.balances))
	for _, b := range s.balances {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b Balance) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Reservation returns one reservation's lifecycle.
func (s *State) Reservation(id string) (Reservation, bool) {
	r, ok := s.reservations[id]
	if !ok {
		return Reservation{}, false
	}
	return *r.clone(), true
}

// Reservations returns every reservation, sorted by id.
func (s *State) Reservations() []Reservation {
	out := make([]Reservation, 0, len(s.reservations))
	for _, r := range s.reservations {
		out = append(out, *r.clone())
	}
	slices.SortFunc(out, func(a, b Reservation) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Budget returns one budget definition.
func (s *State) Budget(ref events.BudgetRef) (Budget, bool) {
	b, ok := s.budgets[ref]
	if !ok {
		return Budget{}, false
	}
	return *b, true
}

// Budgets returns every budget definition, sorted by key.
func (s *State) Budgets() []Budget {
	out := make([]Budget, 0, len(s.budgets))
	for _, b := range s.budgets {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b Budget) int {
		return strings.Compare(streams.BudgetKey(a.Ref), streams.BudgetKey(b.Ref))
	})
	return out
}

// Clone returns a deep copy that shares nothing mutable with s.
func (s *State) Clone() *State {
	c := &State{
		position:     s.position,
		events:       s.events,
		balances:     make(map[events.BalanceRef]*Balance, len(s.balances)),
		lanes:        maps.Clone(s.lanes),
		hashes:       maps.Clone(s.hashes),
		reservations: make(map[string]*Reservation, len(s.reservations)),
		budgets:      make(map[events.BudgetRef]*Budget, len(s.budgets)),
		win:          s.win.clone(),
		pricing:      s.pricing.clone(),
		defaults:     make(map[string]map[uint64]*Budget, len(s.defaults)),
		defaultRev:   maps.Clone(s.defaultRev),
		settings:     maps.Clone(s.settings),
		voided:       maps.Clone(s.voided),
		locs:         s.locs,
	}
	for k, vs := range s.defaults {
		c.defaults[k] = maps.Clone(vs) // *Budget values are never mutated
	}
	for k, b := range s.balances {
		v := *b
		c.balances[k] = &v
	}
	for k, r := range s.reservations {
		c.reservations[k] = r.clone()
	}
	for k, b := range s.budgets {
		v := *b
		c.budgets[k] = &v
	}
	return c
}

func (r *Reservation) clone() *Reservation {
	c := *r
	c.Balances = slices.Clone(r.Balances)
	c.Seqs = slices.Clone(r.Seqs)
	c.Parts = make(map[events.BalanceRef]ReservationPart, len(r.Parts))
	for k, p := range r.Parts {
		p.Seqs = slices.Clone(p.Seqs)
		c.Parts[k] = p
	}
	return &c
}

// Apply folds one stream message: seq is its stream sequence, key its KV
// key (streams.Layout.KeyOf of its subject), data its value. A lane key
// must hold an events.LaneRevision, a budget key an events.BudgetRevision.
// A balance key is not valid: balances live in lanes, so a message under a
// balance key comes from a stream of an older layout. A key of any other
// family is not part of the book of record and is skipped (the position
// still advances).
//
// A lane revision names one or more balances, distinct and in increasing
// streams.BalanceKey order; a balance always stays in the lane that first
// named it. For each balance in turn, after applying its events in order,
// Apply verifies that the balance's stated Spent, Reserved, Overrun and
// Open equal the folded totals, that its Limit is not negative and its
// Unit valid, that reserved never went negative, and that right after each
// ReservationOpened spent + reserved <= Limit (the invariant at
// admission). Every balance the revision names gets seq as its Revision.
// A budget revision's stated Limit, Unit, TZ, Disabled, FixedSlot and
// Thresholds must equal its folded definition (budget.defined.v1 events
// are upcast to v2 with events.AsBudgetDefinedV2).
//
// A seq <= Position is ignored and returns nil. Apply is all or nothing,
// across every balance of a lane revision: on error the State, Position
// included, is unchanged. The error is an *ApplyError wrapping, in
// precedence order: ErrMalformed (decoding, schema: lane.v1 and budget.v1
// are upcast; then ErrChain for a version-2 revision that does not follow the
// last revision of its key applied, naming the sequence; then key, a lane revision
// with no balance or with balances out of order or named twice, then per
// balance in order its schema, ref, lane, unit and limit); then, balance
// by balance in order, event by event in order, ErrMalformed,
// ErrTransition or ErrInvariant (negative reserved, admission), and
// ErrMismatch (a *MismatchError, fields checked in the order spent,
// reserved, overrun, open for a balance; limit, unit, tz, disabled,
// fixed_slot, thresholds for a budget). An
// error about one balance of a lane revision starts with "balance
// <scope/period/instance>: ". Apply does no I/O and does not panic on any
// input.
func (s *State) Apply(seq uint64, key string, data []byte) error {
	if seq <= s.position {
		return nil
	}
	var err error
	switch {
	case streams.IsLaneKey(key):
		err = s.applyLane(seq, key, data)
	case streams.IsBalanceKey(key):
		err = errorf(ErrMalformed, "balance key outside a lane: a stream of an older layout")
	case streams.IsBudgetKey(key):
		err = s.applyBudget(seq, key, data)
	case streams.IsPricingKey(key):
		err = s.applyPricing(seq, key, data)
	case streams.IsDefaultKey(key):
		err = s.applyDefault(seq, key, data)
	case streams.IsAPIKeyKey(key), streams.IsTenantLimitsKey(key):
		err = s.applySetting(seq, key, data)
	}
	if err != nil {
		return &ApplyError{Seq: seq, Key: key, Err: err}
	}
	s.position = seq
	return nil
}

// applySetting folds one API key or tenant limits revision: it must
// decode and belong under key; its last revision is what a snapshot must
// state.
func (s *State) applySetting(seq uint64, key string, data []byte) error {
	var under string
	var chain events.Chain
	if streams.IsAPIKeyKey(key) {
		rev, err := events.DecodeAPIKeyRevision(data)
		if err != nil {
			return errorf(ErrMalformed, "%v", err)
		}
		under, chain = streams.APIKeyKey(rev.ID), rev.Chain
	} else {
		rev, err := events.DecodeTenantLimitsRevision(data)
		if err != nil {
			return errorf(ErrMalformed, "%v", err)
		}
		under, chain = streams.TenantLimitsKey(rev.Tenant), rev.Chain
	}
	if under != key {
		return errorf(ErrMalformed, "a revision of %s under key %s", under, key)
	}
	if err := events.CheckChain(key, seq, chain, s.settings[key], s.hashes[key]); err != nil {
		return fmt.Errorf("%w: %w", ErrChain, err)
	}
	s.settings[key], s.hashes[key] = seq, events.HashPayload(data)
	return nil
}

// skip advances the position past seq without applying it; Check uses it
// to go on after a message it reported.
func (s *State) skip(seq uint64) {
	if seq > s.position {
		s.position = seq
	}
}

// decodeStrict decodes one JSON object with no unknown fields and no
// trailing data.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errorf(ErrMalformed, "empty value (a KV delete or purge?)")
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return errorf(ErrMalformed, "decode: %v", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errorf(ErrMalformed, "decode: unexpected data after the revision")
	}
	return nil
}

// stage holds the reservations one lane revision touches, across all of
// its balances, copied on first touch, so that a failing revision leaves
// the State unchanged.
type stage struct {
	s   *State
	mod map[string]*Reservation
	// voids are the request ids voided by the revision being folded.
	voids []string
}

func (st *stage) get(id string) *Reservation {
	if r, ok := st.mod[id]; ok {
		return r
	}
	r, ok := st.s.reservations[id]
	if !ok {
		return nil
	}
	r = r.clone()
	st.mod[id] = r
	return r
}

// applyLane folds one lane revision: every balance it names, sharing one
// stage, and commits only if all of them fold.
func (s *State) applyLane(seq uint64, key string, data []byte) error {
	rev, err := s.decodeLane(seq, key, data)
	if err != nil {
		return err
	}
	// Every balance's header first, so that a malformed revision is
	// reported as such before any of its events is folded.
	prev := ""
	for i := range rev.Balances {
		br := &rev.Balances[i]
		if err := s.checkHeader(key, br); err != nil {
			return fmt.Errorf("balance %s: %w", br.Balance, err)
		}
		k := streams.BalanceKey(br.Balance)
		switch {
		case i > 0 && k == prev:
			return errorf(ErrMalformed, "balance %s named twice in one lane revision", br.Balance)
		case i > 0 && k < prev:
			return errorf(ErrMalformed, "balances out of key order: %s after %s", k, prev)
		}
		prev = k
	}

	st := &stage{s: s, mod: map[string]*Reservation{}}
	folded := make([]Balance, len(rev.Balances))
	n := 0
	for i := range rev.Balances {
		br := &rev.Balances[i]
		b, err := s.foldBalance(st, seq, key, br)
		if err != nil {
			return fmt.Errorf("balance %s: %w", br.Balance, err)
		}
		folded[i] = b
		n += len(br.Events)
	}

	// Commit.
	for i := range folded {
		b := folded[i]
		b.Revision = seq
		b.Revisions++
		s.balances[b.Ref] = &b
	}
	s.lanes[key] = seq
	s.hashes[key] = events.HashPayload(data)
	for id, r := range st.mod {
		s.reservations[id] = r
		s.closed(r, seq)
	}
	s.void(st.voids, seq)
	s.events += n
	return nil
}

// decodeLane decodes a lane revision of version 1 or 2 and, for version 2,
// checks that it follows the last revision of key applied: a gap or a fork
// is an ErrChain error naming seq.
func (s *State) decodeLane(seq uint64, key string, data []byte) (events.LaneRevision, error) {
	rev, err := parseLane(data)
	return s.chainLane(seq, key, rev, err)
}

// parseLane decodes a lane revision of version 1 or 2 (upcast to 2). It
// reads nothing of the State, so Check runs it ahead of the fold, in
// parallel.
func parseLane(data []byte) (events.LaneRevision, error) {
	// The canonical form the ledger writes is read without reflection;
	// anything else the strict way, which keeps its own verdict.
	rev, canonical, err := codec.DecodeCanonicalLane(data)
	if !canonical {
		if err := decodeStrict(data, &rev); err != nil {
			return rev, err
		}
		err = events.UpcastLane(&rev)
	}
	if err != nil {
		return rev, errorf(ErrMalformed, "%v", err)
	}
	if len(rev.Balances) == 0 {
		return rev, errorf(ErrMalformed, "lane revision names no balance")
	}
	return rev, nil
}

// chainLane checks that rev (parsed with error perr) follows the last
// revision of key applied.
func (s *State) chainLane(seq uint64, key string, rev events.LaneRevision, perr error) (events.LaneRevision, error) {
	if perr != nil {
		return rev, perr
	}
	if rev.Chained() {
		if err := events.CheckChain(key, seq, rev.Chain, s.lanes[key], s.hashes[key]); err != nil {
			return rev, fmt.Errorf("%w: %w", ErrChain, err)
		}
	}
	return rev, nil
}

// parsedLane is a lane revision parsed ahead of its fold (parseLane).
type parsedLane struct {
	rev events.LaneRevision
	err error
}

// applyLaneQuarantine is Check's fold of one lane revision (parsed ahead
// when pre is set): balance by
// balance rather than all or nothing, so that one bad balance does not hide
// the others (with one lane, a lane is the whole book). Balances whose
// balance key is in bad are skipped; each balance that fails to apply is
// left unchanged and returned with its error, for Check to report and
// quarantine. A revision that cannot be read as a lane revision at all
// returns err and changes nothing. The position advances to seq unless err.
func (s *State) applyLaneQuarantine(seq uint64, key string, data []byte, pre *parsedLane, bad map[string]bool) (failed map[events.BalanceRef]error, err error) {
	if seq <= s.position {
		return nil, nil
	}
	if pre == nil {
		rev, err := parseLane(data)
		pre = &parsedLane{rev, err}
	}
	rev, err := s.chainLane(seq, key, pre.rev, pre.err)
	if err != nil {
		return nil, err
	}
	prev := ""
	for i := range rev.Balances {
		k := streams.BalanceKey(rev.Balances[i].Balance)
		if i > 0 && k <= prev {
			return nil, errorf(ErrMalformed, "balances out of key order or named twice: %s after %s", k, prev)
		}
		prev = k
	}
	failed = map[events.BalanceRef]error{}
	// The reservations the revision touched are handed to the window
	// once every balance is folded: one opened and closed in the same
	// revision (an admit and its void in one group commit) is closed in
	// its first balance before its other balances have opened it, and
	// forgetting it then would check it with one part and open it anew in
	// the next balance.
	var touched []string
	for i := range rev.Balances {
		br := &rev.Balances[i]
		if bad[streams.BalanceKey(br.Balance)] {
			continue
		}
		if err := s.checkHeader(key, br); err != nil {
			failed[br.Balance] = err
			continue
		}
		st := &stage{s: s, mod: map[string]*Reservation{}}
		b, err := s.foldBalance(st, seq, key, br)
		if err != nil {
			failed[br.Balance] = err
			continue
		}
		b.Revision = seq
		b.Revisions++
		s.balances[b.Ref] = &b
		for id, r := range st.mod {
			s.reservations[id] = r
			touched = append(touched, id)
		}
		s.void(st.voids, seq)
		s.events += len(br.Events)
	}
	slices.Sort(touched)
	for _, id := range slices.Compact(touched) {
		if r, ok := s.reservations[id]; ok {
			s.closed(r, seq)
		}
	}
	s.lanes[key] = seq
	s.hashes[key] = events.HashPayload(data)
	s.position = seq
	return failed, nil
}

// checkHeader checks one balance of a lane revision before its events:
// schema, ref, lane, unit and limit.
func (s *State) checkHeader(lane string, rev *events.BalanceRevision) error {
	if rev.Schema != events.SchemaBalance {
		return errorf(ErrMalformed, "schema %q in a lane revision, want %q", rev.Schema, events.SchemaBalance)
	}
	if err := rev.Balance.Validate(); err != nil {
		return errorf(ErrMalformed, "%v", err)
	}
	if cur, ok := s.balances[rev.Balance]; ok && cur.Lane != lane {
		return errorf(ErrMalformed, "belongs to lane %s, which first named it, not to %s", cur.Lane, lane)
	}
	if err := events.ValidateUnit(rev.Unit); err != nil {
		return errorf(ErrMalformed, "%v", err)
	}
	if rev.Limit.Sign() < 0 {
		return errorf(ErrMalformed, "negative limit %s", rev.Limit)
	}
	return nil
}

// foldBalance applies one balance's events on top of its folded totals,
// staging the reservations they touch, and checks the numbers the revision
// states. It returns the balance after the revision (Revision and
// Revisions not yet advanced) and changes nothing in s.
func (s *State) foldBalance(st *stage, seq uint64, lane string, rev *events.BalanceRevision) (Balance, error) {
	ref := rev.Balance
	var b Balance
	if cur, ok := s.balances[ref]; ok {
		b = *cur
	} else {
		b = Balance{Ref: ref, Key: streams.BalanceKey(ref), Lane: lane}
	}
	if total := b.Spent.Add(b.Reserved); rev.Limit.Cmp(total) < 0 && total.Cmp(b.Lowered) > 0 {
		b.Lowered = total // the limit was lowered below what the balance held
	}
	b.Unit, b.Limit = rev.Unit, rev.Limit

	for i, e := range rev.Events {
		if err := applyEvent(st, &b, seq, e); err != nil {
			return Balance{}, fmt.Errorf("event %d (%s): %w", i, eventType(e), err)
		}
		if b.Reserved.Sign() < 0 {
			return Balance{}, errorf(ErrInvariant, "event %d (%s): reserved went negative: %s", i, eventType(e), b.Reserved)
		}
		if ev, ok := e.(events.ReservationOpened); ok {
			s.noteZone(&b, ev)
			if total := b.Spent.Add(b.Reserved); total.Cmp(b.Limit) > 0 {
				return Balance{}, errorf(ErrInvariant, "event %d (%s): at admission spent %s + reserved %s = %s exceeds limit %s",
					i, eventType(e), b.Spent, b.Reserved, total, b.Limit)
			}
		}
	}

	for _, c := range []struct {
		field          string
		stated, folded events.Money
	}{
		{"spent", rev.Spent, b.Spent},
		{"reserved", rev.Reserved, b.Reserved},
		{"overrun", rev.Overrun, b.Overrun},
	} {
		if c.stated.Cmp(c.folded) != 0 {
			return Balance{}, &MismatchError{Field: c.field, Stated: c.stated.String(), Folded: c.folded.String()}
		}
	}
	if rev.Open != b.Open {
		return Balance{}, &MismatchError{Field: "open", Stated: strconv.FormatInt(rev.Open, 10), Folded: strconv.FormatInt(b.Open, 10)}
	}
	return b, nil
}

// noteZone adds to b.Zones the zone ev's instance was computed in (see
// Balance.Zones).
func (s *State) noteZone(b *Balance, ev events.ReservationOpened) {
	tz := "UTC"
	if def, ok := s.budgets[b.Ref.Budget()]; ok && def.TZ != "" {
		tz = def.TZ
	}
	z := tz
	if !ev.At.IsZero() {
		loc := s.zoneLoc(tz)
		if loc == nil || b.Ref.Period.InstanceIn(ev.At, loc) != b.Ref.Instance {
			z = "?"
		}
	}
	if !slices.Contains(b.Zones, z) {
		b.Zones = append(slices.Clip(b.Zones), z) // never into an array a copy shares
	}
}

// zoneLoc returns the location of tz (nil if it does not load), cached:
// loading a zone reads the time zone database.
func (s *State) zoneLoc(tz string) *time.Location {
	if s.locs != nil {
		if loc, ok := s.locs.Load(tz); ok {
			return loc.(*time.Location)
		}
	}
	loc, err := events.LoadZone(tz)
	if err != nil {
		loc = nil
	}
	if s.locs != nil {
		s.locs.Store(tz, loc)
	}
	return loc
}

func eventType(e events.Event) events.Type {
	if e == nil {
		return "null"
	}
	return e.EventType()
}

// applyEvent applies one reservation event to the balance b.
func applyEvent(st *stage, b *Balance, seq uint64, e events.Event) error {
	switch ev := e.(type) {
	case events.ReservationOpened:
		return applyOpened(st, b, seq, ev)
	case events.ReservationSettled:
		return applySettled(st, b, seq, ev)
	case events.ReservationReleased:
		return applyReleased(st, b, seq, ev)
	case events.ThresholdCrossed:
		return applyCrossed(b, ev)
	case events.RequestVoided:
		if err := checkBalance(b, ev.Balance); err != nil {
			return err
		}
		if ev.RequestID == "" || !slices.Contains(ev.Scopes, ev.Balance.Scope) {
			return errorf(ErrMalformed, "void of request %q in balance %s, which is not among its scopes %v", ev.RequestID, ev.Balance, ev.Scopes)
		}
		b.Voided++
		st.voids = append(st.voids, ev.RequestID)
		return nil
	default:
		return errorf(ErrMalformed, "not a reservation event (nor a threshold crossing) in a balance revision")
	}
}

func checkBalance(b *Balance, got events.BalanceRef) error {
	if got != b.Ref {
		return errorf(ErrMalformed, "event balance %s differs from the revision's %s", got, b.Ref)
	}
	return nil
}

func appendSeq(seqs []uint64, seq uint64) []uint64 {
	if n := len(seqs); n > 0 && seqs[n-1] == seq {
		return seqs
	}
	return append(seqs, seq)
}

func applyOpened(st *stage, b *Balance, seq uint64, ev events.ReservationOpened) error {
	if err := checkBalance(b, ev.Balance); err != nil {
		return err
	}
	if ev.ReservationID == "" {
		return errorf(ErrMalformed, "empty reservation id")
	}
	if !slices.Contains(ev.Balances, ev.Balance) {
		return errorf(ErrMalformed, "reservation %s: balance %s is not among its balances", ev.ReservationID, ev.Balance)
	}
	if ev.Amount.Sign() < 0 {
		return errorf(ErrTransition, "reservation %s: negative amount %s", ev.ReservationID, ev.Amount)
	}
	if err := st.s.checkQuote(ev); err != nil {
		return err
	}
	r := st.get(ev.ReservationID)
	if r == nil {
		r = &Reservation{
			ID:        ev.ReservationID,
			RequestID: ev.RequestID,
			Unit:      ev.Unit,
			Balances:  slices.Clone(ev.Balances),
			Parts:     map[events.BalanceRef]ReservationPart{},
			OpenedAt:  ev.At,
			ExpiresAt: ev.ExpiresAt,
			Pricing:   ev.Pricing,
		}
		st.mod[ev.ReservationID] = r
	}
	if p, dup := r.Parts[b.Ref]; dup {
		return errorf(ErrTransition, "reservation %s opened again in balance %s (it is %s there)", ev.ReservationID, b.Ref, p.Status)
	}
	if events.IsCount(r.Unit) && !events.IsCount(ev.Unit) {
		// A money part after a count part: the reservation's unit is the
		// money's, whichever part comes first (as a snapshot loads it).
		r.Unit = ev.Unit
	}
	r.Parts[b.Ref] = ReservationPart{Status: events.StatusOpen, Amount: ev.Amount, Seqs: []uint64{seq}}
	r.Seqs = appendSeq(r.Seqs, seq)
	r.refreshStatus()
	b.Reserved = b.Reserved.Add(ev.Amount)
	b.Open++
	b.Opened++
	return nil
}

// part returns the reservation and its part in b, or a transition error.
func part(st *stage, b *Balance, id, what string) (*Reservation, ReservationPart, error) {
	r := st.get(id)
	if r == nil {
		return nil, ReservationPart{}, errorf(ErrTransition, "%s of reservation %s, which was never opened", what, id)
	}
	p, ok := r.Parts[b.Ref]
	if !ok {
		return nil, ReservationPart{}, errorf(ErrTransition, "%s of reservation %s, which was never opened in balance %s", what, id, b.Ref)
	}
	return r, p, nil
}

func applySettled(st *stage, b *Balance, seq uint64, ev events.ReservationSettled) error {
	if err := checkBalance(b, ev.Balance); err != nil {
		return err
	}
	r, p, err := part(st, b, ev.ReservationID, "settle")
	if err != nil {
		return err
	}
	switch {
	case ev.AfterExpiry && p.Status != events.StatusExpired:
		return errorf(ErrTransition, "settle after expiry of reservation %s, which is %s (not expired) in %s", ev.ReservationID, p.Status, b.Ref)
	case !ev.AfterExpiry && p.Status != events.StatusOpen:
		return errorf(ErrTransition, "settle of reservation %s, which is already %s in %s", ev.ReservationID, p.Status, b.Ref)
	}
	if ev.Reserved.Cmp(p.Amount) != 0 {
		return errorf(ErrTransition, "settle of reservation %s states reserved %s, but it opened %s in %s", ev.ReservationID, ev.Reserved, p.Amount, b.Ref)
	}
	if ev.Actual.Sign() < 0 {
		return errorf(ErrTransition, "settle of reservation %s: negative actual %s", ev.ReservationID, ev.Actual)
	}
	want := ev.Actual.Sub(ev.Reserved).Max(events.Zero)
	if ev.AfterExpiry {
		// The sweeper had returned the reservation: all of the spend is
		// beyond what was reserved.
		want = ev.Actual
	}
	if ev.Usage != nil {
		if err := checkUsage(r, b, ev); err != nil {
			return err
		}
	}
	if ev.Overrun.Cmp(want) != 0 {
		return errorf(ErrTransition, "settle of reservation %s states overrun %s, but actual %s - reserved %s gives %s",
			ev.ReservationID, ev.Overrun, ev.Actual, ev.Reserved, want)
	}
	b.Spent = b.Spent.Add(ev.Actual)
	b.Overrun = b.Overrun.Add(ev.Overrun)
	if !ev.AfterExpiry {
		b.Reserved = b.Reserved.Sub(ev.Reserved)
		b.Open--
	}
	b.Settled++
	if ev.Late {
		b.Late++
	}
	p.Status = events.StatusSettled
	p.Actual, p.Overrun = ev.Actual, ev.Overrun
	p.Late, p.AfterExpiry = ev.Late, ev.AfterExpiry
	p.Seqs = appendSeq(p.Seqs, seq)
	r.Parts[b.Ref] = p
	r.Late = r.Late || ev.Late
	r.ClosedAt = ev.At
	r.Seqs = appendSeq(r.Seqs, seq)
	r.refreshStatus()
	return nil
}

func applyReleased(st *stage, b *Balance, seq uint64, ev events.ReservationReleased) error {
	if err := checkBalance(b, ev.Balance); err != nil {
		return err
	}
	if ev.Reason != events.ReasonReleased && ev.Reason != events.ReasonExpired && ev.Reason != events.ReasonVoided {
		return errorf(ErrMalformed, "release of reservation %s with reason %q, want %q, %q or %q",
			ev.ReservationID, ev.Reason, events.ReasonReleased, events.ReasonExpired, events.ReasonVoided)
	}
	r, p, err := part(st, b, ev.ReservationID, "release")
	if err != nil {
		return err
	}
	if p.Status != events.StatusOpen {
		return errorf(ErrTransition, "release of reservation %s, which is already %s in %s", ev.ReservationID, p.Status, b.Ref)
	}
	if ev.Reserved.Cmp(p.Amount) != 0 {
		return errorf(ErrTransition, "release of reservation %s states reserved %s, but it opened %s in %s", ev.ReservationID, ev.Reserved, p.Amount, b.Ref)
	}
	b.Reserved = b.Reserved.Sub(ev.Reserved)
	b.Open--
	if ev.Reason == events.ReasonExpired {
		b.Expired++
		p.Status = events.StatusExpired
		r.Expired = true
	} else {
		b.Released++
		p.Status = events.StatusReleased
	}
	p.Seqs = appendSeq(p.Seqs, seq)
	r.Parts[b.Ref] = p
	r.ClosedAt = ev.At
	r.Seqs = appendSeq(r.Seqs, seq)
	r.refreshStatus()
	return nil
}

// refreshStatus derives the reservation's status from its parts.
func (r *Reservation) refreshStatus() {
	var open, settled, expired bool
	for _, p := range r.Parts {
		switch p.Status {
		case events.StatusOpen:
			open = true
		case events.StatusSettled:
			settled = true
		case events.StatusExpired:
			expired = true
		}
	}
	switch {
	case open:
		r.Status = events.StatusOpen
	case settled:
		r.Status = events.StatusSettled
	case expired:
		r.Status = events.StatusExpired
	default:
		r.Status = events.StatusReleased
	}
}

func (s *State) applyBudget(seq uint64, key string, data []byte) error {
	var rev events.BudgetRevision
	if err := decodeStrict(data, &rev); err != nil {
		return err
	}
	if err := events.UpcastBudget(&rev); err != nil {
		return errorf(ErrMalformed, "%v", err)
	}
	if _, err := events.ParseStoredScope(string(rev.Budget.Scope)); err != nil {
		return errorf(ErrMalformed, "%v", err)
	}
	if _, err := events.ParsePeriod(string(rev.Budget.Period)); err != nil {
		return errorf(ErrMalformed, "%v", err)
	}
	if want := streams.BudgetKey(rev.Budget); want != key {
		return errorf(ErrMalformed, "revision of budget %s/%s belongs under key %s", rev.Budget.Scope, rev.Budget.Period, want)
	}
	if len(rev.Events) == 0 {
		return errorf(ErrMalformed, "budget revision without a BudgetDefined event")
	}
	if rev.Chained() {
		var last uint64
		if cur, ok := s.budgets[rev.Budget]; ok {
			last = cur.Revision
		}
		if err := events.CheckChain(key, seq, rev.Chain, last, s.hashes[key]); err != nil {
			return fmt.Errorf("%w: %w", ErrChain, err)
		}
	}
	var b Budget
	if cur, ok := s.budgets[rev.Budget]; ok {
		b = *cur
	} else {
		b = Budget{Ref: rev.Budget}
	}
	for i, e := range rev.Events {
		if r, ok := e.(events.BudgetRetired); ok {
			switch {
			case r.Budget != rev.Budget:
				return errorf(ErrMalformed, "event %d (%s): budget %s/%s differs from the revision's", i, eventType(e), r.Budget.Scope, r.Budget.Period)
			case b.Definitions == 0 && b.Revision == 0: // (a snapshot's budget has its Revision)
				return errorf(ErrTransition, "event %d (%s): retires a budget never defined", i, eventType(e))
			case b.Retired:
				return errorf(ErrTransition, "event %d (%s): retires a budget retired at %d", i, eventType(e), b.RetiredRevision)
			case len(r.Reason) > events.MaxRetireReasonLen:
				return errorf(ErrMalformed, "event %d (%s): reason of %d bytes", i, eventType(e), len(r.Reason))
			}
			b.Retired, b.RetiredAt, b.RetiredRevision, b.RetiredReason = true, r.At, seq, r.Reason
			continue
		}
		ev, ok := events.AsBudgetDefinedV2(e)
		if !ok {
			return errorf(ErrMalformed, "event %d (%s): not a budget definition in a budget revision", i, eventType(e))
		}
		if ev.Budget != rev.Budget {
			return errorf(ErrMalformed, "event %d (%s): budget %s/%s differs from the revision's", i, eventType(e), ev.Budget.Scope, ev.Budget.Period)
		}
		if ev.Limit.Sign() < 0 {
			return errorf(ErrMalformed, "event %d (%s): negative limit %s", i, eventType(e), ev.Limit)
		}
		if err := events.ValidateUnit(ev.Unit); err != nil {
			return errorf(ErrMalformed, "event %d (%s): %v", i, eventType(e), err)
		}
		if _, err := events.LoadZone(ev.TZ); err != nil {
			return errorf(ErrMalformed, "event %d (%s): %v", i, eventType(e), err)
		}
		if ev.FixedSlot != nil && ev.FixedSlot.Sign() <= 0 {
			return errorf(ErrMalformed, "event %d (%s): fixed slot %s is not positive", i, eventType(e), ev.FixedSlot)
		}
		if b.Retired {
			return errorf(ErrTransition, "event %d (%s): defines a budget retired at %d", i, eventType(e), b.RetiredRevision)
		}
		b.Limit, b.Unit, b.DefinedAt = ev.Limit, ev.Unit, ev.At
		b.TZ, b.Disabled, b.FixedSlot, b.Thresholds = ev.TZ, ev.Disabled, ev.FixedSlot, ev.Thresholds
		b.ExposureCap, b.Learn = ev.ExposureCap, ev.Learn
		if ev.FromDefault != 0 {
			if err := s.checkFromDefault(rev.Budget, ev, seq); err != nil {
				return err
			}
		}
		b.FromDefault = ev.FromDefault
		b.Definitions++
	}
	if rev.Limit.Cmp(b.Limit) != 0 {
		return &MismatchError{Field: "limit", Stated: rev.Limit.String(), Folded: b.Limit.String()}
	}
	if rev.Unit != b.Unit {
		return &MismatchError{Field: "unit", Stated: rev.Unit, Folded: b.Unit}
	}
	if rev.TZ != b.TZ {
		return &MismatchError{Field: "tz", Stated: rev.TZ, Folded: b.TZ}
	}
	if rev.Disabled != b.Disabled {
		return &MismatchError{Field: "disabled", Stated: strconv.FormatBool(rev.Disabled), Folded: strconv.FormatBool(b.Disabled)}
	}
	if st, fo := slotString(rev.FixedSlot), slotString(b.FixedSlot); st != fo {
		return &MismatchError{Field: "fixed_slot", Stated: st, Folded: fo}
	}
	if st, fo := moneyList(rev.Thresholds), moneyList(b.Thresholds); st != fo {
		return &MismatchError{Field: "thresholds", Stated: st, Folded: fo}
	}
	if rev.Retired != b.Retired {
		return &MismatchError{Field: "retired", Stated: strconv.FormatBool(rev.Retired), Folded: strconv.FormatBool(b.Retired)}
	}
	if rev.FromDefault != b.FromDefault {
		return &MismatchError{Field: "from_default", Stated: strconv.FormatUint(rev.FromDefault, 10), Folded: strconv.FormatUint(b.FromDefault, 10)}
	}
	b.Revision = seq
	s.budgets[rev.Budget] = &b
	s.hashes[key] = events.HashPayload(data)
	s.events += len(rev.Events)
	return nil
}

// slotString is a fixed slot as text: "" for none.
// learnString is a learn rule as text ("" for none).
func learnString(r *events.LearnRule) string {
	if r == nil {
		return ""
	}
	return r.String()
}

func slotString(m *events.Money) string {
	if m == nil {
		return ""
	}
	return m.String()
}

// moneyList is a list of amounts as text.
func moneyList(ms []events.Money) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return strings.Join(parts, ",")
}
