package testenv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Named bounds.
const (
	// ReadyTimeout bounds how long a starting server may take to accept
	// connections and, separately, to get JetStream ready.
	ReadyTimeout = 10 * time.Second
	// pollInterval is the period of every condition poll in this package.
	pollInterval = 10 * time.Millisecond
	// probeTimeout bounds one JetStream probe request.
	probeTimeout = time.Second
)

// ServerConfig configures an embedded JetStream server.
type ServerConfig struct {
	// Host to listen on for clients; empty means 127.0.0.1.
	Host string
	// Port to listen on for clients; 0 picks a random free port
	// (server.RANDOM_PORT).
	Port int
	// StoreDir is the JetStream file storage directory (required).
	StoreDir string
	// ServerName names the server; empty lets the server pick one. Keep it
	// stable across restarts of one store.
	ServerName string
	// SyncAlways fsyncs every JetStream write before acknowledging it.
	SyncAlways bool
	// NoLog disables the server's log output.
	NoLog bool
}

// options translates the config into nats-server options.
func (c ServerConfig) options() *server.Options {
	host := c.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := c.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return &server.Options{
		ServerName: c.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   c.StoreDir,
		SyncAlways: c.SyncAlways,
		NoLog:      c.NoLog,
		NoSigs:     true,
	}
}

// StartServer starts an embedded nats-server with JetStream file storage in
// cfg.StoreDir and returns it once it accepts connections and a JetStream
// account info request succeeds (each within ReadyTimeout). The caller owns
// the server: stop it with Shutdown and WaitForShutdown.
//
// It returns an error if StoreDir is empty, if the options are invalid, or
// if the server is not ready in time (the server is then shut down).
func StartServer(cfg ServerConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("testenv: ServerConfig.StoreDir is required")
	}
	s, err := startServer(cfg.options())
	if err != nil {
		return nil, err
	}
	if err := waitJetStream(s, ReadyTimeout); err != nil {
		shutdown(s)
		return nil, err
	}
	return s, nil
}

// startServer creates and starts a server and waits until it accepts
// connections; it does not wait for JetStream (a cluster node cannot be
// ready before its peers run).
func startServer(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("testenv: new server: %w", err)
	}
	if !opts.NoLog {
		s.ConfigureLogger()
	}
	s.Start()
	if !s.ReadyForConnections(ReadyTimeout) {
		shutdown(s)
		return nil, fmt.Errorf("testenv: server %s not ready for connections within %s", opts.ServerName, ReadyTimeout)
	}
	return s, nil
}

// waitJetStream polls until JetStream is enabled on s and an account info
// request over an in-process connection succeeds, or timeout passes.
func waitJetStream(s *server.Server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for ; ; <-ticker.C {
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: jetstream not enabled within %s", timeout)
		}
		if s.JetStreamEnabled() {
			break
		}
	}
	nc, err := nats.Connect(nats.DefaultURL, nats.InProcessServer(s), nats.Name("testenv-probe"))
	if err != nil {
		return fmt.Errorf("testenv: probe connection: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("testenv: probe jetstream: %w", err)
	}
	return waitAccountInfo(js, deadline)
}

// waitAccountInfo polls js.AccountInfo until it succeeds or deadline passes.
func waitAccountInfo(js jetstream.JetStream, deadline time.Time) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for ; ; <-ticker.C {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: jetstream account info not available: %w", err)
		}
	}
}

// shutdown stops s and waits until it has stopped.
func shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}
