package service

import "time"

// workerIdle is how long an idle worker waits for work before it exits.
const workerIdle = 10 * time.Second

// workers runs functions on reused goroutines. A request's goroutine blocks
// in the group commit, so there must be as many as requests in flight (the
// in-flight limit bounds them); reusing them keeps the stacks they grew on
// the first request, where a fresh goroutine per request grew (copied) its
// stack on every request. A worker with no work for workerIdle exits.
type workers struct {
	// jobs is unbuffered: a send succeeds only if a worker is waiting.
	jobs chan func()
}

func newWorkers() *workers { return &workers{jobs: make(chan func())} }

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
		}
	}
}
