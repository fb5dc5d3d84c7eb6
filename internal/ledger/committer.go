package ledger

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/streams"
)

// committer is the state of the part of the Ledger that writes decisions
// (Submit): a queue and a commit lock per lane, the queue of Txs that span
// lanes, and the counters of Stats.
type committer struct {
	klMu  sync.Mutex
	locks map[string]*keyLock
	// multi queues the Txs over several balances for the batch committer.
	multi keyLock
	// laneNext and multiNext are l.commitLaneNext and l.commitMultiNext,
	// bound once (a method value made per submit is an allocation).
	laneNext, multiNext func(*keyLock) bool

	stats struct {
		commits, txs, conflicts, batches, queued, timeouts atomic.Int64
		attemptNanos, writeNanos                           atomic.Int64
	}
}

// keyLock serializes this replica's commits to one key and queues the Txs
// waiting for it, so that one committer folds them into one revision.
type keyLock struct {
	// commit is held while a revision of the key is decided and written.
	commit sync.Mutex

	qmu    sync.Mutex
	queue  []*pending
	active bool // a committer is draining queue
	// last is how many Txs the lane's last group held (see gather).
	last int
}

type pending struct {
	tx   Tx
	refs []events.BalanceRef
	// deadline bounds every attempt to commit tx (from the caller's ctx).
	deadline time.Time
	err      error
	done     chan struct{}
}

func (l *Ledger) lockFor(key string) *keyLock {
	l.klMu.Lock()
	defer l.klMu.Unlock()
	kl := l.locks[key]
	if kl == nil {
		kl = &keyLock{}
		l.locks[key] = kl
	}
	return kl
}

// commitContext returns the context of a commit: never cancelled by the
// caller (a write in flight is not abandoned half way), but bounded by the
// caller's deadline, or by the submit timeout if the caller set none.
func (l *Ledger) commitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithoutCancel(ctx), l.deadlineOf(ctx))
}

func (l *Ledger) deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(l.opts.submitTimeout)
}

// Submit decides tx against the current balances and commits its events.
// Concurrent Txs whose balances are all in one lane are folded into one
// revision of the lane (group commit); a Tx over balances in several lanes
// is written as one atomic batch with a revision check on each lane key. A
// Tx whose Decide returns an error gets that error back and commits
// nothing; so does a Tx whose events cannot be applied (all or none: its
// events are applied to a scratch copy of the group's view and merged only
// if every one applies).
//
// Every attempt to commit tx shares one deadline: ctx's, or the submit
// timeout (WithSubmitTimeout) if ctx has none. ctx's cancellation does not
// abandon a write in flight (other callers' Txs share it), and no caller's
// ctx is used for the writes of a group.
//
// Errors, in precedence order: CodeLedgerUnavailable if the follower is not
// running (fail closed: a book that no longer advances does not decide);
// if the group's write failed, that failure (it replaces every answer
// decided in the group, which may rest on state that was never written):
// *events.Error with CodeLedgerUnavailable (JetStream could not be reached,
// the write's outcome is unknown, or the deadline passed) or CodeLedgerBusy
// (compare-and-set lost MaxAttempts times; nothing of tx was committed);
// otherwise Decide's own error, or CodeInternal if its events do not apply.
func (l *Ledger) Submit(ctx context.Context, tx Tx) error {
	return l.SubmitAll(ctx, []Tx{tx})[0]
}

