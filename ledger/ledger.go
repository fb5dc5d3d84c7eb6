package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Ledger is one replica's view of the book and its commit path. Create it
// with New, then call Run; it is ready when Ready is closed.
type Ledger struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	layout streams.Layout
	opts   options

	mu           sync.RWMutex
	budgets      map[string]*budget // by budget key
	byScope      map[events.Scope][]Budget
	balances     map[string]*balance // by balance key
	lanes        map[string]uint64   // last folded revision, by lane key
	reservations map[string]*Reservation
	requests     map[string]*Reservation // by request id
	// closed and expired queue closed reservations in the order they
	// closed, so the book forgets them after their retention; serverNow is
	// the JetStream timestamp of the last message the follower folded.
	closed, expired []closedRes
	serverNow       time.Time

	klMu  sync.Mutex
	locks map[string]*keyLock
	// multi queues the Txs over several balances for the batch committer.
	multi keyLock

	applied  atomic.Uint64 // last stream sequence folded by the follower
	progress chan struct{} // closed and replaced whenever applied advances
	progMu   sync.Mutex

	ready     chan struct{}
	readyOnce sync.Once

	stats struct {
		commits, txs, conflicts, batches atomic.Int64
	}

	// id marks this replica's writes (header HeaderWriter), so the follower
	// can leave them to the committer, which folds them from memory.
	id string
	// ownApplied is closed and replaced whenever a committer folds its own
	// write.
	ownApplied chan struct{}
	ownMu      sync.Mutex
}

// SyncTimeout bounds Sync: a request that needs the replica to catch up
// fails with CodeLedgerUnavailable rather than wait on a stalled follower.
const SyncTimeout = 10 * time.Second

// HeaderWriter names the replica that wrote a revision.
const HeaderWriter = "Spendgate-Writer"

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
	s, err := js.Stream(ctx, layout.StreamName())
	if err != nil {
		return nil, fmt.Errorf("ledger: bind %s: %w", layout.StreamName(), err)
	}
	return &Ledger{
		nc: nc, js: js, stream: s, layout: layout, opts: o,
		budgets:      map[string]*budget{},
		byScope:      map[events.Scope][]Budget{},
		balances:     map[string]*balance{},
		lanes:        map[string]uint64{},
		reservations: map[string]*Reservation{},
		requests:     map[string]*Reservation{},
		locks:        map[string]*keyLock{},
		progress:     make(chan struct{}),
		ready:        make(chan struct{}),
		id:           uuid.NewString(),
		ownApplied:   make(chan struct{}),
	}, nil
}

// Layout returns the stream layout.
func (l *Ledger) Layout() streams.Layout { return l.layout }

// Ready is closed once the follower has folded the stream as it was when Run
// started.
func (l *Ledger) Ready() <-chan struct{} { return l.ready }

// errFold marks a revision the follower cannot fold: the book is not what
// this code understands, so the replica must stop rather than decide on it.
var errFold = errors.New("ledger: cannot fold")

// followRetry is the pause before the follower re-creates its consumer
// after losing it (a server restart, a leader change).
const followRetry = 250 * time.Millisecond

// Run follows the ledger stream from its first revision and folds every
// revision into the book until ctx ends. A lost consumer (server restart,
// leader change, network) is re-created from the next unfolded revision;
// only a revision it cannot fold stops it. It returns ctx's error, or that
// fold error.
func (l *Ledger) Run(ctx context.Context) error {
	var startLast uint64
	for {
		info, err := l.stream.Info(ctx)
		if err == nil {
			startLast = info.State.LastSeq
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.opts.log.Warn("ledger follower: stream info", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followRetry):
		}
	}
	if startLast == 0 {
		l.readyOnce.Do(func() { close(l.ready) })
	}
	for {
		err := l.follow(ctx, l.applied.Load()+1, startLast)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errFold) {
			return err
		}
		l.opts.log.Warn("ledger follower lost its consumer; resuming", "from", l.applied.Load()+1, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followRetry):
		}
	}
}

