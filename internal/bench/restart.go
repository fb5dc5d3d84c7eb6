package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// The restart scenario (spendgate bench --scenarios restart) measures what
// a restart costs after a history written the way callers write it: 64
// callers through the Go client (group-committed by the replica), admit
// and settle on one hot budget (--restart-shape hot) or as an LLM gateway
// does (gateway: restart_shape.go), against a replica that is a child process
// of the spendgate binary (`spendgate serve --nats-url`), so its time to
// the first admit includes the exec and its resident memory is its own.
// Then the replica is killed (SIGKILL) and restarted, stopped gracefully
// (SIGTERM: it writes a snapshot on stop) and restarted, and, for
// comparison, restarted with every snapshot deleted (a whole fold).
// Constants name its shape and targets.
const (
	// RestartDefault is the default history size (--restart-reservations).
	RestartDefault = 1_000_000
	// restartCallers write the history, as fast as they go.
	restartCallers = 64
	// restartScope is the hot budget every reservation is made on.
	restartScope = "org:restart-hot"
	// restartKillTarget and restartStopTarget: time to the first admit
	// after a SIGKILL and after a graceful stop.
	restartKillTarget = 5 * time.Second
	restartStopTarget = 2 * time.Second
	// restartTry bounds one try of the first admit; a try that times out
	// or finds no responder is sent again (same request id) after
	// restartPoll.
	restartTry  = 250 * time.Millisecond
	restartPoll = 2 * time.Millisecond
	// restartReadyBound bounds a replica's start to its first admit, and
	// is its --ready-timeout (a whole fold of a long history is slow).
	restartReadyBound = 10 * time.Minute
	// restartStopBound bounds a graceful stop (its final snapshot is
	// bounded by service.FinalSnapshotTimeout).
	restartStopBound = 2 * time.Minute
	// restartTimeout bounds the whole scenario.
	restartTimeout = 2 * time.Hour
	// restartProgress is how often the write is reported on stderr.
	restartProgress = 10 * time.Second
	// restartMaxErrors failed cycles stop the write.
	restartMaxErrors = 1000
)

// restartRow is one line of the restart table.
type restartRow struct{ what, value, target, met, detail string }

// restartRun is the scenario's state: its server, its replica's data dir
// and the connection it probes with.
type restartRun struct {
	o      config
	dir    string
	url    string
	layout streams.Layout
	nc     *nats.Conn
	logf   func(format string, args ...any)
	starts int
	// gw is the gateway shape's scopes (nil: the hot shape).
	gw *gatewayShape
	// closes[s] counts the reservations settled in second s of the write
	// (from writeStart): what the idempotency window holds at a restart is
	// computed from them.
	writeStart time.Time
	closes     []int64
}

// restartMeasure is one start of the replica, to its first admit.
type restartMeasure struct {
	took     time.Duration
	rss, hwm uint64
	// From the replica's log: the snapshot it loaded (0: none) and what
	// it folded after it.
	snapSeq, snapBytes, folded uint64
	snapTook                   time.Duration
	window                     int64 // closed reservations remembered
}

