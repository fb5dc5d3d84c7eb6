package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// Named defaults and bounds.
const (
	// DefaultListen is the client address when WithListen is not given:
	// loopback, a random free port.
	DefaultListen = "127.0.0.1:0"
	// DefaultReadyTimeout bounds how long Start waits for the server to
	// accept connections and, separately, for JetStream to answer.
	DefaultReadyTimeout = 10 * time.Second
	// pollInterval is the period of every readiness poll.
	pollInterval = 10 * time.Millisecond
	// probeTimeout bounds one JetStream probe request.
	probeTimeout = time.Second
)

// Option configures Start. An option validates its argument; Start returns
// the first option error.
type Option func(*options) error

// options is the resolved configuration.
type options struct {
	host         string
	port         int
	name         string
	syncAlways   bool
	maxStore     int64
	maxPayload   int32
	log          *slog.Logger
	readyTimeout time.Duration
	cluster      *clusterOptions
}

// clusterOptions is a cluster node's configuration.
type clusterOptions struct {
	name   string
	host   string
	port   int
	routes []string
}

func defaultOptions() options {
	return options{host: "127.0.0.1", port: 0, readyTimeout: DefaultReadyTimeout}
}

// WithListen sets the client address, host:port. An empty host (":4222")
// listens on every interface; port 0 picks a random free port (read it
// back with Server.ClientURL or Server.Addr). The default is DefaultListen.
func WithListen(hostport string) Option {
	return func(o *options) error {
		host, port, err := splitHostPort(hostport)
		if err != nil {
			return fmt.Errorf("embedded: listen address: %w", err)
		}
		o.host, o.port = host, port
		return nil
	}
}

// WithServerName names the server. Keep it stable across restarts of one
// data dir, and distinct within a cluster. The default lets the server
// pick one.
func WithServerName(name string) Option {
	return func(o *options) error {
		o.name = name
		return nil
	}
}

// WithSyncAlways makes the server fsync every JetStream write before it
// acknowledges it (on), instead of every two minutes, nats-server's default
// (off).
func WithSyncAlways(on bool) Option {
	return func(o *options) error {
		o.syncAlways = on
		return nil
	}
}

// WithMaxStore caps the server's JetStream file storage at n bytes. 0, the
// default, leaves it to nats-server: 75% of the free disk under the data
// dir when the server starts. A stream with a byte cap reserves that cap
// from it when created, so a server started on a nearly full disk refuses
// such a stream at once.
func WithMaxStore(n int64) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("embedded: max store must not be negative, got %d", n)
		}
		o.maxStore = n
		return nil
	}
}

// WithMaxPayload sets the most bytes a message may carry (nats-server's
// max_payload). 0, the default, leaves nats-server's 1 MiB.
func WithMaxPayload(n int32) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("embedded: max payload must not be negative, got %d", n)
		}
		o.maxPayload = n
		return nil
	}
}

// WithLogger sends the server's own log lines to l (notices at Info,
// warnings at Warn, errors and fatal errors at Error, debug lines at
// Debug when l is enabled for it). nil, the default, discards them; Start
// still reports a fatal error as its own.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.log = l
		return nil
	}
}

// WithReadyTimeout bounds each of Start's readiness waits. The default is
// DefaultReadyTimeout.
func WithReadyTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("embedded: ready timeout %s must be positive", d)
		}
		o.readyTimeout = d
		return nil
	}
}

// WithCluster makes the server a node of the cluster name: it listens for
// routes on listen (host:port) and connects to routes (nats-route://host:port
// URLs, its own included or not). Start then waits only for client
// connections; call WaitJetStream once a quorum of nodes runs.
func WithCluster(name, listen string, routes ...string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("embedded: cluster name is required")
		}
		host, port, err := splitHostPort(listen)
		if err != nil {
			return fmt.Errorf("embedded: cluster listen address: %w", err)
		}
		o.cluster = &clusterOptions{name: name, host: host, port: port, routes: append([]string(nil), routes...)}
		return nil
	}
}

// splitHostPort parses host:port with a numeric port in 0..65535.
func splitHostPort(hostport string) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q of %q is not a number in 0..65535", p, hostport)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}
