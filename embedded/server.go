package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is a running embedded NATS server with JetStream file storage in
// its data dir, which it holds locked until Shutdown.
type Server struct {
	ns      *server.Server
	dataDir string
	log     *logAdapter
	timeout time.Duration

	mu   sync.Mutex
	lock *dirLock
}

// Start locks dataDir (creating it if needed), starts a NATS server with
// JetStream file storage in it and returns once the server accepts
// connections and, unless it is a cluster node (WithCluster), once a
// JetStream request succeeds, each wait bounded by WithReadyTimeout. The
// caller owns the server: stop it with Shutdown.
//
// Errors, in the order Start meets them (none leaves anything running or
// locked):
//   - an invalid option or an empty dataDir;
//   - the data dir cannot be created or written (wraps the os error, e.g.
//     fs.ErrPermission);
//   - ErrDataDirInUse, with the holder's pid, when another server holds
//     the data dir;
//   - the client or cluster address cannot be bound (wraps the net error,
//     e.g. syscall.EADDRINUSE);
//   - a fatal error the server reported while starting, in its words;
//   - ErrNotReady when the server is not ready in time.
func Start(dataDir string, opts ...Option) (*Server, error) {
	if dataDir == "" {
		return nil, errors.New("embedded: a data dir is required")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	lock, err := lockDir(dataDir)
	if err != nil {
		return nil, err
	}
	if err := checkBind("clients", o.host, o.port); err != nil {
		lock.unlock()
		return nil, err
	}
	if c := o.cluster; c != nil {
		if err := checkBind("cluster routes", c.host, c.port); err != nil {
			lock.unlock()
			return nil, err
		}
	}
	ns, err := server.NewServer(o.natsOptions(dataDir))
	if err != nil {
		lock.unlock()
		return nil, fmt.Errorf("embedded: server options: %w", err)
	}
	la := newLogAdapter(o.log)
	ns.SetLogger(la, la.debug, false)
	s := &Server{ns: ns, dataDir: dataDir, log: la, timeout: o.readyTimeout, lock: lock}
	ns.Start()
	if err := s.waitConnections(o.readyTimeout); err != nil {
		s.Shutdown()
		return nil, err
	}
	if o.cluster == nil {
		ctx, cancel := context.WithTimeout(context.Background(), o.readyTimeout)
		defer cancel()
		if err := s.WaitJetStream(ctx); err != nil {
			s.Shutdown()
			return nil, err
		}
	}
	return s, nil
}

// natsOptions translates the options into fresh nats-server options (the
// server mutates the options it is given, so they are never reused).
func (o options) natsOptions(dataDir string) *server.Options {
	port := o.port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	so := &server.Options{
		ServerName: o.name,
		Host:       o.host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dataDir,
		SyncAlways: o.syncAlways,
		// 0 leaves nats-server to size it from the free disk.
		JetStreamMaxStore: o.maxStore,
		MaxPayload:        o.maxPayload,
		// The server logs through SetLogger, never on its own, and never
		// handles signals: the embedding process owns both.
		NoLog:  true,
		NoSigs: true,
	}
	if c := o.cluster; c != nil {
		cport := c.port
		if cport == 0 {
			cport = server.RANDOM_PORT
		}
		so.Cluster = server.ClusterOpts{Name: c.name, Host: c.host, Port: cport}
		for _, r := range c.routes {
			so.Routes = append(so.Routes, server.RoutesFromStr(r)...)
		}
	}
	return so
}

// checkBind reports an address that cannot be bound (in use, permission
// denied for a low port, no such interface) before the server tries it:
// the server itself would only log it. Port 0 is always free.
func checkBind(what, host string, port int) error {
	if port == 0 {
		return nil
	}
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", hp)
	if err != nil {
		return fmt.Errorf("embedded: cannot listen for %s on %s: %w", what, hp, err)
	}
	return l.Close()
}

// waitConnections waits until the server accepts connections, it reports a
// fatal error, or timeout passes.
func (s *Server) waitConnections(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := s.log.fatalErr(); err != nil {
			return err
		}
		// Above 25ms the server sleeps between its own checks.
		if s.ns.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded: server %s: %w for connections within %s", s.ns.Name(), ErrNotReady, timeout)
		}
	}
}

