package client_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// TestCall: Call returns what happened (the admit reply with the
// reservation and its status, what the call reported, the settle or release
// reply), and a call that failed after it was billed is settled with its
// actual, not released.
func TestCall(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")
	errUpstream := errors.New("upstream: 502 after streaming half the answer")

	t.Run("success: admit and settle replies", func(t *testing.T) {
		req := admitReq("0.50", "org:acme")
		req.RequestID = "call-ok"
		out, err := client.Call(ctxT(t), c, req, func(context.Context) (string, error) { return "0.25", nil })
		require.NoError(t, err)
		require.True(t, out.Admit.Admitted)
		require.NotEmpty(t, out.Admit.ReservationID)
		require.Equal(t, "call-ok", out.Admit.RequestID)
		requireMoney(t, "0.50", out.Admit.Amount)
		require.Equal(t, events.StatusOpen, out.Admit.Status)
		require.True(t, out.Called)
		require.Equal(t, "0.25", out.Actual)
		require.Equal(t, out.Admit.ReservationID, out.Close.ReservationID)
		require.Equal(t, events.StatusSettled, out.Close.Status)
		requireMoney(t, "0.25", out.Close.Actual)
		requireMoney(t, "0.50", out.Close.Reserved)
		require.False(t, out.FailedOpen)
		v := budget(t, c, "org:acme")
		requireMoney(t, "0.25", v.Spent)
		requireMoney(t, "0", v.Reserved)

		// The same request id again: the admit is a replay of a settled
		// reservation, so the call is not run a second time.
		out, err = client.Call(ctxT(t), c, req, func(context.Context) (string, error) {
			t.Error("call ran again for a settled request id")
			return "0.25", nil
		})
		require.ErrorIs(t, err, client.ErrConflict)
		var ee *events.Error
		require.ErrorAs(t, err, &ee)
		require.Equal(t, events.CodeAlreadySettled, ee.Code)
		require.Equal(t, events.StatusSettled, ee.Status)
		require.True(t, out.Admit.Replayed)
		require.Equal(t, events.StatusSettled, out.Admit.Status)
		require.False(t, out.Called)
		requireMoney(t, "0.25", budget(t, c, "org:acme").Spent, "nothing more spent")
	})
	t.Run("billed, then failed: settled with its actual", func(t *testing.T) {
		out, err := client.Call(ctxT(t), c, admitReq("0.50", "org:acme"), func(context.Context) (string, error) {
			return "0.03", errUpstream
		})
		require.ErrorIs(t, err, errUpstream)
		require.Equal(t, errUpstream, err, "the settle succeeded: call's error comes back unchanged")
		require.True(t, out.Called)
		require.Equal(t, events.StatusSettled, out.Close.Status)
		requireMoney(t, "0.03", out.Close.Actual)
		v := budget(t, c, "org:acme")
		requireMoney(t, "0.28", v.Spent, "the billed cost is recorded, not zeroed")
		requireMoney(t, "0", v.Reserved)
	})
	t.Run("failed without an actual: released", func(t *testing.T) {
		out, err := client.Call(ctxT(t), c, admitReq("0.50", "org:acme"), func(context.Context) (string, error) {
			return "", errUpstream
		})
		require.Equal(t, errUpstream, err)
		require.Equal(t, events.StatusReleased, out.Close.Status)
		require.Equal(t, out.Admit.ReservationID, out.Close.ReservationID)
		v := budget(t, c, "org:acme")
		requireMoney(t, "0.28", v.Spent)
		requireMoney(t, "0", v.Reserved)
	})
	t.Run("billed, failed, and the actual is invalid: both errors", func(t *testing.T) {
		out, err := client.Call(ctxT(t), c, admitReq("0.10", "org:acme"), func(context.Context) (string, error) {
			return "NaN", errUpstream
		})
		require.ErrorIs(t, err, errUpstream)
		require.ErrorIs(t, err, client.ErrInvalid, "the settle's refusal is joined")
		require.Empty(t, out.Close.Status)
		// The reservation stays open until it expires (or is released).
		_, rerr := c.Release(ctxT(t), events.ReleaseRequest{ReservationID: out.Admit.ReservationID})
		require.NoError(t, rerr)
	})
	t.Run("denied: the denial, no call", func(t *testing.T) {
		out, err := client.Call(ctxT(t), c, admitReq("0.90", "org:acme"), func(context.Context) (string, error) {
			t.Error("call ran despite the denial")
			return "0", nil
		})
		require.ErrorIs(t, err, client.ErrDenied)
		require.NotErrorIs(t, err, client.ErrUnavailable)
		require.False(t, out.Admit.Admitted)
		require.NotNil(t, out.Admit.Denial)
		require.Equal(t, events.ReasonLimitReached, out.Admit.Denial.Reason)
		require.False(t, out.Called)
	})
	t.Run("Do settles a billed failure too", func(t *testing.T) {
		err := client.Do(ctxT(t), c, admitReq("0.10", "org:acme"), func(context.Context) (string, error) {
			return "0.02", errUpstream
		})
		require.Equal(t, errUpstream, err)
		requireMoney(t, "0.30", budget(t, c, "org:acme").Spent)
	})
}

