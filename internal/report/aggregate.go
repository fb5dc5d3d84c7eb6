package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// Limits of an Aggregate. Its memory is one cell per (hour bucket,
// dimension, value, unit) that saw a reservation within the last
// HourDays days, one per (UTC day, dimension, value, unit) before that,
// plus the reservations an export would still hold (open ones, and
// expired ones within their late-settle hold): never the reservations of
// the past.
const (
	// HourDays is how many days of hour buckets an Aggregate keeps, back
	// from the latest hour a reservation opened in: enough for this
	// month's and last month's reports hour by hour. Older hours are
	// rolled up into whole UTC days, so that a year of history costs 365
	// buckets per group, not 8,760. A report whose bound falls inside a
	// rolled day is refused (ErrRolledUp); the replay takes any hour.
	HourDays = 62

	// MaxReportKeys is how many distinct metadata keys of each tenant's
	// an Aggregate groups by, the first ones it meets in stream order
	// (slots). A report by a key met later is refused
	// (events.CodeReportUnavailable); the replay answers it.
	MaxReportKeys = 32
	// MaxReportValues is how many distinct values of each tenant's an
	// Aggregate keeps per metadata key, and how many scopes per scope
	// kind (the part before ':'), the first ones it meets in stream
	// order (slots). Reservations with a value met later add up in the
	// key's Other group; those with a scope met later, in the Other group
	// of the scope's kind (named as its default is: "run:*").
	MaxReportValues = 500
	// MaxReportKinds is how many scope kinds of each tenant's an
	// Aggregate keeps scopes of, the first ones it meets. Reservations in
	// a scope of a kind met later add up in the one Other group of
	// scopes.
	MaxReportKinds = 32
)

// dimScope is the dimension of scopes; dimTotal the one cell per bucket
// and unit that counts every reservation (a metadata key's "" group is
// the total less the key's values).
const (
	dimScope = "scope"
	dimTotal = ""
)

// groupKey names one cell within a bucket. Tenant is the reservation's
// tenant (events.Scope.Tenant of its balances; "" untenanted), so a
// report can keep to one tenant as Filter.OneTenant does.
type groupKey struct {
	Tenant string
	Dim    string
	Value  string
	Other  bool
	Unit   string
}

// cell is a group's sums in one bucket.
type cell struct {
	Reservations, Open, Settled, Released, Expired, Late int64
	Spend, Overrun, Reserved                             events.Money
}

// add adds (sign +1) or removes (-1) one row's contribution.
// add adds (+1) or removes (-1) row r, which holds reserved in this cell
// and whose settle charged it spent and overrun (r's own, or its scope's:
// Row.ReservedIn, Row.ChargedIn).
func (c *cell) add(r *Row, reserved, spent, overrun events.Money, sign int64) {
	c.Reservations += sign
	switch r.Status {
	case events.StatusOpen:
		c.Open += sign
		c.Reserved = signedAdd(c.Reserved, reserved, sign)
	case events.StatusSettled:
		c.Settled += sign
	case events.StatusReleased:
		c.Released += sign
	case events.StatusExpired:
		c.Expired += sign
	}
	if r.Late {
		c.Late += sign
	}
	if r.Settled {
		c.Spend = signedAdd(c.Spend, spent, sign)
		c.Overrun = signedAdd(c.Overrun, overrun, sign)
	}
}

func (c *cell) merge(o *cell) {
	c.Reservations += o.Reservations
	c.Open += o.Open
	c.Settled += o.Settled
	c.Released += o.Released
	c.Expired += o.Expired
	c.Late += o.Late
	c.Spend = c.Spend.Add(o.Spend)
	c.Overrun = c.Overrun.Add(o.Overrun)
	c.Reserved = c.Reserved.Add(o.Reserved)
}

func (c *cell) sub(o *cell) {
	c.Reservations -= o.Reservations
	c.Open -= o.Open
	c.Settled -= o.Settled
	c.Released -= o.Released
	c.Expired -= o.Expired
	c.Late -= o.Late
	c.Spend = c.Spend.Sub(o.Spend)
	c.Overrun = c.Overrun.Sub(o.Overrun)
	c.Reserved = c.Reserved.Sub(o.Reserved)
}

// signedAdd is m + x for sign +1, m - x for -1.
func signedAdd(m, x events.Money, sign int64) events.Money {
	if sign < 0 {
		return m.Sub(x)
	}
	return m.Add(x)
}

