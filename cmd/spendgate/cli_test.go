package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cliResult is one finished run of the binary.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the binary with args and env added to the environment
// (bounded) and returns its exit status and outputs.
func runCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	return runCLIAs(t, nil, env, args...)
}

// runCLIAs is runCLI with the process's credentials set to cred (nil:
// this process's).
func runCLIAs(t *testing.T, cred *syscall.Credential, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("spendgate %v: %v\n%s", args, err, res.stderr)
	}
	return res
}

// every command and subcommand, as typed.
var allCommands = [][]string{
	{"serve"}, {"budget"}, {"budget", "put"}, {"budget", "get"}, {"budget", "list"}, {"budget", "disable"}, {"budget", "enable"},
	{"admit"}, {"settle"}, {"release"}, {"audit"}, {"audit", "check"}, {"audit", "balances"}, {"audit", "keys"}, {"key"},
	{"bench"}, {"demo"}, {"demo", "overrun"}, {"roles"}, {"feed"}, {"feed", "consumer"}, {"version"},
	{"keys"}, {"keys", "create"}, {"keys", "list"}, {"keys", "get"}, {"keys", "disable"}, {"keys", "enable"}, {"keys", "rotate"},
	{"gateway"},
}

// singleDashFlag matches a long flag printed the flag package's way,
// -name (a one-letter flag, -v, keeps its one dash).
var singleDashFlag = regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+`)

// --help and -h on every command exit 0 and print the usage on stdout,
// flags as --name.
func TestCLI_HelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, help := range []string{"--help", "-h"} {
		r := runCLI(t, nil, help)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "Usage:")
		for _, cmd := range allCommands {
			r := runCLI(t, nil, append(cmd, help)...)
			require.Equal(t, 0, r.code, "%v %s: %s", cmd, help, r.stderr)
			require.True(t, strings.HasPrefix(r.stdout, "Usage: spendgate "+strings.Join(cmd, " ")), "%v %s:\n%s", cmd, help, r.stdout)
			require.Empty(t, r.stderr, "%v %s", cmd, help)
			require.False(t, singleDashFlag.MatchString(r.stdout), "%v %s prints a -flag:\n%s", cmd, help, r.stdout)
		}
	}
	r := runCLI(t, nil, "help", "admit")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "  --amount string\n")
	require.Contains(t, r.stdout, "empty means nats://127.0.0.1:4222")
	require.Contains(t, r.stdout, "prefer $NATS_PASSWORD")
}

// Unexpected arguments, unknown commands and flags are refused with the
// usage on stderr and exit 2, before anything connects or starts.
func TestCLI_UsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
		{[]string{"serve", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"serve", "--sweep-interval", "0s"}, "--sweep-interval must be positive"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--sync-always"}, "--sync-always applies to the embedded server"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--sync-always=false"}, "--sync-always applies to the embedded server"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--max-inflight", "0"}, "--max-inflight must be at least 1"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-rate", "-1"}, "--tenant-rate must not be negative (0: no limit)"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-max-open", "-5"}, "--tenant-max-open must not be negative"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-denial-bytes", "2000000000"}, "must be at most 1073741824"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--denial-max-bytes", "-1"}, "--denial-max-bytes must not be negative"},
		{[]string{"budget"}, "which budget command?"},
		{[]string{"budget", "nope"}, `unknown budget command "nope"`},
		{[]string{"budget", "list", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"settle", "--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"release", "rsv_1"}, `unexpected arguments ["rsv_1"]`},
		{[]string{"audit"}, "which audit?"},
		{[]string{"audit", "check", "--at", "2026-01-01T00:00:00Z"}, "flag provided but not defined: --at"},
		{[]string{"audit", "balances", "--at", "yesterday"}, `--at "yesterday"`},
		{[]string{"bench", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"bench", "--scenarios", "nope"}, `unknown scenario "nope"`},
		{[]string{"bench", "--cluster", "2"}, "--cluster must be 3..5 nodes"},
		{[]string{"demo"}, "which demo?"},
		{[]string{"feed"}, "which feed command?"},
		{[]string{"feed", "consumer"}, "--tenant is required"},
		{[]string{"feed", "consumer", "--tenant", "Acme"}, "must be lower case"},
		{[]string{"demo", "underrun"}, `unexpected arguments ["underrun"]`},
		{[]string{"demo", "overrun", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"demo", "overrun", "--concurrency", "0"}, "--concurrency 0 out of range"},
		{[]string{"demo", "overrun", "--price", "NaN"}, "--price"},
		{[]string{"version", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"keys"}, "which keys command?"},
		{[]string{"keys", "nope"}, `unknown keys command "nope"`},
		{[]string{"keys", "disable"}, "--id is required"},
		{[]string{"keys", "rotate", "--id", "A.B"}, "--id: invalid_identifier"},
		{[]string{"gateway", "--http-api=false"}, "--upstream is required"},
		{[]string{"gateway", "--upstream", "mistral=https://x"}, "want openai=URL or anthropic=URL"},
		{[]string{"gateway", "--upstream", "openai=https://x,key-env=SPENDGATE_TEST_NO_SUCH_VAR"}, "$SPENDGATE_TEST_NO_SUCH_VAR, its key, is empty"},
		{[]string{"gateway", "--max-output", "gpt-4o"}, "want MODEL=N"},
	} {
		r := runCLI(t, []string{"SPENDGATE_NATS_URL=nats://127.0.0.1:1"}, tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
		require.Contains(t, r.stderr, "Usage:", "%v", tc.args)
		require.Empty(t, r.stdout, "%v", tc.args)
	}
}

// spendgate version prints the module version and the commit recorded in
// the binary's build information, the one `go version -m` reads.
func TestCLI_Version(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "version")
	require.Equal(t, 0, r.code, r.stderr)
	out, err := exec.Command("go", "version", "-m", binPath).Output()
	require.NoError(t, err)
	var modVersion, revision string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/spendgate/spendgate":
			modVersion = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			revision = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	require.NotEmpty(t, modVersion, string(out))
	lines := strings.Split(r.stdout, "\n")
	require.Equal(t, "spendgate "+modVersion, lines[0])
	require.Equal(t, "module github.com/spendgate/spendgate", lines[1])
	if revision != "" {
		require.True(t, strings.HasPrefix(lines[2], "commit "+revision), r.stdout)
	} else {
		require.Equal(t, "commit unknown (built without version control information)", lines[2])
	}
}

// The commit line, from build settings as `go build` records them in a
// git checkout.
func TestWriteVersion(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/spendgate/spendgate", Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "9a8dece0"}, {Key: "vcs.time", Value: "2026-12-01T03:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	var buf bytes.Buffer
	require.NoError(t, writeVersion(&buf, info))
	require.Contains(t, buf.String(), "spendgate v0.3.0\nmodule github.com/spendgate/spendgate\ncommit 9a8dece0 (modified)\ncommit time 2026-12-01T03:00:00Z\ngo ")
}

// The production binary links no test package: not testing, not testify,
// not testenv.
func TestDeps_NoTestPackages(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/spendgate/spendgate/embedded")
	for _, d := range deps {
		require.NotEqual(t, "testing", d)
		require.NotContains(t, d, "testenv")
		require.NotContains(t, d, "testify")
	}
}
