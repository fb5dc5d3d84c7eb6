package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// ContentType is the media type of the text exposition format, version
// 0.0.4, that Registry writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Collector is a metric family that a Registry can expose: Counter,
// CounterVec, Gauge, GaugeVec, GaugeFunc, GaugeVecFunc, Histogram and
// HistogramVec. Only this package's types implement it.
type Collector interface {
	desc() *desc
	// collect appends the family's series, in any order.
	collect(dst []series) []series
}

// desc is what every family shares: name, help, type and label names.
type desc struct {
	name   string
	help   string
	typ    string // counter, gauge, histogram
	labels []string
}

// series is one labelled member of a family at scrape time.
type series struct {
	labelValues []string
	// counter and gauge samples: exactly one of the two is used.
	value float64
	text  string // written verbatim when set (Decimal values, integers)
	// histogram samples
	hist *histSnapshot
}

// Registry holds metric families and writes them in the text exposition
// format. Its zero value is not usable; call NewRegistry. A Registry is safe
// for concurrent use; writing takes a snapshot of each family without
// stopping the hot path.
type Registry struct {
	mu   sync.Mutex
	fams map[string]Collector
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{fams: map[string]Collector{}} }

// Register adds c. It returns an error when the family's name or a label
// name is not a valid Prometheus name, or when a family of that name is
// already registered.
func (r *Registry) Register(c Collector) error {
	d := c.desc()
	if err := validate(d); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.fams[d.name]; dup {
		return fmt.Errorf("metrics: %s is already registered", d.name)
	}
	r.fams[d.name] = c
	return nil
}

// MustRegister registers each of cs and panics on the first error. It is
// meant for start-up code registering fixed, known-good names.
func (r *Registry) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes the family named name, if any, and reports whether it
// was registered.
func (r *Registry) Unregister(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.fams[name]
	delete(r.fams, name)
	return ok
}

// WriteTo writes every family in the text exposition format 0.0.4: families
// in name order, each with its HELP and TYPE lines, then its series in the
// order of their label values. A family with no series (a vector nobody has
// used yet) is written as its HELP and TYPE lines only.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	cs := make([]Collector, 0, len(r.fams))
	for _, c := range r.fams {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	slices.SortFunc(cs, func(a, b Collector) int { return strings.Compare(a.desc().name, b.desc().name) })

	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 32<<10)
	var buf []byte
	var ss []series
	for _, c := range cs {
		d := c.desc()
		ss = c.collect(ss[:0])
		slices.SortFunc(ss, func(a, b series) int { return slices.Compare(a.labelValues, b.labelValues) })
		buf = appendFamily(buf[:0], d, ss)
		if _, err := bw.Write(buf); err != nil {
			return cw.n, err
		}
	}
	err := bw.Flush()
	return cw.n, err
}

// ServeHTTP writes the registry to w as a scrape response.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	if req.Method == http.MethodGet {
		_, _ = w.Write(b.Bytes())
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func appendFamily(b []byte, d *desc, ss []series) []byte {
	b = append(b, "# HELP "...)
	b = append(b, d.name...)
	b = append(b, ' ')
	b = appendEscaped(b, d.help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, d.name...)
	b = append(b, ' ')
	b = append(b, d.typ...)
	b = append(b, '\n')
	for _, s := range ss {
		if s.hist != nil {
			b = appendHistogram(b, d, s)
			continue
		}
		b = appendSample(b, d.name, "", d.labels, s.labelValues, "", "")
		if s.text != "" {
			b = append(b, s.text...)
		} else {
			b = appendFloat(b, s.value)
		}
		b = append(b, '\n')
	}
	return b
}

func appendHistogram(b []byte, d *desc, s series) []byte {
	h := s.hist
	var cum uint64
	for i, upper := range h.upper {
		cum += h.counts[i]
		b = appendSample(b, d.name, "_bucket", d.labels, s.labelValues, "le", formatFloat(upper))
		b = strconv.AppendUint(b, cum, 10)
		b = append(b, '\n')
	}
	cum += h.counts[len(h.upper)]
	b = appendSample(b, d.name, "_bucket", d.labels, s.labelValues, "le", "+Inf")
	b = strconv.AppendUint(b, cum, 10)
	b = append(b, '\n')
	b = appendSample(b, d.name, "_sum", d.labels, s.labelValues, "", "")
	b = appendFloat(b, h.sum)
	b = append(b, '\n')
	b = appendSample(b, d.name, "_count", d.labels, s.labelValues, "", "")
	b = strconv.AppendUint(b, cum, 10)
	b = append(b, '\n')
	return b
}

// appendSample writes `name{labels} ` (with the trailing space) with an
// optional extra label (le) last.
func appendSample(b []byte, name, suffix string, labels, values []string, extra, extraValue string) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if len(labels) == 0 && extra == "" {
		return append(b, ' ')
	}
	b = append(b, '{')
	for i, l := range labels {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, l...)
		b = append(b, `="`...)
		b = appendEscaped(b, values[i], true)
		b = append(b, '"')
	}
	if extra != "" {
		if len(labels) > 0 {
			b = append(b, ',')
		}
		b = append(b, extra...)
		b = append(b, `="`...)
		b = append(b, extraValue...)
		b = append(b, '"')
	}
	return append(b, "} "...)
}

// appendEscaped escapes a HELP text (backslash and newline) or a label value
// (backslash, newline and double quote), as the text format requires.
// Invalid UTF-8 is replaced by U+FFFD so that one bad label value cannot
// make the whole scrape unparseable.
func appendEscaped(b []byte, s string, quote bool) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

func formatFloat(f float64) string { return string(appendFloat(nil, f)) }

func validate(d *desc) error {
	if !validName(d.name, true) {
		return fmt.Errorf("metrics: %q is not a valid metric name", d.name)
	}
	seen := map[string]bool{}
	for _, l := range d.labels {
		if !validName(l, false) || strings.HasPrefix(l, "__") {
			return fmt.Errorf("metrics: %s: %q is not a valid label name", d.name, l)
		}
		if l == "le" && d.typ == "histogram" {
			return fmt.Errorf("metrics: %s: a histogram may not have a label named le", d.name)
		}
		if seen[l] {
			return fmt.Errorf("metrics: %s: label %q appears twice", d.name, l)
		}
		seen[l] = true
	}
	return nil
}

// validName reports whether s matches [a-zA-Z_:][a-zA-Z0-9_:]* (metric
// names) or [a-zA-Z_][a-zA-Z0-9_]* (label names, colon false).
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (colon && c == ':') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}
