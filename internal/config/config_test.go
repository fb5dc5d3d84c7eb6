package config_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/config"
)

type settings struct {
	dataDir  *string
	replicas *int
	sync     *bool
	ttl      *time.Duration
	file     *string
}

func newFlags() (*flag.FlagSet, settings) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs, settings{
		dataDir:  fs.String("data-dir", "default-dir", ""),
		replicas: fs.Int("replicas", 1, ""),
		sync:     fs.Bool("sync-always", false, ""),
		ttl:      fs.Duration("default-ttl", 5*time.Minute, ""),
		file:     config.AddFileFlag(fs),
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spendgate.conf")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

func TestEnvName(t *testing.T) {
	require.Equal(t, "SPENDGATE_DATA_DIR", config.EnvName("data-dir"))
	require.Equal(t, "SPENDGATE_SYNC_ALWAYS", config.EnvName("sync-always"))
	require.Equal(t, "SPENDGATE_V", config.EnvName("v"))
	require.Equal(t, "SPENDGATE_A_B", config.EnvName("a.b"))
}

// TestApply_Precedence: flag > env > file > default, per flag.
func TestApply_Precedence(t *testing.T) {
	const file = "data-dir = from-file\nreplicas = 3\n"
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		file     string
		wantDir  string
		wantRepl int
	}{
		{name: "default", wantDir: "default-dir", wantRepl: 1},
		{name: "file", file: file, wantDir: "from-file", wantRepl: 3},
		{name: "env over file", file: file, env: map[string]string{"SPENDGATE_DATA_DIR": "from-env"}, wantDir: "from-env", wantRepl: 3},
		{name: "env over default", env: map[string]string{"SPENDGATE_REPLICAS": "5"}, wantDir: "default-dir", wantRepl: 5},
		{name: "empty env is unset", file: file, env: map[string]string{"SPENDGATE_DATA_DIR": ""}, wantDir: "from-file", wantRepl: 3},
		{name: "flag over env and file", file: file, args: []string{"--data-dir", "from-flag"}, env: map[string]string{"SPENDGATE_DATA_DIR": "from-env"}, wantDir: "from-flag", wantRepl: 3},
		{name: "flag equal to default still wins", file: file, args: []string{"--replicas=1"}, env: map[string]string{"SPENDGATE_REPLICAS": "5"}, wantDir: "from-file", wantRepl: 1},
		{name: "config file named by env", file: file, env: map[string]string{"SPENDGATE_CONFIG": "@file"}, wantDir: "from-file", wantRepl: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, s := newFlags()
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			args := tc.args
			if path != "" && tc.env["SPENDGATE_CONFIG"] == "" {
				args = append([]string{"--config", path}, args...)
			}
			for k, v := range tc.env {
				if v == "@file" {
					v = path
				}
				t.Setenv(k, v)
			}
			require.NoError(t, fs.Parse(args))
			require.NoError(t, config.Apply(fs, config.EnvFlags(fs, envNames(fs)...)))
			require.Equal(t, tc.wantDir, *s.dataDir)
			require.Equal(t, tc.wantRepl, *s.replicas)
			require.False(t, *s.sync)
			require.Equal(t, 5*time.Minute, *s.ttl)
		})
	}
}

func TestApply_FileSyntax(t *testing.T) {
	fs, s := newFlags()
	path := writeFile(t, `
# a comment
   # an indented comment

data-dir   =   "  spaced\tdir  "
sync-always=true
default-ttl = 90s
`)
	require.NoError(t, fs.Parse([]string{"--config=" + path}))
	require.NoError(t, config.Apply(fs, config.EnvFlags(fs, envNames(fs)...)))
	require.Equal(t, "  spaced\tdir  ", *s.dataDir)
	require.True(t, *s.sync)
	require.Equal(t, 90*time.Second, *s.ttl)

	fs, s = newFlags()
	path = writeFile(t, "data-dir = /var/lib/a#b \n")
	require.NoError(t, fs.Parse([]string{"--config=" + path}))
	require.NoError(t, config.Apply(fs, config.EnvFlags(fs, envNames(fs)...)))
	require.Equal(t, "/var/lib/a#b", *s.dataDir, "# inside a value is part of it")
}

