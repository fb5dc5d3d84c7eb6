package service

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After stop, the idle workers exit now, not workerIdle (10 s) later, and
// a function run after stop still runs. It can fail: without the done case
// in loop the four workers stay for workerIdle, twice the bound below.
func TestWorkers_StopEndsIdle(t *testing.T) {
	before := runtime.NumGoroutine()
	w := newWorkers()
	started, release := make(chan struct{}), make(chan struct{})
	for range 4 {
		w.run(func() { started <- struct{}{}; <-release })
	}
	for range 4 {
		<-started
	}
	close(release) // four idle workers now
	w.stop()
	ran := make(chan struct{})
	w.run(func() { close(ran) })
	<-ran
	// Polled here: require.Eventually counts its own goroutine.
	deadline := time.Now().Add(workerIdle / 2)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling a condition with a bound
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "workers outlive stop")
}