// Aggregate is the spend report kept up to date as the ledger stream
// folds: the sums of Report for every scope and every metadata key (up to
// MaxReportKeys keys and MaxReportValues values each per tenant, and
// MaxReportValues scopes of each of MaxReportKinds kinds), per hour bucket of
// the reservations' opening time. It folds reservations exactly as Rows
// does (the same fold, late-settle hold included), so a report from it
// equals the replay's Report of the same stream position, by construction
// and to the cent. It is a pure fold: no clock, no I/O; its position is
// the stream sequence. Not safe for concurrent use (Aggregator guards it).
type Aggregate struct {
	rf      *rowFold
	pos     uint64
	buckets map[int64]map[groupKey]*cell
	sorted  []int64 // bucket starts, ascending
	// latest is the latest hour bucket a reservation opened in; dayBefore
	// the start of the oldest hour bucket kept: buckets before it are
	// whole UTC days (see HourDays). Both come from the events' own times,
	// so the fold stays pure: the same stream rolls up the same way.
	latest, dayBefore int64
	// ceiling bounds latest while a message is folded: the hour after
	// the message's stream timestamp (the server's clock), so that one
	// event stamped far in the future by a replica's wrong clock cannot
	// roll up every hour before it. Zero: no bound.
	ceiling int64
	// slots are the metadata keys and values tracked, per tenant.
	slots slots
}

// NewAggregate returns an empty Aggregate at position 0.
func NewAggregate() *Aggregate {
	return &Aggregate{
		rf:      newRowFold(Filter{}, nil),
		buckets: map[int64]map[groupKey]*cell{},
		slots:   slots{},
	}
}

// Position is the stream sequence of the last message folded.
func (a *Aggregate) Position() uint64 { return a.pos }

// Apply folds one message of the ledger stream (seq, key, payload, and the
// message's stream timestamp, which times the late-settle hold). A message
// at or below the position is skipped. It returns an *projector.ApplyError as Rows
// does; the Aggregate must then be discarded.
func (a *Aggregate) Apply(seq uint64, key string, data []byte, at time.Time) error {
	return a.apply(message{seq: seq, key: key, data: data, at: at})
}

// apply is Apply of a message a read hands over (decoded by the gate when
// it passed one).
func (a *Aggregate) apply(m message) error {
	seq := m.seq
	if seq <= a.pos {
		return nil
	}
	rf := a.rf
	a.ceiling = 0
	if !m.at.IsZero() {
		a.ceiling = bucketOf(m.at) + 60*60
	}
	if err := a.applyEvents(m); err != nil {
		return err
	}
	// As in Rows: the message's events before the holds it ends (ending
	// a hold writes a row, which changes no sum).
	if err := rf.expireHolds(m.at); err != nil {
		return err
	}
	a.pos = seq
	a.rollUp()
	return nil
}

// rollUp merges the hour buckets older than HourDays days before the
// latest hour into one bucket per UTC day. It runs between messages, so
// that a reservation's contribution is taken out of the bucket it was put
// in (bucket maps an hour already rolled to its day).
func (a *Aggregate) rollUp() {
	const day = 24 * 60 * 60
	horizon := a.latest - a.latest%day - HourDays*day
	if horizon <= a.dayBefore {
		return
	}
	i, _ := slices.BinarySearch(a.sorted, horizon)
	var kept []int64
	for _, b := range a.sorted[:i] {
		if b < a.dayBefore {
			kept = append(kept, b) // already a day
			continue
		}
		d := b - b%day
		if d == b {
			kept = append(kept, b) // the day's first hour becomes the day
			continue
		}
		into := a.buckets[d]
		if into == nil {
			into = map[groupKey]*cell{}
			a.buckets[d] = into
			kept = append(kept, d)
		}
		for k, c := range a.buckets[b] {
			if t := into[k]; t != nil {
				t.merge(c)
			} else {
				into[k] = c
			}
		}
		delete(a.buckets, b)
	}
	slices.Sort(kept)
	a.sorted = append(slices.Compact(kept), a.sorted[i:]...)
	a.dayBefore = horizon
}

