package ledger

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/logbound"
	"github.com/spendgate/spendgate/streams"
)

// Ledger is one replica's engine: its book, the follower that folds the
// stream into it, and the committer that writes decisions (see the package
// doc). Create it with New, then call Run; it decides once Ready is closed
// and until Run returns.
type Ledger struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	layout streams.Layout
	opts   options

	// mu guards bk.
	mu sync.RWMutex
	bk *book
	// skew samples this machine's clock against the server's (skew.go).
	skew clockSkew
	// writeFails bounds the log lines of failed writes (committer.go).
	writeFails logbound.Bound
	// tenantLimits is the book's tenant limits, published by the fold
	// for lock-free reads (TenantLimitsOf).
	tenantLimits atomic.Pointer[map[string]TenantLimits]
	// creating are the budgets this replica's puts are creating, for the
	// tenants' limits of budgets (EditBudgetWithin).
	creating creatingBudgets

	follower
	committer
	keys
	// w is the connection the writes travel on (writer.go).
	w writer
	// gate is the one verification step of every revision read (see
	// package gate); its trust state is folded with the book.
	gate *gate.Gate
	// readers are fed by the fold (see Reader); ahead keeps what was
	// folded before the follower reached it, for them.
	readers []Reader
	ahead   ahead
	// skipped is the fold's recent refusals, for Refold.
	skipped skips
	// sync coalesces the stream reads of concurrent Syncs.
	syncs syncer

	// life guards the lifecycle: state (stateNew, stateRunning,
	// stateStopped), why Run stopped, and owned, the background
	// committers Run waits for.
	life    sync.Mutex
	state   int
	stopErr error
	owned   sync.WaitGroup

	// snapStore is the snapshot bucket (nil until found); snapLoaded,
	// snapSkipped and snapWritten feed SnapshotStats.
	snapStore               jetstream.ObjectStore
	snapLoaded, snapWritten atomic.Uint64
	// snapAt is when the newest snapshot this replica knows of was
	// written, in Unix nanoseconds (0: none; SnapshotAge).
	snapAt atomic.Int64
	// foldedEvents counts the events the follower folded since the last
	// snapshot this replica wrote (a trigger of the periodic writer).
	foldedEvents atomic.Uint64
	snapSkipped  atomic.Int64

	// id marks this replica's writes (header streams.HeaderWriter), so the
	// follower can leave them to the committer, which folds them from
	// memory.
	id string
}

// SyncTimeout bounds Sync: a request that needs the replica to catch up
// fails with CodeLedgerUnavailable rather than wait on a stalled follower.
const SyncTimeout = 10 * time.Second

// HeaderWriter names the replica that wrote a revision (an alias of
// streams.HeaderWriter, kept for callers of this package).
const HeaderWriter = streams.HeaderWriter

// ownWait bounds how long the follower waits for a committer to fold its own
// write before decoding it itself (the committer may have timed out).
const ownWait = 2 * time.Second

// New binds the ledger stream (which streams.Ensure must have created).
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, layout streams.Layout, opts ...Option) (*Ledger, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	// A stream another replica created a moment ago may not be visible
	// (or have a leader) on every node yet: retry for a bounded while.
	var s jetstream.Stream
	err := streams.RetryStart(ctx, streams.BindRetryFor, nil, func(ctx context.Context) error {
		var err error
		s, err = js.Stream(ctx, layout.StreamName())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: bind %s: %w", layout.StreamName(), err)
	}
	l := &Ledger{
		nc: nc, js: js, stream: s, layout: layout, opts: o,
		bk:        newBook(layout, o.retention, o.expiredKeep),
		committer: committer{locks: map[string]*keyLock{}},
		follower:  follower{progress: make(chan struct{}), ready: make(chan struct{}), ownApplied: make(chan struct{})},
		id:        uuid.NewString(),
	}
	l.laneNext, l.multiNext = l.commitLaneNext, l.commitMultiNext
	l.keys.signer.Store(o.signer)
	l.gate = gate.New(layout, o.trust)
	if o.unverified {
		l.gate = gate.NewUnverified(layout)
	}
	return l, nil
}

// Layout returns the stream layout.
func (l *Ledger) Layout() streams.Layout { return l.layout }

// Ready is closed once the follower has folded the stream as it was when Run
// started.
func (l *Ledger) Ready() <-chan struct{} { return l.ready }

// BudgetsOf returns the budgets defined for scope, in period order.
func (l *Ledger) BudgetsOf(scope events.Scope) []Budget {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.byScope[scope] // never mutated in place
}

// Budget returns one budget definition.
func (l *Ledger) Budget(ref events.BudgetRef) (Budget, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	b := l.bk.budgets[streams.BudgetKey(ref)]
	if b == nil {
		return Budget{}, false
	}
	return b.def, true
}

// ScopeRetired reports whether a budget of scope is retired, as this
// replica has folded the stream: every admit naming the scope is denied.
func (l *Ledger) ScopeRetired(scope events.Scope) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.scopeRetired(scope)
}

