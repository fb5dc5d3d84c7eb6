// Package testbin builds the executables that this module's tests start as
// processes of their own (spendgate, the bare cluster node of package
// service's hard-failover tests, and nats-server at the version go.mod
// requires), without the race detector, and shares them between the test
// binaries of one checkout. It is for tests only.
//
// Every test binary that needs one asks for all of them at once: one go
// build under a lock, so that packages whose tests run side by side
// (cmd/spendgate, internal/chaos, internal/service) compile the packages
// the three share once instead of once each, and the later ones wait for
// the first instead of compiling the same packages beside it. The builds
// are kept in the OS temp dir, one directory per checkout, where go build
// finds them up to date and links again only what a source change touched.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The executables, by the name go build gives each.
const (
	Spendgate  = "spendgate"   // ./cmd/spendgate
	Node       = "node"        // ./internal/service/testdata/node
	NATSServer = "nats-server" // github.com/nats-io/nats-server/v2
)

// mains are the main packages built, relative to the module root or by
// import path: go build names each after its last element (dropping a
// major version suffix).
var mains = []string{"./cmd/spendgate", "./internal/service/testdata/node", "github.com/nats-io/nats-server/v2"}

// buildTimeout bounds the build (cold caches on two busy cores: the
// first build compiles nats-server and every package of the module).
const buildTimeout = 10 * time.Minute

var (
	once sync.Once
	dir  string // a directory of this process holding links to the builds
	err  error
)

// Path returns the path of the named executable (Spendgate, Node or
// NATSServer), building all of them the first time a process asks. The
// file is this process's own hard link to the kept build: a rebuild by a
// later run of another package writes a new file and leaves it as it is.
// Remove removes this process's links.
func Path(name string) (string, error) {
	once.Do(func() { dir, err = build() })
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// Remove removes the links Path made, if it made any. Call it from
// TestMain after m.Run.
func Remove() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	own, err := os.MkdirTemp("", "spendgate-testbin-")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	keep := filepath.Join(os.TempDir(), "spendgate-test-bin", hex.EncodeToString(sum[:8]))
	if err := buildKept(root, keep); errors.Is(err, errNoKeep) {
		// The kept directory cannot be used (another user's, a full
		// disk): build into this process's own.
		if err := goBuild(root, own); err != nil {
			return "", err
		}
		return own, nil
	} else if err != nil {
		return "", err
	}
	for _, name := range []string{Spendgate, Node, NATSServer} {
		if err := os.Link(filepath.Join(keep, name), filepath.Join(own, name)); err != nil {
			// Across file systems: build into this process's own.
			if err := goBuild(root, own); err != nil {
				return "", err
			}
			break
		}
	}
	return own, nil
}

// errNoKeep says that the kept directory cannot be used.
var errNoKeep = errors.New("testbin: the kept directory cannot be used")

// buildKept brings the builds in keep up to date, holding keep's lock:
// a second process waits for the first's build and then finds nothing to
// do.
func buildKept(root, keep string) error {
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return fmt.Errorf("%w: %v", errNoKeep, err)
	}
	lock, err := os.OpenFile(filepath.Join(keep, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %v", errNoKeep, err)
	}
	defer lock.Close() // and unlocks
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("%w: %v", errNoKeep, err)
	}
	return goBuild(root, keep)
}

// goBuild builds every main package into dir, killed after buildTimeout.
// The environment's own settings: it shares the build cache of the
// module's other builds.
func goBuild(root, dir string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, mains...)...)
	cmd.Dir = root
	timer := time.AfterFunc(buildTimeout, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -o %s %s: %w: %s", dir, strings.Join(mains, " "), err, out)
	}
	return nil
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("testbin: no go.mod above " + wd)
		}
	}
}
