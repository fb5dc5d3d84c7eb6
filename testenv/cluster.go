package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
)

const (
	// clusterName is the name of every test cluster.
	clusterName = "c1"
	// globalAccount is the account of clients without credentials.
	globalAccount = "$G"
)

// Cluster is an in-process JetStream cluster with a client connected to
// every node and the ledger stream replicated on every node.
type Cluster struct {
	// Servers are the nodes; a stopped node stays in place until
	// RestartServer replaces it.
	Servers []*server.Server
	// Conn is connected to all nodes and fails over between them.
	Conn *nats.Conn
	// JS is the JetStream context on Conn.
	JS jetstream.JetStream
	// Layout is the applied layout, with Replicas equal to the node count.
	Layout streams.Layout

	nodes []node
}

// node is what a cluster node keeps across restarts.
type node struct {
	name        string
	storeDir    string
	clientPort  int
	clusterPort int
}

// NewCluster starts an n-node cluster (3 typically; streams allows 1..5
// replicas) on 127.0.0.1, waits until it has a JetStream meta leader and every node is
// current, connects a client to all nodes, applies streams.Ensure with
// Replicas n and waits until the ledger stream has a leader. It registers
// cleanup and fails t on any error.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	layout, err := streams.New(streams.Config{Replicas: n})
	require.NoError(t, err, "testenv: cluster layout")

	ports := freePorts(t, 2*n)
	c := &Cluster{Layout: layout, Servers: make([]*server.Server, n), nodes: make([]node, n)}
	for i := range c.nodes {
		c.nodes[i] = node{
			name:        fmt.Sprintf("n%d", i+1),
			storeDir:    t.TempDir(),
			clientPort:  ports[2*i],
			clusterPort: ports[2*i+1],
		}
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			if s != nil {
				shutdown(s)
			}
		}
	})
	for i := range c.nodes {
		s, err := startServer(c.options(i))
		require.NoError(t, err, "testenv: start node %d", i)
		c.Servers[i] = s
	}
	c.waitMeta(t)

	c.Conn = connect(t, c.URLs(), t.Name())
	c.JS, err = jetstream.New(c.Conn)
	require.NoError(t, err, "testenv: jetstream")
	require.NoError(t, waitAccountInfo(c.JS, time.Now().Add(SetupTimeout)), "testenv: cluster jetstream")

	ctx, cancel := context.WithTimeout(context.Background(), SetupTimeout)
	defer cancel()
	_, err = streams.Ensure(ctx, c.JS, c.Layout)
	require.NoError(t, err, "testenv: ensure streams")
	// Only the leader: followers of a stream that has never committed an
	// entry do not report current until the leader's first commit.
	WaitFor(t, SetupTimeout, "a ledger stream leader", func() bool { return c.Leader() >= 0 })
	return c
}

// URLs returns the client URLs of all nodes, comma-joined.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.clientPort))
	}
	return strings.Join(urls, ",")
}

// StopServer shuts node i down and waits until it has stopped. Stopping a
// stopped node does nothing.
func (c *Cluster) StopServer(i int) {
	shutdown(c.Servers[i])
}

// RestartServer starts node i again, stopping it first if it runs, with the
// same name, store directory and ports, and waits until the cluster has a
// meta leader, every node is current, the ledger stream has a leader and
// every running node has caught up with it. It fails t on any error.
func (c *Cluster) RestartServer(t testing.TB, i int) {
	t.Helper()
	shutdown(c.Servers[i])
	s, err := startServer(c.options(i))
	require.NoError(t, err, "testenv: restart node %d", i)
	c.Servers[i] = s
	c.waitMeta(t)
	c.waitStream(t)
}

// Leader returns the index of the node leading the ledger stream, or -1 if
// no running node leads it right now.
func (c *Cluster) Leader() int {
	for i, s := range c.Servers {
		if s.Running() && s.JetStreamIsStreamLeader(globalAccount, c.Layout.StreamName()) {
			return i
		}
	}
	return -1
}

// options builds fresh server options for node i (the server mutates the
// options it is given, so they are never reused).
func (c *Cluster) options(i int) *server.Options {
	nd := c.nodes[i]
	routes := make([]string, len(c.nodes))
	for j, other := range c.nodes {
		routes[j] = "nats-route://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(other.clusterPort))
	}
	return &server.Options{
		ServerName: nd.name,
		Host:       "127.0.0.1",
		Port:       nd.clientPort,
		JetStream:  true,
		StoreDir:   nd.storeDir,
		NoLog:      true,
		NoSigs:     true,
		Cluster: server.ClusterOpts{
			Name: clusterName,
			Host: "127.0.0.1",
			Port: nd.clusterPort,
		},
		Routes: server.RoutesFromStr(strings.Join(routes, ",")),
	}
}

// waitMeta waits until some running node is the JetStream meta leader and
// every running node is current.
func (c *Cluster) waitMeta(t testing.TB) {
	t.Helper()
	WaitFor(t, SetupTimeout, "jetstream meta leader and current nodes", func() bool {
		leader := false
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			if !s.JetStreamIsCurrent() {
				return false
			}
			leader = leader || s.JetStreamIsLeader()
		}
		return leader
	})
}

// waitStream waits until the ledger stream has a leader and is current on
// every running node.
func (c *Cluster) waitStream(t testing.TB) {
	t.Helper()
	stream := c.Layout.StreamName()
	WaitFor(t, SetupTimeout, "ledger stream leader and current replicas", func() bool {
		for _, s := range c.Servers {
			if s.Running() && !s.JetStreamIsStreamCurrent(globalAccount, stream) {
				return false
			}
		}
		return c.Leader() >= 0
	})
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, found by
// listening on port 0 and closing the listeners.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	listeners := make([]net.Listener, n)
	for i := range listeners {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err, "testenv: pick free port")
		listeners[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range listeners {
		require.NoError(t, l.Close())
	}
	return ports
}