// WaitJetStream waits until JetStream is enabled and a JetStream account
// info request over an in-process connection succeeds. It returns the
// server's fatal error if it reported one, or ErrNotReady (wrapped, with
// the last probe error) when ctx ends first.
func (s *Server) WaitJetStream(ctx context.Context) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	notReady := func(what string, err error) error {
		if ferr := s.log.fatalErr(); ferr != nil {
			return ferr
		}
		if err != nil {
			return fmt.Errorf("embedded: server %s: jetstream %w: %s: %w", s.ns.Name(), ErrNotReady, what, err)
		}
		return fmt.Errorf("embedded: server %s: jetstream %w: %s", s.ns.Name(), ErrNotReady, what)
	}
	for !s.ns.JetStreamEnabled() {
		if err := s.log.fatalErr(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return notReady("not enabled", ctx.Err())
		case <-ticker.C:
		}
	}
	nc, err := s.Connect(nats.Name("embedded-probe"))
	if err != nil {
		return notReady("probe connection", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return notReady("probe", err)
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, err := js.AccountInfo(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return notReady("account info", err)
		case <-ticker.C:
		}
	}
}

// NATS returns the underlying nats-server, for what this package does not
// wrap (cluster and stream leadership, for instance).
func (s *Server) NATS() *server.Server { return s.ns }

// DataDir returns the data dir the server holds.
func (s *Server) DataDir() string { return s.dataDir }

// ClientURL returns the URL clients connect to, nats://host:port, with the
// port the server listens on (the picked one when it was 0).
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Addr returns the client listener's address, or nil once the server has
// stopped.
func (s *Server) Addr() *net.TCPAddr {
	a, _ := s.ns.Addr().(*net.TCPAddr)
	return a
}

// Connect opens an in-process client connection (no TCP loopback) with
// opts appended to the in-process option.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(s.ClientURL(), append([]nats.Option{nats.InProcessServer(s.ns)}, opts...)...)
}

// Running reports whether the server runs.
func (s *Server) Running() bool { return s.ns.Running() }

// Shutdown stops the server, waits until it has stopped and releases the
// data dir. Calling it again does nothing.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lock.unlock()
	s.lock = nil
}

// WaitForShutdown waits until the server has stopped (after Shutdown, or
// after a fatal error of its own).
func (s *Server) WaitForShutdown() { s.ns.WaitForShutdown() }

// logAdapter is the server's logger: it forwards to a slog.Logger (or
// nowhere) and keeps the first fatal error.
type logAdapter struct {
	log   *slog.Logger
	debug bool

	mu    sync.Mutex
	fatal string
}

func newLogAdapter(l *slog.Logger) *logAdapter {
	la := &logAdapter{log: l}
	la.debug = l != nil && l.Enabled(context.Background(), slog.LevelDebug)
	return la
}

// fatalErr returns the first fatal error the server reported, or nil.
func (l *logAdapter) fatalErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatal == "" {
		return nil
	}
	return fmt.Errorf("embedded: nats-server failed: %s", l.fatal)
}

func (l *logAdapter) emit(level slog.Level, format string, v []any) {
	if l.log == nil {
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "nats-server")
}

// Noticef logs at Info.
func (l *logAdapter) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }

// Warnf logs at Warn.
func (l *logAdapter) Warnf(format string, v ...any) { l.emit(slog.LevelWarn, format, v) }

// Errorf logs at Error.
func (l *logAdapter) Errorf(format string, v ...any) { l.emit(slog.LevelError, format, v) }

// Debugf logs at Debug.
func (l *logAdapter) Debugf(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }

// Tracef logs at Debug (tracing is never enabled).
func (l *logAdapter) Tracef(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }

// Fatalf logs at Error and keeps the first fatal error for Start; unlike
// nats-server's own logger it never exits the process.
func (l *logAdapter) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = fmt.Sprintf(format, v...)
	}
	l.mu.Unlock()
	l.emit(slog.LevelError, format, v)
}

// InProcessConn returns an in-process connection to the server, so that
// *Server is a nats.InProcessConnProvider: nats.InProcessServer(s).
func (s *Server) InProcessConn() (net.Conn, error) { return s.ns.InProcessConn() }
