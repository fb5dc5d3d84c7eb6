package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// TestClient_Admit_replayOfAClosedReservation: an admit retried with the
// same request id and body after its reservation was closed is a replay
// that holds nothing. Admit must not return it as admitted (a nil error),
// or a caller makes the paid call again with nothing reserved: it is an
// ErrConflict, the *events.Error naming the reservation and its status. A
// replay of a reservation still open is admitted as before.
func TestClient_Admit_replayOfAClosedReservation(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")

	for _, tc := range []struct {
		name   string
		close  func(*client.Reservation) error
		code   events.Code
		status string
	}{
		{"settled", func(r *client.Reservation) error { _, err := r.Settle(ctxT(t), "0.05"); return err },
			events.CodeAlreadySettled, events.StatusSettled},
		{"released", func(r *client.Reservation) error { _, err := r.Release(ctxT(t)); return err },
			events.CodeAlreadyReleased, events.StatusReleased},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := admitReq("0.10", "org:acme")
			req.RequestID = "replay-" + tc.name
			res, err := c.Admit(ctxT(t), req)
			require.NoError(t, err)

			again, err := c.Admit(ctxT(t), req)
			require.NoError(t, err, "a replay of an open reservation is admitted")
			require.True(t, again.Reply().Replayed)
			require.Equal(t, events.StatusOpen, again.Reply().Status)
			require.Equal(t, res.ID(), again.ID())

			require.NoError(t, tc.close(res))
			again, err = c.Admit(ctxT(t), req)
			require.Nil(t, again, "a replay of a %s reservation is not admitted", tc.status)
			ee := requireRefused(t, err, client.ErrConflict, tc.code)
			require.Equal(t, res.ID(), ee.ReservationID)
			require.Equal(t, tc.status, ee.Status)

			// Call keeps the replayed reply in its Outcome.
			out, err := client.Call(ctxT(t), c, req, func(ctx context.Context) (string, error) {
				t.Error("the call ran under a closed reservation")
				return "", nil
			})
			ee = requireRefused(t, err, client.ErrConflict, tc.code)
			require.Equal(t, tc.status, ee.Status)
			require.True(t, out.Admit.Replayed)
			require.Equal(t, res.ID(), out.Admit.ReservationID)
			require.Equal(t, tc.status, out.Admit.Status)
			requireMoney(t, "0.10", out.Admit.Amount)
			require.False(t, out.Called)
		})
	}
	v := budget(t, c, "org:acme")
	requireMoney(t, "0.05", v.Spent)
	requireMoney(t, "0", v.Reserved)
}
