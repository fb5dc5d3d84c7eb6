package backtest

import (
	"context"
	"maps"
	"sort"
	"strconv"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
)

// Kind is what a Step replays.
type Kind uint8

const (
	// KindBudget defines (or redefines) a budget of the scope.
	KindBudget Kind = iota + 1
	// KindAdmit is a recorded admission (ReservationOpened in the scope's
	// balances).
	KindAdmit
	// KindSettle, KindRelease and KindExpire close a recorded reservation
	// (a release of reason "voided" is a KindRelease).
	KindSettle
	KindRelease
	KindExpire
	// KindDenial is a recorded denial (a denial record).
	KindDenial
	// KindCheck carries only the numbers a revision stated (a revision of
	// the scope whose events replay nothing, such as a threshold).
	KindCheck
)

var kindNames = map[Kind]string{KindBudget: "budget", KindAdmit: "admit", KindSettle: "settle",
	KindRelease: "release", KindExpire: "expire", KindDenial: "denial", KindCheck: "check"}

func (k Kind) String() string { return kindNames[k] }

// Step is one recorded fact of a scope, in the order a replay applies it.
type Step struct {
	Kind Kind
	// Seq is the stream sequence of the revision it came from (0 for a
	// denial, which the ledger never holds).
	Seq uint64
	// At is the time the live decision used: the event's time (the
	// admit's clock, the settle's, the sweeper's), a denial's time.
	At time.Time
	// Budget is the definition of a KindBudget step.
	Budget *ledger.Budget
	// ReservationID is the recorded reservation an admit opened or a close
	// closes; RequestID the admit's request id (as stored: a tenant's is
	// qualified).
	ReservationID, RequestID string
	// Refs are the scope's balances the step touched (an admit's, a
	// close's), or a denial's blocking balance.
	Refs []events.BalanceRef
	// Amount is what an admit or denial asked to reserve (a priced admit's
	// maximum cost), in Unit; Count what it asked of a requests budget.
	// Amount of a settle is its actual cost, as its caller gave it:
	// Excess, the part an exposure cap kept out of the scope's spent,
	// included.
	Amount events.Money
	Excess events.Money
	Unit   string
	Count  int64
	// Pricing is a priced admit's quote (nil: the admit named an amount):
	// a replay asks again for its model and tokens at the quote's prices.
	Pricing *events.PriceQuote
	// TTL is an admit's ExpiresAt - At; Metadata the admit's or denial's.
	TTL      time.Duration
	Metadata map[string]string
	// Denial is a denial's reply (reason, blocking budget, its numbers);
	// Redecide whether the replay decides it again (a limit or disabled
	// denial by a budget of the scope): other denials (another scope's
	// budget, an unpriced model) stay denials.
	Denial   *events.Denial
	Redecide bool
	// Placed says how a denial was put among the recorded revisions: on
	// the balance's numbers it states (exact), or by its time only.
	Placed string
	// Stated are the numbers the revision stated for the scope's
	// balances, on the last step that came from it: a replay under the
	// recorded budgets must arrive at exactly these.
	Stated []events.BalanceRevision
}

// Placements of a denial.
const (
	PlacedOnNumbers = "numbers"
	PlacedByTime    = "time"
)

// History is the recorded facts of one scope, in replay order.
type History struct {
	Scope events.Scope
	// Position is the stream position it was read up to.
	Position uint64
	Steps    []Step
}

// Source is what a History is read from: a *report.Reader, whose
// revisions are the projector's verified read (projector.Read: every
// revision through the gate, signatures and chains checked as a replica
// checks them) and whose denials are the denial stream's records.
type Source interface {
	Revisions(ctx context.Context, fn func(projector.Message) error) (uint64, error)
	Denials(ctx context.Context, f report.Filter, fn func(events.AdmitDenied) error) error
}

var _ Source = (*report.Reader)(nil)

