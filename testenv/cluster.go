package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/embedded"
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
	// embedded are the nodes' handles, parallel to Servers.
	embedded []*embedded.Server
	// log receives the nodes' log lines (ClusterConfig.Log); nil: none.
	log *slog.Logger
	// maxStore is each node's JetStream storage cap (ClusterConfig.MaxStore).
	maxStore int64
}

// node is what a cluster node keeps across restarts.
type node struct {
	name        string
	storeDir    string
	clientPort  int
	clusterPort int
}

// NewCluster starts an n-node cluster (3 typically; streams allows 1..5
// replicas) on 127.0.0.1 with StartCluster, in t's temp dir, with the
// default layout at Replicas n. It registers Shutdown as cleanup and fails
// t on any error.
//
// The nodes' warnings and errors are kept and logged with t.Log if t
// fails, after the cluster has stopped: a cluster test that fails on a
// server's terse API error ("error creating store for stream") then shows
// the server's own reason.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	logs := &LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's warnings and errors:\n%s", logs.String())
		}
	})
	c, err := StartCluster(ClusterConfig{Nodes: n, Dir: t.TempDir(), Name: t.Name(),
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(c.Shutdown)
	return c
}

// ClusterConfig configures StartCluster.
type ClusterConfig struct {
	// Nodes is the number of servers, 1..5 (3 typically).
	Nodes int
	// Dir is the parent of the nodes' store directories (required).
	Dir string
	// Layout is applied with Replicas = Nodes; its other settings are
	// kept. The zero value is streams.Default().
	Layout streams.Layout
	// Name names the client connection.
	Name string
	// Log receives the nodes' own log lines, each with its node's name
	// (node=n1); nil discards them.
	Log *slog.Logger
	// MaxStore caps each node's JetStream storage in bytes; 0 means
	// MaxStore, the package's fixed cap.
	MaxStore int64
}

// StartCluster starts an in-process JetStream cluster on 127.0.0.1 (free
// ports picked for clients and routes), waits until it has a JetStream meta
// leader and every node is current, connects a client to all nodes,
// applies streams.Ensure with Replicas = Nodes and waits until the ledger
// stream has a leader. On error everything it started is stopped. Stop it
// with Shutdown.
func StartCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("testenv: ClusterConfig.Dir is required")
	}
	lc := cfg.Layout.Config()
	if cfg.Layout == (streams.Layout{}) {
		lc = streams.DefaultConfig()
	}
	lc.Replicas = cfg.Nodes
	layout, err := streams.New(lc)
	if err != nil {
		return nil, fmt.Errorf("testenv: cluster layout: %w", err)
	}
	ports, err := embedded.FreePorts(2 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Layout: layout, Servers: make([]*server.Server, cfg.Nodes), nodes: make([]node, cfg.Nodes),
		embedded: make([]*embedded.Server, cfg.Nodes), log: cfg.Log, maxStore: cfg.MaxStore}
	if c.maxStore == 0 {
		c.maxStore = MaxStore
	}
	for i := range c.nodes {
		c.nodes[i] = node{
			name:        fmt.Sprintf("n%d", i+1),
			storeDir:    filepath.Join(cfg.Dir, fmt.Sprintf("n%d", i+1)),
			clientPort:  ports[2*i],
			clusterPort: ports[2*i+1],
		}
	}
	fail := func(err error) (*Cluster, error) {
		c.Shutdown()
		return nil, err
	}
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			return fail(fmt.Errorf("testenv: start node %d: %w", i, err))
		}
	}
	if err := c.awaitMeta(); err != nil {
		return fail(err)
	}
	name := cfg.Name
	if name == "" {
		name = "testenv-cluster"
	}
	c.Conn, err = nats.Connect(c.URLs(), nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait), nats.ReconnectJitter(reconnectWait, reconnectWait))
	if err != nil {
		return fail(fmt.Errorf("testenv: connect %s: %w", c.URLs(), err))
	}
	if c.JS, err = jetstream.New(c.Conn); err != nil {
		return fail(fmt.Errorf("testenv: jetstream: %w", err))
	}
	if err := waitAccountInfo(c.JS, time.Now().Add(SetupTimeout)); err != nil {
		return fail(fmt.Errorf("testenv: cluster jetstream: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), SetupTimeout)
	defer cancel()
	if _, err := streams.Ensure(ctx, c.JS, c.Layout); err != nil {
		return fail(fmt.Errorf("testenv: ensure streams: %w", err))
	}
	// Only the leader: followers of a stream that has never committed an
	// entry do not report current until the leader's first commit.
	if err := waitCond(SetupTimeout, "a ledger stream leader", func() bool { return c.Leader() >= 0 }); err != nil {
		return fail(err)
	}
	return c, nil
}

// Shutdown closes the client and stops every node.
func (c *Cluster) Shutdown() {
	if c.Conn != nil {
		c.Conn.Close()
	}
	for _, s := range c.embedded {
		if s != nil {
			s.Shutdown()
		}
	}
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
	c.embedded[i].Shutdown()
}

// RestartServer starts node i again, stopping it first if it runs, with the
// same name, store directory and ports, and waits until the cluster has a
// meta leader, every node is current, the ledger stream has a leader and
// every running node has caught up with it. It fails t on any error.
func (c *Cluster) RestartServer(t testing.TB, i int) {
	t.Helper()
	c.embedded[i].Shutdown()
	require.NoError(t, c.start(i), "testenv: restart node %d", i)
	require.NoError(t, c.awaitMeta())
	require.NoError(t, c.awaitStream())
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

// start starts node i with its name, store directory and ports; it
// waits only until the node accepts connections (its JetStream needs a
// quorum of peers).
func (c *Cluster) start(i int) error {
	nd := c.nodes[i]
	routes := make([]string, len(c.nodes))
	for j, other := range c.nodes {
		routes[j] = "nats-route://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(other.clusterPort))
	}
	opts := []embedded.Option{
		embedded.WithServerName(nd.name),
		embedded.WithListen(net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.clientPort))),
		embedded.WithCluster(clusterName, net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.clusterPort)), routes...),
		embedded.WithMaxStore(c.maxStore),
	}
	if c.log != nil {
		opts = append(opts, embedded.WithLogger(c.log.With("node", nd.name)))
	}
	s, err := embedded.Start(nd.storeDir, opts...)
	if err != nil {
		return err
	}
	c.embedded[i], c.Servers[i] = s, s.NATS()
	return nil
}

// awaitMeta waits until some running node is the JetStream meta leader and
// every running node is current.
func (c *Cluster) awaitMeta() error {
	return waitCond(SetupTimeout, "jetstream meta leader and current nodes", func() bool {
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

// awaitStream waits until the ledger stream has a leader and is current on
// every running node.
func (c *Cluster) awaitStream() error {
	stream := c.Layout.StreamName()
	return waitCond(SetupTimeout, "ledger stream leader and current replicas", func() bool {
		for _, s := range c.Servers {
			if s.Running() && !s.JetStreamIsStreamCurrent(globalAccount, stream) {
				return false
			}
		}
		return c.Leader() >= 0
	})
}

// waitCond polls cond until it holds or timeout passes.
func waitCond(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for ; ; <-ticker.C {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: timed out after %s waiting for %s", timeout, what)
		}
	}
}
