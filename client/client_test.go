package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// Named bounds of these tests.
const (
	// testTimeout bounds every test's context.
	testTimeout = time.Minute
	// waitTimeout bounds every wait on a condition.
	waitTimeout = 10 * time.Second
	// shortTimeout is the per-attempt timeout of tests that wait for it to
	// pass.
	shortTimeout = 200 * time.Millisecond
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startService starts a spendgate replica on its own connection (as a
// separate process would be), stops it when t ends, and then runs the
// invariant checker: replay == live, reserved == sum of open reservations,
// spent + reserved <= limit.
func startService(t *testing.T, env *testenv.Env) *replica.Replica {
	t.Helper()
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: env.Layout, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, r.Stop())
		rep, err := projector.Check(context.Background(), env.JS, env.Layout)
		require.NoError(t, err)
		require.True(t, rep.OK(), "invariant check: %s", rep)
	})
	return r
}

func newClient(t *testing.T, nc *nats.Conn, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(nc, opts...)
	require.NoError(t, err)
	return c
}

func putBudget(t *testing.T, c *client.Client, scope, limit string) {
	t.Helper()
	v, err := c.PutBudget(ctxT(t), events.BudgetPutRequest{Scope: scope, Period: "month", Limit: limit, Unit: "USD"})
	require.NoError(t, err)
	require.Equal(t, events.Scope(scope), v.Scope)
}

func budget(t *testing.T, c *client.Client, scope string) events.BudgetView {
	t.Helper()
	v, err := c.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: scope, Period: "month"})
	require.NoError(t, err)
	return v
}

func admitReq(amount string, scopes ...string) events.AdmitRequest {
	return events.AdmitRequest{Scopes: scopes, Amount: amount, Unit: "USD"}
}

// requireUnavailableDenial checks a fail-closed denial.
func requireUnavailableDenial(t *testing.T, res *client.Reservation, err error) *client.DeniedError {
	t.Helper()
	require.Nil(t, res)
	require.ErrorIs(t, err, client.ErrDenied)
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.ErrorIs(t, err, client.ErrLedgerUnavailable, "the deprecated name is the same sentinel")
	require.NotErrorIs(t, err, client.ErrInvalid)
	var ee *events.Error
	require.False(t, errors.As(err, &ee), "an outage is not an *events.Error: %v", err)
	var ue *client.UnavailableError
	require.ErrorAs(t, err, &ue)
	var de *client.DeniedError
	require.ErrorAs(t, err, &de)
	require.Equal(t, events.ReasonLedgerUnavailable, de.Denial.Reason)
	require.NotEmpty(t, de.RequestID)
	return de
}

func TestNew_options(t *testing.T) {
	env := testenv.New(t)
	for _, tc := range []struct {
		name string
		opts []client.Option
		ok   bool
	}{
		{"defaults", nil, true},
		{"all valid", []client.Option{client.WithPrefix("a.b."), client.WithTimeout(time.Second), client.WithRetries(1),
			client.WithFailOpen(slog.New(slog.DiscardHandler)), client.WithLogger(slog.New(slog.DiscardHandler))}, true},
		{"prefix empty", []client.Option{client.WithPrefix("")}, false},
		{"prefix without dot", []client.Option{client.WithPrefix("spendgate")}, false},
		{"prefix wildcard", []client.Option{client.WithPrefix("a.*.")}, false},
		{"prefix leading dot", []client.Option{client.WithPrefix(".a.")}, false},
		{"timeout zero", []client.Option{client.WithTimeout(0)}, false},
		{"timeout negative", []client.Option{client.WithTimeout(-time.Second)}, false},
		{"timeout too long", []client.Option{client.WithTimeout(client.MaxTimeout + 1)}, false},
		{"retries zero", []client.Option{client.WithRetries(0)}, false},
		{"retries too many", []client.Option{client.WithRetries(client.MaxAttempts + 1)}, false},
		{"fail-open without logger", []client.Option{client.WithFailOpen(nil)}, false},
		{"nil logger", []client.Option{client.WithLogger(nil)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(env.Conn, tc.opts...)
			if tc.ok {
				require.NoError(t, err)
				require.NotNil(t, c)
			} else {
				require.Error(t, err)
				require.Nil(t, c)
			}
		})
	}
	_, err := client.New(nil)
	require.Error(t, err)
}

