package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// keyLock serializes this replica's commits to one key and queues the Txs
// waiting for it, so that one committer folds them into one revision.
type keyLock struct {
	// commit is held while a revision of the key is decided and written.
	commit sync.Mutex

	qmu    sync.Mutex
	queue  []*pending
	active bool // a committer is draining queue
}

type pending struct {
	tx   Tx
	refs []events.BalanceRef
	err  error
	done chan struct{}
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

// Submit decides tx against the current balances and commits its events.
// Concurrent Txs whose balances are all in one lane are folded into one
// revision of the lane (group commit); a Tx over balances in several lanes
// is written as one atomic batch with a revision check on each lane key. A
// Tx whose Decide returns an error gets that error back and commits
// nothing.
//
// The write outlives ctx's cancellation (a reservation must not be half
// decided because one caller went away); each attempt is bounded by the
// commit timeout.
//
// Errors, in precedence order: Decide's own error; *events.Error with
// CodeLedgerBusy (compare-and-set lost DefaultMaxAttempts times; nothing of
// tx was committed) or CodeLedgerUnavailable (JetStream could not be
// reached).
func (l *Ledger) Submit(ctx context.Context, tx Tx) error {
	refs := uniqueRefs(tx.Balances())
	if len(refs) == 0 {
		return events.Errorf(events.CodeInternal, "transaction touches no balance")
	}
	if len(refs) > streams.MaxBatch {
		return events.Errorf(events.CodeInvalidRequest, "transaction touches %d balances; the limit is %d", len(refs), streams.MaxBatch)
	}
	ctx = context.WithoutCancel(ctx)
	p := &pending{tx: tx, refs: refs, done: make(chan struct{})}
	if lanes := l.lanesOf(refs); len(lanes) > 1 {
		l.enqueue(ctx, &l.multi, p, l.commitMultiNext)
	} else {
		l.enqueue(ctx, l.lockFor(lanes[0]), p, l.commitLaneNext)
	}
	<-p.done
	return p.err
}

// enqueue queues p on q. If no committer is draining q, this caller becomes
// it: it commits the queue as it stands (its own Tx included), then hands
// the rest to a background committer so its own reply is not held up by
// later arrivals.
func (l *Ledger) enqueue(ctx context.Context, q *keyLock, p *pending, next func(context.Context, *keyLock) bool) {
	q.qmu.Lock()
	q.queue = append(q.queue, p)
	lead := !q.active
	q.active = true
	q.qmu.Unlock()
	if lead && next(ctx, q) {
		go func() {
			for next(ctx, q) {
			}
		}()
	}
}

// commitMultiNext commits queued Txs whose balances span several lanes as
// one atomic batch: as many Txs as fit in maxGroup and in streams.MaxBatch
// distinct lanes, decided together against one view of the union of their
// balances, so that on a single file-storage server (where every atomic
// batch pays a staged fsync) many of them share one batch. It holds the
// commit lock of every lane in the union, taken in lane order, so it
// excludes those lanes' committers. It reports whether more are queued;
// when none are, it releases the committer role.
func (l *Ledger) commitMultiNext(ctx context.Context, q *keyLock) bool {
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
	q.qmu.Unlock()

	union := unionRefs(group)
	held := l.lanesOf(union)
	locks := make([]*keyLock, len(held))
	for i, lane := range held {
		locks[i] = l.lockFor(lane)
		locks[i].commit.Lock()
	}
	l.commitGroup(ctx, union, group)
	for _, kl := range locks {
		kl.commit.Unlock()
	}
	return q.more()
}

// commitLaneNext commits up to maxGroup queued Txs of one lane as one
// revision of the lane. It reports whether more are queued; when none are,
// it releases the committer role.
func (l *Ledger) commitLaneNext(ctx context.Context, kl *keyLock) bool {
	kl.qmu.Lock()
	n := min(len(kl.queue), l.opts.maxGroup)
	if n == 0 {
		kl.active = false
		kl.qmu.Unlock()
		return false
	}
	group := make([]*pending, n)
	copy(group, kl.queue)
	kl.queue = append(kl.queue[:0:0], kl.queue[n:]...)
	kl.qmu.Unlock()
	kl.commit.Lock()
	l.commitGroup(ctx, unionRefs(group), group)
	kl.commit.Unlock()
	return kl.more()
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

// commitGroup decides every Tx of group against one view of refs and writes
// the result as one revision per lane (an atomic batch when it spans
// lanes). The caller holds the commit lock of every lane of refs.
func (l *Ledger) commitGroup(ctx context.Context, refs []events.BalanceRef, group []*pending) {
	finish := func(err error) {
		for _, p := range group {
			if err != nil && p.err == nil {
				p.err = err
			}
			close(p.done)
		}
	}
	for attempt := 0; ; attempt++ {
		v := l.newView(refs)
		for _, p := range group {
			evs, err := p.tx.Decide(v)
			p.err = err
			if err != nil || len(evs) == 0 {
				continue
			}
			if err := v.apply(evs); err != nil {
				p.err = &events.Error{Code: events.CodeInternal, Message: "applying decision", Err: err}
			}
		}
		revs := v.revisions()
		// Keys the group writes are vouched for by their compare-and-set.
		// Decisions made on keys it does not write (denials, replays, a
		// half-folded multi-balance reservation) have nothing to vouch for
		// them: check those keys were at their latest revision, else fold
		// and decide again before writing anything.
		if unwritten := v.unwritten(); len(unwritten) > 0 {
			stale, err := l.stale(ctx, v, unwritten)
			if err != nil {
				finish(err)
				return
			}
			if stale {
				if attempt+1 < l.opts.maxAttempts {
					continue
				}
				// Never answer from a view known to be stale.
				finish(events.Errorf(events.CodeLedgerBusy, "gave up after %d attempts on a changing ledger; nothing was committed", attempt+1))
				return
			}
		}
		if len(revs) == 0 {
			finish(nil)
			return
		}
		seqs, err := l.write(ctx, revs)
		if err == nil {
			l.mu.Lock()
			for i := range revs {
				l.applyLaneLocked(revs[i].key, seqs[i], &revs[i].value)
			}
			l.mu.Unlock()
			l.ownFolded()
			l.stats.commits.Add(1)
			l.stats.txs.Add(int64(len(group)))
			if len(revs) > 1 {
				l.stats.batches.Add(1)
			}
			finish(nil)
			return
		}
		if tooLarge(err) && len(group) > 1 {
			// The folded revision is over the server's max payload (or
			// the stream's max message size): commit the group in halves.
			half := len(group) / 2
			l.commitGroup(ctx, refs, group[:half])
			l.commitGroup(ctx, refs, group[half:])
			return
		}
		var unknown bool
		switch {
		case streams.IsConflict(err):
			l.stats.conflicts.Add(1)
		case isTimeout(err):
			// The write may or may not have landed: fold whatever is there
			// and decide again; a landed write shows up as already applied.
			unknown = true
		default:
			l.opts.log.Warn("ledger write failed", "err", err)
			finish(&events.Error{Code: events.CodeLedgerUnavailable, Message: "writing to the ledger stream", Err: err})
			return
		}
		if attempt+1 >= l.opts.maxAttempts {
			finish(events.Errorf(events.CodeLedgerBusy, "gave up after %d conflicting attempts; nothing was committed", attempt+1))
			return
		}
		for _, lane := range l.lanesOf(refs) {
			if err := l.catchUp(ctx, lane); err != nil {
				if unknown {
					err = &events.Error{Code: events.CodeLedgerUnavailable, Message: "write outcome unknown and the ledger cannot be read", Err: err}
				}
				finish(err)
				return
			}
		}
		if attempt >= 3 {
			// Another replica keeps winning this key: back off a little so
			// both do not spin.
			time.Sleep(time.Duration(attempt) * 200 * time.Microsecond)
		}
	}
}

// bufPool recycles revision encoding buffers: the publish copies the data
// into the connection's buffer before it returns.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// write commits revs: one compare-and-set publish for one key, an atomic
// batch with a compare-and-set on every key for several. It returns the
// stream sequence (the new revision) of each.
func (l *Ledger) write(ctx context.Context, revs []keyedRevision) ([]uint64, error) {
	datas := make([][]byte, len(revs))
	for i := range revs {
		buf := bufPool.Get().(*[]byte)
		defer bufPool.Put(buf)
		b, err := revs[i].value.AppendJSON((*buf)[:0])
		if err != nil {
			return nil, err
		}
		*buf = b
		datas[i] = b
	}
	if len(revs) == 1 {
		seq, err := l.publishOne(ctx, revs[0].key, revs[0].rev, datas[0])
		if err != nil {
			return nil, err
		}
		return []uint64{seq}, nil
	}
	return l.publishBatch(ctx, revs, datas)
}

// publishOne writes data to key if the key's last revision is rev (0: the
// key must not exist).
func (l *Ledger) publishOne(ctx context.Context, key string, rev uint64, data []byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
	defer cancel()
	msg := nats.NewMsg(l.layout.Subject(key))
	msg.Data = data
	msg.Header.Set(HeaderWriter, l.id)
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(l.layout.StreamName())}
	if !l.opts.blindWrites {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	ack, err := l.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// JetStream atomic batch headers (nats-server 2.12+).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

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
	ctx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
	defer cancel()
	id := uuid.NewString()
	for i := range revs {
		msg := nats.NewMsg(l.layout.Subject(revs[i].key))
		msg.Data = datas[i]
		msg.Header.Set(hdrBatchID, id)
		msg.Header.Set(HeaderWriter, l.id)
		msg.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if !l.opts.blindWrites {
			msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(revs[i].rev, 10))
		}
		if i < len(revs)-1 {
			if err := l.nc.PublishMsg(msg); err != nil {
				return nil, err
			}
			continue
		}
		msg.Header.Set(hdrBatchCommit, "1")
		reply, err := l.nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return nil, jetstream.ErrNoStreamResponse
			}
			return nil, err
		}
		var ack batchAck
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return nil, err
		}
		if ack.Error != nil {
			return nil, ack.Error
		}
		if ack.Count != len(revs) || ack.Seq < uint64(len(revs)) {
			return nil, errors.New("ledger: batch ack does not match the batch")
		}
		seqs := make([]uint64, len(revs))
		for j := range revs {
			seqs[j] = ack.Seq - uint64(len(revs)-1-j)
		}
		return seqs, nil
	}
	return nil, errors.New("ledger: empty batch")
}

// tooLarge reports whether a write failed on its size.
func tooLarge(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeMessageTooLarge
}

// errCodeMessageTooLarge is JetStream's "message size exceeds maximum
// allowed" (the stream's MaxMsgSize).
const errCodeMessageTooLarge = 10054

// stale reports whether any of lanes has a newer revision than the one v
// was decided on, folding the newer revisions in if so.
func (l *Ledger) stale(ctx context.Context, v *View, lanes []string) (bool, error) {
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