// follow folds revisions from seq from with one ordered consumer until the
// consumer fails or ctx ends.
func (l *Ledger) follow(ctx context.Context, from, startLast uint64) error {
	cons, err := l.js.OrderedConsumer(ctx, l.layout.StreamName(), jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
	})
	if err != nil {
		return fmt.Errorf("ledger: follower: %w", err)
	}
	// Short pulls with a 1 s heartbeat: after a server restart or a
	// leader change the ordered consumer notices within seconds (the
	// defaults, 30 s and 15 s, left a replica's follower stalled that long).
	it, err := cons.Messages(jetstream.PullMaxMessages(1024), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("ledger: follower: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			return fmt.Errorf("ledger: follower: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("ledger: follower metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq <= l.applied.Load() {
			continue
		}
		if msg.Headers().Get(HeaderWriter) == l.id {
			l.awaitOwn(msg.Subject(), seq)
		}
		if err := l.applyMsg(msg.Subject(), seq, msg.Data()); err != nil {
			return fmt.Errorf("%w: seq %d: %w", errFold, seq, err)
		}
		l.mu.Lock()
		l.forgetUntilLocked(meta.Timestamp)
		l.mu.Unlock()
		l.advance(seq)
		if seq >= startLast {
			l.readyOnce.Do(func() { close(l.ready) })
		}
	}
}

// awaitOwn waits (bounded) until the committer that wrote seq has folded it,
// so the follower need not decode a revision this replica already holds in
// memory. Revisions of one key must be folded in order, so the follower
// cannot simply skip it.
func (l *Ledger) awaitOwn(subject string, seq uint64) {
	key, ok := l.layout.KeyOf(subject)
	if !ok {
		return
	}
	deadline := time.NewTimer(ownWait)
	defer deadline.Stop()
	for {
		l.ownMu.Lock()
		ch := l.ownApplied
		l.ownMu.Unlock()
		if l.revOf(key) >= seq {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}

func (l *Ledger) revOf(key string) uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if rev, ok := l.lanes[key]; ok {
		return rev
	}
	if b := l.budgets[key]; b != nil {
		return b.rev
	}
	return 0
}

// ownFolded wakes a follower waiting in awaitOwn.
func (l *Ledger) ownFolded() {
	l.ownMu.Lock()
	close(l.ownApplied)
	l.ownApplied = make(chan struct{})
	l.ownMu.Unlock()
}

func (l *Ledger) advance(seq uint64) {
	l.progMu.Lock()
	if seq > l.applied.Load() {
		l.applied.Store(seq)
		close(l.progress)
		l.progress = make(chan struct{})
	}
	l.progMu.Unlock()
}

// Sync waits until this replica has folded every revision that the stream
// held when Sync was called: a read-your-writes barrier for lookups that
// missed (a reservation or budget just created through another replica).
func (l *Ledger) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	info, err := l.stream.Info(ctx)
	if err != nil {
		return &events.Error{Code: events.CodeLedgerUnavailable, Message: "ledger stream info", Err: err}
	}
	target := info.State.LastSeq
	for {
		l.progMu.Lock()
		ch := l.progress
		done := l.applied.Load() >= target
		l.progMu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return &events.Error{Code: events.CodeLedgerUnavailable, Message: "ledger follower is behind", Err: ctx.Err()}
		}
	}
}

// applyMsg folds one stream message of any key family.
func (l *Ledger) applyMsg(subject string, seq uint64, data []byte) error {
	key, ok := l.layout.KeyOf(subject)
	if !ok {
		return nil
	}
	// A revision already folded (this replica's own write, folded from
	// memory when its ack came back) is skipped before paying for a decode.
	if seq <= l.revOf(key) {
		return nil
	}
	switch {
	case streams.IsLaneKey(key):
		var rev events.LaneRevision
		if err := json.Unmarshal(data, &rev); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if rev.Schema != events.SchemaLane {
			return fmt.Errorf("%s: schema %q, want %q", key, rev.Schema, events.SchemaLane)
		}
		// A balance under another lane than this layout gives it would
		// have a second compare-and-set guard (a replica with another lane
		// count wrote it): stop rather than decide on it.
		for i := range rev.Balances {
			if want := l.layout.LaneKey(rev.Balances[i].Balance); want != key {
				return fmt.Errorf("%s: balance %s belongs to %s with %d lane(s)", key, rev.Balances[i].Balance, want, l.layout.Lanes())
			}
		}
		l.mu.Lock()
		l.applyLaneLocked(key, seq, &rev)
		l.mu.Unlock()
	case streams.IsBalanceKey(key):
		return fmt.Errorf("%s: a balance key outside a lane (a stream of an older layout)", key)
	case streams.IsBudgetKey(key):
		var rev events.BudgetRevision
		if err := json.Unmarshal(data, &rev); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		l.mu.Lock()
		l.applyBudgetLocked(key, seq, &rev)
		l.mu.Unlock()
	}
	return nil
}

