package ops

import (
	"errors"
	"log/slog"
	"time"
)

type options struct {
	log             *slog.Logger
	shutdownTimeout time.Duration
}

func defaultOptions() options {
	return options{log: slog.New(slog.DiscardHandler), shutdownTimeout: DefaultShutdownTimeout}
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
