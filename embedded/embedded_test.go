package embedded_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/embedded"
)

// refuseWithin bounds how long a refused Start may take: "at once", far
// below the readiness timeout a refusal used to wait out.
const refuseWithin = 2 * time.Second

func start(t *testing.T, dir string, opts ...embedded.Option) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(dir, opts...)
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return s
}

func TestStart_JetStreamReady(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir, embedded.WithServerName("n1"), embedded.WithSyncAlways(true))
	require.True(t, s.Running())
	require.Equal(t, dir, s.DataDir())
	require.Equal(t, "nats://127.0.0.1:"+strconv.Itoa(s.Addr().Port), s.ClientURL())
	require.NotZero(t, s.Addr().Port)

	nc, err := s.Connect()
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	require.NoError(t, err)

	pid, err := os.ReadFile(filepath.Join(dir, embedded.LockFile))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid())+"\n", string(pid))
}

// A second server on a held data dir is refused at once, naming the
// holder; once the first shuts down the data dir is free again.
func TestStart_DataDirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(dir)
	require.NoError(t, err)

	begin := time.Now()
	_, err = embedded.Start(dir)
	require.ErrorIs(t, err, embedded.ErrDataDirInUse)
	require.Less(t, time.Since(begin), refuseWithin)
	require.ErrorContains(t, err, "locked by process "+strconv.Itoa(os.Getpid()))
	require.ErrorContains(t, err, dir)
	require.NotContains(t, err.Error(), "testenv")

	first.Shutdown()
	first.Shutdown() // idempotent
	second := start(t, dir)
	require.True(t, second.Running())
}

func TestStart_PortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	dir := t.TempDir()

	begin := time.Now()
	_, err = embedded.Start(dir, embedded.WithListen(l.Addr().String()))
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	require.Less(t, time.Since(begin), refuseWithin)
	require.ErrorContains(t, err, "cannot listen for clients on "+l.Addr().String())
	require.ErrorContains(t, err, "address already in use")

	// The refused start released the data dir.
	start(t, dir)
}

func TestStart_ClusterPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = embedded.Start(t.TempDir(), embedded.WithCluster("c1", l.Addr().String()))
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	require.ErrorContains(t, err, "cannot listen for cluster routes on "+l.Addr().String())
}

// A data dir that cannot be created or written is named with its cause.
func TestStart_UnwritableDataDir(t *testing.T) {
	t.Run("not a directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		_, err := embedded.Start(filepath.Join(file, "data"))
		require.ErrorIs(t, err, syscall.ENOTDIR)
		require.ErrorContains(t, err, "data dir "+filepath.Join(file, "data")+" cannot be created")
	})
	t.Run("permission denied", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes anywhere; cmd/spendgate's TestServe_UnwritableDataDir runs this case as an unprivileged user")
		}
		dir := t.TempDir()
		require.NoError(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		_, err := embedded.Start(dir)
		require.ErrorIs(t, err, fs.ErrPermission)
		require.ErrorContains(t, err, "data dir "+dir+" is not writable")
	})
}

func TestStart_Options(t *testing.T) {
	for name, opt := range map[string]embedded.Option{
		"listen without port":  embedded.WithListen("127.0.0.1"),
		"listen bad port":      embedded.WithListen("127.0.0.1:http"),
		"listen port range":    embedded.WithListen("127.0.0.1:70000"),
		"zero timeout":         embedded.WithReadyTimeout(0),
		"cluster without name": embedded.WithCluster("", "127.0.0.1:0"),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := embedded.Start(dir, opt)
			require.Error(t, err)
			// Nothing was locked.
			_, statErr := os.Stat(filepath.Join(dir, embedded.LockFile))
			require.True(t, errors.Is(statErr, fs.ErrNotExist), "lock file: %v", statErr)
		})
	}
	_, err := embedded.Start("")
	require.ErrorContains(t, err, "data dir is required")
}

// Two cluster nodes find each other; WaitJetStream waits for their quorum.
func TestStart_Cluster(t *testing.T) {
	ports := make([]string, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = l.Addr().String()
		require.NoError(t, l.Close())
	}
	routes := make([]string, len(ports))
	for i, p := range ports {
		routes[i] = "nats-route://" + p
	}
	servers := make([]*embedded.Server, len(ports))
	for i, p := range ports {
		servers[i] = start(t, t.TempDir(), embedded.WithServerName("n"+strconv.Itoa(i)), embedded.WithCluster("c1", p, routes...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range servers {
		require.NoError(t, s.WaitJetStream(ctx))
	}
}

// A fatal error the server reports while starting (here JetStream cannot
// create its store) comes back from Start at once, in the server's words,
// not as a timeout.
func TestStart_ServerFatalError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "jetstream"), []byte("not a directory"), 0o644))
	begin := time.Now()
	_, err := embedded.Start(dir)
	require.Error(t, err)
	require.Less(t, time.Since(begin), refuseWithin)
	require.ErrorContains(t, err, "nats-server failed")
	require.ErrorContains(t, err, "JetStream")
	require.NotErrorIs(t, err, embedded.ErrNotReady)
	// The refused start released the data dir.
	_, err = embedded.Start(dir)
	require.NotErrorIs(t, err, embedded.ErrDataDirInUse)
}
