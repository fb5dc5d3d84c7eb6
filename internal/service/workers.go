package service

import (
	"sync"
	"time"
)

// workerIdle is how long an idle worker waits for work before it exits.
const workerIdle = 10 * time.Second

// workers runs functions on reused goroutines. A request's goroutine blocks
// in the group commit, so there must be as many as requests in flight (the
// in-flight limit bounds them); reusing them keeps the stacks they grew on
// the first request, where a fresh goroutine per request grew (copied) its
// stack on every request. A worker with no work for workerIdle exits, and
// every worker exits once stop is called, when it has no work.
type workers struct {
	// jobs is unbuffered: a send succeeds only if a worker is waiting.
	jobs chan func()
	// done is closed by stop.
	done     chan struct{}
	stopOnce sync.Once
}

func newWorkers() *workers { return &workers{jobs: make(chan func()), done: make(chan struct{})} }

// stop makes the idle workers exit now, and every other one when its work
// is done, instead of workerIdle later: the service's goroutines do not
// outlive its Stop. A function run after stop still runs.
func (w *workers) stop() { w.stopOnce.Do(func() { close(w.done) }) }

// run runs f on an idle worker, or on a new one if none is idle.
func (w *workers) run(f func()) {
	select {
	case w.jobs <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		f = nil
		t.Reset(workerIdle)
		select {
		case f = <-w.jobs:
		case <-t.C:
			return
		case <-w.done:
			return
		}
	}
}
