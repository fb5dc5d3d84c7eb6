// Package replicatest starts spendgate replicas in spendgate's own tests,
// with every option of package replica (testenv.StartSpendgate offers the
// few other projects need).
package replicatest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/testenv"
)

// Start starts a replica on its own connection to env's server, with
// cfg.Layout defaulting to env's, and stops it when t ends.
func Start(t testing.TB, env *testenv.Env, cfg replica.Config) *replica.Replica {
	t.Helper()
	if cfg.Layout.Bucket() == "" {
		cfg.Layout = env.Layout
	}
	js, err := jetstream.New(env.Connect(t))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.SetupTimeout)
	defer cancel()
	r, err := replica.Start(ctx, js.Conn(), js, cfg)
	require.NoError(t, err, "start spendgate")
	t.Cleanup(func() { _ = r.Stop() })
	return r
}
