package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// callerEnv set to 1 makes this test binary the caller (see caller)
// instead of running tests: TestBatching_capExactFromTwoProcesses starts
// it so as a second OS process. Running this binary again costs no build;
// a separately built command cost a go build and link (about 2 CPU-s and
// 6 s of the package's wall on two busy cores).
const callerEnv = "SPENDGATE_TEST_CALLER"

func TestMain(m *testing.M) {
	if os.Getenv(callerEnv) == "1" {
		os.Exit(caller(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// callerResult is what caller prints.
type callerResult struct {
	Admitted int      `json:"admitted"`
	Denied   int      `json:"denied"`
	Errors   []string `json:"errors"`
}

// caller is a test's second process: it makes -n concurrent admits of
// -amount against -scope through one coalescing client.Client, each with
// its own request id, once a line arrives on stdin (so that several
// callers start together), and prints one JSON line: how many were
// admitted, how many denied for the limit, and any other error. It
// returns the exit code.
func caller(args []string) int {
	fs := flag.NewFlagSet("caller", flag.ContinueOnError)
	url := fs.String("url", "", "NATS URL")
	n := fs.Int("n", 100, "concurrent admits")
	amount := fs.String("amount", "0.05", "amount of each admit")
	scope := fs.String("scope", "org:acme", "scope of each admit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	nc, err := nats.Connect(*url, nats.Name("spendgate-test-caller"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu  sync.Mutex
		res = callerResult{Errors: []string{}}
		wg  sync.WaitGroup
	)
	for i := range *n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Admit(ctx, events.AdmitRequest{Scopes: []string{*scope}, Amount: *amount, Unit: "USD"})
			var de *client.DeniedError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				res.Admitted++
			case errors.As(err, &de) && de.Denial.Reason == events.ReasonLimitReached:
				res.Denied++
			default:
				res.Errors = append(res.Errors, fmt.Sprintf("admit %d: %v", i, err))
			}
		}()
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// 200 concurrent admits of 0.05 against a 1.00 budget from two OS
// processes (this binary as caller, 100 each, each through its own
// coalescing client) to two replicas: exactly 20 are admitted, and the batches the
// two clients send interleave at the replicas. As in
// TestBatching_capExactFromTwoClients, the cap holds because the group
// commit decides every item against the balance it commits on
// (compare-and-set on the lane); deciding items against a view the
// commit does not check would admit more than 20 (service's blind-writes
// test shows that failure).
func TestBatching_capExactFromTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs this binary twice more as second processes")
	}
	env := testenv.New(t)
	startService(t, env)
	startService(t, env)
	batches := countBatches(t, env, streams.EndpointAdmitBatch)
	c := newClient(t, env.Connect(t))
	putBudget(t, c, "org:acme", "1.00")

	bin, err := os.Executable()
	require.NoError(t, err)

	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		lines *bufio.Scanner
	}
	var procs []proc
	for range 2 {
		cmd := exec.Command(bin, "-url", env.URL(), "-n", "100", "-amount", "0.05", "-scope", "org:acme")
		cmd.Env = append(os.Environ(), callerEnv+"=1")
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
	n := batches.seen(t)
	require.Positive(t, n)
	require.Less(t, n, 200)
}

// testWriter sends a child's stderr to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("caller: %s", p)
	return len(p), nil
}
