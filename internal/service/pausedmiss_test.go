package service_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/testenv"
)

// TestCluster_MissWithoutLeader: a settle through a replica that has not
// folded the reservation must read the stream's end first, and only the
// stream's leader knows it. Here the ledger stream's leader and one
// follower are paused (SIGSTOP) and the node left running is the follower
// that was paused while the reservation was admitted, so its copy lacks
// it. While the stream has no leader, that node answers a stream info
// request from its own copy (nats-server answers stream info from any
// replica of a leaderless stream).
//
// An earlier build's replica took that answer as the stream's end: a
// settle of a reservation it had never seen was answered
// unknown_reservation at once, without the stream's end being known (this
// test failed so on that build: "settle of an unknown id answered
// unknown_reservation", every run), and so was the settle of the
// acknowledged reservation whenever the replica's follower read from the
// stale node. Now the end is read through the leader (ledger: streamEnd):
// ledger_unavailable until a leader is back, then settled.
func TestCluster_MissWithoutLeader(t *testing.T) {
	soak.Only(t) // it waits out elections of a paused cluster
	if testing.Short() {
		t.Skip("builds and runs node processes")
	}
	c := startProcCluster(t, 3)
	connect := func(name string) (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(c.urls(), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
			nats.PingInterval(nodePing), nats.MaxPingsOutstanding(2))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return nc, js
	}
	start := func(name string) *replica.Replica {
		nc, js := connect(name)
		r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: c.layout, SweepInterval: -1})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Stop() })
		return r
	}
	a, b := start("replica-a"), start("replica-b")
	_, err := a.Ledger.PutBudget(ctxT(t), events.BudgetRef{Scope: "org:paused", Period: events.PeriodMonth}, events.MustMoney("1000"), "USD", time.Now())
	require.NoError(t, err)
	c.awaitCurrent()
	leader := c.leader()
	require.GreaterOrEqual(t, leader, 0)
	stale, other := (leader+1)%3, (leader+2)%3

	// The admit is acknowledged by the leader and one follower; the stale
	// node is paused meanwhile.
	c.signal(stale, syscall.SIGSTOP)
	w, err := a.Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: "w", Scopes: []string{"org:paused"}, Amount: "1"})
	require.NoError(t, err)
	require.True(t, w.Admitted)
	c.signal(leader, syscall.SIGSTOP)
	c.signal(other, syscall.SIGSTOP)
	c.signal(stale, syscall.SIGCONT)
	paused := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			c.signal(leader, syscall.SIGCONT)
			c.signal(other, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	_, bHad := b.Ledger.Reservation(w.ReservationID)

	// Wait until the stale node takes the stream as leaderless (after an
	// election timeout without a quorum): it then answers stream info.
	_, pjs := connect("probe")
	answered := false
	deadline := time.Now().Add(30 * time.Second)
	for !answered && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := pjs.Stream(ctx, c.layout.StreamName())
		cancel()
		answered = err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader == ""
	}
	t.Logf("stream info answered without a leader: %v, %v after the pause; replica b had folded the admit: %v", answered, time.Since(paused).Round(time.Millisecond), bHad)

	for _, id := range []string{"rsv_01a00000-0000-7000-8000-000000000000", w.ReservationID} {
		// Without a leader the answer is ledger_unavailable at the
		// deadline (an earlier build answered unknown_reservation at once).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		cr, err := b.Settler.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: "1"})
		cancel()
		t.Logf("settle of %s with no leader: %+v %v", id, cr, err)
		require.NotEqual(t, events.CodeUnknownReservation, events.CodeOf(err), "settle of %s answered unknown_reservation without the stream's end", id)
		require.Equal(t, events.CodeLedgerUnavailable, events.CodeOf(err), "nothing can be written without a leader")
	}

	resume()
	c.awaitCurrent()
	testenv.WaitFor(t, time.Minute, "the settle once a leader is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cr, err := b.Settler.Settle(ctx, events.SettleRequest{ReservationID: w.ReservationID, Actual: "1"})
		require.NotEqual(t, events.CodeUnknownReservation, events.CodeOf(err))
		return err == nil && cr.Status == events.StatusSettled
	})
}
