package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// The memory check, profiles, and the ledger's commit timings.

// memResult is the mem check's report (one object of --json).
type memResult struct {
	Scenario    string  `json:"scenario"`
	Open        int64   `json:"open_reservations"`
	Budgets     int     `json:"budgets"`
	Errors      int64   `json:"errors"`
	OpenSeconds float64 `json:"open_seconds"`
	RSSBeforeMB float64 `json:"rss_before_mb"`
	RSSMB       float64 `json:"rss_mb"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
	HeapInuseMB float64 `json:"heap_inuse_mb"`
	LimitMB     int     `json:"limit_mb"`
	Over        bool    `json:"over_limit"`
	Note        string  `json:"note"`
}

// memCheck opens benchMemReservations reservations (never settled, TTL
// 24h) over benchSpreadBudgets fresh budgets with 64 callers, then reads
// this process's RSS and Go heap.
func (b *bencher) memCheck() (memResult, error) {
	res := memResult{Scenario: "mem", Budgets: benchSpreadBudgets, LimitMB: benchMemLimitMB}
	res.Note = "RSS of this process, which holds the embedded NATS server, the spendgate replica and the load driver"
	if b.o.NATSURL != "" {
		res.Note = "RSS of this process, the load driver only: the spendgate service runs elsewhere (--nats-url); measure its RSS there"
	}
	scopes := make([]string, benchSpreadBudgets)
	for i := range scopes {
		scopes[i] = "org:bench-" + b.run + "-mem-" + strconv.Itoa(i)
	}
	if err := b.defineBudgets(scopes, benchBigLimit); err != nil {
		return res, err
	}
	runtime.GC()
	res.RSSBeforeMB = rssMB()
	fmt.Fprintf(b.log, "mem: opening %d reservations over %d budgets\n", benchMemReservations, benchSpreadBudgets)
	const callers = 64
	var next, opened, failed atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	subj := b.layout.Endpoint(streams.EndpointAdmit)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := b.conns[b.connFor(c)]
			for b.ctx.Err() == nil && failed.Load() < 1000 {
				i := next.Add(1) - 1
				if i >= benchMemReservations {
					return
				}
				data, _ := json.Marshal(events.AdmitRequest{RequestID: fmt.Sprintf("%s-mem-%d", b.run, i), Scopes: []string{scopes[i%benchSpreadBudgets]}, Amount: benchAmount, TTL: benchMemTTL})
				msg, err := benchRequest(b.ctx, nc, subj, data)
				var ar events.AdmitReply
				if err == nil {
					err = json.Unmarshal(msg.Data, &ar)
				}
				if err != nil || !ar.Admitted {
					failed.Add(1)
					continue
				}
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	res.OpenSeconds = time.Since(t0).Seconds()
	res.Open, res.Errors = opened.Load(), failed.Load()
	if err := b.ctx.Err(); err != nil {
		return res, err
	}
	if res.Errors >= 1000 {
		return res, fmt.Errorf("%d admits failed; gave up", res.Errors)
	}
	runtime.GC()
	res.PeakRSSMB = rssMB()
	// "Held" is the steady state once the burst is over: the embedded
	// server's message-block caches expire after 10 s idle
	// (defaultCacheBufferExpiration), and the Go runtime returns freed
	// pages to the OS. Waiting for that is the measurement, not a
	// synchronization.
	select {
	case <-time.After(benchMemSettle):
	case <-b.ctx.Done():
		return res, b.ctx.Err()
	}
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInuseMB = float64(ms.HeapInuse) / (1 << 20)
	res.RSSMB = rssMB()
	res.Over = res.RSSMB > benchMemLimitMB
	return res, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// rssMB reads this process's VmRSS in MB (0 where there is none).
func rssMB() float64 { return float64(procStatusBytes(0, "VmRSS")) / (1 << 20) }

// writeProfile writes the runtime profile name (block, mutex) to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// commitTimes describes the commit path between two Stats of a run of d:
// time per commit, the part of it spent waiting for the write's ack, and
// how busy the commit path was (attempt time over d, per lane summed).
func commitTimes(st0, st ledger.Stats, d time.Duration) string {
	commits := max(st.Commits-st0.Commits, 1)
	at, wt := st.AttemptTime-st0.AttemptTime, st.WriteTime-st0.WriteTime
	return fmt.Sprintf("%s per commit, %s of it the write; commit path busy %.0f%%",
		(at / time.Duration(commits)).Round(time.Microsecond), (wt / time.Duration(commits)).Round(time.Microsecond), 100*at.Seconds()/d.Seconds())
}