// applyEvents folds m's reservation events, moving each reservation's
// contribution as it changes.
func (a *Aggregate) applyEvents(m message) error {
	rf := a.rf
	switch {
	case streams.IsLaneKey(m.key):
	case streams.IsBalanceKey(m.key):
		return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: projector.Errorf(projector.ErrMalformed, "balance key outside a lane: a stream of an older layout")}
	default:
		return nil
	}
	rev, err := rf.decodeLane(m)
	if err != nil {
		return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: err}
	}
	for i := range rev.Balances {
		br := &rev.Balances[i]
		for j, e := range br.Events {
			var id string
			switch ev := e.(type) {
			case events.ReservationOpened:
				id = ev.ReservationID
			case events.ReservationSettled:
				id = ev.ReservationID
			case events.ReservationReleased:
				id = ev.ReservationID
			default:
				continue
			}
			// Take the reservation's contribution out, fold the event,
			// and put it back as it now stands.
			t := rf.live[id]
			if t != nil {
				a.contribute(&t.row, -1)
			}
			if err := rf.event(m, br.Balance, e); err != nil {
				return &projector.ApplyError{Seq: m.seq, Key: m.key, Err: fmt.Errorf("balance %s: event %d (%s): %w", br.Balance, j, projector.EventType(e), err)}
			}
			if t == nil {
				t = rf.live[id]
			}
			if t != nil {
				a.contribute(&t.row, +1)
			}
		}
	}
	return nil
}

// bucketOf is the start (unix seconds) of the hour bucket of t.
func bucketOf(t time.Time) int64 {
	return t.UTC().Truncate(events.ReportBucket).Unix()
}

// bucket is the bucket a reservation opened at t counts in: its hour, or
// its UTC day once the hour is rolled up.
func (a *Aggregate) bucket(t time.Time) int64 {
	b := bucketOf(t)
	if b < a.dayBefore {
		b -= b % (24 * 60 * 60)
	}
	return b
}

// contribute adds (+1) or removes (-1) row r in every cell it counts in:
// the total, each of its scopes, and each of its tracked metadata keys'
// values.
func (a *Aggregate) contribute(r *Row, sign int64) {
	b := a.bucket(r.OpenedAt)
	if h := bucketOf(r.OpenedAt); sign > 0 && h > a.latest {
		if a.ceiling > 0 {
			h = min(h, a.ceiling)
		}
		a.latest = max(a.latest, h)
	}
	cells := a.cells(b)
	touch := func(k groupKey, reserved, spent, overrun events.Money) {
		touchCell(cells, k, r, reserved, spent, overrun, sign)
	}
	tenant := rowTenant(r)
	touch(groupKey{Tenant: tenant, Dim: dimTotal, Unit: r.Unit}, r.Reserved, r.Actual, r.Overrun)
	for _, s := range r.Scopes {
		v, other := a.slots.value(tenant, dimScope, string(s))
		spent, overrun := r.ChargedIn(s)
		touch(groupKey{Tenant: tenant, Dim: dimScope, Value: v, Other: other, Unit: r.Unit}, r.ReservedIn(s), spent, overrun)
	}
	for k, v := range r.Metadata {
		if v == "" {
			continue // counted in the key's "" group: the total less the values
		}
		dim, ok := a.slots.key(tenant, k)
		if !ok {
			continue
		}
		val, other := a.slots.value(tenant, dim, v)
		touch(groupKey{Tenant: tenant, Dim: dim, Value: val, Other: other, Unit: r.Unit}, r.Reserved, r.Actual, r.Overrun)
	}
	a.dropEmpty(b)
}

// cells returns bucket b's cells, made empty on first use.
func (a *Aggregate) cells(b int64) map[groupKey]*cell {
	cells := a.buckets[b]
	if cells == nil {
		cells = map[groupKey]*cell{}
		a.buckets[b] = cells
		i, _ := slices.BinarySearch(a.sorted, b)
		a.sorted = slices.Insert(a.sorted, i, b)
	}
	return cells
}

// dropEmpty drops bucket b if it holds no cell.
func (a *Aggregate) dropEmpty(b int64) {
	if cells, ok := a.buckets[b]; ok && len(cells) == 0 {
		delete(a.buckets, b)
		i, _ := slices.BinarySearch(a.sorted, b)
		a.sorted = slices.Delete(a.sorted, i, i+1)
	}
}

// touchCell adds (+1) or removes (-1) row r in cells[k] (see cell.add),
// dropping the cell once it counts no reservation.
func touchCell(cells map[groupKey]*cell, k groupKey, r *Row, reserved, spent, overrun events.Money, sign int64) {
	c := cells[k]
	if c == nil {
		c = &cell{}
		cells[k] = c
	}
	c.add(r, reserved, spent, overrun, sign)
	if c.Reservations == 0 {
		delete(cells, k)
	}
}

// rowTenant is the tenant r counts under (events.Scope.Tenant of its
// balances; "" untenanted).
func rowTenant(r *Row) string {
	if len(r.Balances) > 0 {
		return r.Balances[0].Scope.Tenant()
	}
	return ""
}

// Cells is the number of non-empty cells the Aggregate holds (its memory,
// with Tracked).
func (a *Aggregate) Cells() int {
	n := 0
	for _, cs := range a.buckets {
		n += len(cs)
	}
	return n
}