// No spendgate service is started: nobody subscribes to the admit subject.
func TestClient_Admit_noResponders(t *testing.T) {
	env := testenv.New(t)
	const attempts = 3
	c := newClient(t, env.Conn, client.WithTimeout(shortTimeout), client.WithRetries(attempts))
	// No wall-clock assertion: ctxT bounds the call, and a client that
	// hung instead of failing closed would fail through it.
	res, err := c.Admit(ctxT(t), admitReq("0.10", "org:acme"))
	de := requireUnavailableDenial(t, res, err)
	require.ErrorIs(t, err, nats.ErrNoResponders)
	requireMoney(t, "0.10", de.Denial.Requested)
	require.Contains(t, err.Error(), "ledger_unavailable")
}

// A responder that takes every request and never answers.
func TestClient_Admit_noReply(t *testing.T) {
	env := testenv.New(t)
	const attempts = 3
	got := make(chan *nats.Msg, 2*attempts)
	sub, err := env.Conn.ChanSubscribe(env.Layout.Endpoint(streams.EndpointAdmit), got)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, env.Conn.Flush())

	c := newClient(t, env.Connect(t), client.WithTimeout(shortTimeout), client.WithRetries(attempts))
	res, err := c.Admit(ctxT(t), admitReq("0.10", "org:acme"))
	de := requireUnavailableDenial(t, res, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Every attempt was made (and timed out: nobody answers), no more.
	require.Len(t, got, attempts, "one request per attempt")

	// Every attempt carried the request id Admit generated.
	for i := range attempts {
		select {
		case m := <-got:
			var req events.AdmitRequest
			require.NoError(t, json.Unmarshal(m.Data, &req))
			require.Equal(t, de.RequestID, req.RequestID, "attempt %d", i+1)
		case <-time.After(waitTimeout):
			t.Fatalf("attempt %d never arrived", i+1)
		}
	}
	require.Empty(t, got, "no attempt beyond the budget")
}

