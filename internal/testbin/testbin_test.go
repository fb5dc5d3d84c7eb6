package testbin

import (
	"os"
	"os/exec"
	"strings"
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
