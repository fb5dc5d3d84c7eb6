package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/parallel"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/internal/testbin"
	"github.com/spendgate/spendgate/testenv"
)

// binPath is the spendgate binary of the process tests, race-built when
// the tests run with -race: then it is this test binary itself,
// hard-linked as "spendgate" (TestMain runs main when started under that
// name): package main compiled with -race, which go test has just linked,
// so TestMain need not link it a second time (5.5 CPU-seconds where go
// build's link is not cached: a fresh clone, a new commit). Without -race
// (or where no hard link can be made) TestMain builds it.
var binPath string

// usageBinPath is the spendgate binary built without the race detector,
// for the tests that only parse flags and print a usage or a refusal
// (runUsage): one goroutine, nothing to race, and about 170 starts, each
// ten times cheaper without -race (0.2 s of CPU with it: the race
// runtime's start). serve and gateway run it too (procBin), and client
// commands after their first run (clientBin). It is binPath when the
// tests run without -race.
var usageBinPath string

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "spendgate" {
		// Started as binPath: be spendgate, or, as a replica that bench
		// starts (plainReplicas), the plain build.
		if plain := os.Getenv(envPlainReplicas); plain != "" && len(os.Args) > 1 && os.Args[1] == "serve" {
			err := syscall.Exec(plain, os.Args, os.Environ())
			fmt.Fprintln(os.Stderr, "exec", plain+":", err)
			os.Exit(1)
		}
		main()
	}
	if os.Getenv("GO_SPENDGATE_CALLER") == "1" {
		// Re-executed as a caller process: it needs no binary.
		os.Exit(m.Run())
	}
	if err := setTestEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := parallel.Raise(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "spendgate-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "spendgate")
	usageBinPath = binPath
	var builds [][]string
	if raceEnabled {
		// The plain build internal/chaos starts too (package testbin:
		// one build for both, kept between runs).
		if usageBinPath, err = testbin.Path(testbin.Spendgate); err != nil {
			fmt.Fprintln(os.Stderr, "building spendgate:", err)
			os.Exit(1)
		}
		if !linkSelf(binPath) {
			builds = append(builds, []string{"build", "-race", "-o", binPath})
		}
	} else {
		builds = append(builds, []string{"build", "-o", binPath})
	}
	for _, args := range builds {
		if err := goBuild(args...); err != nil {
			fmt.Fprintln(os.Stderr, "building spendgate:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	testbin.Remove()
	os.Exit(code)
}

// goBuild runs go build with args on this package.
func goBuild(args ...string) error {
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// linkSelf hard-links this test binary as path and says whether it could
// (not across file systems: then TestMain builds binPath). Not a symbolic
// link: bench runs its replicas as os.Executable(), which resolves one to
// this binary's own name, under which it would run the tests.
func linkSelf(path string) bool {
	self, err := os.Executable()
	return err == nil && os.Link(self, path) == nil
}

// raceRan holds the client commands (by command and subcommand) a
// race-built process has run in this test run: clientBin.
var raceRan sync.Map

// plainServers are the commands that serve (a replica, on its embedded
// server or joining one; the gateway): they run built without the race
// detector (procBin, clientBin) but where a test asks for raceBin. Their
// concurrent code runs race-instrumented in process in other packages'
// tests: the replica's (ledger, service endpoints, sweep, feed, reports,
// metrics, health) in internal/replica's and internal/service's (their
// harness starts replica.Start on an embedded server, as serve does), the
// dashboard over a live replica in internal/dashboard's, the embedded
// server in every testenv test, the gateway in internal/gateway's. What
// only serve.go does concurrently is kept race-built here:
// TestSecure_KeyRotationSIGHUP (the SIGHUP reload swaps the ledger's
// trust and signer while it serves) and TestServe_CleanStopLogsNoWarning
// (the stop: signal, replica stop and the two connections' drains). A
// race-built serve costs about three times the CPU of a plain one (its
// embedded JetStream server and the replica, race-instrumented), and the
// package starts about 55 of them.
var plainServers = map[string]bool{"serve": true, "gateway": true}

// envPlainReplicas names, in the environment of a race-built bench
// (plainReplicas), the plain build its replicas exec.
const envPlainReplicas = "SPENDGATE_TEST_PLAIN_REPLICAS"

// plainReplicas is the environment of a race-built bench whose replicas
// run the plain build: bench starts them as its own executable (binPath,
// the race-built test binary), which, started as "spendgate serve" with
// envPlainReplicas set, execs usageBinPath in its place (the same pid,
// its arguments and environment). A replica is serve: plainServers says
// where its concurrent code runs race-instrumented. The bench process
// (its embedded server, its callers, the restart scenario's own code)
// stays race-built. A race-built replica cost about three times the CPU
// of a plain one: in TestBench_Restart, 4.6 CPU-seconds with its four
// replicas race-built.
func plainReplicas() []string {
	if usageBinPath == binPath {
		return nil
	}
	return []string{envPlainReplicas + "=" + usageBinPath}
}

// raceAlways are the commands run race-built every time: bench drives load
// with many goroutines, and TestBench_Restart is the only test of its
// restart scenario (internal/bench's own tests run the other scenarios).
var raceAlways = map[string]bool{"bench": true}

// raceBin is the binary a test that needs a race-built serve (see
// plainServers) passes to startProcBin: binPath.
func raceBin() string { return binPath }

// procBin is the binary startProc runs the command args with: usageBinPath
// for a plain server (plainServers), binPath for anything else (bench, and
// a client command a test runs as a process of its own, such as audit
// archive, which TestAudit_ArchiveKillTrim kills while it writes), which
// then counts as the command's race-built run for clientBin.
func procBin(args ...string) string {
	w := commandWords(args)
	if len(w) > 0 && plainServers[w[0]] {
		return usageBinPath
	}
	if len(w) > 0 {
		raceRan.Store(strings.Join(w, " "), true) // clientBin's later runs of it: plain
	}
	return binPath
}

// commandWords are the command and subcommand of args: the words before
// the first flag, at most two.
func commandWords(args []string) []string {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
		if len(words) == 2 {
			break
		}
	}
	return words
}

// clientBin is the binary a test runs the command args with. A plain
// server (plainServers: serve's refusals, its config checks) is
// usageBinPath, and bench (raceAlways) binPath, every time. A client
// command (one request and its reply, an offline tool, a streaming
// command) is binPath the first time this test run runs it (by command and
// subcommand), so the race detector sees each command's code every run,
// and usageBinPath after: a race-built process costs four times the CPU
// of one without (0.22 s against 0.06 s for an admit; the package runs
// about 330 of them), and the process does little concurrently beyond
// nats.go's own goroutines, which run race-built in every test of this
// package's in-process servers and clients.
func clientBin(args ...string) string {
	words := commandWords(args)
	switch {
	case len(words) == 0 || raceAlways[words[0]]:
		return binPath
	case plainServers[words[0]]:
		return usageBinPath
	}
	if _, seen := raceRan.LoadOrStore(strings.Join(words, " "), true); !seen {
		return binPath
	}
	return usageBinPath
}

// setTestEnv sets, once for the whole package, the environment every test
// would otherwise set with t.Setenv (which rules out t.Parallel): serve
// reads $SPENDGATE_NATS_URL, so it is unset (a developer's own must not
// turn a test's embedded server into a client of theirs), and the
// in-process nats-server of docs/security.md's walkthroughs reads the
// role and tenant passwords from the environment, as the page's `export`
// lines give them. The values are the same for every test; a variable
// one test needs differently goes to its processes' environment
// (startProcEnv, runCLI's env).
func setTestEnv() error {
	if err := os.Unsetenv(natsconn.EnvSpendgateURL); err != nil {
		return err
	}
	for _, u := range append(append([]string{}, roles.Names...), walkthroughTenants...) {
		if err := os.Setenv(roles.PasswordEnv(u), walkthroughPassword(u)); err != nil {
			return err
		}
	}
	return nil
}

// proc is a running spendgate process.
type proc struct {
	cmd  *exec.Cmd
	out  *testenv.LogBuffer
	done chan struct{}
	err  error
}

// startProc runs the binary with args (procBin's) and returns once it
// printed "ready" (for serve) or immediately (ready == false). The process
// is killed at test end if still running.
func startProc(t *testing.T, waitReady bool, args ...string) *proc {
	t.Helper()
	return startProcIn(t, testDir(t), waitReady, args...)
}

// testDirs holds each test's working directory for its processes.
var testDirs sync.Map

// testDir returns the working directory of t's processes: a temporary
// directory of its own, shared by every process the test starts, so that
// a default --data-dir (and the signing key in it) is never the
// repository's and is the same for all of them.
func testDir(t *testing.T) string {
	if d, ok := testDirs.Load(t); ok {
		return d.(string)
	}
	d := t.TempDir()
	testDirs.Store(t, d)
	t.Cleanup(func() { testDirs.Delete(t) })
	return d
}

// startProcIn is startProc with the process's working directory dir,
// where its default --data-dir lives.
func startProcIn(t *testing.T, dir string, waitReady bool, args ...string) *proc {
	t.Helper()
	return startProcEnvIn(t, dir, nil, waitReady, args...)
}

// startProcEnv is startProc with env added to the process's environment.
func startProcEnv(t *testing.T, env []string, waitReady bool, args ...string) *proc {
	t.Helper()
	return startProcEnvIn(t, testDir(t), env, waitReady, args...)
}

// startProcEnvIn is startProcIn with env added to the process's
// environment.
func startProcEnvIn(t *testing.T, dir string, env []string, waitReady bool, args ...string) *proc {
	t.Helper()
	return startProcBin(t, procBin(args...), dir, env, waitReady, args...)
}

// startProcBin is startProcEnvIn running bin (raceBin for a race-built
// serve) instead of procBin's.
func startProcBin(t *testing.T, bin, dir string, env []string, waitReady bool, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), out: &testenv.LogBuffer{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %v:\n%s", args, p.out.String())
		}
	})
	if waitReady {
		testenv.WaitFor(t, 30*time.Second, "spendgate serve ready", func() bool {
			select {
			case <-p.done:
				t.Fatalf("spendgate %v exited early: %v\n%s", args, p.err, p.out.String())
			default:
			}
			return bytes.Contains([]byte(p.out.String()), []byte("ready:"))
		})
	}
	return p
}

// kill sends SIGKILL and waits for the process to die.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
		require.NoError(t, p.err, p.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("spendgate did not stop on SIGTERM:\n%s", p.out.String())
	}
}

// connect dials url with reconnects, closed at test end.
func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// serviceCount asks micro discovery how many spendgate instances answer.
func serviceCount(t *testing.T, nc *nats.Conn) int {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.PublishRequest("$SRV.PING.spendgate", inbox, nil))
	n := 0
	for {
		if _, err := sub.NextMsg(300 * time.Millisecond); err != nil {
			return n
		}
		n++
	}
}