func TestApply_Errors(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
		args             []string
	}{
		{name: "unknown key", file: "data-dir = x\n\nreplica = 3\n", want: `:3: unknown key "replica" (not a flag of serve)`},
		{name: "unknown key even if overridden elsewhere", file: "nope = 1\n", args: []string{"--data-dir=x"}, want: `:1: unknown key "nope"`},
		{name: "no equals", file: "data-dir /x\n", want: `:1: expected 'key = value', got "data-dir /x"`},
		{name: "empty key", file: " = 3\n", want: ":1: missing key before '='"},
		{name: "bad value", file: "replicas = three\n", want: `:1: key "replicas": parse error: want a whole number`},
		{name: "bad bool", file: "\nsync-always = maybe\n", want: `:2: key "sync-always": parse error: want true or false`},
		{name: "duration without a unit", file: "default-ttl = 5\n", want: `:1: key "default-ttl": parse error: want a duration such as 5s, 1m or 1h30m`},
		{name: "duplicate", file: "replicas = 3\nreplicas = 4\n", want: `:2: key "replicas" already set on line 1`},
		{name: "nested config", file: "config = other\n", want: `:1: key "config": a config file cannot name another`},
		{name: "bad quotes", file: `data-dir = "open` + "\n", want: `:1: key "data-dir": value "open is not a complete double-quoted string`},
		{name: "value checked even when the flag wins", file: "replicas = three\n", args: []string{"--replicas=2"}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := newFlags()
			path := writeFile(t, tc.file)
			require.NoError(t, fs.Parse(append([]string{"--config", path}, tc.args...)))
			err := config.Apply(fs, config.EnvFlags(fs, envNames(fs)...))
			if tc.want == "" {
				// A value the command line overrides is not parsed by the
				// flag: only keys are checked for it.
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "config: "+path), err.Error())
			require.Contains(t, err.Error(), tc.want)
		})
	}

	fs, _ := newFlags()
	require.NoError(t, fs.Parse([]string{"--config", filepath.Join(t.TempDir(), "missing.conf")}))
	require.ErrorContains(t, config.Apply(fs, config.EnvFlags(fs, envNames(fs)...)), "no such file or directory")

	fs, _ = newFlags()
	t.Setenv("SPENDGATE_REPLICAS", "many")
	require.NoError(t, fs.Parse(nil))
	err := config.Apply(fs, config.EnvFlags(fs, envNames(fs)...))
	require.ErrorContains(t, err, `config: $SPENDGATE_REPLICAS: parse error`)
}

// envNames lists every flag of fs: the tests of the sources' order read
// every flag from the environment.
func envNames(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}

// Only the flags a command lists are read from the environment; each
// listed flag's help names its variable, and Ignored names the variables of
// the others that are set. It fails if every flag is read (in an earlier
// build SPENDGATE_REPLICAS set for something else became --replicas).
func TestApply_EnvWhitelist(t *testing.T) {
	fs, s := newFlags()
	env := config.EnvFlags(fs, "data-dir", "config")
	require.Contains(t, fs.Lookup("data-dir").Usage, "($SPENDGATE_DATA_DIR)")
	require.NotContains(t, fs.Lookup("replicas").Usage, "SPENDGATE_")
	require.Equal(t, []string{"SPENDGATE_CONFIG", "SPENDGATE_DATA_DIR"}, env.Names())
	t.Setenv("SPENDGATE_DATA_DIR", "from-env")
	t.Setenv("SPENDGATE_REPLICAS", "2")
	t.Setenv("SPENDGATE_DEFAULT_TTL", "")
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, config.Apply(fs, env))
	require.Equal(t, "from-env", *s.dataDir)
	require.Equal(t, 1, *s.replicas, "SPENDGATE_REPLICAS is not serve's")
	require.Equal(t, []string{"SPENDGATE_REPLICAS"}, env.Ignored(fs))
	require.Panics(t, func() { config.EnvFlags(fs, "no-such-flag") })
	// Listing a flag twice, or one whose help names its variable
	// already, adds the variable to its help once.
	config.EnvFlags(fs, "data-dir")
	require.Equal(t, 1, strings.Count(fs.Lookup("data-dir").Usage, "$SPENDGATE_DATA_DIR"))
}