// Load reads the whole recorded history of scope (a stored scope: a
// tenant's is "TENANT/KIND:ID") from src: its budget definitions and every
// admission, settle, release and expiry in its balances, in stream order,
// with the denial records of admits that named it placed among them (see
// place).
//
// Errors: CodeUnknownBudget when the ledger never defined a budget of the
// scope; src's read errors.
func Load(ctx context.Context, src Source, scope events.Scope) (*History, error) {
	l := &loader{scope: scope, run: map[string]point{}, points: map[string][]point{}}
	defined := false
	pos, err := src.Revisions(ctx, func(m projector.Message) error {
		r := m.Rev
		switch {
		case r == nil:
		case r.Budget != nil && r.Budget.Budget.Scope == scope:
			b := r.Budget
			def := &ledger.Budget{Ref: b.Budget, Limit: b.Limit, Unit: b.Unit, TZ: b.TZ, Disabled: b.Disabled,
				FixedSlot: b.FixedSlot, Thresholds: b.Thresholds, ExposureCap: b.ExposureCap, Learn: b.Learn, Revision: m.Seq, FromDefault: b.FromDefault}
			l.steps = append(l.steps, Step{Kind: KindBudget, Seq: m.Seq, At: m.At, Budget: def})
			l.stored = append(l.stored, m.At)
			defined = true
		case r.Lane != nil:
			l.lane(m.Seq, m.At, r.Lane)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !defined {
		return nil, events.Errorf(events.CodeUnknownBudget, "the ledger defines no budget for scope %s", scope)
	}
	f := report.Filter{Scopes: []events.Scope{scope}, OneTenant: true, Tenant: scope.Tenant()}
	var denials []Step
	if err := src.Denials(ctx, f, func(d events.AdmitDenied) error {
		denials = append(denials, denialStep(scope, d))
		return nil
	}); err != nil {
		return nil, err
	}
	return &History{Scope: scope, Position: pos, Steps: l.place(denials)}, nil
}

// loader builds a History's recorded steps revision by revision, and
// the numbers each balance of the scope held after each of them (for
// placing denials).
type loader struct {
	scope  events.Scope
	steps  []Step
	stored []time.Time // the stored time of each step's revision
	// run is each balance's numbers so far; points every (step, numbers)
	// it went through, starting with its zero before its first step.
	run    map[string]point
	points map[string][]point
}

// lane appends the steps of the scope's balances in lane revision lr
// (stored at at): one per reservation and kind, in the order the revision
// applied them, the last one carrying the numbers the revision stated.
func (l *loader) lane(seq uint64, at time.Time, lr *events.LaneRevision) {
	type stepKey struct {
		kind Kind
		id   string
	}
	index := map[stepKey]int{}
	first := len(l.steps)
	var stated []events.BalanceRevision
	for _, b := range lr.Balances {
		if b.Balance.Scope != l.scope {
			continue
		}
		stated = append(stated, b)
		key := placeKey(b.Balance)
		for _, ev := range b.Events {
			var k stepKey
			var s Step
			switch e := ev.(type) {
			case events.ReservationOpened:
				k = stepKey{KindAdmit, e.ReservationID}
				s = Step{Kind: KindAdmit, At: e.At, ReservationID: e.ReservationID, RequestID: e.RequestID,
					TTL: e.ExpiresAt.Sub(e.At), Metadata: withModel(e.Metadata, modelOf(e)), Count: 1}
			case events.ReservationSettled:
				k = stepKey{KindSettle, e.ReservationID}
				s = Step{Kind: KindSettle, At: e.At, ReservationID: e.ReservationID}
			case events.ReservationReleased:
				kind := KindRelease
				if e.Reason == events.ReasonExpired {
					kind = KindExpire
				}
				k = stepKey{kind, e.ReservationID}
				s = Step{Kind: kind, At: e.At, ReservationID: e.ReservationID}
			default:
				continue
			}
			i, ok := index[k]
			if !ok {
				s.Seq = seq
				i = len(l.steps)
				index[k] = i
				l.steps = append(l.steps, s)
				l.stored = append(l.stored, at)
			}
			st := &l.steps[i]
			st.Refs = append(st.Refs, b.Balance)
			p, seen := l.run[key]
			if !seen {
				l.points[key] = append(l.points[key], point{index: i - 1, stored: l.storedBefore(i)})
			}
			switch e := ev.(type) {
			case events.ReservationOpened:
				p.reserved = p.reserved.Add(e.Amount)
				switch {
				case events.IsCount(e.Unit):
					if n, err := strconv.ParseInt(e.Amount.String(), 10, 64); err == nil {
						st.Count = n
					}
				case e.Pricing != nil:
					st.Amount, st.Unit, st.Pricing = e.Pricing.MaxCost(), e.Pricing.Unit, e.Pricing
				case st.Unit == "":
					st.Amount, st.Unit = e.Amount, e.Unit
				}
			case events.ReservationSettled:
				p.spent = p.spent.Add(e.Actual)
				if !e.AfterExpiry {
					p.reserved = p.reserved.Sub(e.Reserved)
				}
				if !events.IsCount(b.Unit) {
					st.Amount, st.Excess = e.Actual, events.Money{}
					if e.Excess != nil {
						// The replay settles at what the call cost, and
						// its own cap (or none) decides what is charged.
						st.Amount, st.Excess = e.Actual.Add(*e.Excess), *e.Excess
					}
				}
			case events.ReservationReleased:
				p.reserved = p.reserved.Sub(e.Reserved)
			}
			p.index, p.stored = i, at
			l.run[key] = p
			l.points[key] = append(l.points[key], p)
		}
		// The revision states the numbers after it: the fold goes on from
		// those (the same in a whole history).
		l.run[key] = point{index: len(l.steps) - 1, stored: at, spent: b.Spent, reserved: b.Reserved}
	}
	if len(stated) == 0 {
		return
	}
	if len(l.steps) == first {
		l.steps = append(l.steps, Step{Kind: KindCheck, Seq: seq})
		l.stored = append(l.stored, at)
	}
	l.steps[len(l.steps)-1].Stated = stated
}

// storedBefore is the stored time of the step before index i (zero for
// the first).
func (l *loader) storedBefore(i int) time.Time {
	if i == 0 {
		return time.Time{}
	}
	return l.stored[i-1]
}

// denialStep is the step of denial record d of an admit that named scope.
func denialStep(scope events.Scope, d events.AdmitDenied) Step {
	den := d.Denial
	den.Scope = events.TenantScope(d.Tenant, den.Scope.Local())
	s := Step{Kind: KindDenial, At: d.At, RequestID: events.TenantRequestID(d.Tenant, d.RequestID),
		Metadata: d.Metadata, Unit: d.Unit, Count: 1, Denial: &den}
	s.Metadata = withModel(d.Metadata, d.Model)
	requested, rerr := events.ParseMoney(den.Requested)
	switch {
	case d.Amount != "":
		if a, err := events.ParseMoney(d.Amount); err == nil {
			s.Amount = a
		}
	case rerr == nil && !events.IsCount(den.Unit):
		s.Amount = requested
	}
	if rerr == nil && events.IsCount(den.Unit) {
		if n, err := strconv.ParseInt(requested.String(), 10, 64); err == nil {
			s.Count = n
		}
	}
	if den.Scope == scope && (den.Reason == events.ReasonLimitReached || den.Reason == events.ReasonBudgetDisabled) {
		s.Refs = []events.BalanceRef{{Scope: den.Scope, Period: den.Period, Instance: den.Instance}}
		s.Redecide = s.Amount.Sign() > 0
	}
	return s
}

// withModel is metadata with model under report.MetadataModel when it
// names none (as reports and exports group a priced admit); metadata is
// never modified.
func withModel(metadata map[string]string, model string) map[string]string {
	if model == "" {
		return metadata
	}
	if _, set := metadata[report.MetadataModel]; set {
		return metadata
	}
	m := make(map[string]string, len(metadata)+1)
	maps.Copy(m, metadata)
	m[report.MetadataModel] = model
	return m
}

// modelOf is the model a reservation was priced from, or "".
func modelOf(e events.ReservationOpened) string {
	if e.Pricing == nil {
		return ""
	}
	return e.Pricing.Model
}

// point is a balance's recorded numbers after the step at index (-1:
// before every step), whose revision was stored at stored.
type point struct {
	index           int
	stored          time.Time
	spent, reserved events.Money
}

// place returns the loader's steps with denials put among them. A denial
// was decided against the balances as the replica held them, and its
// record states the blocking balance's spent and reserved. It goes right
// after the last recorded step, stored no later than the denial, after
// which that balance held exactly those numbers (or right before the
// balance's first step, for numbers of zero): there the replay sees the
// balance as the live decision saw it. A denial no point matches (or that
// no budget of the scope blocked) goes after the last step stored no
// later than it. Denials at one point keep the order of their times.
func (l *loader) place(denials []Step) []Step {
	if len(denials) == 0 {
		return l.steps
	}
	after := make([][]Step, len(l.steps)+1) // after[i+1]: the denials after step i
	sort.SliceStable(denials, func(a, b int) bool { return denials[a].At.Before(denials[b].At) })
	for _, d := range denials {
		idx, found := 0, false
		if d.Redecide {
			spent, e1 := events.ParseMoney(d.Denial.Spent)
			reserved, e2 := events.ParseMoney(d.Denial.Reserved)
			if e1 == nil && e2 == nil {
				for _, p := range l.points[placeKey(d.Refs[0])] {
					if !p.stored.After(d.At) && p.spent.Cmp(spent) == 0 && p.reserved.Cmp(reserved) == 0 {
						idx, found = p.index, true
					}
				}
			}
		}
		d.Placed = PlacedOnNumbers
		if !found {
			d.Placed = PlacedByTime
			idx = sort.Search(len(l.stored), func(i int) bool { return l.stored[i].After(d.At) }) - 1
		}
		after[idx+1] = append(after[idx+1], d)
	}
	out := make([]Step, 0, len(l.steps)+len(denials))
	out = append(out, after[0]...)
	for i, s := range l.steps {
		out = append(out, s)
		out = append(out, after[i+1]...)
	}
	return out
}

// placeKey names a balance by scope, period and instance.
func placeKey(r events.BalanceRef) string {
	return string(r.Scope) + "|" + string(r.Period) + "|" + r.Instance
}
