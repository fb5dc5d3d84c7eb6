package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// The history scenario (spendgate bench --scenarios history) measures what
// a long history costs: it writes N reservations (admitted and settled)
// straight to a ledger stream, through the ledger's own encoder and chain,
// in the shape of group commits, and then times restarts, the audit and
// expiry against it. Constants name its shape.
const (
	// HistoryDefault is the default history size (--history).
	HistoryDefault = 1_000_000
	// historyBudgets is the number of budgets (one balance each) the
	// history spreads over.
	historyBudgets = 256
	// historyGroup is the number of reservations one lane revision opens
	// (and, in the balance's next revision, settles): a group commit.
	historyGroup = 16
	// historyRetention is the replicas' idempotency window in the run: the
	// history is written in seconds, so the window is set short for it to
	// be mostly older than the window.
	historyRetention = time.Second
	// historyInWindow is the number of request ids of the run that
	// measures restart time inside the window.
	historyInWindow = 250_000
	// historyExpiries is the number of reservations the expiry run
	// releases.
	historyExpiries = 100_000
	// historyTimeout bounds every step.
	historyTimeout = 30 * time.Minute
)

// historyResult is one measured figure of the history scenario.
type historyResult struct {
	what, value, compare string
}

// runHistory runs the history scenario against its own embedded server
// and prints its table.
func runHistory(ctx context.Context, o config, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	n := o.History
	dir, err := os.MkdirTemp("", "spendgate-history-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(dir, embedded.WithServerName("spendgate-history"))
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect(nats.Name("spendgate-history"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "history: "+format+"\n", args...) }
	var rows []historyResult
	add := func(what, value, compare string) { rows = append(rows, historyResult{what, value, compare}) }

	main, err := historyLayout(ctx, js, o.Lanes, "spendgate")
	if err != nil {
		return err
	}
	logf("writing %d reservations (%d budgets, %d per lane revision)", n, historyBudgets, historyGroup)
	start := time.Now()
	g, err := newHistoryGen(ctx, srv, js, main, historyBudgets)
	if err != nil {
		return err
	}
	if err := g.write(ctx, n, true, time.Now().Add(-time.Hour)); err != nil {
		return err
	}
	logf("wrote %d reservations in %s", n, time.Since(start).Round(time.Millisecond))
	info, err := js.Stream(ctx, main.StreamName())
	if err != nil {
		return err
	}
	disk := blockBytes(dir, main.StreamName())
	add("disk bytes per reservation (admit + settle)", fmt.Sprintf("%.0f", float64(disk)/float64(n)),
		fmt.Sprintf("%.0f in the stream (uncompressed: streams.Compression); %d reservations per lane revision", float64(info.CachedInfo().State.Bytes)/float64(n), historyGroup))

	lopts := []ledger.Option{ledger.WithRetention(historyRetention, historyRetention), ledger.WithSnapshotEvery(0, 0)}
	whole, _, err := restartToAdmit(ctx, srv, main, append(lopts, ledger.WithSnapshotLoad(false)), true)
	if err != nil {
		return fmt.Errorf("restart, whole fold: %w", err)
	}
	logf("restart folding the whole stream: %s", whole.Round(time.Millisecond))
	fromSnap, heap, err := medianRestart(ctx, srv, main, lopts)
	if err != nil {
		return fmt.Errorf("restart from the snapshot: %w", err)
	}
	add(fmt.Sprintf("restart to first admit, %s reservations of history (median of %d)", count(n), historyRestarts), fmtDur(fromSnap), "whole fold: "+fmtDur(whole))

	// A replica that started on an empty history with the same budgets
	// and open reservations.
	base, err := historyLayout(ctx, js, o.Lanes, "spendgate_base")
	if err != nil {
		return err
	}
	bg, err := newHistoryGen(ctx, srv, js, base, historyBudgets)
	if err != nil {
		return err
	}
	if err := bg.write(ctx, g.openCount(), false, time.Now()); err != nil {
		return err
	}
	_, baseHeap, err := medianRestart(ctx, srv, base, append(lopts, ledger.WithSnapshotLoad(false)))
	if err != nil {
		return fmt.Errorf("restart, empty history: %w", err)
	}
	add(fmt.Sprintf("replica heap after start (from the snapshot; median of %d)", historyRestarts), fmtMB(heap),
		fmt.Sprintf("%s for a replica on an empty history with the same %d budgets and %d open reservations (%.1fx)", fmtMB(baseHeap), historyBudgets, g.openCount(), float64(heap)/float64(max(baseHeap, 1))))

	auditWin := []string{"--window", "2s", "--expired-window", "2s"}
	d, rss, how, err := runAudit(ctx, o, srv, js, main, auditWin)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	dt, rsst, _, err := runAudit(ctx, o, srv, js, main, append(auditWin, "--from-snapshot"))
	if err != nil {
		return fmt.Errorf("audit --from-snapshot: %w", err)
	}
	add(fmt.Sprintf("audit check, %s reservations", count(n)), fmt.Sprintf("%s, %s %s", fmtDur(d), fmtMB(rss), how),
		fmt.Sprintf("--from-snapshot (tail only): %s, %s", fmtDur(dt), fmtMB(rsst)))

	exp, err := expiry(ctx, srv, js, o.Lanes)
	if err != nil {
		return fmt.Errorf("expiry: %w", err)
	}
	add(fmt.Sprintf("expiry of %s reservations due at once", count(historyExpiries)), fmtDur(exp), "one replica, default sweep interval")

	win, err := historyLayout(ctx, js, o.Lanes, "spendgate_window")
	if err != nil {
		return err
	}
	wg, err := newHistoryGen(ctx, srv, js, win, historyBudgets)
	if err != nil {
		return err
	}
	if err := wg.write(ctx, historyInWindow, true, time.Now()); err != nil {
		return err
	}
	wopts := []ledger.Option{ledger.WithRetention(time.Hour, time.Hour), ledger.WithSnapshotEvery(0, 0)}
	if _, _, err := restartToAdmit(ctx, srv, win, append(wopts, ledger.WithSnapshotLoad(false)), true); err != nil {
		return err
	}
	inWin, winHeap, err := restartToAdmit(ctx, srv, win, wopts, false)
	if err != nil {
		return err
	}
	perM := time.Duration(float64(inWin) * 1e6 / historyInWindow)
	add("restart time per million request ids inside the window", fmtDur(perM),
		fmt.Sprintf("measured with %s closed reservations in a 1 h window: %s, replica heap %s", count(historyInWindow), fmtDur(inWin), fmtMB(winHeap)))

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "history: %s reservations, %d budgets, %d lane(s), idempotency window %s\n", count(n), historyBudgets, main.Lanes(), historyRetention)
	fmt.Fprintln(tw, "measure\tvalue\tfor comparison")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.what, r.value, r.compare)
	}
	return tw.Flush()
}

