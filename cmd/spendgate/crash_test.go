package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// Bounds of the crash tests. The load is bounded by operation count and by
// time, and every wait is on a condition with a deadline.
const (
	// crashOps is the number of acknowledged operations after which the
	// generator starts no new admit.
	crashOps = 600
	// crashLoadFor bounds the time the generator starts new admits.
	crashLoadFor = 15 * time.Second
	// crashConvergeFor bounds how long an operation already started is
	// retried (across restarts) before the test gives up on it.
	crashConvergeFor = 60 * time.Second
	// crashKills is how many times the serve process is SIGKILLed.
	crashKills = 5
	// crashWorkers is the number of concurrent generator loops.
	crashWorkers = 4
	// crashRequestTimeout is the client's per-request timeout: short, as a
	// service calling spendgate on its request path would use.
	crashRequestTimeout = time.Second
	// crashRetryPause is the back-off between retries of an unanswered
	// request (not a synchronization: the retry itself decides).
	crashRetryPause = 20 * time.Millisecond
	// crashAmount is what every admit reserves.
	crashAmount = "0.01"
)

// crashActuals are the settle actuals, by operation index: below, equal to
// and above (an overrun) the reserved amount.
var crashActuals = []string{"0.004", "0.01", "0.0125"}

// crashClient sends requests the way a client library would: a fresh
// request id chosen before the first send, and every retry of an
// unanswered or retryable request with the same body.
type crashClient struct {
	nc       *nats.Conn
	layout   streams.Layout
	deadline time.Time
	retries  atomic.Int64
}

// do sends req to endpoint until it gets a definitive answer: a reply body
// (decoded into out) or a non-retryable error reply. No responders, a
// timeout, a broken connection, ledger_busy and ledger_unavailable are
// retried with the same request.
func (c *crashClient) do(endpoint string, req, out any) error {
	_, err := c.doCount(endpoint, req, out)
	return err
}

// doCount is do that also returns how many times req was retried.
func (c *crashClient) doCount(endpoint string, req, out any) (retries int, err error) {
	data, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		retries = attempt
		if attempt > 0 {
			c.retries.Add(1)
			if time.Now().After(c.deadline) {
				return retries, fmt.Errorf("%s %s: no definitive answer after %d attempts", endpoint, data, attempt)
			}
			<-time.After(crashRetryPause)
		}
		msg, err := c.nc.Request(c.layout.Endpoint(endpoint), data, crashRequestTimeout)
		if err != nil {
			continue // no responders (serve is down), timeout (killed mid-request), reconnecting
		}
		var er events.ErrorReply
		if err := json.Unmarshal(msg.Data, &er); err != nil {
			return retries, fmt.Errorf("%s: undecodable reply %q: %w", endpoint, msg.Data, err)
		}
		if er.Error != nil {
			switch er.Error.Code {
			case events.CodeLedgerBusy, events.CodeLedgerUnavailable:
				continue
			}
			return retries, er.Error
		}
		if out != nil {
			if err := json.Unmarshal(msg.Data, out); err != nil {
				return retries, fmt.Errorf("%s: reply %q: %w", endpoint, msg.Data, err)
			}
		}
		return retries, nil
	}
}

// crashOutcome is what the generator intends for a reservation after its
// admit, by operation index.
func crashOutcome(i int) string {
	switch i % 5 {
	case 0, 1, 2:
		return events.StatusSettled
	case 3:
		return events.StatusReleased
	}
	return events.StatusOpen
}

// crashAdmit is one acknowledged admit and what became of it.
type crashAdmit struct {
	requestID     string
	reservationID string
	balances      []events.BalanceRef
	// status is the acknowledged state: open, or settled/released once the
	// close was acknowledged.
	status string
	actual string // acknowledged settle actual
	// replayed counts replies that said "replayed": the operation had landed
	// before, but its reply was lost to a kill.
	admitReplayed, closeReplayed bool
}

// crashRecord is everything the generator was acknowledged, keyed by
// request id.
type crashRecord struct {
	mu     sync.Mutex
	asked  map[string]bool // every request id ever sent
	admits map[string]*crashAdmit
	acked  atomic.Int64 // acknowledged operations
	// batchLanes reports whether the admits over two scopes are atomic
	// batches over two lane keys (the serve process runs with several
	// lanes and the two scopes hash to different lanes).
	batchLanes func(scopes []string) bool
	// inBatch counts batch-path admits in flight now; batchRetried those
	// whose request went unanswered at least once (a kill interrupted
	// them).
	inBatch, batchRetried atomic.Int64
}

