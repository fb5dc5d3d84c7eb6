package service_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/internal/testbin"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestCluster_HardFailoverKill is TestCluster_FailoverLeaderKill with each
// node in its own OS process and the stream leader's process killed with
// SIGKILL: no hand-over, the followers elect a leader after raft's election
// timeout. The same assertions: nothing acknowledged lost, replay == live,
// no over-admission, and the first admit within failoverRecoveryBound of
// the new leader's election. SPENDGATE_FAILOVER_KILLS=N kills N times (the
// killed node is started again between kills).
func TestCluster_HardFailoverKill(t *testing.T) { failover(t, processes(t, "sigkill")) }

// TestCluster_HardFailoverPause pauses the stream leader's process with
// SIGSTOP, and resumes it with SIGCONT once another node leads: the paused
// leader wakes up believing it leads, and must not lose or fork anything.
func TestCluster_HardFailoverPause(t *testing.T) { failover(t, processes(t, "sigstop")) }

// Named bounds of the process cluster.
const (
	// nodeStartTimeout bounds a node process's start ("ready").
	nodeStartTimeout = 30 * time.Second
	// nodePing is the client ping interval on the process cluster: with
	// two pings outstanding, a connection to a paused node is given up
	// after about 3 intervals instead of nats.go's default 4 minutes.
	nodePing = 250 * time.Millisecond
	// leaderProbe bounds one stream info request of the leader poll.
	leaderProbe = 300 * time.Millisecond
)

// procCluster is a 3-node JetStream cluster, one OS process per node,
// built from testdata/node.
type procCluster struct {
	t      *testing.T
	bin    string
	dir    string
	client []int // client ports
	route  []int // route ports
	cmds   []*exec.Cmd
	nc     *nats.Conn
	js     jetstream.JetStream
	layout streams.Layout
}

// processes starts a process cluster and returns it as a foCluster whose
// disruption is mode: "sigkill" (the killed node is started again before
// the next round) or "sigstop" (resumed with SIGCONT once another node
// leads).
func processes(t *testing.T, mode string) foCluster {
	soak.Only(t) // the cluster fault test (internal/chaos) kills and pauses nodes in the short suite
	if testing.Short() {
		t.Skip("builds and runs node processes")
	}
	c := startProcCluster(t, 3)
	fc := foCluster{mode: mode, hard: true, layout: c.layout, nc: c.nc, js: c.js, urls: c.urls(),
		url: c.url, leader: c.leader,
		connOpts: []nats.Option{nats.PingInterval(nodePing), nats.MaxPingsOutstanding(2)}}
	switch mode {
	case "sigkill":
		fc.disrupt = func(i int) { c.signal(i, syscall.SIGKILL); _ = c.cmds[i].Wait(); c.cmds[i] = nil }
		fc.heal = func(t *testing.T, i int) { c.start(i); c.awaitCurrent() }
	case "sigstop":
		fc.disrupt = func(i int) { c.signal(i, syscall.SIGSTOP) }
		fc.elected = func(i int) { c.signal(i, syscall.SIGCONT) }
		fc.heal = func(t *testing.T, i int) { c.awaitCurrent() }
	default:
		t.Fatalf("mode %q", mode)
	}
	return fc
}

