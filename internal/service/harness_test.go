package service_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// Parallel tests: a test with its own harness (server, replicas, clock) or
// cluster calls t.Parallel, but for the ones whose outcome depends on
// timing, which a second test beside them on two cores would change: the
// race tests that need both sides of a race to happen and their blind
// controls that need it to break (ledger_test.go, the sweeper races,
// TestBudgetPut_ConcurrentFields), rates and bursts (tenantlimits_test.go),
// the in-flight limit and the miss flood (overload_test.go), a bounded
// recovery or answer time (failover, TestReplica_GarbageUnderEveryKey),
// a stop with requests in flight, the batch's fold count, and the mixed
// workload (its 2-minute deadline beside another heavy test).

// harness is a real JetStream server with one or more spendgate replicas,
// each on its own connection (as separate processes would be), and a
// client connection for requests.
type harness struct {
	t        testing.TB
	env      *testenv.Env
	replicas []*replica.Replica
	nc       *nats.Conn
	clock    *clock
}

type harnessOpts struct {
	replicas   int
	ledgerOpts []ledger.Option
	noCheck    bool
	// stopMayFail accepts a replica whose follower stopped (a negative
	// control whose blind writes fork a lane).
	stopMayFail bool
	// lanes of the ledger stream (default 1: every Tx commits as one lane
	// revision; more lanes put multi-scope Txs on the atomic batch path).
	lanes int
	// maxInFlight is passed to every replica, metrics to the first.
	maxInFlight int
	metrics     *metrics.Set
	// reports runs the spend report aggregator in every replica, with
	// reportOpts.
	reports    bool
	reportOpts []report.AggregatorOption
	// tenantLimits are passed to every replica, and tenantOwn (serve
	// --tenant-limits) if set.
	tenantLimits service.TenantLimits
	tenantOwn    *service.TenantTable
	// retireIdle is the first replica's serve --retire-idle.
	retireIdle map[string]time.Duration
	// maxPayload is the server's max_payload (0: nats-server's 1 MiB).
	maxPayload int32
}

type clock struct{ now atomicTime }

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.replicas == 0 {
		o.replicas = 1
	}
	layout, err := streams.New(streams.Config{Lanes: o.lanes})
	require.NoError(t, err)
	env := testenv.New(t, testenv.WithLayout(layout), testenv.WithMaxPayload(o.maxPayload))
	h := &harness{t: t, env: env, nc: env.Connect(t), clock: &clock{}}
	h.clock.now.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	for i := 0; i < o.replicas; i++ {
		// A metrics set serves one replica: the first; so do idle rules.
		m, idle := o.metrics, o.retireIdle
		if i > 0 {
			m, idle = nil, nil
		}
		nc := env.Connect(t)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		r, err := replica.Start(ctxT(t), nc, js, replica.Config{
			Layout: env.Layout, Now: h.clock.now.Load, SweepInterval: -1, LedgerOptions: o.ledgerOpts,
			MaxInFlight: o.maxInFlight, Metrics: m, Reports: o.reports, ReportOptions: o.reportOpts,
			TenantLimits: o.tenantLimits, TenantOwn: o.tenantOwn, ServiceConn: env.Connect(t), RetireIdle: idle,
		})
		require.NoError(t, err)
		t.Cleanup(func() {
			if err := r.Stop(); !o.stopMayFail {
				require.NoError(t, err)
			}
		})
		h.replicas = append(h.replicas, r)
	}
	if !o.noCheck {
		// The invariant checker runs after every scenario: replay == live
		// to the last digit, reserved == sum of open reservations, and
		// spent + reserved <= limit at every admission.
		t.Cleanup(func() { h.check() })
	}
	return h
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (h *harness) check() {
	h.t.Helper()
	rep, err := projector.Check(context.Background(), h.env.JS, h.env.Layout)
	require.NoError(h.t, err)
	require.True(h.t, rep.OK(), "invariant check: %s", rep)
}

// callE is call for goroutines other than the test's: it never calls
// require, and returns a transport or decoding failure as err.
func (h *harness) callE(endpoint string, req any, out any) (*events.Error, error) {
	e, _, err := h.requestE(h.env.Layout.Endpoint(endpoint), req, out)
	return e, err
}

// requestE sends req to subject and decodes the reply into out, or
// returns the service's error; msg is the reply.
func (h *harness) requestE(subject string, req any, out any) (e *events.Error, msg *nats.Msg, err error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	msg, err = h.nc.Request(subject, data, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	var er events.ErrorReply
	if err := json.Unmarshal(msg.Data, &er); err != nil {
		return nil, msg, err
	}
	if er.Error != nil {
		return er.Error, msg, nil
	}
	if out != nil {
		return nil, msg, json.Unmarshal(msg.Data, out)
	}
	return nil, msg, nil
}

// failed reports whether any replica's follower stopped on its own.
func (h *harness) failed() bool {
	for _, r := range h.replicas {
		select {
		case <-r.Failed():
			return true
		default:
		}
	}
	return false
}

// call sends req to an endpoint and decodes the reply into out; it returns
// the error reply, if any.
func (h *harness) call(endpoint string, req any, out any) *events.Error {
	h.t.Helper()
	data, ok := req.([]byte)
	if !ok {
		var err error
		data, err = json.Marshal(req)
		require.NoError(h.t, err)
	}
	msg, err := h.nc.Request(h.env.Layout.Endpoint(endpoint), data, 10*time.Second)
	require.NoError(h.t, err)
	var er events.ErrorReply
	require.NoError(h.t, json.Unmarshal(msg.Data, &er), string(msg.Data))
	if er.Error != nil {
		require.Equal(h.t, string(er.Error.Code), msg.Header.Get("Nats-Service-Error"), "micro error header carries the code")
		return er.Error
	}
	if out != nil {
		require.NoError(h.t, json.Unmarshal(msg.Data, out))
	}
	return nil
}

func (h *harness) putBudget(scope, period, limit, unit string) events.BudgetView {
	h.t.Helper()
	var v events.BudgetView
	e := h.call(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: scope, Period: period, Limit: limit, Unit: unit}, &v)
	require.Nil(h.t, e)
	return v
}

func (h *harness) budget(scope, period string) events.BudgetView {
	h.t.Helper()
	var v events.BudgetView
	e := h.call(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: scope, Period: period}, &v)
	require.Nil(h.t, e)
	return v
}

func (h *harness) admit(req events.AdmitRequest) (events.AdmitReply, *events.Error) {
	h.t.Helper()
	var r events.AdmitReply
	e := h.call(streams.EndpointAdmit, req, &r)
	return r, e
}

func (h *harness) settle(id, actual string) (events.CloseReply, *events.Error) {
	h.t.Helper()
	var r events.CloseReply
	e := h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: id, Actual: actual}, &r)
	return r, e
}

func (h *harness) release(id string) (events.CloseReply, *events.Error) {
	h.t.Helper()
	var r events.CloseReply
	e := h.call(streams.EndpointRelease, events.ReleaseRequest{ReservationID: id}, &r)
	return r, e
}

// streamState is what "nothing in the ledger changed" compares: the stream's
// last sequence and message count, and every key's last revision.
// Looking the stream up fetches its info: one request, not a second Info.
func (h *harness) streamState() (uint64, uint64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := h.env.JS.Stream(ctx, h.env.Layout.StreamName())
	require.NoError(h.t, err)
	info := s.CachedInfo()
	return info.State.LastSeq, info.State.Msgs
}