func newCrashRecord() *crashRecord {
	return &crashRecord{asked: map[string]bool{}, admits: map[string]*crashAdmit{}}
}

// crashGenerate runs one generator loop: admit (in org:load, and one in
// three also in user:w<w>), then settle, release or leave open. It stops starting admits
// once stop reports true, but an operation it started is retried until it
// is acknowledged.
func crashGenerate(c *crashClient, rec *crashRecord, w int, stop func() bool) error {
	for i := 0; !stop(); i++ {
		rid := fmt.Sprintf("kl-w%d-%d", w, i)
		rec.mu.Lock()
		rec.asked[rid] = true
		rec.mu.Unlock()
		var ar events.AdmitReply
		scopes := []string{"org:load"}
		if i%3 == 0 {
			// One admit in three spans two budgets: one revision of one
			// lane, or with several lanes (when the scopes hash apart) one
			// atomic batch over two lane keys; a kill must split neither.
			scopes = append(scopes, fmt.Sprintf("user:w%d", w))
		}
		req := events.AdmitRequest{RequestID: rid, Scopes: scopes, Amount: crashAmount, TTL: "10m"}
		batch := rec.batchLanes != nil && rec.batchLanes(scopes)
		if batch {
			rec.inBatch.Add(1)
		}
		retried, err := c.doCount(streams.EndpointAdmit, req, &ar)
		if batch {
			rec.inBatch.Add(-1)
			if retried > 0 {
				rec.batchRetried.Add(1)
			}
		}
		if err != nil {
			return fmt.Errorf("admit %s: %w", rid, err)
		}
		if !ar.Admitted || ar.ReservationID == "" {
			return fmt.Errorf("admit %s not admitted: %+v", rid, ar.Denial)
		}
		a := &crashAdmit{requestID: rid, reservationID: ar.ReservationID, balances: ar.Balances, status: events.StatusOpen, admitReplayed: ar.Replayed}
		rec.mu.Lock()
		rec.admits[rid] = a
		rec.mu.Unlock()
		rec.acked.Add(1)

		var cr events.CloseReply
		switch crashOutcome(i) {
		case events.StatusSettled:
			actual := crashActuals[i%5]
			if err := c.do(streams.EndpointSettle, events.SettleRequest{ReservationID: ar.ReservationID, Actual: actual}, &cr); err != nil {
				return fmt.Errorf("settle %s: %w", ar.ReservationID, err)
			}
			if cr.Status != events.StatusSettled || cr.Actual != events.MustMoney(actual).String() || cr.Late {
				return fmt.Errorf("settle %s: reply %+v", ar.ReservationID, cr)
			}
			rec.mu.Lock()
			a.status, a.actual, a.closeReplayed = events.StatusSettled, cr.Actual, cr.Replayed
			rec.mu.Unlock()
		case events.StatusReleased:
			if err := c.do(streams.EndpointRelease, events.ReleaseRequest{ReservationID: ar.ReservationID}, &cr); err != nil {
				return fmt.Errorf("release %s: %w", ar.ReservationID, err)
			}
			if cr.Status != events.StatusReleased {
				return fmt.Errorf("release %s: reply %+v", ar.ReservationID, cr)
			}
			rec.mu.Lock()
			a.status, a.closeReplayed = events.StatusReleased, cr.Replayed
			rec.mu.Unlock()
		default:
			continue
		}
		rec.acked.Add(1)
	}
	return nil
}