// runRestart runs the restart scenario against its own embedded server
// and prints its table.
func runRestart(ctx context.Context, o config, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	dir, err := o.RestartKeep, error(nil)
	if dir != "" {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("--restart-keep: %w", err)
		}
	} else {
		if dir, err = os.MkdirTemp("", "spendgate-restart-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	srv, err := embedded.Start(filepath.Join(dir, "nats"), embedded.WithServerName("spendgate-restart"), embedded.WithSyncAlways(o.SyncAlways))
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	layout, err := streams.New(streams.Config{Lanes: o.Lanes})
	if err != nil {
		return err
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("spendgate-restart-probe"))
	if err != nil {
		return err
	}
	defer nc.Close()
	r := newRestartRun(o, nc, layout, func(format string, args ...any) { fmt.Fprintf(stderr, "restart: "+format+"\n", args...) })
	r.dir, r.url = dir, srv.ClientURL()
	rows, runErr := r.run(ctx)
	if rows == nil {
		return runErr
	}
	n := o.RestartReservations
	syncDesc := "sync=interval (server default, 2m)"
	if o.SyncAlways {
		syncDesc = "sync=always (fsync every write)"
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "restart (--restart-shape %s): %s reservations %s by %d callers through the Go client (%d connections), then restarts of the replica\n",
		o.RestartShape, count(n), r.shapeDesc(), restartCallers, o.Conns)
	fmt.Fprintf(tw, "  NATS: embedded in the bench process, file storage, %s; replica: a child process, %s serve --nats-url URL --data-dir DIR %s\n",
		syncDesc, filepath.Base(o.Self), strings.Join(r.replicaFlags(), " "))
	fmt.Fprintln(tw, "measure\tvalue\ttarget\tmet\tdetail")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.what, row.value, row.target, row.met, row.detail)
	}
	if err := tw.Flush(); err != nil {
		return errors.Join(runErr, err)
	}
	_, err = fmt.Fprintf(stdout, `time to first admit: from just before the replica's exec to the first admit%s answered "admitted" (tries of %s, again at once on no responders or a timeout).
RSS: the replica's VmRSS right after that admit; peak: its VmHWM. window: closed reservations the replica remembers for replays
  (settled within the ledger's %s retention before the restart, counted from the run's settles).
`, r.probeDesc(), restartTry, ledger.DefaultRetention)
	return errors.Join(runErr, err)
}

// newRestartRun is a run of shape o.RestartShape probing over nc.
func newRestartRun(o config, nc *nats.Conn, layout streams.Layout, logf func(format string, args ...any)) *restartRun {
	r := &restartRun{o: o, layout: layout, nc: nc, logf: logf}
	if o.RestartShape == RestartShapeGateway {
		r.gw = newGatewayShape()
	}
	return r
}

// shapeDesc says, in the table's title, how the reservations were made.
func (r *restartRun) shapeDesc() string {
	if r.gw == nil {
		return "(admit + settle) on one budget"
	}
	return fmt.Sprintf("(admit priced from %s on 3 scopes: %s + 1 of %d teams + 1 of %d users, metadata model and feature; settle from usage)",
		restartModel, restartOrg, restartTeams, restartUsers)
}

// probeDesc says, under the table, what the first admit after a start is.
func (r *restartRun) probeDesc() string {
	if r.gw == nil {
		return ""
	}
	return " (priced, on the org, a team and a user)"
}

// replicaFlags are the flags the replica runs with besides --nats-url
// and --data-dir.
func (r *restartRun) replicaFlags() []string {
	return []string{"--replicas", "1", "--lanes", strconv.Itoa(r.o.Lanes), "--ready-timeout", restartReadyBound.String(), "--log-format", "json"}
}

// startReplica starts a replica process on the scenario's data dir.
func (r *restartRun) startReplica() (*child, error) {
	r.starts++
	args := append([]string{"serve", "--nats-url", r.url, "--data-dir", filepath.Join(r.dir, "replica")}, r.replicaFlags()...)
	return startChild(r.o.Self, filepath.Join(r.dir, fmt.Sprintf("replica-%d.log", r.starts)), args...)
}