// SubmitAll submits every Tx of txs as Submit does, each decided and
// answered on its own, but queues them all at once, so that those of one
// lane are folded into the same group commits rather than spread over
// consecutive ones. errs[i] is what Submit would return for txs[i]; every
// Tx shares ctx's deadline (or the submit timeout).
func (l *Ledger) SubmitAll(ctx context.Context, txs []Tx) []error {
	errs := make([]error, len(txs))
	if err := l.live(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	deadline := l.deadlineOf(ctx)
	ps := make([]*pending, len(txs))
	var lanes []*keyLock
	byLane := map[*keyLock][]*pending{}
	var multi []*pending
	for i, tx := range txs {
		refs := uniqueRefs(tx.Balances())
		if len(refs) == 0 {
			errs[i] = events.Errorf(events.CodeInternal, "transaction touches no balance")
			continue
		}
		if len(refs) > streams.MaxBatch {
			errs[i] = events.Errorf(events.CodeInvalidRequest, "transaction touches %d balances; the limit is %d", len(refs), streams.MaxBatch)
			continue
		}
		p := &pending{tx: tx, refs: refs, deadline: deadline, done: make(chan struct{})}
		ps[i] = p
		if ls := l.lanesOf(refs); len(ls) > 1 {
			multi = append(multi, p)
		} else {
			kl := l.lockFor(ls[0])
			if _, ok := byLane[kl]; !ok {
				lanes = append(lanes, kl)
			}
			byLane[kl] = append(byLane[kl], p)
		}
	}
	// Each queue is led (if no committer drains it) by a goroutine of its
	// own but the last, which this one leads, so that queues commit in
	// parallel.
	type group struct {
		q    *keyLock
		ps   []*pending
		next func(*keyLock) bool
	}
	groups := make([]group, 0, 4)
	for _, kl := range lanes {
		groups = append(groups, group{kl, byLane[kl], l.laneNext})
	}
	if len(multi) > 0 {
		groups = append(groups, group{&l.multi, multi, l.multiNext})
	}
	for i, g := range groups {
		if i == len(groups)-1 {
			l.enqueue(g.q, g.ps, g.next)
		} else {
			go l.enqueue(g.q, g.ps, g.next)
		}
	}
	for i, p := range ps {
		if p != nil {
			<-p.done
			errs[i] = p.err
		}
	}
	return errs
}

// enqueue queues ps on q. If no committer is draining q, this caller becomes
// it: it commits the queue as it stands (its own Txs included), then hands
// the rest to a background committer owned by Run, so its own reply is not
// held up by later arrivals. Once Run has stopped, what is queued is
// answered CodeLedgerUnavailable.
func (l *Ledger) enqueue(q *keyLock, ps []*pending, next func(*keyLock) bool) {
	q.qmu.Lock()
	q.queue = append(q.queue, ps...)
	l.stats.queued.Add(int64(len(ps)))
	lead := !q.active
	q.active = true
	q.qmu.Unlock()
	if !lead || !next(q) {
		return
	}
	if !l.goOwned(func() {
		for next(q) {
		}
	}) {
		q.qmu.Lock()
		rest := q.queue
		q.queue, q.active = nil, false
		l.stats.queued.Add(-int64(len(rest)))
		q.qmu.Unlock()
		finishAll(rest, l.live())
	}
}

// commitMultiNext commits queued Txs whose balances span several lanes as
// one atomic batch: as many Txs as fit in maxGroup and in streams.MaxBatch
// distinct lanes, decided together against one view of the union of their
// balances, so that on a single file-storage server (where every atomic
// batch pays a staged fsync) many of them share one batch. While it decides
// and writes it holds the commit lock of every lane in the union, taken in
// lane order, so it excludes those lanes' committers. It reports whether
// more are queued; when none are, it releases the committer role.
func (l *Ledger) commitMultiNext(q *keyLock) bool {
	q.qmu.Lock()
	if len(q.queue) == 0 {
		q.active = false
		q.qmu.Unlock()
		return false
	}
	lanes := map[string]bool{}
	n := 0
	for _, p := range q.queue {
		if n == l.opts.maxGroup {
			break
		}
		pl := l.lanesOf(p.refs)
		added := 0
		for _, lane := range pl {
			if !lanes[lane] {
				added++
			}
		}
		if n > 0 && len(lanes)+added > streams.MaxBatch {
			break
		}
		for _, lane := range pl {
			lanes[lane] = true
		}
		n++
	}
	group := make([]*pending, n)
	copy(group, q.queue)
	q.queue = append(q.queue[:0:0], q.queue[n:]...)
	l.stats.queued.Add(-int64(n))
	q.qmu.Unlock()

	union := unionRefs(group)
	held := l.lanesOf(union)
	locks := make([]*keyLock, len(held))
	for i, lane := range held {
		locks[i] = l.lockFor(lane)
	}
	l.commitGroup(union, group, locks)
	return q.more()
}

// commitLaneNext commits up to maxGroup queued Txs of one lane as one
// revision of the lane. It reports whether more are queued; when none are,
// it releases the committer role.
func (l *Ledger) commitLaneNext(kl *keyLock) bool {
	gather(kl)
	kl.qmu.Lock()
	n := min(len(kl.queue), l.opts.maxGroup)
	kl.last = n
	if n == 0 {
		kl.active = false
		kl.qmu.Unlock()
		return false
	}
	group := make([]*pending, n)
	copy(group, kl.queue)
	kl.queue = append(kl.queue[:0:0], kl.queue[n:]...)
	l.stats.queued.Add(-int64(n))
	kl.qmu.Unlock()
	l.commitGroup(unionRefs(group), group, []*keyLock{kl})
	return kl.more()
}

// gatherYields bounds how many times gather yields the processor.
const gatherYields = 4

// gather lets Txs that are about to be queued on kl join its next group.
// When the lane's last group held several Txs (callers are concurrent) and
// fewer are queued now, it yields the processor a few times, up to
// gatherYields, until as many are queued as last time: goroutines that
// are runnable (a request being decoded, a batch being split) get to
// queue theirs first. A group is one revision, one write and one
// acknowledgement, whatever its size, so on a busy replica fewer, larger
// groups cost less per Tx: at 64 callers on one budget, groups grew from
// about 12 Txs to 18 and the CPU per admit+settle cycle fell.
//
// It never waits for anything that is not already running or runnable:
// no timer, no linger. A lone caller (last group of one) does not yield
// at all, and on an idle replica a yield returns at once.
func gather(kl *keyLock) {
	kl.qmu.Lock()
	want, n := kl.last, len(kl.queue)
	kl.qmu.Unlock()
	for i := 0; i < gatherYields && want > 1 && n < want; i++ {
		runtime.Gosched()
		kl.qmu.Lock()
		n = len(kl.queue)
		kl.qmu.Unlock()
	}
}

// unionRefs returns the distinct balances of group's Txs, in key order.
func unionRefs(group []*pending) []events.BalanceRef {
	if len(group) == 1 {
		return group[0].refs
	}
	var all []events.BalanceRef
	for _, p := range group {
		all = append(all, p.refs...)
	}
	return uniqueRefs(all)
}

// more reports whether Txs are queued; when none are, it releases the
// committer role (under the same lock an arriving Tx checks it).
func (q *keyLock) more() bool {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	if len(q.queue) == 0 {
		q.active = false
		return false
	}
	return true
}

func uniqueRefs(in []events.BalanceRef) []events.BalanceRef {
	if len(in) == 1 {
		return in
	}
	type keyed struct {
		key string
		ref events.BalanceRef
	}
	ks := make([]keyed, 0, len(in))
	for _, r := range in {
		ks = append(ks, keyed{streams.BalanceKey(r), r})
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].key < ks[j].key })
	out := make([]events.BalanceRef, 0, len(ks))
	for i, k := range ks {
		if i == 0 || k.key != ks[i-1].key {
			out = append(out, k.ref)
		}
	}
	return out
}

