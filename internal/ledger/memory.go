package ledger

import (
	"context"
	"sync"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/streams"
)

// Memory is a ledger held in memory, for tests of Txs' decisions (package
// admit's and settle's) without JetStream: the same book, the same View
// (the group's overlay) and the same rules (applyEvent) as a Ledger, with
// each Tx committed at once to the book instead of written to a stream. It
// decides one Tx at a time. There is no follower, no compare-and-set, no
// snapshot and no expiry by the clock: what it tests is what a Tx decides.
type Memory struct {
	// l holds the book and its lock; only what reads the book, and
	// newView, are used of it (it has no connection).
	l *Ledger
	// mu orders Submits (l's mu guards the book).
	mu  sync.Mutex
	seq uint64
}

// NewMemory returns an empty Memory ledger with the default layout.
func NewMemory() *Memory {
	layout := streams.Default()
	bk := newBook(layout, DefaultRetention, DefaultExpiredRetention)
	// No follower stamps its revisions: nothing is pruned.
	bk.noPrune = true
	return &Memory{l: &Ledger{layout: layout, bk: bk}}
}

// Define makes def the budget of def.Ref (its Limit, Unit, TZ, Disabled,
// FixedSlot and Thresholds).
func (m *Memory) Define(def Budget) error {
	var loc *time.Location
	if def.TZ != "" {
		var err error
		if loc, err = time.LoadLocation(def.TZ); err != nil {
			return events.Errorf(events.CodeInvalidRequest, "tz %q: %v", def.TZ, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	m.l.bk.setBudget(streams.BudgetKey(def.Ref), m.seq, &events.BudgetRevision{
		Schema: events.SchemaBudget, Budget: def.Ref, Limit: def.Limit, Unit: def.Unit, TZ: def.TZ,
		Disabled: def.Disabled, FixedSlot: def.FixedSlot, Thresholds: def.Thresholds,
		ExposureCap: def.ExposureCap, Learn: def.Learn,
	}, loc)
	return nil
}

// The book's reads, as a Ledger answers them.

func (m *Memory) BudgetsOf(scope events.Scope) []Budget      { return m.l.BudgetsOf(scope) }
func (m *Memory) Budget(ref events.BudgetRef) (Budget, bool) { return m.l.Budget(ref) }
func (m *Memory) Balance(ref events.BalanceRef) Balance      { return m.l.Balance(ref) }
func (m *Memory) DefaultsOf(kind string) []Default           { return m.l.DefaultsOf(kind) }
func (m *Memory) Price(model string) (Price, bool)           { return m.l.Price(model) }
func (m *Memory) Reservation(id string) (*Reservation, bool) { return m.l.Reservation(id) }
func (m *Memory) ByRequest(rid string) (*Reservation, bool)  { return m.l.ByRequest(rid) }
func (m *Memory) TenantOpen(tenant string) int               { return m.l.TenantOpen(tenant) }
func (m *Memory) TenantDefaultBudgets(tenant string) int     { return m.l.TenantDefaultBudgets(tenant) }
func (m *Memory) TenantDefaultBudgetsAnd(tenant string, refs []events.BudgetRef) (int, []bool) {
	return m.l.TenantDefaultBudgetsAnd(tenant, refs)
}

// Sync returns at once: a Memory ledger has nothing to catch up on.
func (m *Memory) Sync(context.Context) error { return nil }

// CreateFromDefault creates nothing: a Memory ledger has no defaults.
func (m *Memory) CreateFromDefault(context.Context, events.Scope, Default, time.Time) (bool, error) {
	return false, nil
}

// Submit decides tx against the book and commits what it decides.
func (m *Memory) Submit(ctx context.Context, tx Tx) error { return m.SubmitAll(ctx, []Tx{tx})[0] }

// SubmitAll decides and commits txs in order, each against the book as
// the ones before it left it, and returns each one's error.
func (m *Memory) SubmitAll(_ context.Context, txs []Tx) []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	errs := make([]error, len(txs))
	for i, tx := range txs {
		errs[i] = m.commit(tx)
	}
	return errs
}

func (m *Memory) commit(tx Tx) error {
	refs := uniqueRefs(tx.Balances())
	if len(refs) == 0 {
		return events.Errorf(events.CodeInternal, "transaction touches no balance")
	}
	v := m.l.newView(refs)
	evs, err := tx.Decide(v)
	if err != nil || len(evs) == 0 {
		return err
	}
	if err := v.apply(evs); err != nil {
		return err
	}
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	for _, kr := range v.revisions() {
		m.seq++
		for i := range kr.value.Balances {
			b := &kr.value.Balances[i]
			m.l.bk.applyBalance(streams.BalanceKey(b.Balance), m.seq, b)
		}
	}
	return nil
}

// DefinePrice makes p the current price of p.Model (its Unit, Input,
// Output and CachedInput); its Version is the Memory's next sequence.
func (m *Memory) DefinePrice(p Price) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	m.l.bk.setPricing(streams.PricingKey(p.Model), m.seq, &events.PricingRevision{Schema: events.SchemaPricing,
		Model: p.Model, Unit: p.Unit, Input: p.Input, Output: p.Output, CachedInput: p.CachedInput})
}

// Learned returns a copy of k's learned-reservation window (nil: none).
func (m *Memory) Learned(k learn.Key) *learn.Window { return m.l.Learned(k) }