func historyLayout(ctx context.Context, js jetstream.JetStream, lanes int, bucket string) (streams.Layout, error) {
	layout, err := streams.New(streams.Config{Bucket: bucket, Lanes: lanes})
	if err != nil {
		return layout, err
	}
	_, err = streams.Ensure(ctx, js, layout)
	return layout, err
}

// historyRestarts is how many restarts medianRestart takes the median
// of: a replica's heap of a few MB moves by as much with the GC's timing
// of the embedded server's buffers in the same process.
const historyRestarts = 3

// medianRestart is restartToAdmit (without a snapshot) historyRestarts
// times: the median time and the median heap.
func medianRestart(ctx context.Context, srv *embedded.Server, layout streams.Layout, opts []ledger.Option) (time.Duration, uint64, error) {
	var took []time.Duration
	var heaps []uint64
	for range historyRestarts {
		d, h, err := restartToAdmit(ctx, srv, layout, opts, false)
		if err != nil {
			return 0, 0, err
		}
		took, heaps = append(took, d), append(heaps, h)
	}
	slices.Sort(took)
	slices.Sort(heaps)
	return took[len(took)/2], heaps[len(heaps)/2], nil
}

// restartToAdmit starts a ledger replica on layout with opts and returns
// the time from its start to its first admit and the heap it added (after
// a GC); with snapshot it then writes a snapshot. The replica is stopped
// before it returns.
func restartToAdmit(ctx context.Context, srv *embedded.Server, layout streams.Layout, opts []ledger.Option, snapshot bool) (time.Duration, uint64, error) {
	nc, err := srv.Connect(nats.Name("spendgate-history-replica"))
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	l, err := ledger.New(ctx, nc, js, layout, opts...)
	if err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(rctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	defer stop()
	select {
	case <-l.Ready():
	case err := <-done:
		stopped = true
		return 0, 0, fmt.Errorf("ledger stopped: %w", err)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	a, err := admit.New(l)
	if err != nil {
		return 0, 0, err
	}
	rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: uuid.NewString(), Scopes: []string{historyScope(0)}, Amount: "0.01"})
	if err != nil {
		return 0, 0, err
	}
	if !rep.Admitted {
		return 0, 0, fmt.Errorf("first admit denied: %+v", rep.Denial)
	}
	took := time.Since(start)
	if snapshot {
		if _, err := l.Snapshot(ctx); err != nil {
			return 0, 0, err
		}
	}
	// The replica's heap: what a GC frees once it is stopped and gone
	// (the embedded server shares this process; its caches do not move
	// in between).
	live := heapAfterGC()
	stop()
	runtime.KeepAlive(a)
	l, a = nil, nil
	gone := heapAfterGC()
	var held uint64
	if live > gone {
		held = live - gone
	}
	return took, held, nil
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// runAudit runs audit check with args over layout: as a child process of
// the spendgate binary (o.Self) when there is one, so that its peak RSS
// is its own, else in this process (then the figure is the peak heap
// growth). It fails if the audit finds a problem.
func runAudit(ctx context.Context, o config, srv *embedded.Server, js jetstream.JetStream, layout streams.Layout, args []string) (time.Duration, uint64, string, error) {
	if o.Self != "" {
		cmd := exec.CommandContext(ctx, o.Self, append([]string{"audit", "check", "--nats-url", srv.ClientURL(), "--bucket", layout.Bucket()}, args...)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return 0, 0, "", err
		}
		// The child's peak RSS (VmHWM, reset by its exec) read until it
		// exits; rusage's maxrss would count this process's pages, shared
		// with the child before its exec.
		var peak atomic.Uint64
		quit := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				if hwm := procHWM(cmd.Process.Pid); hwm > peak.Load() {
					peak.Store(hwm)
				}
				select {
				case <-quit:
					return
				case <-t.C:
				}
			}
		}()
		err := cmd.Wait()
		took := time.Since(start)
		close(quit)
		wg.Wait()
		if err != nil {
			return 0, 0, "", fmt.Errorf("%w: %s", err, out.String())
		}
		return took, peak.Load(), "peak RSS", nil
	}
	opts := []projector.CheckOption{projector.WithWindow(2*time.Second, 2*time.Second)}
	for _, a := range args {
		if a == "--from-snapshot" {
			opts = append(opts, projector.WithFromSnapshot())
		}
	}
	before := heapAfterGC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	rep, err := projector.Check(ctx, js, layout, opts...)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		return 0, 0, "", err
	}
	if !rep.OK() {
		return 0, 0, "", errors.New(rep.String())
	}
	var grew uint64
	if p := peak.Load(); p > before {
		grew = p - before
	}
	return took, grew, "peak heap growth (in process)", nil
}

