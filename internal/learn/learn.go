// Package learn sizes reservations by observed cost: the pure rule of
// learned reservations (events.LearnRule). Its state is a fold of settled
// calls (Observe), kept per model and scope, and Reserve is a pure
// function of that state, the rule and the request's priced maximum: the
// ledger's book folds the state from the settles every replica folds in
// the same order (internal/ledger/apply.go), and a replay (spendgate
// backtest) folds it the same way from the recorded events, so both
// compute the same amount at the same ledger position.
//
// Nothing here reads a clock, a ledger or a configuration: Observe and
// Reserve are all there is.
package learn

import (
	"sort"

	"github.com/spendgate/spendgate/events"
)

// Key names the calls one window learns from: a model in a scope.
type Key struct {
	Scope events.Scope
	Model string
}

// Window holds the actual costs of the last events.MaxLearnWindow settled
// calls of one key, oldest first once read with Costs. Its zero value is
// an empty window. A Window is not safe for concurrent use.
type Window struct {
	ring []events.Money
	next int // where the next cost goes once the ring is full
}

// Observe records the actual cost of one settled call, forgetting the
// oldest past events.MaxLearnWindow.
func (w *Window) Observe(actual events.Money) {
	if len(w.ring) < events.MaxLearnWindow {
		w.ring = append(w.ring, actual)
		return
	}
	w.ring[w.next] = actual
	w.next = (w.next + 1) % len(w.ring)
}

// Len returns how many costs the window holds.
func (w *Window) Len() int {
	if w == nil {
		return 0
	}
	return len(w.ring)
}

// Costs returns the costs held, oldest first (a new slice).
func (w *Window) Costs() []events.Money {
	if w == nil {
		return nil
	}
	out := make([]events.Money, 0, len(w.ring))
	out = append(out, w.ring[w.next:]...)
	return append(out, w.ring[:w.next]...)
}

// WindowOf returns a window holding costs, oldest first (the last
// events.MaxLearnWindow of them): what a snapshot restores.
func WindowOf(costs []events.Money) *Window {
	w := &Window{}
	for _, c := range costs {
		w.Observe(c)
	}
	return w
}

// Clone returns an independent copy of w (nil for nil).
func (w *Window) Clone() *Window {
	if w == nil {
		return nil
	}
	return &Window{ring: append([]events.Money(nil), w.ring...), next: w.next}
}

// State is the windows of every key, by scope then model. Its zero value
// is empty and usable.
type State struct {
	w map[events.Scope]map[string]*Window
	n int // windows held
}

// Observe folds one settled call of key that cost actual.
func (s *State) Observe(k Key, actual events.Money) {
	w := s.Window(k)
	if w == nil {
		w = &Window{}
		s.Set(k, w)
	}
	w.Observe(actual)
}

// Window returns key's window, nil if no call of it is known. The caller
// must not change it.
func (s *State) Window(k Key) *Window {
	if s == nil {
		return nil
	}
	return s.w[k.Scope][k.Model]
}

// Set replaces key's window (a snapshot's load).
func (s *State) Set(k Key, w *Window) {
	if s.w == nil {
		s.w = map[events.Scope]map[string]*Window{}
	}
	m := s.w[k.Scope]
	if m == nil {
		m = map[string]*Window{}
		s.w[k.Scope] = m
	}
	if _, ok := m[k.Model]; !ok {
		s.n++
	}
	m[k.Model] = w
}

// Forget drops every window of scope (a scope whose budget was retired:
// no call is admitted in it again). It returns how many it dropped.
func (s *State) Forget(scope events.Scope) int {
	if s == nil {
		return 0
	}
	n := len(s.w[scope])
	delete(s.w, scope)
	s.n -= n
	return n
}

// Len returns how many windows the state holds.
func (s *State) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Keys returns every key, sorted by scope then model.
func (s *State) Keys() []Key {
	if s == nil {
		return nil
	}
	var out []Key
	for scope, m := range s.w {
		for model := range m {
			out = append(out, Key{Scope: scope, Model: model})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Scope != out[j].Scope {
			return out[i].Scope < out[j].Scope
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// Decision is what Reserve decided for one request.
type Decision struct {
	// Amount is what to reserve; Ceiling what its settle may reach (the
	// priced maximum). Amount <= Ceiling.
	Amount, Ceiling events.Money
	// Learned is false on a cold start (fewer than the rule's MinSamples
	// calls known: Amount is the priced maximum); Samples is how many
	// calls the percentile was taken over.
	Learned bool
	Samples int
}

// Reserve is the learned reservation of a request whose priced maximum is
// max, under rule, given w, the window of the request's model and scope
// (nil: none known): on a cold start, max; otherwise the rule's
// percentile (nearest rank) of the last rule.Window costs, raised to the
// rule's floor and cut at max. A learned amount of zero (every recent call
// cost nothing, and no floor) reserves max: a reservation holds something.
// It is pure: equal inputs give equal decisions on every replica.
func Reserve(rule events.LearnRule, w *Window, max events.Money) Decision {
	d := Decision{Amount: max, Ceiling: max}
	costs := w.Costs()
	if len(costs) > rule.Window {
		costs = costs[len(costs)-rule.Window:]
	}
	if len(costs) < rule.MinSamples || len(costs) == 0 {
		return d
	}
	sort.SliceStable(costs, func(i, j int) bool { return costs[i].Cmp(costs[j]) < 0 })
	// Nearest rank: the smallest cost with at least Percentile% of the
	// window at or below it.
	rank := (rule.Percentile*len(costs) + 99) / 100
	amt := costs[rank-1].Max(rule.Floor)
	if amt.Cmp(max) > 0 {
		amt = max
	}
	if amt.Sign() <= 0 {
		return d
	}
	d.Amount, d.Learned, d.Samples = amt, true, len(costs)
	return d
}