// TestCall_panicReleaseFailureIsLogged: when the call panics and the
// release that follows fails (here the ledger went away during the call),
// the release's error is logged at ERROR and the panic goes on unchanged.
func TestCall_panicReleaseFailureIsLogged(t *testing.T) {
	env := testenv.New(t)
	r := startService(t, env)
	var buf bytes.Buffer
	c := newClient(t, env.Connect(t), client.WithTimeout(shortTimeout), client.WithRetries(1),
		client.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	putBudget(t, c, "org:acme", "1.00")

	var got any
	func() {
		defer func() { got = recover() }()
		_, _ = client.Call(ctxT(t), c, admitReq("0.50", "org:acme"), func(context.Context) (string, error) {
			require.NoError(t, r.Stop())
			panic("boom")
		})
	}()
	require.Equal(t, "boom", got, "the panic value is unchanged")
	logged := buf.String()
	require.Contains(t, logged, "level=ERROR")
	require.Contains(t, logged, "release after a panicking call failed")
	require.Contains(t, logged, "ledger_unavailable")
}

// TestClient_sentinels: outages, caller bugs, unknown things and conflicts
// are told apart by sentinel errors, and an outage is never an
// *events.Error.
func TestClient_sentinels(t *testing.T) {
	t.Run("outage", func(t *testing.T) {
		env := testenv.New(t) // no spendgate service
		c := newClient(t, env.Conn, client.WithTimeout(shortTimeout), client.WithRetries(2))
		for name, call := range map[string]func() error{
			"settle": func() error {
				_, err := c.Settle(ctxT(t), events.SettleRequest{ReservationID: "rsv_1", Actual: "1"})
				return err
			},
			"release": func() error { _, err := c.Release(ctxT(t), events.ReleaseRequest{ReservationID: "rsv_1"}); return err },
			"put": func() error {
				_, err := c.PutBudget(ctxT(t), events.BudgetPutRequest{Scope: "org:a", Period: "month", Limit: "1", Unit: "USD"})
				return err
			},
			"list": func() error { _, err := c.ListBudgets(ctxT(t), ""); return err },
		} {
			err := call()
			require.ErrorIs(t, err, client.ErrUnavailable, name)
			require.NotErrorIs(t, err, client.ErrInvalid, name)
			require.NotErrorIs(t, err, client.ErrDenied, name)
			var ee *events.Error
			require.False(t, errors.As(err, &ee), "%s: an outage is not an *events.Error", name)
			var ue *client.UnavailableError
			require.ErrorAs(t, err, &ue, name)
			require.Equal(t, events.CodeLedgerUnavailable, ue.Code, name)
		}
		// Call fails closed.
		out, err := client.Call(ctxT(t), c, admitReq("0.10", "org:acme"), func(context.Context) (string, error) {
			t.Error("call ran without the ledger")
			return "", nil
		})
		require.ErrorIs(t, err, client.ErrDenied)
		require.ErrorIs(t, err, client.ErrUnavailable)
		require.False(t, out.Called)
	})
	t.Run("refusals", func(t *testing.T) {
		env := testenv.New(t)
		startService(t, env)
		c := newClient(t, env.Connect(t))
		putBudget(t, c, "org:acme", "1.00")
		putBudget(t, c, "org:acme2", "1.00")

		_, err := c.Admit(ctxT(t), admitReq("-1", "org:acme"))
		requireRefused(t, err, client.ErrInvalid, events.CodeInvalidAmount)
		_, err = c.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "org:acme"})
		requireRefused(t, err, client.ErrInvalid, events.CodeInvalidPeriod)
		_, err = c.Settle(ctxT(t), events.SettleRequest{ReservationID: "rsv_nope", Actual: "1"})
		requireRefused(t, err, client.ErrNotFound, events.CodeUnknownReservation)
		_, err = c.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "org:ghost", Period: "month"})
		requireRefused(t, err, client.ErrNotFound, events.CodeUnknownBudget)

		req := admitReq("0.10", "org:acme")
		req.RequestID = "sentinel-1"
		res, err := c.Admit(ctxT(t), req)
		require.NoError(t, err)
		require.Equal(t, events.StatusOpen, res.Reply().Status)
		_, err = res.Settle(ctxT(t), "0.05")
		require.NoError(t, err)
		_, err = res.Release(ctxT(t))
		ee := requireRefused(t, err, client.ErrConflict, events.CodeAlreadySettled)
		require.Equal(t, res.ID(), ee.ReservationID)
		require.Equal(t, events.StatusSettled, ee.Status)
		req.Amount = "0.20"
		_, err = c.Admit(ctxT(t), req)
		ee = requireRefused(t, err, client.ErrConflict, events.CodeIdempotencyMismatch)
		require.Equal(t, events.StatusSettled, ee.Status)

		list, err := c.GetScopeBudgets(ctxT(t), "org:acme")
		require.NoError(t, err)
		require.Len(t, list.Budgets, 1)
		require.Equal(t, events.Scope("org:acme"), list.Budgets[0].Scope)
		requireMoney(t, "0.05", list.Budgets[0].Spent)
		_, err = c.GetScopeBudgets(ctxT(t), "org:ghost")
		requireRefused(t, err, client.ErrNotFound, events.CodeUnknownBudget)
	})
}