// Budgets returns every budget, sorted by scope then period.
func (l *Ledger) Budgets() []Budget {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.budgetList()
}

// Balance returns the balance of ref as this replica has folded it.
func (l *Ledger) Balance(ref events.BalanceRef) Balance {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.balance(streams.BalanceKey(ref), ref)
}

// Reservation returns a copy of what this replica knows of reservation id.
func (l *Ledger) Reservation(id string) (*Reservation, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r, ok := l.bk.get(id)
	if !ok {
		return nil, false
	}
	return r.clone(), true
}

// ByRequest returns a copy of the reservation opened for request id rid,
// if the book remembers one.
func (l *Ledger) ByRequest(rid string) (*Reservation, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.bk.requests[rid]
	if r == nil {
		return nil, false
	}
	return r.clone(), true
}

// Voided reports whether the book remembers request id rid as voided
// (events.RequestVoided).
func (l *Ledger) Voided(rid string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.voids[rid] != nil
}

// Expired returns up to max ids of open reservations whose ExpiresAt is at
// or before now, oldest expiry first.
func (l *Ledger) Expired(now time.Time, max int) []string {
	l.mu.RLock()
	due := l.bk.expiredBy(now)
	l.mu.RUnlock()
	sort.Slice(due, func(i, j int) bool { return due[i].ExpiresAt.Before(due[j].ExpiresAt) })
	if len(due) > max {
		due = due[:max]
	}
	ids := make([]string, len(due))
	for i, r := range due {
		ids[i] = r.ID
	}
	return ids
}

// PutBudget defines or changes a budget's limit and unit, in UTC, enabled,
// with no fixed slot: DefineBudget with that definition.
func (l *Ledger) PutBudget(ctx context.Context, ref events.BudgetRef, limit events.Money, unit string, now time.Time) (Budget, error) {
	ch, err := l.DefineBudget(ctx, Budget{Ref: ref, Limit: limit, Unit: unit}, now)
	return ch.Budget, err
}

// BudgetChange is what DefineBudget did.
type BudgetChange struct {
	// Budget is the definition now.
	Budget Budget
	// Existed is true when the budget was defined before; Prev is then
	// that definition.
	Existed bool
	Prev    Budget
	// Changed names the fields that changed (see Budget.Changes); empty
	// for a new budget and when nothing changed.
	Changed []string
}

// DefineBudget defines or changes a budget to def (its Ref, Limit, Unit,
// TZ, Disabled, FixedSlot, Thresholds, ExposureCap and Learn; Loc and
// Revision are ignored):
// EditBudget with an edit that replaces the whole definition.
//
// Errors: as EditBudget's, and CodeInvalidTZ (def.TZ) first.
func (l *Ledger) DefineBudget(ctx context.Context, def Budget, now time.Time) (BudgetChange, error) {
	if _, err := events.LoadZone(def.TZ); err != nil {
		return BudgetChange{}, err
	}
	return l.EditBudget(ctx, def.Ref, def.Unit, func(Budget, bool) (Budget, error) { return def, nil }, now)
}

// BudgetEdit turns a budget's current definition (existed false: there is
// none, cur is zero) into the one to write. It is called under the book's
// read lock, once per compare-and-set attempt, so it must be quick and
// must not call the Ledger. Its Ref, Loc, Revision and FromDefault are
// ignored.
type BudgetEdit func(cur Budget, existed bool) (Budget, error)