func (r *restartRun) run(ctx context.Context) ([]restartRow, error) {
	var rows []restartRow
	add := func(what, value, target, met, detail string) {
		rows = append(rows, restartRow{what, value, target, met, detail})
	}
	n := r.o.RestartReservations

	// First start, on an empty ledger: the budget, then the baseline RSS.
	t0 := time.Now()
	rep, err := r.startReplica()
	if err != nil {
		return nil, err
	}
	defer func() { // the replica of the moment, if any: none outlives the run
		if rep != nil {
			_, _ = rep.stop(syscall.SIGKILL, restartStopBound)
		}
	}()
	var clients []*client.Client
	for i := 0; i < r.o.Conns; i++ {
		cnc, err := nats.Connect(r.url, nats.Name(fmt.Sprintf("spendgate-restart-client-%d", i)))
		if err != nil {
			return nil, err
		}
		defer cnc.Close()
		cl, err := client.New(cnc, client.WithTimeout(benchRequestTimeout), client.WithRetries(1))
		if err != nil {
			return nil, err
		}
		clients = append(clients, cl)
	}
	if err := r.prepare(ctx, rep, clients[0]); err != nil {
		return nil, err
	}
	first, err := r.toFirstAdmit(ctx, rep, t0)
	if err != nil {
		return nil, fmt.Errorf("first start: %w", err)
	}
	r.logf("first start on an empty ledger: first admit after %s, RSS %s", fmtDur(first.took), fmtMB(first.rss))

	// The history.
	r.logf("writing %d reservations with %d callers", n, restartCallers)
	cpu0, bcpu0 := procCPU(rep.pid()), processCPU()
	w := r.write(ctx, clients, n)
	cpu, bcpu := procCPU(rep.pid())-cpu0, processCPU()-bcpu0
	if w.err != nil {
		return nil, w.err
	}
	rate := float64(n) / w.elapsed.Seconds()
	written := "history written (admit + settle, hot budget)"
	if r.gw != nil {
		written = "history written (priced admit on 3 scopes + settle from usage)"
	}
	add(written, fmt.Sprintf("%.0f reservations/s", rate), "-", "-",
		fmt.Sprintf("%s in %s by %d callers", count(n), fmtDur(w.elapsed), restartCallers))
	add("  replica CPU per reservation (child: utime+stime)", fmtMicros(cpu, n), "-", "-", "the replica process alone")
	add("  bench process CPU per reservation", fmtMicros(bcpu, n), "-", "-", "embedded NATS server + the 64 callers and their Go clients")
	st, err := r.streamState(ctx)
	if err != nil {
		return nil, err
	}
	add("ledger stream", fmt.Sprintf("%d messages", st.Msgs), "-", "-",
		fmt.Sprintf("last seq %d, %.1f reservations per message, %s", st.LastSeq, float64(n)/float64(max(st.Msgs, 1)), fmtMB(st.Bytes)))
	snaps, err := r.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	add("snapshots before the SIGKILL", strconv.Itoa(len(snaps)), "-", "-", describeSnapshots(snaps, st.LastSeq))

	// SIGKILL, restart.
	if _, err := rep.stop(syscall.SIGKILL, restartStopBound); err == nil || !strings.Contains(err.Error(), "killed") {
		return nil, fmt.Errorf("SIGKILL of the replica: %v", err)
	}
	rep, kill, err := r.restart(ctx, "after SIGKILL")
	if err != nil {
		return nil, err
	}
	add("SIGKILL, restart: time to first admit", fmtDur(kill.took), "< "+fmtDur(restartKillTarget), metStr(kill.took < restartKillTarget), kill.describe())
	add("  replica RSS after it (peak)", fmtMB(kill.rss), "-", "-", "peak "+fmtMB(kill.hwm)+"; "+r.perReservation(kill, first))

	// SIGTERM, restart.
	stopTook, err := rep.stop(syscall.SIGTERM, restartStopBound)
	if err != nil {
		return nil, fmt.Errorf("graceful stop: %w\n%s", err, rep.logTail(2000))
	}
	if snaps, err = r.snapshots(ctx); err != nil {
		return nil, err
	}
	if st, err = r.streamState(ctx); err != nil {
		return nil, err
	}
	add("SIGTERM: graceful stop took", fmtDur(stopTook), "-", "-", fmt.Sprintf("%d snapshot(s) after it: %s; %s", len(snaps), describeSnapshots(snaps, st.LastSeq), stopSnapshotLocked(rep.logPath)))
	rep, term, err := r.restart(ctx, "after SIGTERM")
	if err != nil {
		return nil, err
	}
	add("SIGTERM, restart: time to first admit", fmtDur(term.took), "< "+fmtDur(restartStopTarget), metStr(term.took < restartStopTarget), term.describe())
	add("  replica RSS after it (peak)", fmtMB(term.rss), "-", "-", "peak "+fmtMB(term.hwm)+"; "+r.perReservation(term, first))

	// For comparison: no snapshot to load. serve has no flag to skip
	// loading one, so they are deleted (after a graceful stop, which
	// writes one more).
	if _, err := rep.stop(syscall.SIGTERM, restartStopBound); err != nil {
		return nil, fmt.Errorf("graceful stop: %w\n%s", err, rep.logTail(2000))
	}
	deleted, err := r.deleteSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	rep, whole, err := r.restart(ctx, "without snapshots")
	if err != nil {
		return nil, err
	}
	add("for comparison: SIGTERM, snapshots deleted, restart", fmtDur(whole.took), "-", "-",
		fmt.Sprintf("%d snapshot(s) deleted: %s; RSS %s, peak %s", deleted, whole.describe(), fmtMB(whole.rss), fmtMB(whole.hwm)))
	put := "put the budget"
	if r.gw != nil {
		put = fmt.Sprintf("put the price and %d budgets", len(r.gw.budgets()))
	}
	add("first start on the empty ledger (reference)", fmtDur(first.took), "-", "-", fmt.Sprintf("%s, then the first admit; RSS %s, peak %s", put, fmtMB(first.rss), fmtMB(first.hwm)))
	if _, err := rep.stop(syscall.SIGTERM, restartStopBound); err != nil {
		return nil, fmt.Errorf("last stop: %w\n%s", err, rep.logTail(2000))
	}
	if w.errors > 0 {
		return rows, fmt.Errorf("%w: restart: %d cycles failed (first: %s)", ErrRequests, w.errors, w.firstErr)
	}
	return rows, nil
}