// A responder answering with micro service errors, as the service does.
func TestClient_Admit_serviceErrors(t *testing.T) {
	for _, tc := range []struct {
		name        string
		code        events.Code
		status      string
		noBody      bool
		attempts    int // requests the responder sees
		unavailable bool
		// class is the sentinel a refusal matches (unavailable: none).
		class error
	}{
		{"busy is retried, then fails closed", events.CodeLedgerBusy, "503", false, 3, true, nil},
		{"unavailable is retried, then fails closed", events.CodeLedgerUnavailable, "503", false, 3, true, nil},
		{"internal fails closed at once", events.CodeInternal, "500", false, 1, true, nil},
		{"validation is the caller's bug", events.CodeInvalidAmount, "400", false, 1, false, client.ErrInvalid},
		{"headers only", events.CodeInvalidIdentifier, "400", true, 1, false, client.ErrInvalid},
		{"mismatch is a conflict", events.CodeIdempotencyMismatch, "409", false, 1, false, client.ErrConflict},
		{"a tenant's limit is not retried", events.CodeTenantLimit, "429", false, 1, false, client.ErrLimited},
		{"unknown 429 code is a limit", "tenant_quota", "429", false, 1, false, client.ErrLimited},
		// Codes of a newer service: the status header classifies them.
		{"unknown 503 code fails closed", "ledger_overloaded", "503", false, 1, true, nil},
		{"unknown 409 code is a conflict", "already_frozen", "409", false, 1, false, client.ErrConflict},
		{"unknown 404 code is not found", "unknown_tenant", "404", false, 1, false, client.ErrNotFound},
		{"unknown 400 code is the caller's bug", "invalid_model", "400", false, 1, false, client.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.New(t)
			var mu sync.Mutex
			ids := map[string]int{}
			sub, err := env.Conn.Subscribe(env.Layout.Endpoint(streams.EndpointAdmit), func(m *nats.Msg) {
				var req events.AdmitRequest
				_ = json.Unmarshal(m.Data, &req)
				mu.Lock()
				ids[req.RequestID]++
				mu.Unlock()
				reply := &nats.Msg{Header: nats.Header{}}
				reply.Header.Set("Nats-Service-Error-Code", tc.status)
				reply.Header.Set("Nats-Service-Error", string(tc.code))
				if !tc.noBody {
					reply.Data, _ = json.Marshal(events.ErrorReply{Error: &events.Error{Code: tc.code, Message: "from the fake"}})
				}
				_ = m.RespondMsg(reply)
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			require.NoError(t, env.Conn.Flush())

			c := newClient(t, env.Connect(t), client.WithTimeout(2*time.Second), client.WithRetries(3))
			req := admitReq("0.10", "org:acme")
			req.RequestID = "req-1"
			res, err := c.Admit(ctxT(t), req)
			require.Nil(t, res)
			if tc.unavailable {
				de := requireUnavailableDenial(t, res, err)
				require.Equal(t, "req-1", de.RequestID)
				var ue *client.UnavailableError
				require.ErrorAs(t, err, &ue)
				require.Equal(t, tc.code, ue.Code, "the service's code is kept")
			} else {
				var ee *events.Error
				require.ErrorAs(t, err, &ee)
				require.Equal(t, tc.code, ee.Code)
				require.ErrorIs(t, err, tc.class)
				require.NotErrorIs(t, err, client.ErrDenied)
				require.NotErrorIs(t, err, client.ErrUnavailable)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[string]int{"req-1": tc.attempts}, ids)
		})
	}
}

// dropProxy stands between a client with prefix "test." and the service:
// it forwards every request, and drops the reply of the first request to
// each endpoint in drop, so that the client times out and retries.
type dropProxy struct {
	mu   sync.Mutex
	seen map[string][]string // endpoint -> request bodies, in order
}

func newDropProxy(t *testing.T, env *testenv.Env, drop ...string) *dropProxy {
	t.Helper()
	p := &dropProxy{seen: map[string][]string{}}
	nc := env.Connect(t)
	sub, err := nc.Subscribe("test.>", func(m *nats.Msg) {
		endpoint := strings.TrimPrefix(m.Subject, "test.")
		p.mu.Lock()
		p.seen[endpoint] = append(p.seen[endpoint], string(m.Data))
		first := len(p.seen[endpoint]) == 1
		p.mu.Unlock()
		// A synchronous forward: the subscription handles one message at a
		// time, so a retry is forwarded only after the dropped original
		// was answered.
		reply, err := nc.RequestMsg(&nats.Msg{Subject: env.Layout.Endpoint(endpoint), Data: m.Data, Header: m.Header}, waitTimeout)
		if err != nil {
			t.Errorf("proxy: forward %s: %v", endpoint, err)
			return
		}
		if first {
			for _, d := range drop {
				if d == endpoint {
					return
				}
			}
		}
		if err := m.RespondMsg(&nats.Msg{Data: reply.Data, Header: reply.Header}); err != nil {
			t.Errorf("proxy: respond %s: %v", endpoint, err)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return p
}

func (p *dropProxy) requests(endpoint string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen[endpoint]...)
}

func TestClient_Admit_retryAfterLostReply(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	p := newDropProxy(t, env, streams.EndpointAdmit, streams.EndpointSettle)
	c := newClient(t, env.Connect(t), client.WithPrefix("test."), client.WithTimeout(500*time.Millisecond), client.WithRetries(3))
	putBudget(t, c, "org:acme", "1.00")

	res, err := c.Admit(ctxT(t), admitReq("0.40", "org:acme"))
	require.NoError(t, err)
	require.True(t, res.Reply().Replayed, "the retry got the stored answer")
	sent := p.requests(streams.EndpointAdmit)
	require.GreaterOrEqual(t, len(sent), 2, "the first reply was dropped, so the client retried")
	for i, body := range sent {
		var req events.AdmitRequest
		require.NoError(t, json.Unmarshal([]byte(body), &req))
		require.Equal(t, res.RequestID(), req.RequestID, "every attempt carries the same request id")
		require.Equal(t, i > 0, req.Retry, "every attempt after the first is marked a retry (attempt %d)", i+1)
	}
	v := budget(t, c, "org:acme")
	requireMoney(t, "0.40", v.Reserved, "reserved once")
	require.Equal(t, int64(1), v.Open)

	// Settle's first reply is lost too: the retry is answered as a replay
	// and the spend is counted once.
	cr, err := res.Settle(ctxT(t), "0.30")
	require.NoError(t, err)
	require.True(t, cr.Replayed)
	require.Equal(t, events.StatusSettled, cr.Status)
	require.GreaterOrEqual(t, len(p.requests(streams.EndpointSettle)), 2)
	v = budget(t, c, "org:acme")
	requireMoney(t, "0.30", v.Spent)
	requireMoney(t, "0", v.Reserved)
	require.Equal(t, int64(0), v.Open)
}

func TestReservation_cancelledContext(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")

	t.Run("Release", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctxT(t))
		res, err := c.Admit(ctx, admitReq("0.40", "org:acme"))
		require.NoError(t, err)
		requireMoney(t, "0.40", budget(t, c, "org:acme").Reserved)
		cancel()
		cr, err := res.Release(ctx)
		require.NoError(t, err)
		require.Equal(t, events.StatusReleased, cr.Status)
		require.Equal(t, res.ID(), cr.ReservationID)
		v := budget(t, c, "org:acme")
		requireMoney(t, "0", v.Reserved)
		require.Equal(t, int64(0), v.Open)

		// Releasing again is answered as a replay.
		cr, err = res.Release(ctx)
		require.NoError(t, err)
		require.True(t, cr.Replayed)
	})
	t.Run("Settle past the caller's deadline", func(t *testing.T) {
		res, err := c.Admit(ctxT(t), admitReq("0.40", "org:acme"))
		require.NoError(t, err)
		ctx, cancel := context.WithDeadline(ctxT(t), time.Now().Add(-time.Second))
		defer cancel()
		require.Error(t, ctx.Err())
		cr, err := res.Settle(ctx, "0.25")
		require.NoError(t, err)
		require.Equal(t, events.StatusSettled, cr.Status)
		requireMoney(t, "0.25", cr.Actual)
		v := budget(t, c, "org:acme")
		requireMoney(t, "0.25", v.Spent)
		requireMoney(t, "0", v.Reserved)
	})
	t.Run("Admit with a cancelled context is not admitted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctxT(t))
		cancel()
		res, err := c.Admit(ctx, admitReq("0.10", "org:acme"))
		require.Nil(t, res)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, client.ErrLedgerUnavailable)
	})
}