// Tracked is the number of reservations the Aggregate follows: open, or
// expired and within their late-settle hold.
func (a *Aggregate) Tracked() int { return len(a.rf.live) }

// ErrKeyNotTracked: a report by a metadata key the Aggregate does not
// track (more than MaxReportKeys keys were met before it).
var ErrKeyNotTracked = fmt.Errorf("report: metadata key not tracked by the aggregate (more than %d keys)", MaxReportKeys)

// ErrRolledUp: a report bound inside a day whose hours the Aggregate
// rolled up (see HourDays).
var ErrRolledUp = errors.New("report: the aggregate keeps whole UTC days for hours before its hour horizon")

// RolledUpBefore is the start of the oldest hour the Aggregate keeps:
// before it, a report's bounds must be whole UTC days (zero when nothing
// was rolled up).
func (a *Aggregate) RolledUpBefore() time.Time {
	if a.dayBefore == 0 {
		return time.Time{}
	}
	return time.Unix(a.dayBefore, 0).UTC()
}

// ErrScopesFilter: an Aggregate's report covers every reservation; a
// selection by scope (Filter.Scopes) needs the replay.
var ErrScopesFilter = errors.New("report: the aggregate's report cannot select reservations by scope")

// Report sums the buckets in [f.From, f.To) (zero: open bound; both must
// be multiples of events.ReportBucket to equal the replay, and of a day
// before RolledUpBefore, else ErrRolledUp), of f's tenant
// when f.OneTenant, grouped by. It reads only the buckets it covers. The
// result has the same groups and sums as Projector.Report with the same
// Filter at the same position, except that the values it does not track
// add up in Other groups (AggregateReport.Other): a metadata key's in
// one, scopes in their kind's ("run:*") or, past MaxReportKinds kinds,
// in one (""). It returns ErrScopesFilter when
// f.Scopes is set, and ErrKeyNotTracked for a metadata key that is not
// tracked while others were dropped.
func (a *Aggregate) Report(by GroupBy, f Filter) (*AggregateReport, error) {
	from, to := f.From, f.To
	if len(f.Scopes) > 0 {
		return nil, ErrScopesFilter
	}
	for _, t := range []time.Time{from, to} {
		if !t.IsZero() && t.Unix() < a.dayBefore && t.Unix()%(24*60*60) != 0 {
			return nil, fmt.Errorf("%w: %s is before %s and not at 00:00Z", ErrRolledUp, t.UTC().Format(time.RFC3339), a.RolledUpBefore().Format(time.RFC3339))
		}
	}
	dim := dimScope
	if !by.scope {
		dim = MetadataColumnPrefix + by.key
		if a.slots.untracked(by.key, f) {
			return nil, ErrKeyNotTracked
		}
	}
	lo, hi := 0, len(a.sorted)
	if !from.IsZero() {
		lo, _ = slices.BinarySearch(a.sorted, from.Unix())
	}
	if !to.IsZero() {
		hi, _ = slices.BinarySearch(a.sorted, to.Unix())
	}
	sums := map[groupKey]*cell{}
	sum := func(k groupKey, c *cell) {
		s := sums[k]
		if s == nil {
			s = &cell{}
			sums[k] = s
		}
		s.merge(c)
	}
	totals := map[string]*cell{}
	fromUnix := int64(math.MinInt64)
	if !from.IsZero() {
		fromUnix = from.Unix()
	}
	var fold func(string) (string, bool)
	if by.scope {
		fold = a.slots.legacyFold(fromUnix)
	}
	for _, b := range a.sorted[lo:max(lo, hi)] {
		for k, c := range a.buckets[b] {
			if f.OneTenant && k.Tenant != f.Tenant {
				continue
			}
			if fold != nil && k.Dim == dim && !k.Other {
				// A scope whose spend before a snapshot of the older
				// slots may be in the one Other group (legacyScopes).
				k.Value, k.Other = fold(k.Value)
			}
			k.Tenant = ""
			switch k.Dim {
			case dim:
				sum(k, c)
			case dimTotal:
				if !by.scope {
					t := totals[k.Unit]
					if t == nil {
						t = &cell{}
						totals[k.Unit] = t
					}
					t.merge(c)
				}
			}
		}
	}
	// A metadata key's "" group: the reservations without the key.
	for unit, t := range totals {
		for k, s := range sums {
			if k.Unit == unit {
				t.sub(s)
			}
		}
		if t.Reservations > 0 {
			sums[groupKey{Dim: dim, Unit: unit}] = t
		}
	}
	rep := &AggregateReport{SpendReport: SpendReport{By: by, Filter: f, Position: a.pos}, fold: fold}
	for k, c := range sums {
		rep.Groups = append(rep.Groups, SpendGroup{Value: k.Value, Unit: k.Unit,
			Reservations: c.Reservations, Open: c.Open, Settled: c.Settled, Released: c.Released,
			Expired: c.Expired, Late: c.Late, Spend: c.Spend, Overrun: c.Overrun, Reserved: c.Reserved})
		if k.Other {
			rep.Other = append(rep.Other, len(rep.Groups)-1)
		}
	}
	sortGroups(rep)
	return rep, nil
}