// TestEnv_As: a flag read from another variable than its EnvName takes
// that variable, its help names that one alone, and its EnvName, set, is
// reported ignored.
func TestEnv_As(t *testing.T) {
	fs, s := newFlags()
	env := config.EnvFlags(fs, "data-dir")
	env.As(fs, "data-dir", "SPENDGATE_OTHER_DIR")
	require.Contains(t, fs.Lookup("data-dir").Usage, "($SPENDGATE_OTHER_DIR)")
	require.NotContains(t, fs.Lookup("data-dir").Usage, "$SPENDGATE_DATA_DIR")
	require.Equal(t, []string{"SPENDGATE_OTHER_DIR"}, env.Names())
	t.Setenv("SPENDGATE_DATA_DIR", "serve's")
	t.Setenv("SPENDGATE_OTHER_DIR", "mine")
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, config.Apply(fs, env))
	require.Equal(t, "mine", *s.dataDir)
	require.Equal(t, []string{"SPENDGATE_DATA_DIR"}, env.Ignored(fs))
	require.Panics(t, func() { env.As(fs, "replicas", "SPENDGATE_R") }, "a flag env does not list")
}

func TestApply_NoFileFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a := fs.String("a", "def", "")
	t.Setenv("SPENDGATE_A", "env")
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, config.Apply(fs, config.EnvFlags(fs, envNames(fs)...)))
	require.Equal(t, "env", *a)
}

func TestLogging(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var lg config.Logging
	lg.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--log-level", "debug", "--log-format=json"}))
	require.Equal(t, slog.LevelDebug, lg.Level)
	require.True(t, lg.JSON)
	var b bytes.Buffer
	lg.New(&b).Debug("hello", "k", 1, "took", 52300*time.Microsecond, slog.Group("g", "locked", 2*time.Second))
	var rec map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &rec), b.String())
	require.Equal(t, "DEBUG", rec["level"])
	require.Equal(t, "hello", rec["msg"])
	require.Equal(t, "52.3ms", rec["took"], "a duration names its unit, as in the text format")
	require.Equal(t, map[string]any{"locked": "2s"}, rec["g"])

	// From a file, and defaults.
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var lg2 config.Logging
	lg2.AddFlags(fs)
	config.AddFileFlag(fs)
	require.NoError(t, fs.Parse([]string{"--config", writeFile(t, "log-level = WARN\n")}))
	require.NoError(t, config.Apply(fs, config.EnvFlags(fs, envNames(fs)...)))
	require.Equal(t, slog.LevelWarn, lg2.Level)
	require.False(t, lg2.JSON)
	b.Reset()
	l := lg2.New(&b)
	l.Info("dropped")
	l.Warn("kept")
	require.NotContains(t, b.String(), "dropped")
	require.Contains(t, b.String(), "level=WARN msg=kept")

	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var lg3 config.Logging
	lg3.AddFlags(fs)
	require.ErrorContains(t, fs.Parse([]string{"--log-level=trace"}), `log level "trace" is not debug, info, warn or error`)
	require.ErrorContains(t, fs.Parse([]string{"--log-format=xml"}), `log format "xml" is not text or json`)

	// PrintDefaults must not panic on the zero values.
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	require.Contains(t, usage.String(), "-log-level")
}