func (l *Ledger) applyBudgetLocked(key string, seq uint64, rev *events.BudgetRevision) {
	b := l.budgets[key]
	if b == nil {
		b = &budget{}
		l.budgets[key] = b
	}
	if seq <= b.rev {
		return
	}
	b.rev = seq
	b.def = Budget{Ref: rev.Budget, Limit: rev.Limit, Unit: rev.Unit, Revision: seq}
	// Rebuild the scope's index (a new slice: readers hold the old one).
	var defs []Budget
	for _, p := range events.Periods {
		if d := l.budgets[streams.BudgetKey(events.BudgetRef{Scope: rev.Budget.Scope, Period: p})]; d != nil {
			defs = append(defs, d.def)
		}
	}
	l.byScope[rev.Budget.Scope] = defs
}

// applyLaneLocked folds one lane revision: every balance it names. Revisions
// of one lane arrive here in order from three places (the follower, a
// catch-up after a conflict, and this replica's own successful writes); a
// revision already folded is skipped.
func (l *Ledger) applyLaneLocked(lane string, seq uint64, rev *events.LaneRevision) {
	if seq <= l.lanes[lane] {
		return
	}
	for i := range rev.Balances {
		l.applyBalanceLocked(streams.BalanceKey(rev.Balances[i].Balance), seq, &rev.Balances[i])
	}
	l.lanes[lane] = seq
}

// applyBalanceLocked folds one balance of a lane revision at seq.
func (l *Ledger) applyBalanceLocked(key string, seq uint64, rev *events.BalanceRevision) {
	b := l.balances[key]
	if b == nil {
		b = &balance{key: key, ref: rev.Balance, self: []events.BalanceRef{rev.Balance}, open: map[string]*Reservation{}}
		l.balances[key] = b
	}
	if seq <= b.rev {
		return
	}
	for _, e := range rev.Events {
		l.applyEventLocked(b, key, e)
	}
	b.rev = seq
	b.unit, b.limit = rev.Unit, rev.Limit
	b.spent, b.reserved, b.overrun = rev.Spent, rev.Reserved, rev.Overrun
}

type closedRes struct {
	r  *Reservation
	at time.Time
}

// closeLocked queues r, which just closed, for forgetting after its
// retention. Retention runs on one clock, the JetStream server's: r is
// stamped with the timestamp of the last message the follower folded, and
// the follower forgets by the timestamps of the messages it folds (see
// forgetUntilLocked). A replica's own clock, which stamps the events it
// decides, plays no part, so one skewed replica cannot shrink everyone's
// replay window.
func (l *Ledger) closeLocked(r *Reservation) {
	at := l.serverNow
	if at.IsZero() {
		// The follower has folded nothing yet (a fresh stream): the best
		// estimate of the server's clock is this machine's.
		at = time.Now()
	}
	if r.Status == events.StatusExpired {
		l.expired = append(l.expired, closedRes{r, at})
	} else {
		l.closed = append(l.closed, closedRes{r, at})
	}
}

// forgetUntilLocked forgets the closed reservations whose retention ended
// before server time t; only the follower calls it.
func (l *Ledger) forgetUntilLocked(t time.Time) {
	if t.After(l.serverNow) {
		l.serverNow = t
	}
	l.closed = l.forgetLocked(l.closed, t.Add(-l.opts.retention))
	l.expired = l.forgetLocked(l.expired, t.Add(-l.opts.expiredKeep))
}

