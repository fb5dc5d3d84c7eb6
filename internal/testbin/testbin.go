// Package testbin builds the executables that this module's tests start as
// processes of their own (spendgate, the bare cluster node of package
// service's hard-failover tests, and nats-server at the version go.mod
// requires), without the race detector, and keeps them between runs and
// between the test binaries of one checkout. It is for tests only.
//
// Every build holds one lock (in the OS temp dir, one per checkout), so
// that packages whose tests run side by side (cmd/spendgate,
// internal/chaos, internal/service) do not compile the packages their
// executables share at the same time, each in its own go build: the later
// ones wait for the first and find those packages in the build cache. The
// executables are kept beside the lock, where go build finds them up to
// date and links one again only when a source of it changed. The kept
// executables of a checkout that no longer exists are removed by the next
// build of any checkout.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// mains are the main packages, relative to the module root or by import
// path, by the name go build gives each (its last element, less a major
// version suffix).
var mains = map[string]string{
	Spendgate:  "./cmd/spendgate",
	Node:       "./internal/service/testdata/node",
	NATSServer: "github.com/nats-io/nats-server/v2",
}

// buildTimeout bounds one build (cold caches on two busy cores: the
// first compiles nats-server and most packages of the module).
const buildTimeout = 10 * time.Minute

var (
	mu    sync.Mutex
	dir   string                // this process's directory of links to the builds
	built = map[string]string{} // name: path, in dir
)

// Path returns the path of the named executable (Spendgate, Node or
// NATSServer), building it the first time this process asks. The file is
// this process's own hard link to the kept build: a rebuild by a later run
// writes a new file and leaves it as it was. Remove removes the links.
func Path(name string) (string, error) {
	pkg, ok := mains[name]
	if !ok {
		return "", fmt.Errorf("testbin: no executable %q", name)
	}
	mu.Lock()
	defer mu.Unlock()
	if path, ok := built[name]; ok {
		return path, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "spendgate-testbin-"); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, name)
	sum := sha256.Sum256([]byte(root))
	keep := filepath.Join(os.TempDir(), "spendgate-test-bin", hex.EncodeToString(sum[:8]))
	err = buildKept(root, keep, pkg)
	if err == nil {
		err = os.Link(filepath.Join(keep, name), path)
	}
	if err != nil {
		if errors.Is(err, errBuild) {
			return "", err
		}
		// The kept directory cannot be used (another user's, a full
		// disk, another file system): build into this process's own.
		if err := goBuild(root, dir, pkg); err != nil {
			return "", err
		}
	}
	built[name] = path
	return path, nil
}

// Remove removes the links Path made, if it made any. Call it from
// TestMain after m.Run.
func Remove() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// errBuild marks a failed go build (as opposed to a kept directory that
// cannot be used).
var errBuild = errors.New("testbin: build failed")

// buildKept brings pkg's build in keep up to date, holding keep's lock.
func buildKept(root, keep, pkg string) error {
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(keep, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close() // and unlocks
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(keep, rootFile), []byte(root), 0o644); err != nil {
		return err
	}
	pruneStale(filepath.Dir(keep), keep)
	return goBuild(root, keep, pkg)
}

// rootFile, in a kept directory, holds the checkout's module root.
const rootFile = "root"

// pruneStale removes the kept directories under parent, other than own,
// whose checkout is gone (no go.mod at the root they name) and whose lock
// no one holds: about 90 MB each, left by every clone or worktree the
// tests ran in. A directory that names no root (an older layout's) is left
// alone. A process still running a removed executable keeps its own link.
func pruneStale(parent, own string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		d := filepath.Join(parent, e.Name())
		if !e.IsDir() || d == own {
			continue
		}
		root, err := os.ReadFile(filepath.Join(d, rootFile))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(string(root), "go.mod")); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		lock, err := os.OpenFile(filepath.Join(d, "lock"), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(d)
		}
		lock.Close()
	}
}

// goBuild builds pkg into dir, killed after buildTimeout. The
// environment's own settings: it shares the build cache of the module's
// other builds.
func goBuild(root, dir, pkg string) error {
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), pkg)
	cmd.Dir = root
	timer := time.AfterFunc(buildTimeout, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: go build -o %s %s: %v: %s", errBuild, dir, pkg, err, out)
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
