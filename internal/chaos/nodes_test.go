package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/testenv"
)

// Named bounds of the node processes.
const (
	// nodeStart bounds a node's start until it answers its monitoring
	// port (a restarted node may first recover its stores).
	nodeStart = 60 * time.Second
	// monitorTimeout bounds one monitoring request (a paused node never
	// answers).
	monitorTimeout = time.Second
	// clusterName names the test cluster.
	clusterName = "chaos"
)

// node is one nats-server process of the cluster.
type node struct {
	name    string
	dir     string // its directory: config, store, log
	client  int    // client port
	route   int    // route port
	monitor int    // monitoring (HTTP) port
	cmd     *exec.Cmd
	exited  chan struct{}
	paused  bool
}

// cluster is three nats-server processes with sync_interval: always.
type cluster struct {
	t     *testing.T
	bin   string
	nodes []*node
}

// startCluster starts n nodes in dir and waits until they have a JetStream
// meta leader. Every process is killed when t ends.
func startCluster(t *testing.T, bin, dir string, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: bin}
	ports := testenv.FreePorts(t, 3*n)
	for i := 0; i < n; i++ {
		c.nodes = append(c.nodes, &node{name: fmt.Sprintf("n%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			client: ports[3*i], route: ports[3*i+1], monitor: ports[3*i+2]})
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			c.kill(nd)
		}
	})
	for _, nd := range c.nodes {
		c.writeConfig(nd)
		c.start(nd)
	}
	c.await("a JetStream meta leader", time.Minute, func() bool { return c.metaLeader() != nil })
	return c
}

func (c *cluster) writeConfig(nd *node) {
	var routes []string
	for _, o := range c.nodes {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(o.route))
	}
	conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: %s
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, nd.name, nd.client, nd.monitor, filepath.Join(nd.dir, "store"), clusterName, nd.route, strings.Join(routes, ", "))
	require.NoError(c.t, os.MkdirAll(nd.dir, 0o755))
	require.NoError(c.t, os.WriteFile(filepath.Join(nd.dir, "nats.conf"), []byte(conf), 0o644))
}