// AggregateReport is a SpendReport from an Aggregate. Other holds the
// indexes in Groups of the Other groups: that of the metadata values past
// MaxReportValues, or of the scopes of kinds past MaxReportKinds (Value
// ""), and those of the scopes of one kind past MaxReportValues (Value
// KindOther, "run:*").
type AggregateReport struct {
	SpendReport
	Other []int
	// fold maps a scope this report counts in its kind's Other group
	// (legacyScopes) to it, so that its denials and check decisions count
	// there too (nil: none).
	fold func(string) (string, bool)
}

// IsOther reports whether Groups[i] is an Other group.
func (r *AggregateReport) IsOther(i int) bool { return slices.Contains(r.Other, i) }

// sortGroups sorts rep's groups as Report does (Other groups after the
// "" group of their unit and spend), keeping Other's indexes right.
func sortGroups(rep *AggregateReport) {
	type g struct {
		SpendGroup
		other bool
	}
	gs := make([]g, len(rep.Groups))
	for i := range rep.Groups {
		gs[i] = g{rep.Groups[i], rep.IsOther(i)}
	}
	sort.SliceStable(gs, func(i, j int) bool {
		a, b := gs[i], gs[j]
		if c := strings.Compare(a.Unit, b.Unit); c != 0 {
			return c < 0
		}
		if c := b.Spend.Cmp(a.Spend); c != 0 {
			return c < 0
		}
		if c := strings.Compare(a.Value, b.Value); c != 0 {
			return c < 0
		}
		return !a.other && b.other
	})
	rep.Other = nil
	for i := range gs {
		rep.Groups[i] = gs[i].SpendGroup
		if gs[i].other {
			rep.Other = append(rep.Other, i)
		}
	}
}

// ParseReportRequest validates a spend report request. Errors
// (*events.Error), in precedence order: CodeInvalidRequest (by missing or
// not "scope" nor a metadata key), CodeInvalidTime (from or to not RFC
// 3339, not on a whole UTC hour, or from not before to).
func ParseReportRequest(req events.ReportRequest) (by GroupBy, from, to time.Time, err error) {
	key, explicit := strings.CutPrefix(req.By, MetadataColumnPrefix)
	switch {
	case req.By == "":
		return by, from, to, events.Errorf(events.CodeInvalidRequest, `by is required: "scope" or a metadata key such as "model"`)
	case req.By == dimScope:
		by = ByScope
	default:
		if err := events.ValidateToken("metadata key", key, 64); err != nil {
			if explicit {
				return by, from, to, events.Errorf(events.CodeInvalidRequest, "by %q: %v", req.By, err)
			}
			return by, from, to, events.Errorf(events.CodeInvalidRequest, `by %q: want "scope" or a metadata key: %v`, req.By, err)
		}
		by = ByMetadata(key)
	}
	parse := func(name, s string) (time.Time, error) {
		if s == "" {
			return time.Time{}, nil
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, events.Errorf(events.CodeInvalidTime, "%s %q is not an RFC 3339 time like 2026-12-01T00:00:00Z", name, s)
		}
		if !t.Equal(t.Truncate(events.ReportBucket)) {
			// The buckets are UTC hours: a time with another offset
			// (+05:30) may be on its own zone's hour and not on one of
			// them, so the message shows it in UTC.
			in := ""
			if _, off := t.Zone(); off != 0 {
				in = " (" + t.UTC().Format(time.RFC3339) + ")"
			}
			return time.Time{}, events.Errorf(events.CodeInvalidTime, "%s %q%s is not on a whole UTC hour (the report's bucket); the replay (spendgate report --replay) takes any time", name, s, in)
		}
		return t.UTC(), nil
	}
	if from, err = parse("from", req.From); err != nil {
		return by, from, to, err
	}
	if to, err = parse("to", req.To); err != nil {
		return by, from, to, err
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return by, from, to, events.Errorf(events.CodeInvalidTime, "from %s is not before to %s", req.From, req.To)
	}
	return by, from, to, nil
}