// restart starts a replica and measures it to its first admit; what
// names the restart in its log line and errors.
func (r *restartRun) restart(ctx context.Context, what string) (*child, restartMeasure, error) {
	t0 := time.Now()
	rep, err := r.startReplica()
	if err != nil {
		return nil, restartMeasure{}, err
	}
	m, err := r.toFirstAdmit(ctx, rep, t0)
	if err != nil {
		_, _ = rep.stop(syscall.SIGKILL, restartStopBound)
		return nil, restartMeasure{}, fmt.Errorf("restart %s: %w", what, err)
	}
	r.logf("restart %s: first admit after %s", what, fmtDur(m.took))
	return rep, m, nil
}

// prepare defines what the shape's reservations are made on, its first
// request tried until the first replica answers: the hot budget, or the
// gateway shape's price, then its budgets. rep is nil for a replica that is
// not a child of the run (a test's).
func (r *restartRun) prepare(ctx context.Context, rep *child, cl *client.Client) error {
	if r.gw == nil {
		return r.untilAnswered(ctx, rep, "budget put", func(ctx context.Context) error {
			_, err := cl.PutBudget(ctx, events.BudgetPutRequest{Scope: restartScope, Period: string(events.PeriodMonth), Limit: benchBigLimit, Unit: "USD"})
			return err
		})
	}
	if err := r.untilAnswered(ctx, rep, "pricing put", func(ctx context.Context) error {
		_, err := cl.PutPrice(ctx, gatewayPrice())
		return err
	}); err != nil {
		return err
	}
	for _, b := range r.gw.budgets() {
		if _, err := cl.PutBudget(ctx, b); err != nil {
			return fmt.Errorf("budget put %s: %w", b.Scope, err)
		}
	}
	return nil
}

