package ops

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

type options struct {
	log             *slog.Logger
	shutdownTimeout time.Duration
	hosts           map[string]bool
}

func defaultOptions() options {
	return options{log: slog.New(slog.DiscardHandler), shutdownTimeout: DefaultShutdownTimeout, hosts: map[string]bool{}}
}

// Option configures a Server.
type Option func(*options) error

// WithLogger logs the listening address and HTTP server errors to l.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("ops: nil logger")
		}
		o.log = l
		return nil
	}
}

// WithShutdownTimeout bounds how long Run waits for requests in flight
// after its context ends (default DefaultShutdownTimeout; must be
// positive).
func WithShutdownTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return errors.New("ops: shutdown timeout must be positive")
		}
		o.shutdownTimeout = d
		return nil
	}
}

// WithHosts adds host names (not IP addresses, which are always answered)
// that /metrics and the handlers of HandleRestricted answer to, besides
// localhost and the name in the Server's address. A request naming any
// other Host is refused 403: see HandleRestricted.
func WithHosts(names ...string) Option {
	return func(o *options) error {
		for _, n := range names {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if strings.ContainsAny(n, ":/[] ") {
				return fmt.Errorf("ops: %q is not a host name (give the name alone, without a port or a scheme)", n)
			}
			o.hosts[canonicalHost(n)] = true
		}
		return nil
	}
}
