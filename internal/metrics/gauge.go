package metrics

import (
	"math"
	"strconv"
	"sync/atomic"
)

// Gauge is a value that goes up and down. Set is one atomic store; Add,
// Inc and Dec are a compare-and-swap loop on the value's bits.
type Gauge struct {
	d    *desc
	bits atomic.Uint64
}

// NewGauge returns an unlabelled gauge at 0.
func NewGauge(name, help string) *Gauge {
	return &Gauge{d: &desc{name: name, help: help, typ: "gauge"}}
}

// Set sets the gauge to f.
func (g *Gauge) Set(f float64) { g.bits.Store(math.Float64bits(f)) }

// Add adds f (which may be negative).
func (g *Gauge) Add(f float64) {
	for {
		old := g.bits.Load()
		if g.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+f)) {
			return
		}
	}
}

// Inc adds 1.
func (g *Gauge) Inc() { g.Add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.Add(-1) }

// Value returns the current value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

func (g *Gauge) desc() *desc { return g.d }

func (g *Gauge) collect(dst []series) []series {
	return append(dst, series{value: g.Value()})
}

// GaugeVec is a family of gauges that differ by label values.
type GaugeVec struct {
	vec[Gauge]
}

// NewGaugeVec returns a gauge family with the given label names.
func NewGaugeVec(name, help string, labels ...string) *GaugeVec {
	v := &GaugeVec{}
	v.init(&desc{name: name, help: help, typ: "gauge", labels: labels}, func() *Gauge { return &Gauge{} })
	return v
}

// With returns the gauge for the given label values; see CounterVec.With.
func (v *GaugeVec) With(values ...string) *Gauge { return v.with(values) }

func (v *GaugeVec) collect(dst []series) []series {
	return v.each(dst, func(lv []string, g *Gauge) series { return series{labelValues: lv, value: g.Value()} })
}

// GaugeFunc is a gauge whose value is computed by a function at scrape
// time, such as a follower's lag or a snapshot's age.
type GaugeFunc struct {
	d *desc
	f func() float64
}

// NewGaugeFunc returns a gauge that calls f on every scrape. f is called
// from the scraping goroutine, possibly concurrently with itself; it must
// be safe for that and must not block.
func NewGaugeFunc(name, help string, f func() float64) *GaugeFunc {
	return &GaugeFunc{d: &desc{name: name, help: help, typ: "gauge"}, f: f}
}

func (g *GaugeFunc) desc() *desc { return g.d }

func (g *GaugeFunc) collect(dst []series) []series {
	return append(dst, series{value: g.f()})
}

// Value is a sample value: a float (Float), an integer (Int), or a decimal
// string written verbatim (Decimal). The zero Value is 0.
type Value struct {
	f    float64
	text string
}

// Float returns a float sample value.
func Float(f float64) Value { return Value{f: f} }

// Int returns an integer sample value, written exactly.
func Int(n int64) Value { return Value{text: strconv.FormatInt(n, 10)} }

// Decimal returns a sample value written exactly as s, without ever being
// converted to a float in this process. It is how money gauges (reserved
// amount per budget) are exposed: the ledger's exact decimal string goes on
// the wire, and only Prometheus, when it parses the scrape, rounds it to
// its float64 storage (about 15 significant digits); the ledger and its
// audit keep the exact figure. s must be a plain decimal string: an
// optional '-', ASCII digits, and optionally '.' and more digits (as
// events.Money.String returns). Anything else is written as NaN, so a bad
// value shows as a gap in the graph instead of corrupting the scrape.
func Decimal(s string) Value {
	if !plainDecimal(s) {
		return Value{text: "NaN"}
	}
	return Value{text: s}
}

func plainDecimal(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	i, f, dot := cutByte(s, '.')
	return digits(i) && (!dot || digits(f))
}

func cutByte(s string, c byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Sample is one labelled sample that a GaugeVecFunc reports.
type Sample struct {
	// LabelValues are in the order of the family's label names.
	LabelValues []string
	Value       Value
}

// GaugeVecFunc is a labelled gauge family computed at scrape time, such as
// open reservations per budget taken from the in-memory book.
type GaugeVecFunc struct {
	d *desc
	f func() []Sample
}

// NewGaugeVecFunc returns a gauge family whose samples f returns on every
// scrape. Samples whose number of label values does not match labels are
// dropped; if two samples have the same label values, both are written and
// Prometheus rejects the scrape, so f must not do that. f has the same
// contract as NewGaugeFunc's, and bounds its own output (see Set's
// BudgetLimit).
func NewGaugeVecFunc(name, help string, labels []string, f func() []Sample) *GaugeVecFunc {
	return &GaugeVecFunc{d: &desc{name: name, help: help, typ: "gauge", labels: labels}, f: f}
}

func (g *GaugeVecFunc) desc() *desc { return g.d }

func (g *GaugeVecFunc) collect(dst []series) []series {
	for _, s := range g.f() {
		if len(s.LabelValues) != len(g.d.labels) {
			continue
		}
		dst = append(dst, series{labelValues: s.LabelValues, value: s.Value.f, text: s.Value.text})
	}
	return dst
}

func nan() float64 { return math.NaN() }