// untilAnswered makes a request with tries of restartTry until the
// replica answers it.
func (r *restartRun) untilAnswered(ctx context.Context, rep *child, what string, req func(context.Context) error) error {
	deadline := time.Now().Add(restartReadyBound)
	for {
		tctx, cancel := context.WithTimeout(ctx, restartTry)
		err := req(tctx)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := r.waitRetry(ctx, rep, deadline); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
}

// waitRetry pauses restartPoll before another try; it fails if the
// replica exited (rep nil: not a child of the run), ctx ended or the
// deadline passed.
func (r *restartRun) waitRetry(ctx context.Context, rep *child, deadline time.Time) error {
	var done <-chan struct{}
	if rep != nil {
		done = rep.done
	}
	if time.Now().After(deadline) {
		tail := ""
		if rep != nil {
			tail = "\n" + rep.logTail(2000)
		}
		return fmt.Errorf("the replica did not answer within %s%s", restartReadyBound, tail)
	}
	select {
	case <-done:
		return fmt.Errorf("the replica exited: %v\n%s", rep.exitErr(), rep.logTail(2000))
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(restartPoll):
		return nil
	}
}

// toFirstAdmit admits as the shape does (on the hot budget, or reservation
// 0 of the gateway shape, priced), trying until it is answered
// "admitted", and returns the time since t0 (taken before the replica's
// exec) and the replica's memory and log facts at that instant.
func (r *restartRun) toFirstAdmit(ctx context.Context, rep *child, t0 time.Time) (restartMeasure, error) {
	req := events.AdmitRequest{RequestID: uuid.NewString(), Scopes: []string{restartScope}, Amount: benchAmount}
	if r.gw != nil {
		req = r.gw.call(0).admit()
		req.RequestID = uuid.NewString()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return restartMeasure{}, err
	}
	subject := r.layout.Endpoint(streams.EndpointAdmit)
	deadline := t0.Add(restartReadyBound)
	for {
		tctx, cancel := context.WithTimeout(ctx, restartTry)
		msg, err := r.nc.RequestWithContext(tctx, subject, data)
		cancel()
		if err == nil {
			admitted, retry, aerr := admitAnswer(msg)
			if aerr != nil {
				return restartMeasure{}, aerr
			}
			if admitted {
				m := restartMeasure{took: time.Since(t0), rss: procStatusBytes(rep.pid(), "VmRSS"), hwm: procHWM(rep.pid())}
				m.window = r.windowAt(time.Now())
				m.readLog(rep.logPath)
				return m, nil
			}
			if !retry {
				return restartMeasure{}, errors.New("first admit not admitted")
			}
		} else if ctx.Err() != nil {
			return restartMeasure{}, ctx.Err()
		} else if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			return restartMeasure{}, fmt.Errorf("first admit: %w", err)
		}
		if err := r.waitRetry(ctx, rep, deadline); err != nil {
			return restartMeasure{}, err
		}
	}
}

// admitAnswer reads an admit's reply: admitted, or an answer to try again
// (the ledger is not ready: ledger_unavailable, ledger_busy), or an error.
func admitAnswer(msg *nats.Msg) (admitted, retry bool, err error) {
	if msg.Header.Get(micro.ErrorHeader) != "" {
		var er events.ErrorReply
		if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
			switch er.Error.Code {
			case events.CodeLedgerUnavailable, events.CodeLedgerBusy:
				return false, true, nil
			}
			return false, false, fmt.Errorf("first admit: %s: %s", er.Error.Code, er.Error.Message)
		}
		return false, false, fmt.Errorf("first admit: %s", msg.Header.Get(micro.ErrorHeader))
	}
	var ar events.AdmitReply
	if err := json.Unmarshal(msg.Data, &ar); err != nil {
		return false, false, fmt.Errorf("first admit reply: %w", err)
	}
	if !ar.Admitted {
		if ar.Denial != nil && ar.Denial.Reason == events.ReasonLedgerUnavailable {
			return false, true, nil
		}
		return false, false, fmt.Errorf("first admit denied: %+v", ar.Denial)
	}
	return true, false, nil
}

// readLog takes from the replica's JSON log what its start did: the
// snapshot it loaded and the revisions it folded to be ready.
func (m *restartMeasure) readLog(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		num := func(k string) uint64 {
			v, _ := line[k].(float64)
			return uint64(v)
		}
		switch line["msg"] {
		case "ledger: loaded snapshot":
			m.snapSeq, m.snapBytes = num("seq"), num("bytes")
			m.snapTook = logDuration(line["took"])
		case "ledger: folded the stream; ready":
			m.folded = num("folded")
		}
	}
}

