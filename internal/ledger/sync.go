package ledger

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/spendgate/spendgate/events"
)

// syncer coalesces the stream reads of concurrent Syncs: a miss (a
// reservation, budget or request id this replica does not hold) needs the
// stream's last sequence as the leader has it, and under a flood of misses
// one read per miss would queue every request behind thousands of round
// trips. Instead, every Sync that arrives while a read is in flight waits
// for the next read, which starts when the current one returns and serves
// all of them: at most one read is in flight per replica, and a Sync waits
// for at most two.
//
// A Sync may not join a read that is already in flight: that read may have
// left before the write the caller wants to see was acknowledged, and its
// answer would miss it (read-your-writes would break).
type syncer struct {
	mu      sync.Mutex
	running bool       // a read is in flight
	next    *syncRound // the read that starts when the current one returns
	reads   atomic.Int64
}

// syncRound is one stream read shared by every Sync that joined it.
type syncRound struct {
	done   chan struct{}
	target uint64 // the stream's last sequence, once done (if err is nil)
	err    error
}

// syncTarget returns the stream's last sequence as the leader reports it,
// read after the call began, sharing the read with concurrent callers.
//
// It is the leader's answer (streamEnd), never the first answer to a
// stream info request: while an R3 stream has no leader (its leader paused
// or killed, until an election), every replica answers from its own copy,
// and a follower's copy lacks the last writes the leader acknowledged (a
// follower applies an entry when it learns of its commit, which the lost
// leader never sent). A Sync on such a target returned before the book
// held a reservation acknowledged a moment earlier, and a settle of it was
// answered unknown_reservation.
func (l *Ledger) syncTarget(ctx context.Context) (uint64, error) {
	l.syncs.mu.Lock()
	r := l.syncs.next
	if r == nil {
		r = &syncRound{done: make(chan struct{})}
		l.syncs.next = r
	}
	if !l.syncs.running {
		l.syncs.running = true
		l.syncs.next = nil
		l.startSyncRound(r)
	}
	l.syncs.mu.Unlock()
	select {
	case <-r.done:
		return r.target, r.err
	case <-ctx.Done():
		return 0, &events.Error{Code: events.CodeLedgerUnavailable, Message: "ledger follower is behind", Err: ctx.Err()}
	}
}

// startSyncRound reads the stream's state for r on a goroutine Run owns,
// then starts the round that queued behind it, if any. l.syncs.mu is held.
func (l *Ledger) startSyncRound(r *syncRound) {
	run := func() {
		l.syncs.reads.Add(1)
		// The read is shared, so no caller's ctx bounds it.
		ctx, cancel := context.WithTimeout(context.Background(), SyncTimeout)
		r.target, r.err = l.streamEnd(ctx)
		cancel()
		close(r.done)
		l.syncs.mu.Lock()
		defer l.syncs.mu.Unlock()
		if nr := l.syncs.next; nr != nil {
			l.syncs.next = nil
			l.startSyncRound(nr)
			return
		}
		l.syncs.running = false
	}
	if !l.goOwned(run) {
		r.err = events.Errorf(events.CodeLedgerUnavailable, "the ledger follower has stopped")
		close(r.done)
		// Whoever queued a next round behind this one is failed too: no
		// read will start for it.
		if nr := l.syncs.next; nr != nil {
			l.syncs.next = nil
			nr.err = r.err
			close(nr.done)
		}
		l.syncs.running = false
	}
}

// StreamEnd returns the ledger stream's last sequence as its leader has it
// (0 for an empty stream), read through the leader and retried through an
// election within ctx: what a health check compares Applied with.
//
// Errors: *events.Error with CodeLedgerUnavailable when no leader answered
// within ctx (the stream has no leader, or JetStream cannot be reached).
func (l *Ledger) StreamEnd(ctx context.Context) (uint64, error) { return l.streamEnd(ctx) }

// Applied returns the last stream sequence this replica has folded.
func (l *Ledger) Applied() uint64 { return l.applied.Load() }