// expiry writes historyExpiries open reservations already expired, starts
// a replica with its sweeper at default settings and returns the time
// until none is left to expire.
func expiry(ctx context.Context, srv *embedded.Server, js jetstream.JetStream, lanes int) (time.Duration, error) {
	layout, err := historyLayout(ctx, js, lanes, "spendgate_expiry")
	if err != nil {
		return 0, err
	}
	g, err := newHistoryGen(ctx, srv, js, layout, historyBudgets)
	if err != nil {
		return 0, err
	}
	due := time.Now().Add(-time.Hour)
	if err := g.write(ctx, historyExpiries, false, due); err != nil {
		return 0, err
	}
	nc, err := srv.Connect(nats.Name("spendgate-history-sweeper"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	rjs, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	r, err := replica.Start(ctx, nc, rjs, replica.Config{Layout: layout, ReadyTimeout: historyTimeout,
		LedgerOptions: []ledger.Option{ledger.WithSnapshotEvery(0, 0)}})
	if err != nil {
		return 0, err
	}
	defer r.Stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for len(r.Ledger.Expired(time.Now(), 1)) > 0 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-r.Failed():
			return 0, r.Err()
		case <-t.C:
		}
	}
	return time.Since(start), nil
}

// historyGen writes reservations straight to a ledger stream.
type historyGen struct {
	js     jetstream.JetStream
	layout streams.Layout
	bals   []*genBalance
}

type genBalance struct {
	ref                     events.BalanceRef
	lane                    string
	spent, reserved, amount events.Money
	open                    []events.ReservationOpened
}

// genLane is what the chain needs of one lane: its last revision.
type genLane struct {
	mu   sync.Mutex
	seq  uint64
	hash string
}

func historyScope(i int) string { return fmt.Sprintf("org:hist%d", i) }