// stopSnapshotLocked says, from a stopped replica's JSON log, how long the
// snapshot it wrote on stop held the book's read lock to copy it: what a
// snapshot of that book makes every admit wait, when a replica writes one
// while serving.
func stopSnapshotLocked(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "its log is unreadable"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := "no snapshot on stop in its log"
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Locked any    `json:"locked"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "ledger: wrote a snapshot on stop" {
			found = "the snapshot on stop copied the book under its lock in " + fmtDur(logDuration(line.Locked))
		}
	}
	return found
}

// logDuration reads a duration of the replica's JSON log: a string with
// its unit ("52.3ms", see config.Logging), or a count of nanoseconds (a
// replica of an earlier build); 0 if it is neither.
func logDuration(v any) time.Duration {
	switch v := v.(type) {
	case string:
		d, _ := time.ParseDuration(v)
		return d
	case float64:
		return time.Duration(v)
	}
	return 0
}

// describe says where a start began: the snapshot and the tail it folded.
func (m restartMeasure) describe() string {
	s := "no snapshot: folded the whole stream"
	if m.snapSeq > 0 {
		s = fmt.Sprintf("snapshot at seq %d (%s) loaded in %s", m.snapSeq, fmtMB(m.snapBytes), fmtDur(m.snapTook))
	}
	if m.folded > 0 {
		s += fmt.Sprintf(", then %d revisions folded", m.folded)
	}
	return s + fmt.Sprintf("; window %s", count(int(m.window)))
}

// perReservation states a restart's RSS over the empty ledger's per
// remembered reservation.
func (r *restartRun) perReservation(m, empty restartMeasure) string {
	if m.window == 0 {
		return "window empty"
	}
	grew := int64(m.rss) - int64(empty.rss)
	return fmt.Sprintf("%+.0f bytes per remembered reservation over the empty ledger's %s (window %s)",
		float64(grew)/float64(m.window), fmtMB(empty.rss), count(int(m.window)))
}

// writeResult is the history's write.
type writeResult struct {
	elapsed  time.Duration
	errors   int64
	firstErr string
	err      error
}

// write makes n admit+settle cycles of the shape with restartCallers
// callers over the clients, as fast as they go, and records when each
// reservation closed. Each caller takes the next reservation index and
// makes that reservation, again after a failure, so the history is
// reservations 0..n-1 whatever the order.
func (r *restartRun) write(ctx context.Context, clients []*client.Client, n int) writeResult {
	var next, done, failed atomic.Int64
	var mu sync.Mutex
	var res writeResult
	r.writeStart = time.Now()
	perCaller := make([][]int64, restartCallers)
	scopes := []string{restartScope}
	var wg sync.WaitGroup
	for c := 0; c < restartCallers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[c%len(clients)]
			i := -1 // the reservation to make; -1: take the next
			for ctx.Err() == nil && failed.Load() < restartMaxErrors {
				if i < 0 {
					if i = int(next.Add(1) - 1); i >= n {
						return
					}
				}
				var err error
				if r.gw != nil {
					err = gatewayCycle(ctx, cl, r.gw.call(i))
				} else {
					err = restartCycle(ctx, cl, scopes)
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if res.firstErr == "" {
						res.firstErr = err.Error()
					}
					mu.Unlock()
					time.Sleep(benchErrorBackoff)
					continue
				}
				s := int(time.Since(r.writeStart) / time.Second)
				for len(perCaller[c]) <= s {
					perCaller[c] = append(perCaller[c], 0)
				}
				perCaller[c][s]++
				done.Add(1)
				i = -1
			}
		}()
	}
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		t := time.NewTicker(restartProgress)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				d := done.Load()
				r.logf("%d of %d written (%.0f/s), %d failed", d, n, float64(d)/time.Since(r.writeStart).Seconds(), failed.Load())
			}
		}
	}()
	wg.Wait()
	close(stop)
	pwg.Wait()
	res.elapsed = time.Since(r.writeStart)
	res.errors = failed.Load()
	for _, pc := range perCaller {
		for s, k := range pc {
			for len(r.closes) <= s {
				r.closes = append(r.closes, 0)
			}
			r.closes[s] += k
		}
	}
	switch {
	case ctx.Err() != nil:
		res.err = ctx.Err()
	case res.errors >= restartMaxErrors:
		res.err = fmt.Errorf("%w: restart: %d cycles failed; gave up (first: %s)", ErrRequests, res.errors, res.firstErr)
	case done.Load() != int64(n):
		res.err = fmt.Errorf("restart: %d of %d written", done.Load(), n)
	}
	r.logf("wrote %d reservations in %s (%.0f/s), %d failed", done.Load(), res.elapsed.Round(time.Millisecond), float64(done.Load())/res.elapsed.Seconds(), res.errors)
	return res
}

// restartCycle is one caller's cycle: admit (the client sets a UUID
// request id and the service the default TTL), settle with the same
// actual.
func restartCycle(ctx context.Context, cl *client.Client, scopes []string) error {
	res, err := cl.Admit(ctx, events.AdmitRequest{Scopes: scopes, Amount: benchAmount})
	if err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	cr, err := res.Settle(ctx, benchAmount)
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	if cr.Status != events.StatusSettled {
		return fmt.Errorf("settle: status %q", cr.Status)
	}
	return nil
}

// windowAt is how many of the run's reservations closed within the
// ledger's retention before at (to the second): what the idempotency
// window of a replica restarted at `at` holds.
func (r *restartRun) windowAt(at time.Time) int64 {
	from := at.Add(-ledger.DefaultRetention)
	var n int64
	for s, k := range r.closes {
		if !r.writeStart.Add(time.Duration(s+1) * time.Second).Before(from) {
			n += k
		}
	}
	return n
}

func (r *restartRun) streamState(ctx context.Context) (jetstream.StreamState, error) {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return jetstream.StreamState{}, err
	}
	s, err := js.Stream(ctx, r.layout.StreamName())
	if err != nil {
		return jetstream.StreamState{}, err
	}
	return s.CachedInfo().State, nil
}

// snapshots lists the snapshot bucket's snapshots, newest first.
func (r *restartRun) snapshots(ctx context.Context) ([]ledger.SnapshotInfo, error) {
	store, err := r.snapshotStore(ctx)
	if err != nil || store == nil {
		return nil, err
	}
	objs, err := store.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ledger.SnapshotInfo
	for _, o := range objs {
		if seq, ok := streams.SnapshotSeq(o.Name); ok && !o.Deleted {
			out = append(out, ledger.SnapshotInfo{Name: o.Name, Seq: seq, Size: o.Size})
		}
	}
	for i := 1; i < len(out); i++ { // newest first
		for j := i; j > 0 && out[j].Seq > out[j-1].Seq; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

func (r *restartRun) snapshotStore(ctx context.Context) (jetstream.ObjectStore, error) {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return nil, err
	}
	store, err := js.ObjectStore(ctx, r.layout.SnapshotBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	return store, err
}

// deleteSnapshots deletes every snapshot and returns how many.
func (r *restartRun) deleteSnapshots(ctx context.Context) (int, error) {
	snaps, err := r.snapshots(ctx)
	if err != nil || len(snaps) == 0 {
		return 0, err
	}
	store, err := r.snapshotStore(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range snaps {
		if err := store.Delete(ctx, s.Name); err != nil {
			return 0, fmt.Errorf("delete snapshot %s: %w", s.Name, err)
		}
	}
	return len(snaps), nil
}

func describeSnapshots(snaps []ledger.SnapshotInfo, last uint64) string {
	if len(snaps) == 0 {
		return "none"
	}
	return fmt.Sprintf("newest at seq %d of %d (%s)", snaps[0].Seq, last, fmtMB(snaps[0].Size))
}

func metStr(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// fmtMicros is d per n in µs.
func fmtMicros(d time.Duration, n int) string {
	return fmt.Sprintf("%.0f µs", float64(d.Microseconds())/float64(max(n, 1)))
}
