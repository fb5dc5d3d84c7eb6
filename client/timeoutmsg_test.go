package client_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// A settle that no replica answers: its error says once that no reply
// came within the timeout (it said it twice when the reply mux's timer
// ended the attempt: "no reply within 200ms: no reply within 200ms").
func TestClient_noReplyErrorNamesTheTimeoutOnce(t *testing.T) {
	env := testenv.New(t)
	sub, err := env.Conn.Subscribe(env.Layout.Endpoint(streams.EndpointSettle), func(*nats.Msg) {})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, env.Conn.Flush())

	c := newClient(t, env.Connect(t), client.WithTimeout(shortTimeout), client.WithRetries(1))
	_, err = c.Settle(ctxT(t), events.SettleRequest{ReservationID: "rsv_x", Actual: "0.01"})
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.Equal(t, 1, strings.Count(err.Error(), "no reply within"), "%v", err)
}
