package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// failoverRecoveryBound is the generous bound, in CI, on the time from the
// new stream leader's election to the first admit acknowledged after it.
const failoverRecoveryBound = 5 * time.Second

// hardFailoverClient is the Go client's retry budget for a hard failover,
// as docs/operator.md sizes it: 6 attempts of 2 s ride through raft's election
// timeout (up to about 9 s) and the first commit after it.
var hardFailoverClient = []client.Option{client.WithTimeout(2 * time.Second), client.WithRetries(6)}

// acked is one acknowledged operation of the failover load.
type acked struct {
	id      string // reservation id
	settled bool
	at      time.Time
}

// TestCluster_FailoverLeaderKill kills the ledger stream's leader of a
// 3-node cluster under a load of admit+settle cycles (callers retry the same
// request id until it is answered, as the client does) and asserts: every
// acknowledged admit and settle is in the stream (a fresh replica folds
// them all), replay == live and no admission went over a limit
// (projector.Check), and the first admit acknowledged after the new
// leader's election comes within failoverRecoveryBound of it. The measured
// times are logged. SPENDGATE_FAILOVER_KILLS=N kills N times (the killed
// node is restarted between kills). It fails if a write acknowledged
// before the kill is lost (the fresh replica misses it), if the commit
// path stalls for a fixed timeout after the election, or if a retried write
// lands twice (the checker's replay).
func TestCluster_FailoverLeaderKill(t *testing.T) { failover(t, inProcess(t, "stop")) }

// TestCluster_FailoverStepDown is TestCluster_FailoverLeaderKill with a
// graceful leader change instead of a stopped node: the stream leader is
// asked to step down (what `nats stream cluster step-down` does).
func TestCluster_FailoverStepDown(t *testing.T) { failover(t, inProcess(t, "stepdown")) }

// failoverKills is how many leader changes a failover test makes: 1, or
// SPENDGATE_FAILOVER_KILLS.
func failoverKills(t *testing.T) int {
	kills := 1
	if v := os.Getenv("SPENDGATE_FAILOVER_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		kills = n
	}
	return kills
}

// foCluster is what the failover load needs of a 3-node cluster, in
// process or one process per node.
type foCluster struct {
	mode string
	// hard: the leader is lost without a hand-over (raft's election
	// timeout runs).
	hard   bool
	layout streams.Layout
	// nc and js are connected to every node.
	nc *nats.Conn
	js jetstream.JetStream
	// url is node i's client URL; urls all of them, comma-joined.
	url  func(i int) string
	urls string
	// connOpts are added to the replica's and the callers' connections.
	connOpts []nats.Option
	// leader is the node leading the ledger stream, -1 if none.
	leader func() int
	// disrupt takes node i (the leader) out: stop, kill, pause, step
	// down. elected runs once another node leads (resume a paused
	// node); heal brings node i back before the next round (restart a
	// stopped or killed node). Either may be nil.
	disrupt func(i int)
	elected func(i int)
	heal    func(t *testing.T, i int)
}

// inProcess is the in-process cluster of testenv: mode "stop" shuts the
// leader's node down (nats-server hands its leadership over: a graceful
// change), "stepdown" asks the leader to step down.
func inProcess(t *testing.T, mode string) foCluster {
	c := testenv.NewCluster(t, 3)
	fc := foCluster{mode: mode, layout: c.Layout, nc: c.Conn, js: c.JS, urls: c.URLs(),
		url: func(i int) string { return c.Servers[i].ClientURL() }, leader: c.Leader}
	if mode == "stepdown" {
		fc.disrupt = func(int) {
			msg, err := c.Conn.Request("$JS.API.STREAM.LEADER.STEPDOWN."+c.Layout.StreamName(), nil, 10*time.Second)
			require.NoError(t, err)
			require.Contains(t, string(msg.Data), `"success":true`)
		}
	} else {
		fc.disrupt = c.StopServer
		fc.heal = func(t *testing.T, i int) { c.RestartServer(t, i) }
	}
	return fc
}

