package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// natsServerModule is the module whose main package is nats-server: the
// version spendgate embeds, from go.mod.
const natsServerModule = "github.com/nats-io/nats-server/v2"

// buildTimeout bounds one go build (cold caches on 2 busy cores).
const buildTimeout = 5 * time.Minute

var (
	binOnce sync.Once
	binDir  string
	binErr  error
	natsBin string
	sgBin   string
	sgDone  chan struct{}
	sgErr   error
)

// binaries builds nats-server (at the version go.mod requires) once per
// test binary and starts building spendgate, and returns nats-server's
// path and a function that waits for spendgate's. nats-server is cached
// across runs in the OS temp dir under its version (built to a temporary
// name and renamed, so concurrent runs never see half a file). spendgate
// is built from the current sources in the background, so that its link
// overlaps the cluster's start and first election: a caller starts the
// nats-server processes before it waits for spendgate.
func binaries(t *testing.T) (nats string, spendgate func() string) {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "spendgate-chaos-bin-"); binErr != nil {
			return
		}
		sgBin, sgDone = filepath.Join(binDir, "spendgate"), make(chan struct{})
		go func() {
			defer close(sgDone)
			sgErr = goRunCopy("github.com/spendgate/spendgate/cmd/spendgate", sgBin)
		}()
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", natsServerModule).Output()
		if err != nil {
			binErr = fmt.Errorf("go list -m %s: %w", natsServerModule, err)
			return
		}
		version := strings.TrimSpace(string(out))
		cache := filepath.Join(os.TempDir(), "spendgate-test-bin")
		if binErr = os.MkdirAll(cache, 0o755); binErr != nil {
			return
		}
		natsBin = filepath.Join(cache, "nats-server-"+version)
		if _, err := os.Stat(natsBin); err != nil {
			tmp := fmt.Sprintf("%s.%d.tmp", natsBin, os.Getpid())
			if binErr = goBuild(tmp, natsServerModule); binErr != nil {
				return
			}
			binErr = os.Rename(tmp, natsBin)
		}
	})
	if binErr != nil {
		t.Fatalf("build binaries: %v", binErr)
	}
	return natsBin, func() string {
		t.Helper()
		<-sgDone
		if sgErr != nil {
			t.Fatalf("build spendgate: %v", sgErr)
		}
		return sgBin
	}
}

// goRunCopy builds pkg (a main package) as go run does and copies the
// executable to out. go run keeps its executables in the build cache (Go
// 1.24 and later), so when pkg's sources have not changed since the last
// run it only checks that they have not, instead of linking again as go
// build -o does every time (3-4 CPU-seconds).
func goRunCopy(pkg, out string) error {
	return goCmd("run", "-exec", "cp", pkg, out)
}

// goBuild builds pkg (a main package of this module or its dependencies)
// to out.
func goBuild(out, pkg string) error {
	return goCmd("build", "-o", out, pkg)
}

// goCmd runs the go command with args, killed after buildTimeout.
func goCmd(args ...string) error {
	// The environment's own settings: the build shares the cache of the
	// module's other builds (CI builds cmd/spendgate and compiles
	// nats-server's packages for the benchmarks before the tests).
	cmd := exec.Command("go", args...)
	timer := time.AfterFunc(buildTimeout, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, b)
	}
	return nil
}

// TestMain removes the spendgate binary's temp dir after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if sgDone != nil {
		<-sgDone // a test that failed before waiting for the build
	}
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}