// newHistoryGen defines the budgets through a ledger replica (the way an
// operator does) and returns a generator for their balances.
func newHistoryGen(ctx context.Context, srv *embedded.Server, js jetstream.JetStream, layout streams.Layout, budgets int) (*historyGen, error) {
	nc, err := srv.Connect(nats.Name("spendgate-history-budgets"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ljs, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	l, err := ledger.New(ctx, nc, ljs, layout, ledger.WithSnapshotEvery(0, 0))
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(rctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-l.Ready():
	case err := <-done:
		return nil, err
	}
	g := &historyGen{js: js, layout: layout}
	now := time.Now()
	for i := 0; i < budgets; i++ {
		ref := events.BudgetRef{Scope: events.Scope(historyScope(i)), Period: events.PeriodMonth}
		b, err := l.PutBudget(ctx, ref, events.MustMoney(benchBigLimit), "USD", now)
		if err != nil {
			return nil, err
		}
		bal := b.Balance(now)
		g.bals = append(g.bals, &genBalance{ref: bal, lane: layout.LaneKey(bal), amount: events.MustMoney("0.25")})
	}
	return g, nil
}

func (g *historyGen) openCount() int {
	n := 0
	for _, b := range g.bals {
		n += len(b.open)
	}
	return n
}

// write writes n reservations, historyGroup per lane revision, spread
// over the balances: each revision of a balance settles the group the
// previous one opened (when settle) and opens the next. Event times start
// at t0, a millisecond apart; each reservation expires a minute after it
// opened. Lanes are written concurrently, each in chain order.
func (g *historyGen) write(ctx context.Context, n int, settle bool, t0 time.Time) error {
	lanes := map[string]*genLane{}
	byLane := map[string][]*genBalance{}
	for _, b := range g.bals {
		if lanes[b.lane] == nil {
			st, err := laneHead(ctx, g.js, g.layout, b.lane)
			if err != nil {
				return err
			}
			lanes[b.lane] = st
		}
		byLane[b.lane] = append(byLane[b.lane], b)
	}
	var next atomic.Int64
	errs := make(chan error, len(byLane))
	var wg sync.WaitGroup
	for lane, bals := range byLane {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := int(next.Add(historyGroup)) - historyGroup
				if k >= n {
					errs <- nil
					return
				}
				b := bals[i%len(bals)]
				if err := g.revision(ctx, lanes[lane], b, min(historyGroup, n-k), settle, t0.Add(time.Duration(k)*time.Millisecond)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// laneHead reads a lane key's last revision (none yet: zero).
func laneHead(ctx context.Context, js jetstream.JetStream, layout streams.Layout, lane string) (*genLane, error) {
	s, err := js.Stream(ctx, layout.StreamName())
	if err != nil {
		return nil, err
	}
	m, err := s.GetLastMsgForSubject(ctx, layout.Subject(lane))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return &genLane{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &genLane{seq: m.Sequence, hash: events.HashPayload(m.Data)}, nil
}

// revision writes one lane revision of balance b: settle its open group
// (if settle), open k new reservations.
func (g *historyGen) revision(ctx context.Context, lane *genLane, b *genBalance, k int, settle bool, at time.Time) error {
	lane.mu.Lock()
	defer lane.mu.Unlock()
	var evs events.Events
	if settle {
		for _, o := range b.open {
			evs = append(evs, events.ReservationSettled{ReservationID: o.ReservationID, Balance: b.ref, Reserved: o.Amount,
				Actual: events.MustMoney("0.2"), Overrun: events.Zero, At: at})
			b.spent = b.spent.Add(events.MustMoney("0.2"))
			b.reserved = b.reserved.Sub(o.Amount)
		}
		b.open = b.open[:0]
	}
	for j := 0; j < k; j++ {
		var h [16]byte
		_, _ = rand.Read(h[:])
		o := events.ReservationOpened{ReservationID: "rsv_" + uuid.Must(uuid.NewV7()).String(), RequestID: uuid.NewString(),
			RequestHash: hex.EncodeToString(h[:]), Balance: b.ref, Amount: b.amount, Unit: "USD",
			Balances: []events.BalanceRef{b.ref}, ExpiresAt: at.Add(time.Minute), At: at}
		evs = append(evs, o)
		b.open = append(b.open, o)
		b.reserved = b.reserved.Add(b.amount)
	}
	rev := events.LaneRevision{Schema: events.SchemaLane, Chain: events.Chain{Prev: lane.seq, PrevHash: lane.hash},
		Balances: []events.BalanceRevision{{Schema: events.SchemaBalance, Balance: b.ref, Unit: "USD",
			Limit: events.MustMoney(benchBigLimit), Spent: b.spent, Reserved: b.reserved, Overrun: events.Zero,
			Open: int64(len(b.open)), Events: evs}}}
	data, err := codec.AppendLane(nil, &rev)
	if err != nil {
		return err
	}
	ack, err := g.js.Publish(ctx, g.layout.Subject(b.lane), data, jetstream.WithExpectLastSequencePerSubject(lane.seq))
	if err != nil {
		return fmt.Errorf("write %s after %d: %w", b.lane, lane.seq, err)
	}
	lane.seq, lane.hash = ack.Sequence, events.HashPayload(data)
	return nil
}

// blockBytes sums the message block files of stream name under dir.
func blockBytes(dir, name string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, string(filepath.Separator)+name+string(filepath.Separator)) && strings.HasSuffix(p, ".blk") {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func fmtMB(b uint64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