func failover(t *testing.T, c foCluster) {
	mode := c.mode
	kills := failoverKills(t)
	leader := c.leader()
	require.GreaterOrEqual(t, leader, 0)
	other := (leader + 1) % 3
	// The replica and the callers connect to a node that is not the
	// leader first (they fail over to the others anyway).
	connect := func(name string) *nats.Conn {
		opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.Name(name)}, c.connOpts...)
		nc, err := nats.Connect(c.url(other)+","+c.urls, opts...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	rnc := connect("replica")
	rjs, err := jetstream.New(rnc)
	require.NoError(t, err)
	r, err := replica.Start(ctxT(t), rnc, rjs, replica.Config{Layout: c.layout, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	cnc := connect("callers")
	// request sends req until it is answered with something else than
	// ledger_unavailable / ledger_busy or a timeout (the same body each
	// time: the same request id, so a retry is idempotent), or stop.
	request := func(stop <-chan struct{}, endpoint string, req any, out any) (*events.Error, error) {
		data, _ := json.Marshal(req)
		for {
			select {
			case <-stop:
				return nil, context.Canceled
			default:
			}
			msg, err := cnc.Request(c.layout.Endpoint(endpoint), data, 2*time.Second)
			if err != nil {
				continue
			}
			var er events.ErrorReply
			if err := json.Unmarshal(msg.Data, &er); err != nil {
				return nil, err
			}
			if er.Error != nil {
				if er.Error.Code == events.CodeLedgerUnavailable || er.Error.Code == events.CodeLedgerBusy {
					continue
				}
				return er.Error, nil
			}
			return nil, json.Unmarshal(msg.Data, out)
		}
	}
	var bv events.BudgetView
	e, err := request(nil, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:fo", Period: "month", Limit: "1000000", Unit: "USD"}, &bv)
	require.NoError(t, err)
	require.Nil(t, e)

	const callers = 8
	stop := make(chan struct{})
	var mu sync.Mutex
	var log []acked
	var failures atomic.Int64
	var firstFailure atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				var ar events.AdmitReply
				e, err := request(stop, streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprintf("fo-%d-%d", w, seq), Scopes: []string{"org:fo"}, Amount: "1", TTL: "10m"}, &ar)
				if err == context.Canceled {
					return
				}
				if err != nil || e != nil || !ar.Admitted {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("admit: %v %v %+v", err, e, ar))
					continue
				}
				mu.Lock()
				log = append(log, acked{id: ar.ReservationID, at: time.Now()})
				mu.Unlock()
				var cr events.CloseReply
				e, err = request(stop, streams.EndpointSettle, events.SettleRequest{ReservationID: ar.ReservationID, Actual: "1"}, &cr)
				if err == context.Canceled {
					return
				}
				if err != nil || e != nil || cr.Status != events.StatusSettled {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("settle: %v %v %+v", err, e, cr))
					continue
				}
				mu.Lock()
				log = append(log, acked{id: ar.ReservationID, settled: true, at: time.Now()})
				mu.Unlock()
			}
		}()
	}
	// One more caller uses the Go client, sized as docs/operator.md says: its
	// defaults (DefaultTimeout × DefaultAttempts) for a graceful change,
	// hardFailoverClient for a hard one. It must never fail closed.
	var goOpts []client.Option
	if c.hard {
		goOpts = hardFailoverClient
	}
	gc, err := client.New(cnc, goOpts...)
	require.NoError(t, err)
	var goCalls, goFails atomic.Int64
	var goFirst atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := client.Call(context.Background(), gc, events.AdmitRequest{Scopes: []string{"org:fo"}, Amount: "1", TTL: "10m"},
				func(context.Context) (string, error) { return "1", nil })
			goCalls.Add(1)
			if err != nil {
				goFails.Add(1)
				goFirst.CompareAndSwap(nil, err.Error())
			}
		}
	}()
	countAdmits := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(log)
	}
	// firstAdmitAfter is the time of the first admit acknowledged after t0.
	firstAdmitAfter := func(t0 time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range log {
			if !a.settled && a.at.After(t0) {
				return a.at, true
			}
		}
		return time.Time{}, false
	}
	// The new leader's election instant is the timestamp of its
	// LEADER_ELECTED advisory (the server's clock, the same machine's),
	// when the advisory arrives; else when the leader poll first saw it.
	anc := connect("advisories")
	advisories := make(chan *nats.Msg, 64)
	asub, err := anc.ChanSubscribe("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."+c.layout.StreamName(), advisories)
	require.NoError(t, err)
	t.Cleanup(func() { _ = asub.Unsubscribe() })
	require.NoError(t, anc.Flush())
	electedBy := func(notLeader string, polled time.Time) (time.Time, string) {
		timer := time.NewTimer(2 * time.Second)
		defer timer.Stop()
		for {
			select {
			case m := <-advisories:
				var adv struct {
					Timestamp time.Time `json:"timestamp"`
					Leader    string    `json:"leader"`
				}
				if json.Unmarshal(m.Data, &adv) == nil && adv.Leader != notLeader && !adv.Timestamp.IsZero() {
					return adv.Timestamp, "advisory"
				}
			case <-timer.C:
				return polled, "poll"
			}
		}
	}
	var elections, recoveries []time.Duration
	for k := 0; k < kills; k++ {
		base := countAdmits()
		testenv.WaitFor(t, 30*time.Second, "load before the kill", func() bool { return countAdmits() >= base+200 })
		old := c.leader()
		require.GreaterOrEqual(t, old, 0)
		for len(advisories) > 0 {
			<-advisories
		}
		killedAt := time.Now()
		c.disrupt(old)
		var polledAt time.Time
		testenv.WaitFor(t, 60*time.Second, "a new stream leader", func() bool {
			if l := c.leader(); l >= 0 && l != old {
				polledAt = time.Now()
				return true
			}
			return false
		})
		if c.elected != nil {
			c.elected(old)
		}
		electedAt, source := electedBy(fmt.Sprintf("n%d", old+1), polledAt)
		var recoveredAt time.Time
		testenv.WaitFor(t, 60*time.Second, "an admit after the election", func() bool {
			at, ok := firstAdmitAfter(electedAt)
			recoveredAt = at
			return ok
		})
		election, recovery := electedAt.Sub(killedAt), recoveredAt.Sub(electedAt)
		elections, recoveries = append(elections, election), append(recoveries, recovery)
		t.Logf("%s %d: leader n%d; new leader elected after %v (%s); first admit acknowledged %v after the election", mode, k+1, old+1, election.Round(time.Millisecond), source, recovery.Round(time.Millisecond))
		require.Less(t, recovery, failoverRecoveryBound, "admits resumed too long after the election")
		if k+1 < kills && c.heal != nil {
			c.heal(t, old)
		}
	}
	base := countAdmits()
	testenv.WaitFor(t, 30*time.Second, "load after the failover", func() bool { return countAdmits() >= base+100 })
	close(stop)
	wg.Wait()
	require.Zero(t, failures.Load(), "first: %v", firstFailure.Load())
	t.Logf("Go client (hard-failover budget: %v): %d calls, %d failed", c.hard, goCalls.Load(), goFails.Load())
	require.Zero(t, goFails.Load(), "the Go client failed closed: first: %v", goFirst.Load())
	if len(recoveries) > 1 {
		sorted := append([]time.Duration(nil), recoveries...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		sortedE := append([]time.Duration(nil), elections...)
		sort.Slice(sortedE, func(i, j int) bool { return sortedE[i] < sortedE[j] })
		t.Logf("%s, %d times: disruption->new leader median %v, worst %v", mode, kills, sortedE[len(sortedE)/2].Round(time.Millisecond), sortedE[len(sortedE)-1].Round(time.Millisecond))
		t.Logf("%s, %d times: election->first admit median %v, worst %v", mode, kills, sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
	}

	// Nothing acknowledged is lost: a fresh replica folds every
	// acknowledged admit, and every acknowledged settle as settled.
	fresh, err := ledger.New(ctxT(t), c.nc, c.js, c.layout)
	require.NoError(t, err)
	fctx, fcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fresh.Run(fctx) }()
	t.Cleanup(func() { fcancel(); <-done })
	select {
	case <-fresh.Ready():
	case <-time.After(60 * time.Second):
		t.Fatal("fresh replica not ready")
	}
	require.NoError(t, fresh.Sync(ctxT(t)))
	mu.Lock()
	defer mu.Unlock()
	admits, settles := 0, 0
	for _, a := range log {
		res, ok := fresh.Reservation(a.id)
		require.True(t, ok, "acknowledged admit %s lost", a.id)
		if a.settled {
			settles++
			require.Equal(t, events.StatusSettled, res.Status, "acknowledged settle of %s lost", a.id)
		} else {
			admits++
		}
	}
	t.Logf("%d admits and %d settles acknowledged, none lost", admits, settles)
	rep, err := projector.Check(ctxT(t), c.js, c.layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), "invariant check: %s", rep)
}