// EditBudget defines or changes the budget ref names: edit decides the
// new definition from the current one as this replica has folded it, and
// a compare-and-set on the budget key makes the read and the write one
// step, so that two puts changing different fields at once both land.
// unit picks, as for a put, the budget of that kind of unit when the scope
// has a money and a count budget in the period; "" picks the one defined
// first. It writes one BudgetDefinedV2 event; a definition equal to the
// current one changes nothing and returns it. A change of unit is refused
// (the unit of a budget never changes). All attempts share one deadline:
// ctx's, or DefaultSubmitTimeout (see WithSubmitTimeout) if ctx has none;
// ctx's cancellation does not abandon a write in flight.
//
// Errors: edit's own; *events.Error with CodeUnitChangeRefused,
// CodeLedgerUnavailable (the follower is not running, JetStream could not
// be reached, or the deadline passed) or CodeLedgerBusy.
func (l *Ledger) EditBudget(ctx context.Context, ref events.BudgetRef, unit string, edit BudgetEdit, now time.Time) (BudgetChange, error) {
	return l.EditBudgetWithin(ctx, ref, unit, edit, BudgetLimit{}, now)
}

// EditBudgetWithin is EditBudget, which refuses a put that would create a
// new budget of a tenant (the scope's, never the untenanted deployment's)
// when the tenant has lim.Max budgets put for their scopes (not created
// from defaults, not retired) with lim.Refusal, before anything is
// written. A change of a budget that exists is never refused.
//
// On this replica the count is exact: the budgets its other puts are
// creating right now count with those folded. Across replicas a creation
// another replica wrote and this one has not folded yet is missed (the
// caller syncs with the stream first, so only what was written since).
func (l *Ledger) EditBudgetWithin(ctx context.Context, ref events.BudgetRef, unit string, edit BudgetEdit, lim BudgetLimit, now time.Time) (BudgetChange, error) {
	asked := ref
	var def, cur Budget
	var existed bool
	var changed []string
	tenant := ref.Scope.Tenant()
	limited := tenant != "" && lim.Max > 0
	// reserved is the budget key this call holds as being created (one
	// attempt's decision: a later attempt may find it defined).
	reserved := ""
	defer func() {
		if reserved != "" {
			l.creating.release(tenant, reserved)
		}
	}()
	seq, wrote, err := l.define(ctx, "budget", func(b *book) (string, func(events.Chain) any, bool, error) {
		target := asked
		if unit != "" {
			target = b.target(asked, unit)
		}
		key := streams.BudgetKey(target)
		cur, existed, changed = Budget{}, false, nil
		if d := b.budgets[key]; d != nil {
			cur, existed = d.def, true
		}
		var err error
		if def, err = edit(cur, existed); err != nil {
			return "", nil, false, err
		}
		def.Ref, def.Loc, def.Revision, def.FromDefault = target, nil, 0, 0
		changed = []string{}
		if existed {
			changed = def.Changes(cur)
		}
		switch {
		case existed && cur.Retired:
			return "", nil, false, events.Errorf(events.CodeBudgetRetired,
				"budget %s per %s was retired; a retired budget is never defined again (define one of another scope)", cur.Ref.Scope.Local(), cur.Ref.Period)
		case !existed && b.scopeRetired(target.Scope):
			// Every admit naming a scope with a retired budget is denied:
			// a new budget of it could never be used.
			return "", nil, false, events.Errorf(events.CodeBudgetRetired,
				"scope %s has a retired budget, so every admit naming it is denied; a new budget of it could never be used (define one of another scope)", target.Scope.Local())
		case existed && len(changed) > 0 && b.scopeRetired(target.Scope):
			// Nor would a change of one of its other budgets do anything.
			return "", nil, false, events.Errorf(events.CodeBudgetRetired,
				"scope %s has a retired budget, so every admit naming it is denied; a change of its budget per %s would have no effect", target.Scope.Local(), target.Period)
		case existed && len(changed) == 0:
			return key, nil, true, nil
		case existed && cur.Unit != def.Unit:
			// A budget's unit never changes once defined. Checking "no
			// spend and nothing open" here would race: an admit committed
			// on the lane between this check and the budget write would
			// be counted in the new unit, and nothing ties the two keys'
			// writes together.
			return "", nil, false, events.Errorf(events.CodeUnitChangeRefused,
				"budget %s per %s is in %s; a budget's unit cannot change to %s (define a budget of another scope or period instead)",
				def.Ref.Scope, def.Ref.Period, cur.Unit, def.Unit)
		}
		if limited && !existed && reserved != key {
			if reserved != "" {
				l.creating.release(tenant, reserved)
				reserved = ""
			}
			if err := l.creating.reserve(b, tenant, key, lim); err != nil {
				return "", nil, false, err
			}
			reserved = key
		}
		d := def
		return key, func(ch events.Chain) any {
			ev := events.BudgetDefinedV2{Budget: d.Ref, Limit: d.Limit, Unit: d.Unit, TZ: d.TZ, Disabled: d.Disabled,
				FixedSlot: d.FixedSlot, Thresholds: d.Thresholds, ExposureCap: d.ExposureCap, Learn: d.Learn, Changed: changed, At: now.UTC()}
			return events.BudgetRevision{Schema: events.SchemaBudget, Chain: ch,
				Budget: d.Ref, Limit: d.Limit, Unit: d.Unit, TZ: d.TZ, Disabled: d.Disabled,
				FixedSlot: d.FixedSlot, Thresholds: d.Thresholds, ExposureCap: d.ExposureCap, Learn: d.Learn, Events: events.Events{ev}}
		}, false, nil
	})
	if err != nil {
		return BudgetChange{}, err
	}
	if !wrote {
		return BudgetChange{Budget: cur, Existed: true, Prev: cur, Changed: []string{}}, nil
	}
	// The gate has checked that the zone loads.
	if loc, _ := events.LoadZone(def.TZ); loc != nil && loc != time.UTC {
		def.Loc = loc
	}
	def.Revision = seq
	return BudgetChange{Budget: def, Existed: existed, Prev: cur, Changed: changed}, nil
}