// requireRefused checks a refusal: the service's *events.Error with code,
// matching exactly the sentinel class among the client's.
func requireRefused(t *testing.T, err error, class error, code events.Code) *events.Error {
	t.Helper()
	var ee *events.Error
	require.ErrorAs(t, err, &ee)
	require.Equal(t, code, ee.Code)
	for _, s := range []error{client.ErrInvalid, client.ErrNotFound, client.ErrConflict, client.ErrUnavailable, client.ErrDenied} {
		if s == class {
			require.ErrorIs(t, err, s)
		} else {
			require.NotErrorIs(t, err, s)
		}
	}
	return ee
}

// TestCall_noActualNoError: a call that returns neither a cost nor an
// error ran and was likely billed. Its settle of "" was refused
// invalid_amount, leaving the reservation held until its TTL and its
// spend unrecorded; it is settled at its whole reservation instead (never
// recorded as zero), noted and logged.
func TestCall_noActualNoError(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	var logs testenv.LogBuffer
	c := newClient(t, env.Connect(t), client.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	putBudget(t, c, "org:acme", "1.00")

	out, err := client.Call(ctxT(t), c, admitReq("0.40", "org:acme"), func(context.Context) (string, error) { return "", nil })
	require.NoError(t, err, "the call succeeded and its spend is recorded")
	require.True(t, out.Called)
	require.Empty(t, out.Actual)
	require.Equal(t, events.StatusSettled, out.Close.Status)
	requireMoney(t, "0.40", out.Close.Actual, "settled at the whole reservation")
	v := budget(t, c, "org:acme")
	requireMoney(t, "0.40", v.Spent)
	requireMoney(t, "0", v.Reserved)
	require.Equal(t, int64(0), v.Open)
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), client.NoteNoActual)
}
