package report_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

var benchRows = flag.Int("export-rows", 20000, "reservations in the book of BenchmarkProjector_Export (try 1000000)")

// closedHistory writes n reservations into one balance, perBatch to a lane
// revision: each revision opens a batch and settles the previous one, so
// that at most perBatch reservations are open at any point. Each carries
// metadata, as a real admit would.
func closedHistory(t testing.TB, n, perBatch int) *testenv.Env {
	env := testenv.New(t)
	bk := newBook(t, env)
	limit := strconv.Itoa(2 * perBatch)
	bk.define(acme.Budget(), limit)
	at := t0
	var prev []string
	for i := 0; i < n || len(prev) > 0; {
		var evs []events.Event
		var cur []string
		for j := 0; j < perBatch && i < n; j, i = j+1, i+1 {
			id := fmt.Sprintf("rsv_%08d", i)
			cur = append(cur, id)
			evs = append(evs, open(id, "1", at, time.Minute, map[string]string{"model": "gpt-4o", "user": "u-" + strconv.Itoa(i%100)}, acme)...)
		}
		for _, id := range prev {
			evs = append(evs, settle(id, "1", "0.5", at, false, false, acme)...)
		}
		bk.commit(evs...)
		prev = cur
		at = at.Add(time.Second)
	}
	return env
}

// heapSampler records the live heap every `every` rows.
type heapSampler struct {
	every, rows int
	gc          bool
	samples     []uint64
}

func (h *heapSampler) row() {
	h.rows++
	if h.rows%h.every != 0 {
		return
	}
	if h.gc {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.samples = append(h.samples, ms.HeapAlloc)
}

func (h *heapSampler) peak() uint64 {
	var p uint64
	for _, s := range h.samples {
		p = max(p, s)
	}
	return p
}

// The export's memory stays flat as rows grow: the live heap after 50,000
// rows (20,000 under the race detector) is within a few MB of the heap
// after 5,000. It can fail: an export
// that kept its rows (or a State that keeps every reservation, about 1 KB
// each) grows by tens of MB between the samples.
func TestExport_MemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 50,000 reservations")
	}
	n := 50000
	if exportRace {
		n = 20000
	}
	env := closedHistory(t, n, 10)
	p := projector.New(env.JS, env.Layout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := &heapSampler{every: 5000, gc: true}
	var rows int
	_, err := report.NewReader(env.JS, env.Layout, p).Rows(ctx, report.Filter{}, func(r *report.Row) error {
		rows++
		h.row()
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, n, rows)
	require.Len(t, h.samples, n/5000)
	require.GreaterOrEqual(t, len(h.samples), 4)
	// The samples wobble by a few MB (the embedded server's block cache,
	// the consumer's buffer): bound the peak loosely and the settled level
	// (the lowest of the last three samples) tightly. Keeping ~1 KB per
	// row would add ~44 MB to both.
	first := int64(h.samples[0])
	t.Logf("live heap every 5,000 rows (bytes): %v", h.samples)
	require.Less(t, int64(h.peak())-first, int64(12<<20), "peak live heap grew from row 5,000 to row %d: memory follows rows", n)
	last := slices.Min(h.samples[len(h.samples)-3:])
	require.Less(t, int64(last)-first, int64(1<<20), "live heap grew from row 5,000 to row %d: memory follows rows", n)

	// The CSV writer on top streams too. One export first warms the
	// embedded server's block cache (4 MB of buffers it keeps in a pool
	// once it has read the stream's blocks), which is not the export's.
	_, err = report.NewReader(env.JS, env.Layout, p).ExportCSV(ctx, io.Discard, report.Filter{})
	require.NoError(t, err)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	tot, err := report.NewReader(env.JS, env.Layout, p).ExportCSV(ctx, io.Discard, report.Filter{})
	require.NoError(t, err)
	require.Equal(t, int64(n), tot.Units[0].Rows)
	require.Equal(t, strconv.Itoa(n/2), tot.Units[0].Actual.String())
	runtime.GC()
	runtime.ReadMemStats(&ms)
	require.Less(t, int64(ms.HeapAlloc)-int64(before), int64(4<<20))
}

// BenchmarkProjector_Export measures export rows per second and the peak
// heap (sampled every 10,000 rows) over a book of -export-rows closed
// reservations. The process RSS includes the embedded NATS server that
// holds the stream, so it is reported apart as an upper bound.
func BenchmarkProjector_Export(b *testing.B) {
	env := closedHistory(b, *benchRows, 10)
	p := projector.New(env.JS, env.Layout)
	ctx := context.Background()
	for _, format := range []string{"csv", "jsonl"} {
		b.Run(format, func(b *testing.B) {
			runtime.GC()
			h := &heapSampler{every: 10000}
			w := rowCounter{h: h}
			start := time.Now()
			for i := 0; i < b.N; i++ {
				var err error
				if format == "csv" {
					_, err = report.NewReader(env.JS, env.Layout, p).ExportCSV(ctx, w, report.Filter{})
				} else {
					_, err = report.NewReader(env.JS, env.Layout, p).ExportJSONL(ctx, w, report.Filter{})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(*benchRows)/time.Since(start).Seconds(), "rows/s")
			b.ReportMetric(float64(h.peak())/(1<<20), "peak-heap-MB")
			if rss := peakRSS(); rss > 0 {
				b.ReportMetric(float64(rss)/(1<<20), "proc-peak-RSS-MB")
			}
		})
	}
}

// rowCounter discards output and samples the heap once per line written
// (a JSONL row; a CSV buffer flush, which is coarser but still periodic).
type rowCounter struct{ h *heapSampler }

func (w rowCounter) Write(p []byte) (int, error) {
	for range strings.Count(string(p), "\n") {
		w.h.row()
	}
	return len(p), nil
}

// peakRSS is the process's peak resident set (Linux VmHWM), or 0.
func peakRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