func TestClient_Admit_failOpen(t *testing.T) {
	env := testenv.New(t)
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	c := newClient(t, env.Conn, client.WithFailOpen(logger), client.WithTimeout(shortTimeout), client.WithRetries(2))

	req := admitReq("0.10", "org:acme")
	req.RequestID = "open-1"
	res, err := c.Admit(ctxT(t), req)
	require.NoError(t, err)
	require.True(t, res.FailedOpen())
	require.Empty(t, res.ID())
	require.Equal(t, "open-1", res.RequestID())
	requireMoney(t, "0.10", res.Amount())
	require.True(t, res.Reply().Admitted)
	require.True(t, res.ExpiresAt().IsZero())
	logged := buf.String()
	require.Contains(t, logged, "level=WARN")
	require.Contains(t, logged, "fail-open")
	require.Contains(t, logged, "request_id=open-1")

	buf.Reset()
	cr, err := res.Settle(ctxT(t), "0.05")
	require.NoError(t, err)
	require.Equal(t, events.CloseReply{}, cr)
	require.Contains(t, buf.String(), "level=WARN")
	require.Contains(t, buf.String(), "not recorded")

	buf.Reset()
	_, err = res.Release(ctxT(t))
	require.NoError(t, err)
	require.Contains(t, buf.String(), "level=WARN")

	// With the ledger up, fail-open changes nothing: budgets still deny.
	startService(t, env)
	putBudget(t, c, "org:acme", "0.10")
	buf.Reset()
	res, err = c.Admit(ctxT(t), admitReq("0.20", "org:acme"))
	require.Nil(t, res)
	require.ErrorIs(t, err, client.ErrDenied)
	require.NotErrorIs(t, err, client.ErrLedgerUnavailable)
	res, err = c.Admit(ctxT(t), admitReq("0.05", "org:nobody"))
	require.Nil(t, res)
	var de *client.DeniedError
	require.ErrorAs(t, err, &de)
	require.Equal(t, events.ReasonUnknownBudget, de.Denial.Reason)
	res, err = c.Admit(ctxT(t), admitReq("0.05", "org:acme"))
	require.NoError(t, err)
	require.False(t, res.FailedOpen())
	_, err = res.Release(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, buf.String(), "nothing failed open")
}

