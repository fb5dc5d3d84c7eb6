package client_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// callerResult is what testdata/caller prints.
type callerResult struct {
	Admitted int      `json:"admitted"`
	Denied   int      `json:"denied"`
	Errors   []string `json:"errors"`
}

// 200 concurrent admits of 0.05 against a 1.00 budget from two OS
// processes (testdata/caller, 100 each, each through its own coalescing
// client) to two replicas: exactly 20 are admitted, and the batches the
// two clients send interleave at the replicas. As in
// TestBatching_capExactFromTwoClients, the cap holds because the group
// commit decides every item against the balance it commits on
// (compare-and-set on the lane); deciding items against a view the
// commit does not check would admit more than 20 (service's blind-writes
// test shows that failure).
func TestBatching_capExactFromTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a second binary")
	}
	env := testenv.New(t)
	startService(t, env)
	startService(t, env)
	batches := countBatches(t, env, streams.EndpointAdmitBatch)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")

	bin := filepath.Join(t.TempDir(), "caller")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/caller").CombinedOutput()
	require.NoError(t, err, "build testdata/caller: %s", out)

	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		lines *bufio.Scanner
	}
	var procs []proc
	for range 2 {
		cmd := exec.Command(bin, "-url", env.URL(), "-n", "100", "-amount", "0.05", "-scope", "org:acme")
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = testWriter{t}
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		procs = append(procs, proc{cmd, stdin, bufio.NewScanner(stdout)})
	}
	// Both connected and ready before either starts.
	for _, p := range procs {
		line := make(chan string, 1)
		go func() {
			if p.lines.Scan() {
				line <- p.lines.Text()
			}
			close(line)
		}()
		select {
		case l := <-line:
			require.Equal(t, "ready", l)
		case <-time.After(30 * time.Second):
			t.Fatal("caller did not get ready within 30 s")
		}
	}
	for _, p := range procs {
		_, err := io.WriteString(p.stdin, "go\n")
		require.NoError(t, err)
	}
	var admitted, denied int
	for i, p := range procs {
		require.True(t, p.lines.Scan(), "caller %d printed no result", i)
		var r callerResult
		require.NoError(t, json.Unmarshal(p.lines.Bytes(), &r), "caller %d: %s", i, p.lines.Text())
		require.Empty(t, r.Errors, "caller %d", i)
		admitted += r.Admitted
		denied += r.Denied
		require.NoError(t, p.cmd.Wait())
	}
	require.Equal(t, 20, admitted)
	require.Equal(t, 180, denied)
	v := budget(t, c, "org:acme")
	requireMoney(t, "1.00", v.Reserved)
	require.EqualValues(t, 20, v.Open)
	// 200 admits in fewer messages than admits: the clients coalesced.
	require.Positive(t, batches.Load())
	require.Less(t, batches.Load(), int64(200))
}

// testWriter sends a child's stderr to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("caller: %s", p)
	return len(p), nil
}
