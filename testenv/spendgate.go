package testenv

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/service"
)

// StartSpendgate starts a spendgate replica on its own connection to the
// environment's server (as a separate process would be), with cfg.Layout
// defaulting to the environment's layout, and stops it when t ends. Requests
// go to e.Layout.Endpoint(...) on any connection; package client talks to it
// too. Call it more than once for several replicas.
func (e *Env) StartSpendgate(t testing.TB, cfg service.ReplicaConfig) *service.Replica {
	t.Helper()
	if cfg.Layout.Bucket() == "" {
		cfg.Layout = e.Layout
	}
	nc := connect(t, e.URL(), t.Name()+"-spendgate")
	js, err := jetstream.New(nc)
	require.NoError(t, err, "testenv: jetstream for spendgate")
	ctx, cancel := context.WithTimeout(context.Background(), SetupTimeout)
	defer cancel()
	r, err := service.StartReplica(ctx, nc, js, cfg)
	require.NoError(t, err, "testenv: start spendgate")
	t.Cleanup(func() { _ = r.Stop() })
	return r
}