func TestClient_Admit_denied(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")

	first, err := c.Admit(ctxT(t), admitReq("0.60", "org:acme"))
	require.NoError(t, err)
	require.NotEmpty(t, first.ID())
	require.NotEmpty(t, first.RequestID())
	requireMoney(t, "0.60", first.Amount())
	require.Equal(t, "USD", first.Unit())
	require.False(t, first.FailedOpen())
	require.True(t, first.ExpiresAt().After(time.Now()))
	require.Len(t, first.Balances(), 1)
	require.Equal(t, events.Scope("org:acme"), first.Balances()[0].Scope)

	req := admitReq("0.60", "org:acme")
	req.RequestID = "second"
	res, err := c.Admit(ctxT(t), req)
	require.Nil(t, res)
	require.ErrorIs(t, err, client.ErrDenied)
	require.NotErrorIs(t, err, client.ErrLedgerUnavailable)
	var de *client.DeniedError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "second", de.RequestID)
	require.Nil(t, de.Err)
	d := de.Denial
	require.Equal(t, events.ReasonLimitReached, d.Reason)
	require.Equal(t, events.Scope("org:acme"), d.Scope)
	require.Equal(t, events.Period("month"), d.Period)
	requireMoney(t, "1.00", d.Limit)
	requireMoney(t, "0", d.Spent)
	requireMoney(t, "0.60", d.Reserved)
	requireMoney(t, "0.60", d.Requested)
	require.Contains(t, err.Error(), "limit_reached")

	// The denial reserved nothing.
	requireMoney(t, "0.60", budget(t, c, "org:acme").Reserved)

	// An invalid request is the caller's bug, not a denial.
	res, err = c.Admit(ctxT(t), admitReq("-1", "org:acme"))
	require.Nil(t, res)
	require.NotErrorIs(t, err, client.ErrDenied)
	var ee *events.Error
	require.ErrorAs(t, err, &ee)
	require.Equal(t, events.CodeInvalidAmount, ee.Code)
	require.ErrorIs(t, err, &events.Error{Code: events.CodeInvalidAmount})

	_, err = first.Release(ctxT(t))
	require.NoError(t, err)
}

func TestClient_budgets(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")
	putBudget(t, c, "user:u-1", "0.50")

	list, err := c.ListBudgets(ctxT(t), "org")
	require.NoError(t, err)
	require.Len(t, list.Budgets, 1)
	require.Equal(t, events.Scope("org:acme"), list.Budgets[0].Scope)
	list, err = c.ListBudgets(ctxT(t), "")
	require.NoError(t, err)
	require.Len(t, list.Budgets, 2)

	_, err = c.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "org:nobody", Period: "month"})
	var ee *events.Error
	require.ErrorAs(t, err, &ee)
	require.Equal(t, events.CodeUnknownBudget, ee.Code)

	_, err = c.PutBudget(ctxT(t), events.BudgetPutRequest{Scope: "org:a.b", Period: "month", Limit: "1", Unit: "USD"})
	require.ErrorAs(t, err, &ee)
	require.Equal(t, events.CodeInvalidIdentifier, ee.Code)

	_, err = c.Settle(ctxT(t), events.SettleRequest{ReservationID: "nope", Actual: "1"})
	require.ErrorAs(t, err, &ee)
	require.Equal(t, events.CodeUnknownReservation, ee.Code)
	_, err = c.Release(ctxT(t), events.ReleaseRequest{ReservationID: "nope"})
	require.ErrorAs(t, err, &ee)
	require.Equal(t, events.CodeUnknownReservation, ee.Code)
}

