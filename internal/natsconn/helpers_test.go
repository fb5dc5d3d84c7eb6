package natsconn_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/testcert"
)

// newCA is testcert.NewCA.
func newCA(t *testing.T, dir, name string) *testcert.CA { return testcert.NewCA(t, dir, name) }

// startConf starts a nats-server from a config file body (listen is added:
// 127.0.0.1, a random port) and stops it when t ends.
func startConf(t *testing.T, body string) *server.Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.conf")
	require.NoError(t, os.WriteFile(path, []byte("listen: \"127.0.0.1:-1\"\n"+body), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err, "server config:\n%s", body)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second), "server not ready")
	return s
}