func startProcCluster(t *testing.T, n int) *procCluster {
	t.Helper()
	c := &procCluster{t: t, dir: t.TempDir(), cmds: make([]*exec.Cmd, n)}
	// testdata/node, built by package testbin under the lock that
	// cmd/spendgate's and internal/chaos's builds share, and kept.
	bin, err := testbin.Path(testbin.Node)
	require.NoError(t, err, "build testdata/node")
	c.bin = bin
	for i := 0; i < n; i++ {
		c.client = append(c.client, testenv.FreePort(t))
		c.route = append(c.route, testenv.FreePort(t))
	}
	t.Cleanup(func() {
		if c.nc != nil {
			c.nc.Close()
		}
		for i, cmd := range c.cmds {
			if cmd != nil {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
				c.cmds[i] = nil
			}
		}
	})
	for i := 0; i < n; i++ {
		c.start(i)
	}
	c.nc, err = nats.Connect(c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.PingInterval(nodePing), nats.MaxPingsOutstanding(2), nats.Name("proc-cluster"))
	require.NoError(t, err)
	c.js, err = jetstream.New(c.nc)
	require.NoError(t, err)
	lc := streams.DefaultConfig()
	lc.Replicas = n
	c.layout, err = streams.New(lc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = streams.Ensure(ctx, c.js, c.layout)
	require.NoError(t, err)
	c.awaitCurrent()
	return c
}

func (c *procCluster) url(i int) string {
	return "nats://127.0.0.1:" + strconv.Itoa(c.client[i])
}

func (c *procCluster) urls() string {
	var out []string
	for i := range c.client {
		out = append(out, c.url(i))
	}
	return strings.Join(out, ",")
}

// start starts node i's process and waits until it accepts connections.
// A port freePort handed out can be taken by another process before the
// node binds it: the node is then started again on fresh ports (its peers
// still reach it, since it dials their routes).
func (c *procCluster) start(i int) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		err := c.try(i)
		if err == nil {
			return
		}
		log, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i+1)))
		if attempt == 3 || !strings.Contains(string(log), "address already in use") {
			require.NoError(c.t, err)
		}
		c.t.Logf("node n%d: a port was taken, starting it on fresh ports", i+1)
		p := testenv.FreePorts(c.t, 2)
		c.client[i], c.route[i] = p[0], p[1]
	}
}

// try starts node i's process once and waits until it accepts
// connections, or exits.
func (c *procCluster) try(i int) error {
	c.t.Helper()
	var routes []string
	for _, p := range c.route {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	cmd := exec.Command(c.bin, "-name", fmt.Sprintf("n%d", i+1), "-dir", filepath.Join(c.dir, fmt.Sprintf("n%d", i+1)),
		"-listen", "127.0.0.1:"+strconv.Itoa(c.client[i]), "-cluster", "127.0.0.1:"+strconv.Itoa(c.route[i]),
		"-routes", strings.Join(routes, ","))
	logf, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i+1)))
	require.NoError(c.t, err)
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	require.NoError(c.t, err)
	require.NoError(c.t, cmd.Start())
	c.cmds[i] = cmd
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				return
			}
		}
		ready <- fmt.Errorf("node n%d exited before it was ready (see %s)", i+1, logf.Name())
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			c.cmds[i] = nil
		}
		return err
	case <-time.After(nodeStartTimeout):
		c.t.Fatalf("node n%d not ready within %v", i+1, nodeStartTimeout)
	}
	return nil
}

func (c *procCluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	require.NoError(c.t, c.cmds[i].Process.Signal(sig), "signal %v to n%d", sig, i+1)
}

// info returns the ledger stream's cluster info, or nil if no answer came
// within leaderProbe.
func (c *procCluster) info() *jetstream.ClusterInfo {
	ctx, cancel := context.WithTimeout(context.Background(), leaderProbe)
	defer cancel()
	s, err := c.js.Stream(ctx, c.layout.StreamName())
	if err != nil {
		return nil
	}
	return s.CachedInfo().Cluster
}

// leader returns the index of the node leading the ledger stream (as the
// stream's info names it), or -1.
func (c *procCluster) leader() int {
	ci := c.info()
	if ci == nil || ci.Leader == "" {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimPrefix(ci.Leader, "n"))
	if err != nil || n < 1 || n > len(c.cmds) {
		return -1
	}
	return n - 1
}

// awaitCurrent waits until the ledger stream has a leader and every other
// replica is current and online.
func (c *procCluster) awaitCurrent() {
	c.t.Helper()
	testenv.WaitFor(c.t, time.Minute, "the ledger stream current on every node", func() bool {
		ci := c.info()
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != len(c.cmds)-1 {
			return false
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	})
}
