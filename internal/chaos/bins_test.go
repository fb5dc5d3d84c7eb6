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
)

// binaries builds nats-server (at the version go.mod requires) and
// spendgate once per test binary and returns their paths. nats-server is
// cached across runs in the OS temp dir under its version (built to a
// temporary name and renamed, so concurrent runs never see half a file);
// spendgate is built fresh into a temp dir, since its sources change.
func binaries(t *testing.T) (nats, spendgate string) {
	t.Helper()
	binOnce.Do(func() {
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
			if binErr = os.Rename(tmp, natsBin); binErr != nil {
				return
			}
		}
		if binDir, binErr = os.MkdirTemp("", "spendgate-chaos-bin-"); binErr != nil {
			return
		}
		sgBin = filepath.Join(binDir, "spendgate")
		binErr = goBuild(sgBin, "github.com/spendgate/spendgate/cmd/spendgate")
	})
	if binErr != nil {
		t.Fatalf("build binaries: %v", binErr)
	}
	return natsBin, sgBin
}

// goBuild builds pkg (a main package of this module or its dependencies)
// to out.
func goBuild(out, pkg string) error {
	// The environment's own settings: the build shares the cache of the
	// module's other builds (CI builds cmd/spendgate and compiles
	// nats-server's packages for the benchmarks before the tests).
	cmd := exec.Command("go", "build", "-o", out, pkg)
	timer := time.AfterFunc(buildTimeout, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}

// TestMain removes the spendgate binary's temp dir after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}
