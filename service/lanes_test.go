package service_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// A balance written under another lane than the stream's lane count gives
// it has a second compare-and-set guard (a writer with another lane count
// wrote it). A replica must refuse to fold it and not start, rather than
// admit against one of two diverging copies.
func TestReplica_RefusesBalanceInTheWrongLane(t *testing.T) {
	layout, err := streams.New(streams.Config{Lanes: 2})
	require.NoError(t, err)
	env := testenv.New(t, testenv.WithLayout(layout))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ref := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	right := layout.LaneKey(ref)
	wrong := "lane.0"
	if right == wrong {
		wrong = "lane.1"
	}
	rev := events.LaneRevision{Schema: events.SchemaLaneV1, Balances: []events.BalanceRevision{{
		Schema: events.SchemaBalance, Balance: ref, Unit: "USD", Limit: events.MustMoney("10"),
		Spent: events.MustMoney("0"), Reserved: events.MustMoney("0"), Overrun: events.MustMoney("0"), Events: events.Events{},
	}}}
	data, err := json.Marshal(rev)
	require.NoError(t, err)
	_, err = env.JS.Publish(ctx, layout.Subject(wrong), data, jetstream.WithExpectLastSequencePerSubject(0))
	require.NoError(t, err)

	_, err = service.StartReplica(ctx, env.Connect(t), env.JS, service.ReplicaConfig{Layout: layout, SweepInterval: -1, ReadyTimeout: 20 * time.Second})
	require.Error(t, err)
	require.ErrorContains(t, err, "belongs to "+right)
}