// RetireBudget retires the budget ref names for good (see
// events.BudgetRetired), as of now, with the caller's reason: one
// revision of its key, stating its last definition with Retired set and
// carrying one BudgetRetired. unit picks among a money and a count budget
// of the scope and period as for EditBudget. Retiring a retired budget
// changes nothing and reports already true.
//
// Errors: *events.Error with CodeUnknownBudget (no such budget),
// CodeInvalidRequest (reason too long) or EditBudget's.
func (l *Ledger) RetireBudget(ctx context.Context, ref events.BudgetRef, unit, reason string, now time.Time) (b Budget, already bool, err error) {
	return l.retireBudget(ctx, ref, unit, reason, now, nil)
}

// retireBudget is RetireBudget, which when cond is set retires the budget
// only if cond holds of it under the book's lock (else it answers already
// true and writes nothing).
func (l *Ledger) retireBudget(ctx context.Context, ref events.BudgetRef, unit, reason string, now time.Time, cond func(*book, *budget) bool) (b Budget, already bool, err error) {
	if len(reason) > events.MaxRetireReasonLen {
		return Budget{}, false, events.Errorf(events.CodeInvalidRequest, "reason is %d bytes, at most %d", len(reason), events.MaxRetireReasonLen)
	}
	if !utf8.ValidString(reason) || strings.ContainsFunc(reason, func(r rune) bool { return r < 0x20 || r >= 0x7f && r < 0xa0 || r == utf8.RuneError }) {
		return Budget{}, false, events.Errorf(events.CodeInvalidRequest, "reason must be one line of UTF-8 text, without control characters")
	}
	var cur Budget
	seq, wrote, err := l.define(ctx, "budget", func(bk *book) (string, func(events.Chain) any, bool, error) {
		target := ref
		if unit != "" {
			target = bk.target(ref, unit)
		}
		key := streams.BudgetKey(target)
		d := bk.budgets[key]
		switch {
		case d == nil && unit != "":
			return "", nil, false, events.Errorf(events.CodeUnknownBudget, "no budget in %s is defined for %s per %s", unit, target.Scope.Local(), target.Period)
		case d == nil:
			return "", nil, false, events.Errorf(events.CodeUnknownBudget, "no budget is defined for %s per %s", target.Scope.Local(), target.Period)
		case unit != "" && d.def.Unit != unit:
			// target names the plain budget for another currency of
			// money (a put of it is refused as a unit change): a
			// retirement, which cannot be undone, names its budget
			// exactly.
			return "", nil, false, events.Errorf(events.CodeUnknownBudget, "no budget in %s is defined for %s per %s (its budget is in %s)",
				unit, target.Scope.Local(), target.Period, d.def.Unit)
		}
		cur = d.def
		if cur.Retired || cond != nil && !cond(bk, d) {
			return key, nil, true, nil
		}
		src := d.src
		return key, func(ch events.Chain) any {
			return events.BudgetRevision{Schema: events.SchemaBudget, Chain: ch,
				Budget: src.Budget, Limit: src.Limit, Unit: src.Unit, TZ: src.TZ, Disabled: src.Disabled,
				FixedSlot: src.FixedSlot, Thresholds: src.Thresholds, ExposureCap: src.ExposureCap, Learn: src.Learn,
				FromDefault: src.FromDefault, Retired: true,
				Events: events.Events{events.BudgetRetired{Budget: src.Budget, Reason: reason, At: now.UTC()}}}
		}, false, nil
	})
	if err != nil {
		return Budget{}, false, err
	}
	if !wrote {
		return cur, true, nil
	}
	cur.Retired, cur.Revision, cur.RetiredAt, cur.RetiredReason = true, seq, now.UTC(), reason
	return cur, false, nil
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, errResentConflict)
}