func (l *Ledger) forgetLocked(q []closedRes, before time.Time) []closedRes {
	n := 0
	for n < len(q) && q[n].at.Before(before) {
		r := q[n].r
		if r.Status != events.StatusOpen && l.reservations[r.ID] == r {
			delete(l.reservations, r.ID)
			if l.requests[r.RequestID] == r {
				delete(l.requests, r.RequestID)
			}
		}
		n++
	}
	if n == 0 {
		return q
	}
	if n > len(q)/2 {
		// Compact so the backing array does not grow without bound.
		return append(q[:0:0], q[n:]...)
	}
	return q[n:]
}

func (l *Ledger) applyEventLocked(b *balance, key string, e events.Event) {
	switch e := e.(type) {
	case events.ReservationOpened:
		r := l.reservations[e.ReservationID]
		if r == nil {
			balances := e.Balances
			if len(balances) == 1 && balances[0] == b.ref {
				balances = b.self
			}
			r = &Reservation{
				ID: e.ReservationID, RequestID: e.RequestID, RequestHash: e.RequestHash,
				Balances: balances, Parts: make([]Part, 0, len(balances)),
				OpenedAt: e.At, ExpiresAt: e.ExpiresAt, Status: events.StatusOpen,
			}
			l.reservations[e.ReservationID] = r
			l.requests[e.RequestID] = r
		}
		p := r.part(b.key)
		p.Unit, p.Amount = e.Unit, e.Amount
		b.open[e.ReservationID] = r
	case events.ReservationSettled:
		delete(b.open, e.ReservationID)
		if r := l.reservations[e.ReservationID]; r != nil {
			was := r.Status
			r.Status = events.StatusSettled
			r.part(key).Actual = e.Actual
			r.Late = r.Late || e.Late
			if was != events.StatusSettled {
				l.closeLocked(r)
			}
		}
	case events.ReservationReleased:
		delete(b.open, e.ReservationID)
		if r := l.reservations[e.ReservationID]; r != nil && r.Status == events.StatusOpen {
			if e.Reason == events.ReasonExpired {
				r.Status = events.StatusExpired
			} else {
				r.Status = events.StatusReleased
			}
			l.closeLocked(r)
		}
	}
}

// catchUp folds the revisions of key written after the one this replica
// holds, reading them from the stream leader (next message by subject), so a
// replica that lost a compare-and-set learns what it missed without waiting
// for its follower.
func (l *Ledger) catchUp(ctx context.Context, key string) error {
	subj := l.layout.Subject(key)
	for {
		have := l.revOf(key)
		m, found, err := l.leaderGet(ctx, leaderGetRequest{Seq: have + 1, NextFor: subj})
		if err != nil {
			return err
		}
		if !found {
			return nil
		}
		if err := l.applyMsg(m.subject, m.seq, m.data); err != nil {
			return &events.Error{Code: events.CodeInternal, Message: "folding missed revision", Err: err}
		}
		// A follower waiting for this replica's own write (whose ack was
		// lost) may be waiting for exactly this revision.
		l.ownFolded()
	}
}

// BudgetsOf returns the budgets defined for scope, in period order.
func (l *Ledger) BudgetsOf(scope events.Scope) []Budget {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.byScope[scope] // never mutated in place
}

// Budget returns one budget definition.
func (l *Ledger) Budget(ref events.BudgetRef) (Budget, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	b := l.budgets[streams.BudgetKey(ref)]
	if b == nil {
		return Budget{}, false
	}
	return b.def, true
}

// Budgets returns every budget, sorted by scope then period.
func (l *Ledger) Budgets() []Budget {
	l.mu.RLock()
	out := make([]Budget, 0, len(l.budgets))
	for _, b := range l.budgets {
		out = append(out, b.def)
	}
	l.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ref.Scope != out[j].Ref.Scope {
			return out[i].Ref.Scope < out[j].Ref.Scope
		}
		return out[i].Ref.Period < out[j].Ref.Period
	})
	return out
}

