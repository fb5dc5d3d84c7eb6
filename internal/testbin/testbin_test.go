package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each executable is built and runs: nats-server prints the version go.mod
// requires, spendgate its usage, and node is an executable file. A second
// Path returns the same file; a name it does not know is an error.
func TestPath_BuildsEachOnceAndTheyRun(t *testing.T) {
	t.Cleanup(Remove)
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output()
	require.NoError(t, err)

	nats, err := Path(NATSServer)
	require.NoError(t, err)
	out, err := exec.Command(nats, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), strings.TrimPrefix(strings.TrimSpace(string(version)), "v"))

	sg, err := Path(Spendgate)
	require.NoError(t, err)
	out, err = exec.Command(sg, "help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "spendgate serve")

	node, err := Path(Node)
	require.NoError(t, err)
	info, err := os.Stat(node)
	require.NoError(t, err)
	require.NotZero(t, info.Mode()&0o111, "node is not executable")

	again, err := Path(Spendgate)
	require.NoError(t, err)
	require.Equal(t, sg, again)
	first, err := os.Stat(sg)
	require.NoError(t, err)
	second, err := os.Stat(again)
	require.NoError(t, err)
	require.True(t, os.SameFile(first, second))

	_, err = Path("redis-server")
	require.ErrorContains(t, err, `no executable "redis-server"`)
}

// The kept builds of a checkout that is gone are removed; those of a
// checkout that exists, of one whose lock is held (a build under way), and
// of an older layout that names no checkout are left.
func TestPruneStale_RemovesOnlyGoneCheckouts(t *testing.T) {
	parent := t.TempDir()
	live := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(live, "go.mod"), []byte("module x\n"), 0o644))
	gone := filepath.Join(t.TempDir(), "removed-clone")

	kept := func(name, root string) string {
		d := filepath.Join(parent, name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "lock"), nil, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "spendgate"), []byte("binary"), 0o755))
		if root != "" {
			require.NoError(t, os.WriteFile(filepath.Join(d, rootFile), []byte(root), 0o644))
		}
		return d
	}
	own := kept("own", gone) // its own checkout is never pruned by itself
	stale := kept("stale", gone)
	alive := kept("alive", live)
	legacy := kept("legacy", "")
	busy := kept("busy", gone)
	lock, err := os.OpenFile(filepath.Join(busy, "lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))

	pruneStale(parent, own)

	require.NoDirExists(t, stale)
	for _, d := range []string{own, alive, legacy, busy} {
		require.FileExists(t, filepath.Join(d, "spendgate"))
	}
}
