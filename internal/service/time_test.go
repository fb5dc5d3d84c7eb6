package service_test

import (
	"sync/atomic"
	"time"
)

// atomicTime is a settable clock.
type atomicTime struct{ v atomic.Pointer[time.Time] }

func (a *atomicTime) Store(t time.Time) { a.v.Store(&t) }
func (a *atomicTime) Load() time.Time   { return *a.v.Load() }
func (a *atomicTime) Add(d time.Duration) {
	for {
		old := a.v.Load()
		n := old.Add(d)
		if a.v.CompareAndSwap(old, &n) {
			return
		}
	}
}