// crashVerify checks the replayed book against everything acknowledged:
// every acknowledged admit exists with its amount and balances and is in
// its acknowledged state, no reservation exists that the generator never
// asked for (nor two for one request), nothing is half-applied, every
// balance's spent, reserved and open are exactly what the acknowledged
// operations imply, and replay equals live.
func crashVerify(t *testing.T, js jetstream.JetStream, layout streams.Layout, c *crashClient, rec *crashRecord) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := projector.New(js, layout).CatchUp(ctx)
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()

	// Every operation the generator started converged: it retried each one
	// with the same id until it was answered, so a settle that landed
	// before a kill ate its reply is acknowledged too (its retry answered
	// "replayed", with the same actual) and counts in spent exactly once.
	require.Len(t, rec.admits, len(rec.asked), "every admit sent was acknowledged in the end")
	amount := events.MustMoney(crashAmount)
	type totals struct {
		spent, reserved, overrun events.Money
		open                     int64
	}
	want := map[events.BalanceRef]*totals{}
	byRes := map[string]*crashAdmit{}
	for _, a := range rec.admits {
		byRes[a.reservationID] = a
		r, ok := st.Reservation(a.reservationID)
		require.True(t, ok, "acknowledged admit %s (reservation %s) is not in the book", a.requestID, a.reservationID)
		require.Equal(t, a.requestID, r.RequestID)
		require.ElementsMatch(t, a.balances, r.Balances, "reservation %s", a.reservationID)
		require.Len(t, r.Parts, len(a.balances), "reservation %s is opened in every balance or in none", a.reservationID)
		require.Equal(t, a.status, r.Status, "reservation %s (request %s)", a.reservationID, a.requestID)
		for ref, p := range r.Parts {
			require.Equal(t, a.status, p.Status, "reservation %s in %s", a.reservationID, ref)
			require.Zero(t, p.Amount.Cmp(amount), "reservation %s holds %s in %s", a.reservationID, p.Amount, ref)
			tt := want[ref]
			if tt == nil {
				tt = &totals{}
				want[ref] = tt
			}
			switch a.status {
			case events.StatusOpen:
				tt.reserved = tt.reserved.Add(amount)
				tt.open++
			case events.StatusSettled:
				actual := events.MustMoney(a.actual)
				require.Zero(t, p.Actual.Cmp(actual), "reservation %s settled with %s, acknowledged %s", a.reservationID, p.Actual, actual)
				require.False(t, p.Late || p.AfterExpiry)
				tt.spent = tt.spent.Add(actual)
				tt.overrun = tt.overrun.Add(actual.Sub(amount).Max(events.Zero))
			}
		}
	}
	for _, r := range st.Reservations() {
		require.True(t, rec.asked[r.RequestID], "reservation %s for request %s that the generator never sent", r.ID, r.RequestID)
		a, ok := byRes[r.ID]
		require.True(t, ok, "reservation %s (request %s) was never acknowledged: a second reservation for one request", r.ID, r.RequestID)
		require.Equal(t, a.requestID, r.RequestID)
	}
	require.Len(t, st.Reservations(), len(rec.admits))
	for ref, tt := range want {
		b, ok := st.Balance(ref)
		require.True(t, ok, "balance %s", ref)
		require.Equal(t, tt.spent.String(), b.Spent.String(), "spent of %s", ref)
		require.Equal(t, tt.reserved.String(), b.Reserved.String(), "reserved of %s", ref)
		require.Equal(t, tt.overrun.String(), b.Overrun.String(), "overrun of %s", ref)
		require.Equal(t, tt.open, b.Open, "open of %s", ref)
		require.Zero(t, b.Expired+b.Late, "nothing expired or settled late in %s", ref)
	}
	require.Len(t, st.Balances(), len(want), "no balance beyond those the generator touched")

	// The live service agrees (for the org's current month).
	var v events.BudgetView
	require.NoError(t, c.do(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:load", Period: "month"}, &v))
	if tt := want[events.BalanceRef{Scope: "org:load", Period: events.PeriodMonth, Instance: v.Instance}]; tt != nil {
		require.Equal(t, tt.spent.String(), v.Spent)
		require.Equal(t, tt.reserved.String(), v.Reserved)
		require.Equal(t, tt.open, v.Open)
	}

	rep, err := projector.Check(ctx, js, layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), "replay == live: %s", rep)
}

