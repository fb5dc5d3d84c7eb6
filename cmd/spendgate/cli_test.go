package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/testenv"
)

// cliResult is one finished run of the binary.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the binary with args (clientBin's) and env added to the
// environment (bounded) and returns its exit status and outputs.
func runCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	return runCLIAs(t, nil, env, args...)
}

// runCLIAs is runCLI with the process's credentials set to cred (nil:
// this process's).
func runCLIAs(t *testing.T, cred *syscall.Credential, env []string, args ...string) cliResult {
	t.Helper()
	return runBin(t, clientBin(args...), cred, env, args...)
}

// runUsage is runCLI for a run that only parses its flags and prints a
// usage, a help or a refusal, before anything connects or starts: it runs
// usageBinPath, built without the race detector (one goroutine, nothing to
// race; a race-built process costs ten times the CPU to start).
func runUsage(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	return runBin(t, usageBinPath, nil, env, args...)
}

// runBin runs bin with args, env added to the environment and the
// credentials cred (nil: this process's), bounded, and returns its exit
// status and outputs.
func runBin(t *testing.T, bin string, cred *syscall.Credential, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
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

// every command and subcommand, as typed (TestCLI_HelpListsEverything
// checks that it names every command and every subcommand the commands
// themselves list).
var allCommands = [][]string{
	{"serve"}, {"budget"}, {"budget", "put"}, {"budget", "get"}, {"budget", "list"}, {"budget", "disable"}, {"budget", "enable"}, {"budget", "retire"},
	{"pricing"}, {"pricing", "put"}, {"pricing", "get"}, {"pricing", "list"}, {"pricing", "import"},
	{"admit"}, {"settle"}, {"release"}, {"void"},
	{"audit"}, {"audit", "check"}, {"audit", "keys"}, {"audit", "balances"}, {"audit", "export"}, {"audit", "archive"}, {"audit", "trim"},
	{"snapshot"}, {"report"}, {"backtest"}, {"key"},
	{"bench"}, {"demo"}, {"demo", "overrun"}, {"roles"}, {"feed"}, {"feed", "consumer"}, {"alerts"}, {"alerts", "webhook"}, {"version"},
	{"keys"}, {"keys", "create"}, {"keys", "list"}, {"keys", "get"}, {"keys", "update"}, {"keys", "disable"}, {"keys", "enable"}, {"keys", "rotate"},
	{"gateway"}, {"tenant-limits"}, {"tenant-limits", "put"}, {"tenant-limits", "get"}, {"tenant-limits", "list"},
}

// singleDashFlag matches a long flag printed the flag package's way,
// -name (a one-letter flag, -v, keeps its one dash).
var singleDashFlag = regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+`)

// --help and -h on every command exit 0 and print the usage on stdout,
// flags as --name.
func TestCLI_HelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, help := range []string{"--help", "-h"} {
		r := runUsage(t, nil, help)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "Usage:")
		for _, cmd := range allCommands {
			r := runHelp(t, append(cmd, help)...)
			require.Equal(t, 0, r.code, "%v %s: %s", cmd, help, r.stderr)
			require.True(t, strings.HasPrefix(r.stdout, "Usage: spendgate "+strings.Join(cmd, " ")), "%v %s:\n%s", cmd, help, r.stdout)
			require.Empty(t, r.stderr, "%v %s", cmd, help)
			require.False(t, singleDashFlag.MatchString(r.stdout), "%v %s prints a -flag:\n%s", cmd, help, r.stdout)
		}
	}
	r := runUsage(t, nil, "help", "admit")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "  --amount string\n")
	require.Contains(t, r.stdout, "  -o, --output json|id\n")
	require.Contains(t, r.stdout, "empty means nats://127.0.0.1:4222")
	require.Contains(t, r.stdout, "prefer $NATS_PASSWORD")
}

// helps caches runs of the binary with --help, which several tests read
// (each costs a process start), by their arguments: a *helpRun.
var helps sync.Map

// helpRun is one cached --help run: done is closed once it ended, ran
// saying whether r is its result (false: it failed the test that ran it).
type helpRun struct {
	done chan struct{}
	ran  bool
	r    cliResult
}

// runHelp is runUsage(t, nil, args...) for a --help run, run once per
// test binary: a test that asks for a run another test has under way
// waits for it (the three help tests run in parallel and read the same
// 44 helps; before, they ran about 20 of them twice).
func runHelp(t *testing.T, args ...string) cliResult {
	t.Helper()
	h, loaded := helps.LoadOrStore(strings.Join(args, " "), &helpRun{done: make(chan struct{})})
	run := h.(*helpRun)
	if !loaded {
		defer close(run.done)
		run.r = runUsage(t, nil, args...)
		run.ran = true
		return run.r
	}
	select {
	case <-run.done:
	case <-time.After(2 * time.Minute): // runBin's own bound is 60 s
		t.Fatalf("spendgate %v: the run another test started did not end", args)
	}
	require.True(t, run.ran, "spendgate %v failed in the test that ran it", args)
	return run.r
}

// helpFlag matches a flag line of a --help: "  --name TYPE" or
// "  -o, --name TYPE" (a short flag, "  -v").
var helpFlag = regexp.MustCompile(`(?m)^  (?:-([a-z]), )?-(-?[a-z][a-z-]*)(?: |$)`)

// helpSections splits a --help into its usage line, its own flags and its
// connection flags (by name; a short flag under its letter too).
func helpSections(t *testing.T, help string) (usage string, own, conn map[string]bool) {
	t.Helper()
	usage, _, _ = strings.Cut(help, "\n")
	own, conn = map[string]bool{}, map[string]bool{}
	_, flags, _ := strings.Cut(help, "\nFlags:\n")
	flags, connFlags, _ := strings.Cut(flags, "\nConnection flags:\n")
	if !strings.Contains(help, "\nFlags:\n") {
		_, connFlags, _ = strings.Cut(help, "\nConnection flags:\n")
	}
	for _, part := range []struct {
		text string
		into map[string]bool
	}{{flags, own}, {connFlags, conn}} {
		for _, m := range helpFlag.FindAllStringSubmatch(part.text, -1) {
			part.into[strings.TrimPrefix(m[2], "-")] = true
			if m[1] != "" {
				part.into[m[1]] = true
			}
		}
	}
	return usage, own, conn
}

// synopsisFlag matches a flag in a usage line: --name, or -o.
var synopsisFlag = regexp.MustCompile(`(?:^|[\s\[|])--?([a-z][a-z-]*)`)

// Every command's --help: its usage line names only flags it has; the
// connection flags (--nats-url, --creds, ..., --prefix, --timeout) are
// listed apart, after the command's own, under "Connection flags:" (an
// earlier build mixed them into every command's own); budget get names
// the week period and --unit.
func TestCLI_HelpSections(t *testing.T) {
	t.Parallel()
	helps := map[string]string{}
	family := map[string]map[string]bool{} // the flags of a command and its subcommands
	for _, cmd := range allCommands {
		r := runHelp(t, append(cmd, "--help")...)
		require.Equal(t, 0, r.code, "%v: %s", cmd, r.stderr)
		helps[strings.Join(cmd, " ")] = r.stdout
		_, own, conn := helpSections(t, r.stdout)
		if family[cmd[0]] == nil {
			family[cmd[0]] = map[string]bool{}
		}
		for _, m := range []map[string]bool{own, conn} {
			for n := range m {
				family[cmd[0]][n] = true
			}
		}
	}
	for _, cmd := range allCommands {
		help := helps[strings.Join(cmd, " ")]
		usage, own, conn := helpSections(t, help)
		// The text between the usage line and the flags is wrapped for a
		// terminal (the gateway's and roles' once ran to 120 columns).
		about, _, _ := strings.Cut(help, "\nFlags:\n")
		about, _, _ = strings.Cut(about, "\nConnection flags:\n")
		for _, line := range strings.Split(about, "\n")[1:] {
			require.LessOrEqual(t, len(line), 100, "%v: a line of the help runs past 100 columns:\n%s", cmd, line)
		}
		for _, m := range synopsisFlag.FindAllStringSubmatch(strings.TrimPrefix(usage, "Usage: spendgate"), -1) {
			has := own[m[1]] || conn[m[1]]
			if len(cmd) == 1 && len(own)+len(conn) == 0 {
				has = family[cmd[0]][m[1]] // "spendgate feed consumer --tenant NAME"
			}
			require.True(t, has, "%v: the usage line names --%s, which it does not have:\n%s", cmd, m[1], help)
		}
		// bench embeds its own server; its --nats-url and --prefix are
		// options of the run. roles' --prefix and --tls-* render a layout.
		if cmd[0] == "bench" || cmd[0] == "roles" {
			continue
		}
		if own["nats-url"] || conn["nats-url"] {
			require.True(t, strings.Index(help, "\nFlags:\n") < strings.Index(help, "\nConnection flags:\n"), "%v: the connection flags come after the command's own:\n%s", cmd, help)
			for name := range connectionFlags {
				if name == "timeout" && cmd[0] == "serve" {
					continue // serve answers requests; it sends none
				}
				require.True(t, conn[name], "%v: --%s is not under Connection flags:\n%s", cmd, name, help)
				require.False(t, own[name], "%v: --%s is among the command's own flags:\n%s", cmd, name, help)
			}
		} else {
			require.Empty(t, conn, "%v", cmd)
		}
	}
	usage, own, _ := helpSections(t, helps["budget get"])
	require.Contains(t, usage, "month|week|day|hour|minute|lifetime")
	require.Contains(t, usage, "--unit")
	require.True(t, own["unit"])
}

// The top-level usage names every command (the commands map), and each of
// its lines names only flags that the command (or one of its subcommands)
// has. Each command with subcommands lists, in its --help, every subcommand
// it accepts (as its "which ...?" error names them): an earlier build's
// audit --help named three of six.
func TestCLI_HelpListsEverything(t *testing.T) {
	t.Parallel()
	top := runUsage(t, nil, "help")
	require.Equal(t, 0, top.code)
	typed := map[string]bool{}
	for _, c := range allCommands {
		typed[strings.Join(c, " ")] = true
	}
	for name := range commands {
		require.True(t, typed[name], "allCommands lacks %s", name)
		require.Contains(t, top.stdout, "\n  spendgate "+name+" ", "the usage lacks %s", name)
	}
	// Every flag a command or any of its subcommands has.
	flagsOf := map[string]map[string]bool{}
	for _, c := range allCommands {
		r := runHelp(t, append(c, "--help")...)
		_, own, conn := helpSections(t, r.stdout)
		if flagsOf[c[0]] == nil {
			flagsOf[c[0]] = map[string]bool{}
		}
		for n := range own {
			flagsOf[c[0]][n] = true
		}
		for n := range conn {
			flagsOf[c[0]][n] = true
		}
	}
	for _, line := range strings.Split(top.stdout, "\n") {
		rest, ok := strings.CutPrefix(line, "  spendgate ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		require.NotNil(t, flagsOf[name], "the usage names a command %q that does not exist", name)
		for _, m := range synopsisFlag.FindAllStringSubmatch(rest, -1) {
			require.True(t, flagsOf[name][m[1]], "the usage's line names --%s, which spendgate %s does not have:\n%s", m[1], name, line)
		}
	}
	// "which audit? (check, balances, export, keys, archive or trim)"
	which := regexp.MustCompile(`\(([a-z, ]+)\)`)
	for _, parent := range []string{"budget", "pricing", "audit", "keys", "feed", "demo", "tenant-limits"} {
		r := runUsage(t, nil, parent)
		require.Equal(t, exitUsage, r.code)
		first, _, _ := strings.Cut(r.stderr, "\n")
		m := which.FindStringSubmatch(first)
		require.NotNil(t, m, "%s: %s", parent, first)
		subs := strings.FieldsFunc(strings.ReplaceAll(m[1], " or ", ","), func(r rune) bool { return r == ',' || r == ' ' })
		require.NotEmpty(t, subs)
		help := runHelp(t, parent, "--help")
		usage, _, _ := strings.Cut(help.stdout, "\n")
		for _, sub := range subs {
			require.True(t, typed[parent+" "+sub], "allCommands lacks %s %s", parent, sub)
			require.Regexp(t, `[ |]`+sub+`[ |]`, usage, "%s --help's usage line lacks %s", parent, sub)
			require.Regexp(t, `(?m)^  `+sub+` `, help.stdout, "%s --help does not describe %s", parent, sub)
		}
	}
}

// Unexpected arguments, unknown commands and flags, bad flag values and
// missing required flags are refused with the usage on stderr and exit 64
// (EX_USAGE; 2 is a denied admit), before anything connects or starts: the
// service address is unreachable, so a command that sent anything would
// fail with exit 1 instead. An earlier build sent admit without --amount
// to the service, and it came back "amount is empty", naming no flag.
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
		// --listen beside a NATS URL would be ignored; here the URL comes
		// from $SPENDGATE_NATS_URL (below), as it does for an operator
		// who exported it for the CLI.
		{[]string{"serve", "--listen", "127.0.0.1:1"}, "--listen is the embedded server's address, but a NATS URL is set (nats://127.0.0.1:1,"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:2", "--listen", "127.0.0.1:1"}, "a NATS URL is set (nats://127.0.0.1:2,"},
		{[]string{"serve", "--insecure-listen"}, "--insecure-listen applies to the embedded server's --listen, but a NATS URL is set (nats://127.0.0.1:1)"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--max-inflight", "0"}, "--max-inflight must be at least 1"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-rate", "-1"}, "--tenant-rate must not be negative (0: no limit)"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-max-open", "-5"}, "--tenant-max-open must not be negative"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-burst", "-5"}, "--tenant-burst must not be negative"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-denial-bytes", "2000000000"}, "--tenant-denial-bytes 2000000000: at most 1073741824"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--tenant-max-open", "1073741825"}, "--tenant-max-open 1073741825: at most 1073741824, as tenant-limits put takes"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--denial-max-bytes", "-1"}, "--denial-max-bytes must not be negative"},
		{[]string{"budget"}, "which budget command?"},
		{[]string{"budget", "nope"}, `unknown budget command "nope"`},
		{[]string{"budget", "list", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"settle", "--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"serve", "--sweep-interval", "5"}, `invalid value "5" for flag --sweep-interval: parse error: want a duration such as 5s, 1m or 1h30m`},
		{[]string{"release", "rsv_1"}, `unexpected arguments ["rsv_1"]`},
		{[]string{"audit"}, "which audit?"},
		{[]string{"audit", "check", "--at", "2026-01-01T00:00:00Z"}, "flag provided but not defined: --at"},
		{[]string{"audit", "balances", "--at", "yesterday"}, `--at "yesterday"`},
		{[]string{"audit", "balances", "--at", "2999-01-01T00:00:00Z"}, `--at "2999-01-01T00:00:00Z" is in the future`},
		{[]string{"bench", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"bench", "--scenarios", "nope"}, `unknown scenario "nope"`},
		{[]string{"bench", "--cluster", "2"}, "--cluster must be 3..5 nodes"},
		{[]string{"demo"}, "which demo?"},
		{[]string{"feed"}, "which feed command?"},
		{[]string{"feed", "consumer"}, "--tenant is required"},
		{[]string{"feed", "consumer", "--tenant", "Acme"}, "must be lower case"},
		{[]string{"demo", "underrun"}, `unknown demo command "underrun"`},
		{[]string{"audit", "nope"}, `unknown audit command "nope"`},
		{[]string{"feed", "nope"}, `unknown feed command "nope"`},
		{[]string{"alerts", "nope"}, `unknown alerts command "nope"`},
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
		{[]string{"gateway", "--drain-abandoned", "-1s"}, "--drain-abandoned must be at least 0 (0: cut at once)"},
		// Bad flag values, named with two dashes.
		{[]string{"serve", "--feed=maybe"}, `invalid boolean value "maybe" for --feed`},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "--count", "x"}, `invalid value "x" for flag --count`},
		{[]string{"admit", "--scope", "org:a", "--amount"}, "flag needs an argument: --amount"},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "-o", "yaml"}, `invalid value "yaml" for flag -o: want json or id`},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "--output", "yaml"}, `invalid value "yaml" for flag --output: want json or id`},
		// Required flags, named.
		{[]string{"admit", "--amount", "1"}, "--scope is required"},
		{[]string{"admit", "--scope", "org:a"}, "--amount is required (or --model with --input-tokens and --max-output-tokens"},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "--model", "m"}, "--amount and --model together"},
		{[]string{"admit", "--scope", "org:a", "--model", "m"}, "--model needs the token counts to price"},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "--max-output-tokens", "5"}, "they need --model"},
		{[]string{"admit", "--scope", "org:a", "--amount", "1", "-o", "id", "--mode", "check"}, "-o id prints the reservation id, and --mode check reserves nothing"},
		{[]string{"settle", "--actual", "1"}, "--reservation is required"},
		{[]string{"settle", "--reservation", "rsv_1"}, "--actual is required (or, for a reservation priced from a model, its usage"},
		{[]string{"settle", "--reservation", "rsv_1", "--actual", "1", "--output-tokens", "3"}, "--actual and the usage"},
		{[]string{"release"}, "--reservation is required"},
		{[]string{"void", "--scope", "org:a"}, "--request-id is required"},
		{[]string{"void", "--request-id", "r-1"}, "--scope is required"},
		{[]string{"budget", "put", "--period", "month", "--limit", "1"}, "--scope is required"},
		{[]string{"budget", "get"}, "--scope is required"},
		{[]string{"budget", "enable", "--period", "month"}, "--scope is required"},
		{[]string{"pricing", "put", "--model", "m", "--input", "1"}, "--output is required"},
		{[]string{"pricing", "get"}, "--model is required"},
		{[]string{"pricing", "import"}, "--file is required"},
		{[]string{"keys", "create"}, "--scope is required"},
		{[]string{"keys", "rotate"}, "--id is required"},
		{[]string{"audit", "archive"}, "--dir is required"},
		{[]string{"key"}, "--file is required"},
		{[]string{"report"}, "--by is required"},
		{[]string{"tenant-limits", "put", "--max-open", "5"}, "--tenant is required"},
		{[]string{"tenant-limits", "put", "--tenant", "acme", "--rate", "fast"}, "want a whole number"},
	} {
		r := runUsage(t, []string{"SPENDGATE_NATS_URL=nats://127.0.0.1:1"}, tc.args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
		require.Contains(t, r.stderr, "Usage:", "%v", tc.args)
		if tc.args != nil && !strings.HasPrefix(tc.want, "unknown command") {
			// The error, the usage line and where the help is: not the
			// whole help, whose flags would scroll the error away. (An
			// unknown command gets the list of commands.)
			require.NotContains(t, r.stderr, "\nFlags:\n", "%v", tc.args)
			require.Contains(t, r.stderr, " --help' for what it does and every flag.", "%v", tc.args)
			require.LessOrEqual(t, strings.Count(r.stderr, "\n"), 6, "%v:\n%s", tc.args, r.stderr)
		}
		require.Empty(t, r.stdout, "%v", tc.args)
	}
}

// spendgate version prints the module version and the commit recorded in
// the binary's build information, the one `go version -m` reads; a build
// that recorded none (go run, -buildvcs=false, a git worktree) says so and
// how to get one, instead of claiming a commit. It runs usageBinPath, the
// binary go build made (binPath is the test binary under -race).
// TestCLI_TimeoutSaysWhat: a replica that takes the request and never
// answers (here a subscriber that does nothing) is reported as no answer
// within --timeout, with what a replica that cannot serve does instead,
// not as Go's "context deadline exceeded". How it can fail: the message is
// the bare context error.
func TestCLI_TimeoutSaysWhat(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	sub, err := env.Conn.Subscribe("spendgate.budget.list", func(*nats.Msg) {})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, env.Conn.Flush())
	r := runCLI(t, nil, "budget", "list", "--nats-url", env.URL(), "--timeout", "300ms")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, "spendgate: budget.list: no answer within --timeout 300ms")
	require.NotContains(t, r.stderr, "context deadline exceeded")
}

func TestCLI_Version(t *testing.T) {
	t.Parallel()
	r := runBin(t, usageBinPath, nil, nil, "version")
	require.Equal(t, 0, r.code, r.stderr)
	out, err := exec.Command("go", "version", "-m", usageBinPath).Output()
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
		require.Equal(t, "commit "+noCommit, lines[2])
		require.Contains(t, lines[2], "-ldflags \"-X main.commit=")
	}
}

// The commit line: as go build records it in a git checkout; stamped with
// -ldflags when the build recorded none; else what to do about it.
func TestWriteVersion(t *testing.T) {
	t.Parallel()
	main := debug.Module{Path: "github.com/spendgate/spendgate", Version: "v0.3.0"}
	info := &debug.BuildInfo{Main: main, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "9a8dece0"}, {Key: "vcs.time", Value: "2026-12-01T03:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	var buf bytes.Buffer
	require.NoError(t, writeVersion(&buf, info, "ignored"))
	require.True(t, strings.HasPrefix(buf.String(), "spendgate v0.3.0\nmodule github.com/spendgate/spendgate\ncommit 9a8dece0 (modified)\ncommit time 2026-12-01T03:00:00Z\ngo "), buf.String())

	// -ldflags "-X main.commit=..." sets this package-level string
	// variable (a build that names another sets nothing, silently).
	var _ *string = &commit
	buf.Reset()
	require.NoError(t, writeVersion(&buf, &debug.BuildInfo{Main: main}, "1234abcd"))
	require.True(t, strings.HasPrefix(buf.String(), "spendgate v0.3.0\nmodule github.com/spendgate/spendgate\ncommit 1234abcd (stamped with -ldflags)\ngo "), buf.String())

	buf.Reset()
	require.NoError(t, writeVersion(&buf, &debug.BuildInfo{Main: main}, ""))
	require.Contains(t, buf.String(), "\ncommit unknown: built without VCS information (go run records none; use go build in a git checkout")
	require.NotContains(t, buf.String(), "commit time")
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

// docs/guide.md's command line section shows the usage `spendgate --help`
// prints, line for line: the guide's copy had fallen behind the commands.
func TestCLI_GuideShowsTheUsage(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "guide.md"))
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(doc), "```text\nUsage:\n")
	require.True(t, ok, "the guide's usage block")
	block, _, _ = strings.Cut(block, "```")
	_, want, _ := strings.Cut(usage, "Usage:\n")
	want, _, _ = strings.Cut(want, "\n\n")
	require.Equal(t, want+"\n", block, "docs/guide.md's usage block differs from spendgate --help's")
}
