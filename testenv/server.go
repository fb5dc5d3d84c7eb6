package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/embedded"
)

// Named bounds.
const (
	// ReadyTimeout bounds how long a starting server may take to accept
	// connections and, separately, to get JetStream ready.
	ReadyTimeout = embedded.DefaultReadyTimeout
	// pollInterval is the period of every condition poll in this package.
	pollInterval = 10 * time.Millisecond
	// probeTimeout bounds one JetStream probe request.
	probeTimeout = time.Second
)

// ServerConfig configures StartServer.
type ServerConfig struct {
	// Host to listen on for clients; empty means 127.0.0.1.
	Host string
	// Port to listen on for clients; 0 picks a random free port.
	Port int
	// StoreDir is the JetStream file storage directory (required).
	StoreDir string
	// ServerName names the server; empty lets the server pick one. Keep it
	// stable across restarts of one store.
	ServerName string
	// SyncAlways fsyncs every JetStream write before acknowledging it.
	SyncAlways bool
	// NoLog is kept for compatibility: test servers never log.
	NoLog bool
	// MaxStore caps the server's JetStream file storage in bytes; 0 means
	// MaxStore, the package's fixed cap.
	MaxStore int64
	// MaxPayload is the most bytes a message may carry; 0 means
	// nats-server's default (1 MiB).
	MaxPayload int32
}

// MaxStore is a test server's JetStream storage cap unless its config
// gives another: 1 TiB, what nats-server assumes when it cannot read the
// disk's size. Left to nats-server, the cap is 75% of the disk free when
// the server starts, and a stream with a byte cap (the denial stream's is
// 1 GiB) reserves it whole at create: on a machine with little disk left a
// test would fail at start for what it never writes. Tests write far less
// than they reserve; the disk's real limit still applies to what they do
// write.
const MaxStore = 1 << 40

// StartServer starts an embedded server (package embedded) with JetStream
// file storage in cfg.StoreDir and returns it once it accepts connections
// and a JetStream request succeeds. The caller owns the server: stop it
// with Shutdown. It returns embedded.Start's errors.
func StartServer(cfg ServerConfig) (*embedded.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("testenv: ServerConfig.StoreDir is required")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	maxStore := cfg.MaxStore
	if maxStore == 0 {
		maxStore = MaxStore
	}
	return embedded.Start(cfg.StoreDir,
		embedded.WithListen(net.JoinHostPort(host, strconv.Itoa(cfg.Port))),
		embedded.WithServerName(cfg.ServerName),
		embedded.WithSyncAlways(cfg.SyncAlways),
		embedded.WithMaxStore(maxStore),
		embedded.WithMaxPayload(cfg.MaxPayload),
	)
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
