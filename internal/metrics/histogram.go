package metrics

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds, in seconds, of the latency
// histograms: 100µs to 10s, about three per decade. An in-process admit
// commits in a few milliseconds; a leader failover costs seconds.
var LatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5, 10,
}

// TxBuckets are the upper bounds of the transactions-per-commit histogram:
// powers of two up to 4096, the largest group ledger.WithMaxGroup allows.
var TxBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

// Histogram counts observations in fixed buckets. Observe is a binary search
// over the bounds, one atomic add on the bucket and a compare-and-swap loop
// on the sum: no lock. A scrape reads each bucket atomically; the count it
// writes is the sum of the buckets it read, so +Inf and _count always
// agree, while _sum may include an observation that a bucket read just
// missed (or the reverse), which Prometheus tolerates.
type Histogram struct {
	d       *desc
	upper   []float64
	counts  []atomic.Uint64 // len(upper)+1; the last is +Inf
	sumBits atomic.Uint64
}

// NewHistogram returns an unlabelled histogram with the given bucket upper
// bounds, which must be sorted, finite and distinct (it panics otherwise).
func NewHistogram(name, help string, buckets []float64) *Histogram {
	h := newHistogram(slices.Clone(buckets))
	h.d = &desc{name: name, help: help, typ: "histogram"}
	return h
}

func newHistogram(buckets []float64) *Histogram {
	checkBuckets(buckets)
	return &Histogram{upper: buckets, counts: make([]atomic.Uint64, len(buckets)+1)}
}

func checkBuckets(b []float64) {
	for i, u := range b {
		if math.IsNaN(u) || math.IsInf(u, 0) || (i > 0 && u <= b[i-1]) {
			panic(fmt.Sprintf("metrics: histogram buckets %v are not sorted, finite and distinct", b))
		}
	}
}

// Observe records v (seconds, for latency histograms). v lands in the
// first bucket whose upper bound is >= v.
func (h *Histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.upper, v)].Add(1)
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// ObserveDuration records d in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// Since records the time elapsed since start, in seconds: defer
// h.Since(time.Now()) times a function.
func (h *Histogram) Since(start time.Time) { h.Observe(time.Since(start).Seconds()) }

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// histSnapshot is a histogram read at scrape time; counts are per bucket,
// not cumulative.
type histSnapshot struct {
	upper  []float64
	counts []uint64
	sum    float64
}

func (h *Histogram) snapshot() *histSnapshot {
	s := &histSnapshot{upper: h.upper, counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		s.counts[i] = h.counts[i].Load()
	}
	s.sum = math.Float64frombits(h.sumBits.Load())
	return s
}

func (h *Histogram) desc() *desc { return h.d }

func (h *Histogram) collect(dst []series) []series {
	return append(dst, series{hist: h.snapshot()})
}

// HistogramVec is a family of histograms with the same buckets that differ
// by label values.
type HistogramVec struct {
	vec[Histogram]
}

// NewHistogramVec returns a histogram family; see NewHistogram for buckets.
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	checkBuckets(buckets)
	b := slices.Clone(buckets)
	v := &HistogramVec{}
	v.init(&desc{name: name, help: help, typ: "histogram", labels: labels}, func() *Histogram { return newHistogram(b) })
	return v
}

// With returns the histogram for the given label values; see
// CounterVec.With.
func (v *HistogramVec) With(values ...string) *Histogram { return v.with(values) }

func (v *HistogramVec) collect(dst []series) []series {
	return v.each(dst, func(lv []string, h *Histogram) series { return series{labelValues: lv, hist: h.snapshot()} })
}
