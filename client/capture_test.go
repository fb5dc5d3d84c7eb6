package client_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestClient_StreamAcknowledgementIsNoAnswer: a JetStream stream that
// captures the admit and settle subjects (what a login that may update a
// stream's subjects could make) answers each request with its
// acknowledgement. Admit takes it for an unknown outcome, not a denial:
// a fail-closed ledger_unavailable denial (matching ErrUnavailable, whose
// message says the reply was not a replica's), after voiding the request
// id; Settle returns an *UnavailableError. The stream stored both
// requests, so it was the one that answered. It fails without
// notAnAnswer: the acknowledgement decoded as a denial without a reason
// (code internal, not ErrUnavailable, nothing voided) and as a settle of
// an unnamed reservation.
func TestClient_StreamAcknowledgementIsNoAnswer(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	s, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "CAPTURE",
		Subjects: []string{env.Layout.Endpoint(streams.EndpointAdmit), env.Layout.Endpoint(streams.EndpointSettle)},
	})
	require.NoError(t, err)
	c := newClient(t, env.Connect(t), client.WithTimeout(shortTimeout), client.WithRetries(1))

	res, err := c.Admit(ctx, admitReq("0.10", "org:acme"))
	de := requireUnavailableDenial(t, res, err)
	require.ErrorContains(t, err, "not a replica's answer (neither admitted nor denied)")
	require.Nil(t, de.Void, "the void was tried; no replica here answers it")

	_, err = c.Settle(ctx, events.SettleRequest{ReservationID: "rsv_1", Actual: "0.05"})
	require.ErrorIs(t, err, client.ErrUnavailable)
	var ue *client.UnavailableError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, events.CodeInternal, ue.Code)
	require.ErrorContains(t, err, "not a replica's answer (no reservation_id)")

	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs, "the stream took both requests")
}
