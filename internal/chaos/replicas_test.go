package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/testenv"
)

// replicaStart bounds a replica's start until /readyz answers 200.
const replicaStart = 90 * time.Second

// replica is one spendgate serve process.
type replica struct {
	name   string
	dir    string
	http   int
	cmd    *exec.Cmd
	exited chan struct{}
}

// replicaKeys makes one signing key per replica in dir and returns the
// seed files and the trusted list every replica and the auditor share.
func replicaKeys(t *testing.T, dir string, n int) (seeds []string, trusted string, ks *signing.KeySet) {
	t.Helper()
	var pubs []string
	for i := 0; i < n; i++ {
		f := filepath.Join(dir, fmt.Sprintf("r%d.nk", i+1))
		s, _, err := signing.LoadOrCreate(f)
		require.NoError(t, err)
		seeds = append(seeds, f)
		pubs = append(pubs, s.PublicKey())
	}
	trusted = strings.Join(pubs, ",")
	ks, err := signing.ParseKeys(trusted)
	require.NoError(t, err)
	return seeds, trusted, ks
}

// startReplica starts spendgate serve against urls, signing with seed and
// trusting trusted, and waits until /readyz answers 200. The process gets
// a clean environment (no SPENDGATE_* of the test's) and is killed when t
// ends.
func startReplica(t *testing.T, bin, dir, name, urls, seed, trusted string, extra ...string) *replica {
	t.Helper()
	r := &replica{name: name, dir: filepath.Join(dir, name), http: testenv.FreePort(t)}
	require.NoError(t, os.MkdirAll(r.dir, 0o755))
	logf, err := os.Create(filepath.Join(r.dir, "serve.log"))
	require.NoError(t, err)
	defer logf.Close()
	args := append([]string{"serve", "--nats-url", urls, "--replicas", "3", "--http", "127.0.0.1:" + strconv.Itoa(r.http),
		"--signing-key", seed, "--trusted-keys", trusted, "--data-dir", r.dir, "--log-format", "json"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.dir}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	r.cmd, r.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() { r.kill() })
	deadline := time.Now().Add(replicaStart)
	for !r.ready() {
		select {
		case <-r.exited:
			t.Fatalf("replica %s exited at start; see %s", name, filepath.Join(r.dir, "serve.log"))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not ready within %v; see %s", name, replicaStart, filepath.Join(r.dir, "serve.log"))
		}
	}
	return r
}

// ready reports whether the replica's /readyz answers 200.
func (r *replica) ready() bool {
	code, _ := r.get("/readyz")
	return code == http.StatusOK
}

// get requests path on the replica's HTTP listener.
func (r *replica) get(path string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), monitorTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(r.http)+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM and waits for the process to exit.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if r.cmd == nil {
		return
	}
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s did not exit on SIGTERM", r.name)
	}
	r.cmd = nil
}

func (r *replica) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.cmd = nil
}
