package config

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Logging is the logger's configuration, from --log-level and
// --log-format. The zero value is level info, format text.
type Logging struct {
	Level slog.Level
	// JSON selects slog's JSON handler (one object a line) over its text
	// handler (key=value pairs).
	JSON bool
}

// AddFlags declares --log-level (debug, info, warn, error) and --log-format
// (text, json) on fs, both writing into l. Bad values are rejected by the
// flags themselves, so fs.Parse and Apply report them.
func (l *Logging) AddFlags(fs *flag.FlagSet) {
	fs.Var(levelValue{&l.Level}, "log-level", "least severe log level written: debug, info, warn or error")
	fs.Var(formatValue{&l.JSON}, "log-format", "log line format: text or json")
}

// New returns a logger writing to w at l's level and in l's format. In
// JSON a duration is written as the text format writes it ("52.3ms"), not
// as slog's bare count of nanoseconds, which names no unit.
func (l Logging) New(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.Level}
	if l.JSON {
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// ParseLevel parses debug, info, warn or error (any case).
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q is not debug, info, warn or error", s)
}

type levelValue struct{ l *slog.Level }

func (v levelValue) String() string {
	if v.l == nil {
		return "info"
	}
	return strings.ToLower(v.l.String())
}

func (v levelValue) Set(s string) error {
	l, err := ParseLevel(s)
	if err != nil {
		return err
	}
	*v.l = l
	return nil
}

type formatValue struct{ json *bool }

func (v formatValue) String() string {
	if v.json != nil && *v.json {
		return "json"
	}
	return "text"
}

func (v formatValue) Set(s string) error {
	switch strings.ToLower(s) {
	case "text":
		*v.json = false
	case "json":
		*v.json = true
	default:
		return fmt.Errorf("log format %q is not text or json", s)
	}
	return nil
}