// finishAll answers every Tx of group with err, replacing the answers
// decided in the group: a decision (a denial, an idempotency mismatch
// against a sibling) may rest on state the group never wrote.
func finishAll(group []*pending, err error) {
	for _, p := range group {
		p.err = err
		close(p.done)
	}
}

// finishEach answers every Tx of group with its own decision (the group's
// write landed, or there was nothing to write).
func finishEach(group []*pending) {
	for _, p := range group {
		close(p.done)
	}
}

// action is what the committer does after one attempt, classified from its
// outcome.
type action int

const (
	// actDone: every Tx of the group has its answer.
	actDone action = iota
	// actFail: answer every Tx of the group with the attempt's error.
	actFail
	// actRetry: nothing was written (a lost compare-and-set, or a decision
	// made on a stale view): fold what was missed and decide again.
	actRetry
	// actRetryUnknown: the write may or may not have landed (a timeout):
	// fold whatever is there and decide again; a landed write shows up as
	// already applied.
	actRetryUnknown
	// actSplit: the folded revision is over the server's max payload:
	// commit the group in halves.
	actSplit
)

// backoffAfter is the attempt from which the committer pauses before
// deciding again (another replica keeps winning the same lanes), and
// backoffStep the pause per attempt.
const (
	backoffAfter = 3
	backoffStep  = 200 * time.Microsecond
)