// crashLoop runs the generator against the running serve process p,
// SIGKILLs it crashKills times at moments drawn from the acknowledged
// operation count, restarts it each time (start, with the same arguments),
// and returns once every started operation was acknowledged.
//
// With layout's lanes > 1 the two-scope admits are atomic batches over two
// lane keys; each kill then waits (bounded) for one of them to be in
// flight, and crashLoop asserts that kills landed while batches were in
// flight, that some batch-path admit was interrupted and retried, and that
// some operation had landed before the kill ate its reply (a replay).
func crashLoop(t *testing.T, c *crashClient, p *proc, start func() *proc) *crashRecord {
	t.Helper()
	lanes := c.layout.Lanes()
	for _, b := range []events.BudgetPutRequest{
		{Scope: "org:load", Period: "month", Limit: "100000", Unit: "USD"},
		{Scope: "user:w0", Period: "lifetime", Limit: "100000", Unit: "USD"},
		{Scope: "user:w1", Period: "lifetime", Limit: "100000", Unit: "USD"},
		{Scope: "user:w2", Period: "lifetime", Limit: "100000", Unit: "USD"},
		{Scope: "user:w3", Period: "lifetime", Limit: "100000", Unit: "USD"},
	} {
		require.NoError(t, c.do(streams.EndpointBudgetPut, b, nil))
	}

	rec := newCrashRecord()
	if lanes > 1 {
		rec.batchLanes = func(scopes []string) bool {
			seen := map[string]bool{}
			for _, sc := range scopes {
				seen[c.layout.LaneKey(events.BalanceRef{Scope: events.Scope(sc)})] = true
			}
			return len(seen) > 1
		}
		spans := 0
		for w := 0; w < crashWorkers; w++ {
			if rec.batchLanes([]string{"org:load", fmt.Sprintf("user:w%d", w)}) {
				spans++
			}
		}
		require.Positive(t, spans, "some worker's two-scope admits span two lanes")
	}
	began := time.Now()
	// The load goes on until it has crashOps acknowledged operations and
	// every kill is done, but never starts an admit after hardUntil.
	var killsDone atomic.Bool
	loadUntil, hardUntil := began.Add(crashLoadFor), began.Add(2*crashLoadFor)
	stop := func() bool {
		now := time.Now()
		return now.After(hardUntil) || killsDone.Load() && (rec.acked.Load() >= crashOps || now.After(loadUntil))
	}
	var wg sync.WaitGroup
	errs := make(chan error, crashWorkers)
	var running atomic.Int64
	for w := 0; w < crashWorkers; w++ {
		wg.Add(1)
		running.Add(1)
		go func() {
			defer wg.Done()
			defer running.Add(-1)
			if err := crashGenerate(c, rec, w, stop); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		}()
	}

	// Kill after a random number of acknowledged operations since the last
	// (re)start: 0.5x to 1.5x an even share of crashOps.
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	share := int64(crashOps / (crashKills + 1))
	var killedAt []int64
	killsInBatch := 0
	for k := 0; k < crashKills; k++ {
		at := rec.acked.Load() + share/2 + rng.Int64N(share)
		testenv.WaitFor(t, crashConvergeFor, fmt.Sprintf("%d acknowledged operations", at), func() bool {
			return rec.acked.Load() >= at || running.Load() == 0
		})
		if running.Load() == 0 {
			break // a worker failed: its error is reported below
		}
		if lanes > 1 {
			// Kill while a batch-path admit is in flight (bounded: a
			// third of the admits take that path).
			testenv.WaitFor(t, crashConvergeFor, "a batch-path admit in flight", func() bool {
				return rec.inBatch.Load() > 0 || running.Load() == 0
			})
			if rec.inBatch.Load() > 0 {
				killsInBatch++
			}
		}
		killedAt = append(killedAt, rec.acked.Load())
		p.kill(t)
		p = start()
	}
	killsDone.Store(true)
	waitDone := make(chan struct{})
	go func() { wg.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(crashConvergeFor + crashLoadFor):
		t.Fatal("the load generator did not finish")
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	replayedAdmits, replayedCloses := 0, 0
	for _, a := range rec.admits {
		if a.admitReplayed {
			replayedAdmits++
		}
		if a.closeReplayed {
			replayedCloses++
		}
	}
	t.Logf("seed %d: %d acknowledged operations (%d admits) in %v; SIGKILLed after %v acknowledged operations; %d retries; %d admits and %d settles/releases had landed before a kill ate their reply (answered replayed on retry)",
		seed, rec.acked.Load(), len(rec.admits), time.Since(began).Round(time.Millisecond), killedAt, c.retries.Load(), replayedAdmits, replayedCloses)
	require.Len(t, killedAt, crashKills, "the serve process was killed during the load")
	require.Positive(t, c.retries.Load(), "kills interrupted requests")
	if lanes > 1 {
		t.Logf("%d of %d kills landed with a batch in flight; %d batch-path admits were interrupted and retried", killsInBatch, len(killedAt), rec.batchRetried.Load())
		require.Positive(t, killsInBatch, "kills landed while atomic batches were in flight")
		require.Positive(t, rec.batchRetried.Load(), "a kill interrupted a batch-path admit, which was retried")
		require.Positive(t, replayedAdmits+replayedCloses, "some operation landed before a kill ate its reply, and its retry was a replay")
	}
	return rec
}

// TestServe_KillLoop: a load of admits, settles and releases runs against a
// serve process that is SIGKILLed several times and restarted; unanswered
// requests are retried with the same request id or reservation id, as a
// client does. Afterwards every acknowledged operation is in the book,
// nothing else is, nothing is half-applied, and replay equals live.
//
// Durability in force: fsync on the interval (--sync-always=false; the
// embedded default is --sync-always). JetStream writes every
// message to its file store (the OS page cache) before acknowledging it and
// fsyncs on its periodic sync interval. A SIGKILL of the process (even with
// the embedded server inside it) therefore loses nothing acknowledged: the
// kernel still holds and later writes what the process handed it. A power
// loss or kernel crash could lose the writes of the last sync interval;
// --sync-always (fsync before every acknowledgement) is for that.
func TestServe_KillLoop(t *testing.T) {
	soak.Only(t) // TestServe_KilledWhileSweepingAndSnapshotting kills serve in the short suite
	t.Run("external NATS", func(t *testing.T) {
		env := testenv.New(t)
		args := []string{"serve", "--nats-url", env.URL(), "--replicas", "1"}
		start := func() *proc { return startProc(t, true, args...) }
		p := start()
		c := &crashClient{nc: connect(t, env.URL()), layout: env.Layout, deadline: time.Now().Add(crashLoadFor + crashConvergeFor)}
		rec := crashLoop(t, c, p, start)
		crashVerify(t, env.JS, env.Layout, c, rec)
	})
	t.Run("external NATS, 8 lanes", func(t *testing.T) {
		// Two-scope admits are atomic batches over two lane keys: a kill
		// must not split one (crashVerify checks every reservation is
		// opened in all its balances or in none).
		layout, err := streams.New(streams.Config{Lanes: 8})
		require.NoError(t, err)
		env := testenv.New(t, testenv.WithLayout(layout))
		args := []string{"serve", "--nats-url", env.URL(), "--replicas", "1", "--lanes", "8"}
		start := func() *proc { return startProc(t, true, args...) }
		p := start()
		c := &crashClient{nc: connect(t, env.URL()), layout: env.Layout, deadline: time.Now().Add(crashLoadFor + crashConvergeFor)}
		rec := crashLoop(t, c, p, start)
		crashVerify(t, env.JS, env.Layout, c, rec)
	})
	t.Run("embedded NATS", func(t *testing.T) {
		// The serve process embeds the server: a SIGKILL takes the server
		// down with it, and the restart recovers the same data dir.
		dir := filepath.Join(t.TempDir(), "data")
		listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		args := []string{"serve", "--data-dir", dir, "--listen", listen, "--sync-always=false"}
		start := func() *proc { return startProc(t, true, args...) }
		p := start()
		nc := connect(t, "nats://"+listen)
		layout := streams.Default() // what serve uses without --bucket/--prefix
		c := &crashClient{nc: nc, layout: layout, deadline: time.Now().Add(crashLoadFor + crashConvergeFor)}
		rec := crashLoop(t, c, p, start)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		crashVerify(t, js, layout, c, rec)
	})
}

// Caller process: TestCaller_KilledHoldingReservations re-executes this
// test binary with GO_SPENDGATE_CALLER=1 to run TestHelperCallerProcess as
// a separate process that admits reservations and is then SIGKILLed while
// it holds them (the os/exec helper-process pattern).
const (
	crashCallerEnv    = "GO_SPENDGATE_CALLER"
	crashCallerURLEnv = "GO_SPENDGATE_CALLER_URL"
	crashCallerHeld   = 5
)

// TestHelperCallerProcess is not a test: it is the body of the caller
// process of TestCaller_KilledHoldingReservations, and returns at once in
// a normal test run.
func TestHelperCallerProcess(t *testing.T) {
	if os.Getenv(crashCallerEnv) != "1" {
		return
	}
	nc, err := nats.Connect(os.Getenv(crashCallerURLEnv))
	require.NoError(t, err)
	defer nc.Close()
	c := &crashClient{nc: nc, layout: streams.Default(), deadline: time.Now().Add(30 * time.Second)}
	var ids []string
	for i := 0; i < crashCallerHeld; i++ {
		var ar events.AdmitReply
		req := events.AdmitRequest{RequestID: fmt.Sprintf("caller-%d", i), Scopes: []string{"org:caller"}, Amount: "0.25", TTL: "1s"}
		require.NoError(t, c.do(streams.EndpointAdmit, req, &ar))
		require.True(t, ar.Admitted, "%+v", ar.Denial)
		ids = append(ids, ar.ReservationID)
	}
	// The upstream calls are "in flight": hold the reservations until killed.
	fmt.Println("holding", strings.Join(ids, " "))
	<-time.After(2 * time.Minute)
	t.Fatal("the caller process was not killed")
}

// TestCaller_KilledHoldingReservations: a caller process admits five
// reservations with a 1s TTL and is SIGKILLed while it holds them, so it
// never settles or releases. The serve process's sweeper (every 200ms)
// returns them: the budget is whole again within a bounded wait, and
// replay equals live.
func TestCaller_KilledHoldingReservations(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	startProc(t, true, "serve", "--nats-url", env.URL(), "--replicas", "1", "--sweep-interval", "200ms")
	c := &crashClient{nc: connect(t, env.URL()), layout: env.Layout, deadline: time.Now().Add(time.Minute)}
	require.NoError(t, c.do(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:caller", Period: "month", Limit: "10", Unit: "USD"}, nil))

	out := &testenv.LogBuffer{}
	caller := exec.Command(os.Args[0], "-test.run=^TestHelperCallerProcess$", "-test.count=1")
	caller.Env = append(os.Environ(), crashCallerEnv+"=1", crashCallerURLEnv+"="+env.URL())
	caller.Stdout, caller.Stderr = out, out
	require.NoError(t, caller.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = caller.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = caller.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("caller process output:\n%s", out.String())
		}
	})
	// The helper process first runs this package's TestMain, which builds
	// the spendgate binary again: allow for that.
	testenv.WaitFor(t, 90*time.Second, "the caller holding its reservations", func() bool {
		select {
		case <-exited:
			t.Fatalf("the caller process exited early: %v\n%s", waitErr, out.String())
		default:
		}
		return strings.Contains(out.String(), "holding")
	})
	var ids []string
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "holding "); ok {
			ids = strings.Fields(rest)
		}
	}
	require.Len(t, ids, crashCallerHeld)

	require.NoError(t, caller.Process.Signal(syscall.SIGKILL))
	<-exited
	var ee *exec.ExitError
	require.True(t, errors.As(waitErr, &ee), "caller: %v", waitErr)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())

	var v events.BudgetView
	testenv.WaitFor(t, 15*time.Second, "the budget whole again", func() bool {
		if err := c.do(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:caller", Period: "month"}, &v); err != nil {
			return false
		}
		return v.Reserved == "0" && v.Open == 0
	})
	require.Equal(t, "0", v.Spent)
	require.Equal(t, "10", v.Available)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := projector.New(env.JS, env.Layout).CatchUp(ctx)
	require.NoError(t, err)
	for _, id := range ids {
		r, ok := st.Reservation(id)
		require.True(t, ok, id)
		require.Equal(t, events.StatusExpired, r.Status, id)
		require.True(t, r.Expired)
		require.False(t, r.ClosedAt.Before(r.ExpiresAt), "%s released at %v, before its expiry %v", id, r.ClosedAt, r.ExpiresAt)
	}
	require.Len(t, st.Reservations(), crashCallerHeld)
	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), "replay == live: %s", rep)
}
