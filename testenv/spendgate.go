package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/replica"
)

// Spendgate configures the replica StartSpendgate starts. The zero value
// is a replica as spendgate serve runs one by default.
type Spendgate struct {
	// Now is the replica's clock for admits, settles and expiries
	// (default time.Now): a test that moves it expires reservations
	// without waiting.
	Now func() time.Time
	// SweepInterval is how often the replica releases expired
	// reservations (0: every second); negative: never.
	SweepInterval time.Duration
	// Feed runs the live event feed relay; Reports keeps the spend report
	// the report endpoint answers.
	Feed, Reports bool
}

// Replica is a spendgate replica StartSpendgate started.
type Replica struct{ r *replica.Replica }

// Stop stops the replica as a graceful shutdown of spendgate serve does.
// StartSpendgate stops it when the test ends; Stop is for a test that
// needs it stopped earlier, and may be called more than once.
func (r *Replica) Stop() error { return r.r.Stop() }

// StartSpendgate starts a spendgate replica on its own connection to the
// environment's server (as a separate process would be) and stops it
// when t ends. Requests go to e.Layout.Endpoint(...) on any connection;
// package client talks to it too. Call it more than once for several
// replicas.
func (e *Env) StartSpendgate(t testing.TB, cfg Spendgate) *Replica {
	t.Helper()
	nc := connect(t, e.URL(), t.Name()+"-spendgate")
	js, err := jetstream.New(nc)
	require.NoError(t, err, "testenv: jetstream for spendgate")
	ctx, cancel := context.WithTimeout(context.Background(), SetupTimeout)
	defer cancel()
	// The endpoints on a connection of their own, as spendgate serve has
	// them (replica.Config.ServiceConn).
	snc := connect(t, e.URL(), t.Name()+"-spendgate-endpoints")
	r, err := replica.Start(ctx, nc, js, replica.Config{Layout: e.Layout, Now: cfg.Now, SweepInterval: cfg.SweepInterval, Feed: cfg.Feed, Reports: cfg.Reports, ServiceConn: snc})
	require.NoError(t, err, "testenv: start spendgate")
	t.Cleanup(func() { _ = r.Stop() })
	return &Replica{r}
}
