package projector

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReadStall bounds how long a read of the ledger stream up to a known
// sequence (an audit, an export, a replay, a snapshot's fold, a trim's
// check) waits for its next message: on an R3 stream the reading consumer
// is placed on any replica's copy, and a copy that cannot be read sends
// nothing (an audit check once hung 14 minutes on a broken copy). The
// read then fails naming the node whose copy it read, instead of waiting
// for the caller's deadline.
const ReadStall = 30 * time.Second

// readStall is ReadStall, shortened by tests.
var readStall = ReadStall

// errStalled is the cause a stallWatch cancels a read with.
var errStalled = errors.New("no message")

// stallWatch cancels a read that gets no message for its bound.
type stallWatch struct {
	bound  time.Duration
	last   atomic.Int64 // unix nanos of the last message
	fired  atomic.Bool  // the bound passed: the read was cancelled for it
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// watchStall returns a context derived from ctx that is cancelled with
// errStalled once no progress was reported for bound.
func watchStall(ctx context.Context, bound time.Duration) (context.Context, *stallWatch) {
	rctx, cancel := context.WithCancelCause(ctx)
	w := &stallWatch{bound: bound, cancel: cancel, done: make(chan struct{})}
	w.progress()
	tick := min(bound/4, time.Second)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-rctx.Done():
				return
			case <-t.C:
				if time.Since(time.Unix(0, w.last.Load())) > bound {
					w.fired.Store(true)
					cancel(errStalled)
					return
				}
			}
		}
	}()
	return rctx, w
}

// progress records a message (nil-safe: a read without a bound).
func (w *stallWatch) progress() {
	if w != nil {
		w.last.Store(time.Now().UnixNano())
	}
}

func (w *stallWatch) stop() {
	close(w.done)
	w.cancel(nil)
}

// stalledCause reports whether the watch cancelled the read.
func (w *stallWatch) stalledCause() bool { return w != nil && w.fired.Load() }

// readError describes a failed read: which node's copy it read (the node
// hosting the reading consumer, on a cluster), how far it got, and why.
func readError(stream string, cons jetstream.Consumer, w *stallWatch, last, until uint64, err error) error {
	where := stream
	if info := cons.CachedInfo(); info != nil && info.Cluster != nil && info.Cluster.Leader != "" {
		where = fmt.Sprintf("%s from node %s's copy", stream, info.Cluster.Leader)
	}
	upTo := ""
	if until != 0 {
		upTo = fmt.Sprintf(" of %d", until)
	}
	if w.stalledCause() {
		return fmt.Errorf("projector: read %s: %w for %s after seq %d%s (that copy may be unreadable or far behind; retry, or read when another node serves it)",
			where, errStalled, w.bound, last, upTo)
	}
	return fmt.Errorf("projector: read %s: stopped after seq %d%s: %w", where, last, upTo, err)
}
