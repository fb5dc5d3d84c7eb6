package testenv

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/streams"
)

// Named bounds of the test environment.
const (
	// SetupTimeout bounds Ensure and every readiness wait of New,
	// NewCluster, Restart and RestartServer.
	SetupTimeout = 30 * time.Second
	// reconnectWait is the clients' pause between reconnect attempts.
	reconnectWait = 20 * time.Millisecond
	// serverName is the single server's stable name.
	serverName = "testenv"
)

// Env is one in-process JetStream server with a connected client and the
// ledger stream in place.
type Env struct {
	// Server is the running server; Restart replaces it.
	Server *server.Server
	// Conn is the environment's client connection; it survives Restart.
	Conn *nats.Conn
	// JS is the JetStream context on Conn.
	JS jetstream.JetStream
	// Layout is the layout applied with streams.Ensure.
	Layout streams.Layout
	// StoreDir is the server's JetStream storage directory.
	StoreDir string

	srv *embedded.Server
	cfg ServerConfig
}

// Option configures New.
type Option func(*options)

type options struct {
	layout     streams.Layout
	syncAlways bool
	maxStore   int64
	maxPayload int32
}

// WithLayout applies l instead of streams.Default().
func WithLayout(l streams.Layout) Option {
	return func(o *options) { o.layout = l }
}

// WithSyncAlways makes the server fsync every JetStream write.
func WithSyncAlways() Option {
	return func(o *options) { o.syncAlways = true }
}

// WithMaxStore caps the server's JetStream storage at n bytes instead of
// MaxStore: a server short of room, to test what it refuses.
func WithMaxStore(n int64) Option {
	return func(o *options) { o.maxStore = n }
}

// WithMaxPayload caps a message at n bytes instead of nats-server's
// 1 MiB: a connection whose replies must be small, to test what does
// not fit.
func WithMaxPayload(n int32) Option {
	return func(o *options) { o.maxPayload = n }
}

// New starts a JetStream server on 127.0.0.1 with a random port and
// t.TempDir() storage, connects to it, applies streams.Ensure with the
// layout (streams.Default() unless WithLayout), and registers cleanup that
// closes the connection and shuts the server down. It fails t on any error.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := options{layout: streams.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	e := &Env{
		Layout:   o.layout,
		StoreDir: t.TempDir(),
	}
	e.cfg = ServerConfig{
		Host:       "127.0.0.1",
		StoreDir:   e.StoreDir,
		ServerName: serverName,
		SyncAlways: o.syncAlways,
		NoLog:      true,
		MaxStore:   o.maxStore,
		MaxPayload: o.maxPayload,
	}
	s, err := StartServer(e.cfg)
	require.NoError(t, err, "testenv: start server")
	e.srv, e.Server = s, s.NATS()
	// Cleanups run last-in first-out: connections close before the server
	// stops, and the server stops before t.TempDir is removed.
	t.Cleanup(func() { e.srv.Shutdown() })
	// Restart reuses the port the server picked.
	e.cfg.Port = s.Addr().Port

	e.Conn = connect(t, e.URL(), t.Name())
	e.JS, err = jetstream.New(e.Conn)
	require.NoError(t, err, "testenv: jetstream")

	ctx, cancel := context.WithTimeout(context.Background(), SetupTimeout)
	defer cancel()
	_, err = streams.Ensure(ctx, e.JS, e.Layout)
	require.NoError(t, err, "testenv: ensure streams")
	return e
}

// URL returns the server's client URL, nats://127.0.0.1:<port>.
func (e *Env) URL() string {
	return "nats://" + net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.cfg.Port))
}

// Connect returns a new connection to the server, closed when t ends. Like
// Conn, it reconnects forever, so it survives Restart.
func (e *Env) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	return connect(t, e.URL(), t.Name()+"-extra")
}

// Restart shuts the server down and starts a new one on the same store
// directory and port, then waits until JetStream is ready and Conn has
// reconnected and can reach JetStream. It fails t on any error.
func (e *Env) Restart(t testing.TB) {
	t.Helper()
	before := e.Conn.Stats().Reconnects
	e.srv.Shutdown()
	s, err := StartServer(e.cfg)
	require.NoError(t, err, "testenv: restart server")
	e.srv, e.Server = s, s.NATS()
	WaitFor(t, SetupTimeout, "client reconnected after restart", func() bool {
		return e.Conn.Stats().Reconnects > before && e.Conn.Status() == nats.CONNECTED
	})
	require.NoError(t, waitAccountInfo(e.JS, time.Now().Add(SetupTimeout)), "testenv: jetstream after restart")
}

// WaitFor polls cond every few milliseconds until it returns true, and
// fails t with what if it has not within timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for ; ; <-ticker.C {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: timed out after %s waiting for %s", timeout, what)
		}
	}
}

// Within polls cond every few milliseconds until it returns true or
// timeout passes, and reports whether it did: for a test that acts again
// (and waits again) when a condition did not come in time.
func Within(timeout time.Duration, cond func() bool) bool {
	return waitCond(timeout, "", cond) == nil
}

// connect dials urls with a reconnect-forever policy and closes the
// connection when t ends.
func connect(t testing.TB, urls, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(urls,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(reconnectWait, reconnectWait),
	)
	require.NoError(t, err, "testenv: connect %s", urls)
	t.Cleanup(nc.Close)
	return nc
}
