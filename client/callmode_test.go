package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// Call reserves before it calls; a check or shadow admit reserves
// nothing. Call refuses one up front instead of running the call and then
// failing its settle ("settle of  after the successful call:
// invalid_identifier: reservation_id is empty"), which read as spend lost.
func TestCall_refusesCheckAndShadowModes(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Conn)
	putBudget(t, c, "org:acme", "1.00")
	for _, mode := range []string{events.ModeCheck, events.ModeShadow} {
		t.Run(mode, func(t *testing.T) {
			req := admitReq("0.10", "org:acme")
			req.Mode = mode
			out, err := client.Call(ctxT(t), c, req, func(context.Context) (string, error) {
				t.Error("the call ran")
				return "0.05", nil
			})
			require.ErrorIs(t, err, client.ErrInvalid)
			var ee *events.Error
			require.ErrorAs(t, err, &ee)
			require.Equal(t, events.CodeInvalidMode, ee.Code)
			require.False(t, out.Called)
		})
	}
	req := admitReq("0.10", "org:acme")
	req.Mode = events.ModeAdmit
	out, err := client.Call(ctxT(t), c, req, func(context.Context) (string, error) { return "0.05", nil })
	require.NoError(t, err)
	require.Equal(t, events.StatusSettled, out.Close.Status)
}