func TestDo(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")
	errUpstream := errors.New("upstream: 502")

	t.Run("call fails: released", func(t *testing.T) {
		ran := false
		err := client.Do(ctxT(t), c, admitReq("0.50", "org:acme"), func(ctx context.Context) (string, error) {
			ran = true
			requireMoney(t, "0.50", budget(t, c, "org:acme").Reserved, "reserved during the call")
			return "", errUpstream
		})
		require.True(t, ran)
		require.ErrorIs(t, err, errUpstream)
		v := budget(t, c, "org:acme")
		requireMoney(t, "0", v.Reserved)
		requireMoney(t, "0", v.Spent)
	})
	t.Run("call fails and cancels the caller: still released", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctxT(t))
		err := client.Do(ctx, c, admitReq("0.50", "org:acme"), func(ctx context.Context) (string, error) {
			cancel()
			return "", ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		requireMoney(t, "0", budget(t, c, "org:acme").Reserved)
	})
	t.Run("call panics: released", func(t *testing.T) {
		require.Panics(t, func() {
			_ = client.Do(ctxT(t), c, admitReq("0.50", "org:acme"), func(context.Context) (string, error) {
				panic("boom")
			})
		})
		requireMoney(t, "0", budget(t, c, "org:acme").Reserved)
	})
	t.Run("call succeeds: settled", func(t *testing.T) {
		err := client.Do(ctxT(t), c, admitReq("0.50", "org:acme"), func(context.Context) (string, error) {
			return "0.25", nil
		})
		require.NoError(t, err)
		v := budget(t, c, "org:acme")
		requireMoney(t, "0", v.Reserved)
		requireMoney(t, "0.25", v.Spent)
	})
	t.Run("denied: call not run", func(t *testing.T) {
		err := client.Do(ctxT(t), c, admitReq("0.80", "org:acme"), func(context.Context) (string, error) {
			t.Error("call ran despite the denial")
			return "0", nil
		})
		require.ErrorIs(t, err, client.ErrDenied)
		requireMoney(t, "0.25", budget(t, c, "org:acme").Spent)
	})
	t.Run("bad actual: settle error", func(t *testing.T) {
		err := client.Do(ctxT(t), c, admitReq("0.10", "org:acme"), func(context.Context) (string, error) {
			return "not-a-number", nil
		})
		var ee *events.Error
		require.ErrorAs(t, err, &ee)
		require.Equal(t, events.CodeInvalidAmount, ee.Code)
		// The reservation stays open until it expires.
		list, err := c.ListBudgets(ctxT(t), "org")
		require.NoError(t, err)
		require.Equal(t, int64(1), list.Budgets[0].Open)
	})
}

// requireMoney checks that got is the decimal want, whatever its scale
// ("0.40" equals "0.4").
func requireMoney(t *testing.T, want, got string, msgAndArgs ...any) {
	t.Helper()
	w, err := events.ParseMoney(want)
	require.NoError(t, err, "want %q", want)
	g, err := events.ParseMoney(got)
	require.NoError(t, err, "got %q", got)
	require.Zero(t, w.Cmp(g), append([]any{"want %s, got %s", want, got}, msgAndArgs...)...)
}

// TestClient_PutBudgetChangeAndPricing: PutBudget reports what the put did
// (created, changed, previous); a model priced with PutPrice admits from
// token counts, and SettleUsage settles at the admit's price version.
func TestClient_PutBudgetChangeAndPricing(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t))
	put, err := c.PutBudget(ctxT(t), events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1", Unit: "USD"})
	require.NoError(t, err)
	require.True(t, put.Created)
	require.Empty(t, put.Changed)
	put, err = c.PutBudget(ctxT(t), events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "2", Unit: "USD"})
	require.NoError(t, err)
	require.False(t, put.Created)
	require.Equal(t, []string{"limit"}, put.Changed)
	require.Equal(t, "1", put.Previous.Limit)
	require.Equal(t, "2", put.Limit)

	p, err := c.PutPrice(ctxT(t), events.PricingPutRequest{Model: "gpt-x", Input: "2.5", Output: "10"})
	require.NoError(t, err)
	got, err := c.GetPrice(ctxT(t), "gpt-x")
	require.NoError(t, err)
	require.Equal(t, p.PriceView, got)
	_, err = c.GetPrice(ctxT(t), "gpt-none")
	require.ErrorIs(t, err, client.ErrNotFound)

	res, err := c.Admit(ctxT(t), events.AdmitRequest{Scopes: []string{"org:acme"}, Model: "gpt-x", InputTokens: 1000, MaxOutputTokens: 1000})
	require.NoError(t, err)
	require.Equal(t, "0.0125", res.Amount())
	_, err = c.PutPrice(ctxT(t), events.PricingPutRequest{Model: "gpt-x", Input: "100", Output: "100"})
	require.NoError(t, err)
	cl, err := res.SettleUsage(ctxT(t), events.Usage{InputTokens: 1000, OutputTokens: 200})
	require.NoError(t, err)
	require.Equal(t, "0.0045", cl.Actual, "priced at the admit's version: 1000 x 2.5 + 200 x 10 per million")
	require.Equal(t, p.Version, cl.Usage.PriceVersion)
}