// Stats counts this replica's commit path since it started.
type Stats struct {
	// Commits is the number of successful writes (a lane revision, or an
	// atomic batch of revisions of several lanes).
	Commits int64
	// Batches is how many of Commits were atomic batches over lanes.
	Batches int64
	// Txs is the number of Txs decided in successful commits (including
	// those that committed nothing, such as denials and replays).
	Txs int64
	// Conflicts counts writes lost to compare-and-set.
	Conflicts int64
	// Queued is how many submitted Txs wait for a committer now (a gauge:
	// not those being decided or written).
	Queued int64
	// SyncReads counts the stream reads made for Sync (misses that had to
	// catch up); concurrent Syncs share one read.
	SyncReads int64
	// Timeouts counts writes that got no answer within the commit timeout
	// (DefaultCommitTimeout): their outcome was unknown, and they were sent
	// again.
	Timeouts int64
	// AttemptTime is the time spent in commit attempts (deciding,
	// encoding, writing and folding a group, under its lanes' commit
	// locks), and WriteTime the part of it spent waiting for the writes'
	// acks; both summed over every attempt. Over wall time AttemptTime
	// says how busy the commit path is (a single lane commits one group
	// at a time).
	AttemptTime, WriteTime time.Duration
	// Rejected counts the revisions this replica skipped instead of
	// folding (unsigned, badly signed, untrusted key, malformed, replayed,
	// off the chain; see Rejection).
	Rejected int64
	// Heads is the number of keys the gate holds a head of (a gauge):
	// every key a revision of passed, and at most gate.MaxSkippedOnly
	// keys only skipped revisions were seen under.
	Heads int
	// Balances is the number of balances the book holds (a gauge), and
	// Pruned how many it has dropped since it started: past minute and
	// hour balances, and the balances of retired budgets, once nothing
	// can change them (prune.go).
	Balances int
	Pruned   int64
	// Window is the number of closed reservations the idempotency window
	// holds (a gauge): each is forgotten after its retention.
	Window int
	// Budgets is the number of budgets the book holds (a gauge), Retired
	// those of them that are retired (tombstones), and Learned the
	// learned-reservation windows (one per scope and model).
	Budgets, Retired, Learned int
}

// Stats returns the commit counters.
func (l *Ledger) Stats() Stats {
	l.mu.RLock()
	heads, balances, pruned, window := l.bk.heads.Len(), len(l.bk.balances), l.bk.pruned, l.bk.win.len()
	budgets, retired, learned := len(l.bk.budgets), l.bk.retired, l.bk.learned.Len()
	l.mu.RUnlock()
	return Stats{Commits: l.stats.commits.Load(), Batches: l.stats.batches.Load(), Txs: l.stats.txs.Load(), Conflicts: l.stats.conflicts.Load(), Queued: l.stats.queued.Load(),
		SyncReads: l.syncs.reads.Load(), Timeouts: l.stats.timeouts.Load(), Rejected: l.keys.rejected.Load(),
		AttemptTime: time.Duration(l.stats.attemptNanos.Load()), WriteTime: time.Duration(l.stats.writeNanos.Load()), Heads: heads,
		Balances: balances, Pruned: pruned, Window: window, Budgets: budgets, Retired: retired, Learned: learned}
}