// Balance returns the balance of ref as this replica has folded it.
func (l *Ledger) Balance(ref events.BalanceRef) Balance {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.balanceLocked(streams.BalanceKey(ref), ref)
}

func (l *Ledger) balanceLocked(key string, ref events.BalanceRef) Balance {
	out := Balance{Ref: ref}
	if b := l.balances[key]; b != nil {
		out.Unit, out.Limit = b.unit, b.limit
		out.Spent, out.Reserved, out.Overrun, out.Open = b.spent, b.reserved, b.overrun, len(b.open)
	}
	if d := l.budgets[streams.BudgetKey(ref.Budget())]; d != nil {
		out.Defined, out.Unit, out.Limit = true, d.def.Unit, d.def.Limit
	}
	return out
}

// Reservation returns a copy of what this replica knows of reservation id.
func (l *Ledger) Reservation(id string) (*Reservation, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.reservations[id]
	if r == nil {
		return nil, false
	}
	return r.clone(), true
}

// Expired returns up to max ids of open reservations whose ExpiresAt is at
// or before now, oldest expiry first.
func (l *Ledger) Expired(now time.Time, max int) []string {
	l.mu.RLock()
	var due []*Reservation
	for _, r := range l.reservations {
		if r.Status == events.StatusOpen && !r.ExpiresAt.After(now) {
			due = append(due, r)
		}
	}
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

// PutBudget defines or changes a budget: one BudgetDefined event in one
// compare-and-set write of the budget key. Putting the definition it already
// has changes nothing and returns it.
//
// Errors: *events.Error with CodeLedgerBusy or CodeLedgerUnavailable.
func (l *Ledger) PutBudget(ctx context.Context, ref events.BudgetRef, limit events.Money, unit string, now time.Time) (Budget, error) {
	key := streams.BudgetKey(ref)
	for attempt := 0; attempt < l.opts.maxAttempts; attempt++ {
		l.mu.RLock()
		var rev uint64
		var cur Budget
		if b := l.budgets[key]; b != nil {
			rev, cur = b.rev, b.def
		}
		l.mu.RUnlock()
		if rev > 0 && cur.Limit.Cmp(limit) == 0 && cur.Unit == unit {
			// Only a no-op if this replica's copy is the latest: another
			// replica may have changed the budget a moment ago.
			latest, err := l.latestRev(ctx, key)
			if err != nil {
				return Budget{}, err
			}
			if latest == rev {
				return cur, nil
			}
			if err := l.catchUp(ctx, key); err != nil {
				return Budget{}, err
			}
			continue
		}
		value := events.BudgetRevision{
			Schema: events.SchemaBudget, Budget: ref, Limit: limit, Unit: unit,
			Events: events.Events{events.BudgetDefined{Budget: ref, Limit: limit, Unit: unit, At: now.UTC()}},
		}
		data, err := json.Marshal(value)
		if err != nil {
			return Budget{}, &events.Error{Code: events.CodeInternal, Message: "encoding budget", Err: err}
		}
		seq, err := l.publishOne(ctx, key, rev, data)
		if err == nil {
			l.mu.Lock()
			l.applyBudgetLocked(key, seq, &value)
			l.mu.Unlock()
			l.ownFolded()
			return Budget{Ref: ref, Limit: limit, Unit: unit, Revision: seq}, nil
		}
		if !streams.IsConflict(err) && !isTimeout(err) {
			return Budget{}, &events.Error{Code: events.CodeLedgerUnavailable, Message: "writing budget", Err: err}
		}
		if err := l.catchUp(ctx, key); err != nil {
			return Budget{}, err
		}
	}
	return Budget{}, events.Errorf(events.CodeLedgerBusy, "budget %s/%s: too many concurrent writers", ref.Scope, ref.Period)
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse)
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
}

// Stats returns the commit counters.
func (l *Ledger) Stats() Stats {
	return Stats{Commits: l.stats.commits.Load(), Batches: l.stats.batches.Load(), Txs: l.stats.txs.Load(), Conflicts: l.stats.conflicts.Load()}
}