// commitGroup decides every Tx of group against one view of refs and writes
// the result as one revision per lane (an atomic batch when it spans
// lanes), retrying until every Tx has its answer. It takes locks (the
// commit locks of refs' lanes, in lane order) for each attempt only: the
// catch-up reads and the back-off between attempts run without them.
//
// The one network call made under the locks is the attempt itself (the
// leader reads that check a decision that writes nothing, and the write):
// a lane's revision is decided on the lane's last revision, so this
// replica's next decision of the lane must wait for the outcome of the
// write, and holding the lock is what makes it wait instead of losing its
// own compare-and-set. A multi-lane batch holds up to streams.MaxBatch
// lane locks for that one write. Each call is bounded by the commit
// timeout and every attempt by the group's deadline.
func (l *Ledger) commitGroup(refs []events.BalanceRef, group []*pending, locks []*keyLock) {
	unknown := false   // the outcome of the last write is unknown
	var lost lostWrite // that write
	for attempt := 0; ; attempt++ {
		group = expire(group, unknown)
		if len(group) == 0 {
			return
		}
		if err := l.live(); err != nil {
			finishAll(group, err)
			return
		}
		deadline := group[0].deadline
		for _, p := range group[1:] {
			if p.deadline.After(deadline) {
				deadline = p.deadline
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		for _, kl := range locks {
			kl.commit.Lock()
		}
		t0 := time.Now()
		act, err := l.attempt(ctx, refs, group, &lost)
		l.stats.attemptNanos.Add(int64(time.Since(t0)))
		for _, kl := range locks {
			kl.commit.Unlock()
		}
		switch act {
		case actDone:
			cancel()
			return
		case actFail:
			cancel()
			if unknown && events.CodeOf(err) != events.CodeLedgerUnavailable {
				err = &events.Error{Code: events.CodeLedgerUnavailable, Message: "an earlier write's outcome is unknown", Err: err}
			}
			finishAll(group, err)
			return
		case actSplit:
			cancel()
			half := len(group) / 2
			l.commitGroup(refs, group[:half], locks)
			l.commitGroup(refs, group[half:], locks)
			return
		}
		unknown = act == actRetryUnknown
		if attempt+1 >= l.opts.maxAttempts {
			cancel()
			if unknown {
				finishAll(group, events.Errorf(events.CodeLedgerUnavailable, "gave up after %d attempts; the last write's outcome is unknown", attempt+1))
			} else {
				finishAll(group, events.Errorf(events.CodeLedgerBusy, "gave up after %d conflicting attempts; nothing was committed", attempt+1))
			}
			return
		}
		for _, lane := range l.lanesOf(refs) {
			if err := l.resolve(ctx, lane, unknown); err != nil {
				cancel()
				if unknown {
					err = &events.Error{Code: events.CodeLedgerUnavailable, Message: "write outcome unknown and the ledger cannot be read", Err: err}
				}
				finishAll(group, err)
				return
			}
		}
		landed := false
		if unknown {
			var err error
			if _, landed, err = lost.landed(ctx, l); err != nil {
				cancel()
				finishAll(group, &events.Error{Code: events.CodeLedgerUnavailable, Message: "write outcome unknown and the ledger cannot be read", Err: err})
				return
			}
		}
		if landed {
			// The write landed (the catch-up folded it): the group's
			// decisions are what the ledger holds. Deciding again on a
			// book that holds them would answer an admit "replayed" and
			// a settle "already closed".
			cancel()
			l.stats.commits.Add(1)
			l.stats.txs.Add(int64(len(group)))
			if l.opts.observer != nil {
				l.opts.observer.Committed(len(group))
			}
			finishEach(group)
			return
		}
		if attempt >= backoffAfter {
			// Another replica keeps winning these lanes: back off a little
			// so both do not spin (no lock held; bounded by the deadline).
			t := time.NewTimer(time.Duration(attempt) * backoffStep)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		cancel()
	}
}

// resolve folds what was written to lane after this replica's last folded
// revision (catchUp). After a write whose outcome is unknown, a read that
// times out (the stream has no leader yet) is tried again until ctx ends:
// the answer to the callers waits for the lane's last revision, which says
// whether the write landed.
func (l *Ledger) resolve(ctx context.Context, lane string, unknown bool) error {
	for {
		err := l.catchUp(ctx, lane)
		if err == nil || !unknown || !(isTimeout(err) || streams.IsTransient(err)) || !pause(ctx, retryPause) {
			return err
		}
	}
}

// expire answers the Txs of group whose deadline has passed and returns the
// others. Nothing of an expired Tx was committed, unless the last write's
// outcome is unknown.
func expire(group []*pending, unknown bool) []*pending {
	now := time.Now()
	keep := group[:0:0]
	for _, p := range group {
		if now.Before(p.deadline) {
			keep = append(keep, p)
			continue
		}
		msg := "the deadline passed before the change could be written; nothing was committed"
		if unknown {
			msg = "the deadline passed; the outcome of the last write is unknown"
		}
		p.err = events.Errorf(events.CodeLedgerUnavailable, "%s", msg)
		close(p.done)
	}
	return keep
}

// attempt decides every Tx of group against one view of refs, verifies the
// decisions that write nothing, writes, and classifies the outcome into an
// action. On actDone the Txs are answered; on actFail err is the answer
// for all of them. The caller holds the commit lock of every lane of refs.
func (l *Ledger) attempt(ctx context.Context, refs []events.BalanceRef, group []*pending, lost *lostWrite) (action, error) {
	// Decide.
	v := l.newView(refs)
	for _, p := range group {
		evs, err := p.tx.Decide(v)
		p.err = err
		if err != nil || len(evs) == 0 {
			continue
		}
		if ref, gone := v.gone(evs); gone {
			p.err = events.Errorf(events.CodeBudgetRetired, "budget %s per %s was retired and its balance %s has left the ledger's memory; nothing was written (the ledger stream keeps its numbers)",
				ref.Scope.Local(), ref.Period, ref.Instance)
			continue
		}
		if err := v.apply(evs); err != nil {
			p.err = &events.Error{Code: events.CodeInternal, Message: "applying decision", Err: err}
		}
	}
	if v.stale {
		return actRetry, nil
	}
	revs := v.revisions()
	// Verify. Keys the group writes are vouched for by their
	// compare-and-set. Decisions made on keys it does not write (denials,
	// replays, a half-folded multi-balance reservation) have nothing to
	// vouch for them: check those keys were at their latest revision, else
	// fold and decide again before writing anything.
	if unwritten := v.unwritten(); len(unwritten) > 0 {
		stale, err := l.stale(ctx, v, unwritten)
		if err != nil {
			return actFail, err
		}
		if stale {
			// Never answer from a view known to be stale.
			return actRetry, nil
		}
	}
	if len(revs) == 0 {
		finishEach(group)
		return actDone, nil
	}
	// Write.
	t0 := time.Now()
	seqs, hashes, err := l.write(ctx, revs)
	l.stats.writeNanos.Add(int64(time.Since(t0)))
	if err == nil {
		err = l.foldOwn(revs, seqs, hashes)
		l.ownFolded()
		if err != nil {
			// The write landed but does not follow what this replica
			// folded (a second writer without compare-and-set forked the
			// lane): the follower will stop on it too. Fail closed; a
			// retry elsewhere finds what was written.
			return actFail, &events.Error{Code: events.CodeLedgerUnavailable, Message: "own write does not follow the folded revision (a fork)", Err: err}
		}
		l.stats.commits.Add(1)
		l.stats.txs.Add(int64(len(group)))
		if len(revs) > 1 {
			l.stats.batches.Add(1)
		}
		if l.opts.observer != nil {
			l.opts.observer.Committed(len(group))
		}
		finishEach(group)
		return actDone, nil
	}
	// Classify.
	switch {
	case tooLarge(err) && len(group) > 1:
		return actSplit, nil
	case streams.IsConflict(err):
		l.stats.conflicts.Add(1)
		if l.opts.observer != nil {
			l.opts.observer.Conflicted()
		}
		return actRetry, nil
	case isTimeout(err):
		l.stats.timeouts.Add(1)
		lost.keys, lost.hashes, lost.revs = lost.keys[:0], hashes, lost.revs[:0]
		for _, r := range revs {
			lost.keys = append(lost.keys, r.key)
			lost.revs = append(lost.revs, r.rev)
		}
		return actRetryUnknown, nil
	default:
		// Bounded: with the stream out of disk every commit fails, and a
		// line each buried the log (and filled the disk it shares).
		if log, held := l.writeFails.Note(time.Now()); log || held > 0 {
			if held > 0 {
				l.opts.log.Warn("more ledger writes failed; not logged one by one (past the first 20 a minute, summed up once a minute)", "failed", held)
			}
			if log {
				l.opts.log.Warn("ledger write failed", "err", err)
			}
		}
		return actFail, &events.Error{Code: events.CodeLedgerUnavailable, Message: "writing to the ledger stream", Err: err}
	}
}

// bufPool recycles revision encoding buffers: the publish copies the data
// into the connection's buffer before it returns.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// write commits revs: one compare-and-set publish for one key, an atomic
// batch with a compare-and-set on every key for several. It returns the
// stream sequence (the new revision) and the payload hash of each.
func (l *Ledger) write(ctx context.Context, revs []keyedRevision) ([]uint64, []string, error) {
	datas := make([][]byte, len(revs))
	hashes := make([]string, len(revs))
	for i := range revs {
		buf := bufPool.Get().(*[]byte)
		defer bufPool.Put(buf)
		b, err := codec.AppendLane((*buf)[:0], &revs[i].value)
		if err != nil {
			return nil, nil, err
		}
		*buf = b
		datas[i] = b
		hashes[i] = events.HashPayload(b)
	}
	if f := l.opts.writeFault; f != nil {
		keys := make([]string, len(revs))
		for i := range revs {
			keys[i] = revs[i].key
		}
		if err := f(ctx, keys); err != nil {
			return nil, nil, err
		}
	}
	if err := l.writable(); err != nil {
		return nil, hashes, err
	}
	var seqs []uint64
	if len(revs) == 1 {
		seq, _, err := l.publishOne(ctx, revs[0].key, revs[0].rev, datas[0])
		if err != nil {
			return nil, hashes, err
		}
		seqs = []uint64{seq}
	} else {
		var err error
		if seqs, err = l.publishBatch(ctx, revs, datas); err != nil {
			return nil, hashes, err
		}
	}
	return seqs, hashes, nil
}

// lostWrite is a write whose outcome is unknown (its acknowledgement
// timed out): the keys it wrote, its payloads' hashes, and the revision of
// each key it required (its compare-and-set).
type lostWrite struct {
	keys, hashes []string
	revs         []uint64
}

// landed reports whether w landed, with the sequence of its first key's
// revision. The caller has folded the key up to the stream's latest
// (resolve, catchUp), so a landed write is in the book; but another
// replica may have written on top of it since, so the key's head is not
// enough: the key's first message after the revision w required is w's
// if w landed, as the compare-and-set let nothing in between. An atomic
// batch lands whole or not at all, so its first key tells.
func (w *lostWrite) landed(ctx context.Context, l *Ledger) (uint64, bool, error) {
	if len(w.keys) == 0 {
		return 0, false, nil
	}
	key, hash := w.keys[0], w.hashes[0]
	l.mu.RLock()
	seq, head := l.bk.valid(key)
	l.mu.RUnlock()
	if head == hash {
		return seq, true, nil
	}
	m, found, err := l.leaderGet(ctx, leaderGetRequest{Seq: w.revs[0] + 1, NextFor: l.layout.Subject(key)})
	if err != nil || !found || events.HashPayload(m.data) != hash {
		return 0, false, err
	}
	return m.seq, true, nil
}

// publishOne writes data to key if the key's last revision is rev (0: the
// key must not exist).
//
// Each attempt waits at most the commit timeout; an attempt that times out
// (no stream leader, a leader election in progress) is sent again, the same
// bytes with the same expected revision, until ctx ends. If an earlier
// attempt landed, the repeat fails its compare-and-set and the caller folds
// the lane (catchUp), where it finds its own write; no other write can land
// at rev. (No Nats-Msg-Id: the server would keep one dedupe entry per
// commit for the stream's duplicate window, hundreds of MB at thousands of
// commits per second, to save a round trip only after a lost ack.) When
// ctx ends first, the outcome is unknown and the caller resolves it by
// reading the lane.
func (l *Ledger) publishOne(ctx context.Context, key string, rev uint64, data []byte) (uint64, nats.Header, error) {
	l.ownWrites.Add(1)
	defer l.ownWrites.Add(-1)
	msg := nats.NewMsg(l.layout.Subject(key))
	msg.Data = data
	msg.Header.Set(streams.HeaderWriter, l.id)
	l.sign(msg.Header, key, data)
	// The headers jetstream.WithExpectStream and
	// WithExpectLastSequencePerSubject set (see publishRequest).
	msg.Header.Set(jetstream.ExpectedStreamHeader, l.layout.StreamName())
	if !l.opts.blindWrites {
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
		seq, err := l.publishAcked(actx, msg)
		cancel()
		if err == nil {
			if attempt > 1 {
				l.opts.log.Info("ledger write landed after retries", "key", key, "attempts", attempt)
			}
			return seq, msg.Header, nil
		}
		if attempt > 1 && streams.IsConflict(err) {
			// An earlier attempt timed out and may have landed: then this
			// resend loses to it. The outcome is unknown, not a conflict;
			// the caller resolves it by reading the lane.
			return 0, nil, fmt.Errorf("%w (%v)", errResentConflict, err)
		}
		if !isTimeout(err) || !pause(ctx, retryPause) {
			return 0, nil, err
		}
	}
}

// errResentConflict: a resend after a timed-out attempt lost its
// compare-and-set. The timed-out attempt may be the write it lost to, so
// the outcome is unknown (isTimeout reports it as such).
var errResentConflict = errors.New("ledger: a resend after a timeout lost its compare-and-set; the first attempt may have landed")

// pause waits d, or until ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

type batchAck struct {
	Stream string              `json:"stream"`
	Seq    uint64              `json:"seq"`
	Count  int                 `json:"count"`
	Error  *jetstream.APIError `json:"error,omitempty"`
}

// publishBatch writes all revisions as one atomic batch: either every key
// moves to its new revision or none does (a stale revision on any key
// rejects the whole batch). One round trip: only the commit message asks
// for an ack.
func (l *Ledger) publishBatch(ctx context.Context, revs []keyedRevision, datas [][]byte) ([]uint64, error) {
	l.ownWrites.Add(1)
	defer l.ownWrites.Add(-1)
	ctx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
	defer cancel()
	// Every message of the batch on one connection, in order.
	nc, done := l.writeConn()
	defer done()
	id := uuid.NewString()
	for i := range revs {
		msg := nats.NewMsg(l.layout.Subject(revs[i].key))
		msg.Data = datas[i]
		msg.Header.Set(streams.HeaderBatchID, id)
		msg.Header.Set(streams.HeaderWriter, l.id)
		l.sign(msg.Header, revs[i].key, datas[i])
		msg.Header.Set(streams.HeaderBatchSeq, strconv.Itoa(i+1))
		if !l.opts.blindWrites {
			msg.Header.Set(streams.HeaderExpectedLastSubjSeq, strconv.FormatUint(revs[i].rev, 10))
		}
		if i < len(revs)-1 {
			if err := nc.PublishMsg(msg); err != nil {
				return nil, err
			}
			continue
		}
		msg.Header.Set(streams.HeaderBatchCommit, "1")
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return nil, jetstream.ErrNoStreamResponse
			}
			return nil, err
		}
		seq, count, err := batchPubAck(reply.Data)
		if err != nil {
			return nil, err
		}
		if count != len(revs) || seq < uint64(len(revs)) {
			return nil, errors.New("ledger: batch ack does not match the batch")
		}
		seqs := make([]uint64, len(revs))
		for j := range revs {
			seqs[j] = seq - uint64(len(revs)-1-j)
		}
		return seqs, nil
	}
	return nil, errors.New("ledger: empty batch")
}

// tooLarge reports whether a write failed on its size.
func tooLarge(err error) bool { return streams.IsTooLarge(err) }

// stale reports whether any of lanes has a newer revision than the one v
// was decided on, folding the newer revisions in if so.
func (l *Ledger) stale(ctx context.Context, v *group, lanes []string) (bool, error) {
	stale := false
	for _, key := range lanes {
		latest, err := l.latestRev(ctx, key)
		if err != nil {
			return false, err
		}
		if latest > v.lanes[key] {
			stale = true
			if err := l.catchUp(ctx, key); err != nil {
				return false, err
			}
		}
	}
	return stale, nil
}