// start starts nd's process and waits until its monitoring port answers.
func (c *cluster) start(nd *node) {
	c.t.Helper()
	logf, err := os.OpenFile(filepath.Join(nd.dir, "nats.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(c.t, err)
	defer logf.Close()
	fmt.Fprintf(logf, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "-c", filepath.Join(nd.dir, "nats.conf"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(c.t, cmd.Start())
	nd.cmd, nd.exited, nd.paused = cmd, make(chan struct{}), false
	go func(ch chan struct{}) { _ = cmd.Wait(); close(ch) }(nd.exited)
	c.await(nd.name+" answering", nodeStart, func() bool {
		select {
		case <-nd.exited:
			// The log is in the test's temp dir, gone once it ends.
			log, _ := os.ReadFile(filepath.Join(nd.dir, "nats.log"))
			c.t.Fatalf("%s exited at start; the end of its log:\n%s", nd.name, tail(string(log), 40))
		default:
		}
		_, err := getJSON[server.Varz](nd, "/varz")
		return err == nil
	})
}

// kill sends SIGKILL to nd (and SIGCONT, so a paused one dies) and waits
// for it to exit. Killing a stopped node does nothing.
func (c *cluster) kill(nd *node) {
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Signal(syscall.SIGKILL)
	_ = nd.cmd.Process.Signal(syscall.SIGCONT)
	<-nd.exited
	nd.cmd, nd.paused = nil, false
}

// term stops nd gracefully (SIGTERM) and waits for it to exit.
func (c *cluster) term(nd *node) {
	c.t.Helper()
	if nd.cmd == nil {
		return
	}
	require.NoError(c.t, nd.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-nd.exited:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("%s did not exit on SIGTERM", nd.name)
	}
	nd.cmd = nil
}

// pause and resume send SIGSTOP and SIGCONT.
func (c *cluster) pause(nd *node) {
	require.NoError(c.t, nd.cmd.Process.Signal(syscall.SIGSTOP))
	nd.paused = true
}

func (c *cluster) resume(nd *node) {
	require.NoError(c.t, nd.cmd.Process.Signal(syscall.SIGCONT))
	nd.paused = false
}

// running reports whether nd's process runs and is not paused.
func (nd *node) running() bool { return nd.cmd != nil && !nd.paused }

// url is nd's client URL.
func (nd *node) url() string { return "nats://127.0.0.1:" + strconv.Itoa(nd.client) }

// urls are every node's client URLs, comma-separated.
func (c *cluster) urls() string {
	var out []string
	for _, nd := range c.nodes {
		out = append(out, nd.url())
	}
	return strings.Join(out, ",")
}

// getJSON reads nd's monitoring endpoint path into a T.
func getJSON[T any](nd *node, path string) (*T, error) {
	if !nd.running() {
		return nil, fmt.Errorf("%s is not running", nd.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), monitorTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(nd.monitor)+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s", nd.name, path, resp.Status)
	}
	var v T
	return &v, json.NewDecoder(resp.Body).Decode(&v)
}

// jsz is one node's JetStream view: the meta group, and its own copy of
// each stream (state read from its own store) with the stream's cluster
// as it sees it.
func jsz(nd *node) (*server.JSInfo, error) {
	return getJSON[server.JSInfo](nd, "/jsz?accounts=true&streams=true")
}

// streamOn returns nd's copy of stream (nil if nd has none or does not
// answer).
func streamOn(nd *node, stream string) *server.StreamDetail {
	info, err := jsz(nd)
	if err != nil {
		return nil
	}
	for _, a := range info.AccountDetails {
		for i := range a.Streams {
			if a.Streams[i].Name == stream {
				return &a.Streams[i]
			}
		}
	}
	return nil
}

// byName returns the node called name, or nil.
func (c *cluster) byName(name string) *node {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

// metaLeader returns the JetStream meta leader as a running node reports
// it, or nil.
func (c *cluster) metaLeader() *node {
	for _, nd := range c.nodes {
		if info, err := jsz(nd); err == nil && info.Meta != nil && info.Meta.Leader != "" {
			if l := c.byName(info.Meta.Leader); l != nil && l.running() {
				return l
			}
		}
	}
	return nil
}

// streamLeader returns the node that leads stream by its own account
// (the leader's copy names itself), or nil.
func (c *cluster) streamLeader(stream string) *node {
	for _, nd := range c.nodes {
		if sd := streamOn(nd, stream); sd != nil && sd.Cluster != nil && sd.Cluster.Leader == nd.name {
			return nd
		}
	}
	return nil
}

// current reports whether stream has a leader and every node runs and
// holds a copy with the leader's last sequence, as each node's own
// monitoring reports its store. It returns the last sequence.
func (c *cluster) current(stream string) (uint64, bool) {
	l := c.streamLeader(stream)
	if l == nil {
		return 0, false
	}
	ls := streamOn(l, stream)
	if ls == nil {
		return 0, false
	}
	for _, nd := range c.nodes {
		sd := streamOn(nd, stream)
		if sd == nil || sd.State.LastSeq != ls.State.LastSeq || sd.State.Msgs != ls.State.Msgs {
			return 0, false
		}
	}
	return ls.State.LastSeq, true
}

// await polls cond until it holds, failing t after timeout.
func (c *cluster) await(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// moveStreamLeader asks stream's leader, from, to step down in favour of
// another node, and waits until another node leads.
func (c *cluster) moveStreamLeader(nc *nats.Conn, stream string, from *node) {
	c.t.Helper()
	var to *node
	for _, nd := range c.nodes {
		if nd != from && nd.running() {
			to = nd
			break
		}
	}
	req := fmt.Sprintf(`{"placement":{"preferred":%q}}`, to.name)
	c.await(fmt.Sprintf("%s to lead %s instead of %s", to.name, stream, from.name), electionBound, func() bool {
		if l := c.streamLeader(stream); l != nil && l != from {
			return true
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(req), monitorTimeout)
		return false
	})
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
