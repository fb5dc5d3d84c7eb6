package metrics

import (
	"strconv"
	"sync/atomic"
)

// Counter is a monotonically increasing integer count. Inc and Add are one
// atomic add each. The zero value is not registered anywhere; make counters
// with NewCounter or CounterVec.With.
type Counter struct {
	d *desc
	v atomic.Uint64
}

// NewCounter returns an unlabelled counter. name should end in _total.
func NewCounter(name, help string) *Counter {
	return &Counter{d: &desc{name: name, help: help, typ: "counter"}}
}

// Inc adds 1.
func (c *Counter) Inc() { c.v.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Value returns the current count.
func (c *Counter) Value() uint64 { return c.v.Load() }

func (c *Counter) desc() *desc { return c.d }

func (c *Counter) collect(dst []series) []series {
	return append(dst, series{text: strconv.FormatUint(c.v.Load(), 10)})
}

// CounterVec is a family of counters that differ by label values.
type CounterVec struct {
	vec[Counter]
}

// NewCounterVec returns a counter family with the given label names.
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	v := &CounterVec{}
	v.init(&desc{name: name, help: help, typ: "counter", labels: labels}, func() *Counter { return &Counter{} })
	return v
}

// With returns the counter for the given label values, one per label name
// in the order they were declared, creating it at zero on first use. The
// returned counter may be kept and reused: it stays the family's member.
// Label values must come from a bounded set (codes, endpoint names), never
// from request data: every distinct combination is a series forever.
// With panics if the number of values differs from the number of labels,
// a programming error that every test exercising the call site catches.
func (v *CounterVec) With(values ...string) *Counter { return v.with(values) }

func (v *CounterVec) collect(dst []series) []series {
	return v.each(dst, func(lv []string, c *Counter) series {
		return series{labelValues: lv, text: strconv.FormatUint(c.v.Load(), 10)}
	})
}

// CounterFunc is a counter whose value is read by a function at scrape
// time: a count another package keeps (a feed relay's appends).
type CounterFunc struct {
	d *desc
	f func() uint64
}

// NewCounterFunc returns a counter that calls f on every scrape; f must
// never decrease, be safe to call concurrently and not block. name should
// end in _total.
func NewCounterFunc(name, help string, f func() uint64) *CounterFunc {
	return &CounterFunc{d: &desc{name: name, help: help, typ: "counter"}, f: f}
}

func (c *CounterFunc) desc() *desc { return c.d }

func (c *CounterFunc) collect(dst []series) []series {
	return append(dst, series{text: strconv.FormatUint(c.f(), 10)})
}
