package bench

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/streams"
)

// Bounds of the embedded cluster.
const (
	// clusterSetupTimeout bounds the cluster's start: every node's
	// JetStream, the streams and a ledger stream leader.
	clusterSetupTimeout = 30 * time.Second
	// clusterPoll is the period of the cluster's readiness polls.
	clusterPoll = 20 * time.Millisecond
	// globalAccount is the account of clients without credentials.
	globalAccount = "$G"
)

// benchCluster is an embedded n-node cluster on 127.0.0.1.
type benchCluster struct {
	nodes []*embedded.Server
}

// startCluster starts n nodes in dir with free ports, waits until every
// node's JetStream answers, applies streams.Ensure with the layout (at n
// replicas) and waits until the ledger stream has a leader.
func startCluster(n int, dir string, layout streams.Layout) (_ *benchCluster, err error) {
	c := &benchCluster{}
	defer func() {
		if err != nil {
			c.shutdown()
		}
	}()
	ports, err := embedded.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	routes := make([]string, n)
	for i := range routes {
		routes[i] = "nats-route://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1]))
	}
	for i := 0; i < n; i++ {
		name := "n" + strconv.Itoa(i+1)
		s, err := embedded.Start(filepath.Join(dir, name),
			embedded.WithServerName(name),
			embedded.WithListen(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i]))),
			embedded.WithCluster("spendgate-bench", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])), routes...))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterSetupTimeout)
	defer cancel()
	for _, s := range c.nodes {
		if err := s.WaitJetStream(ctx); err != nil {
			return nil, err
		}
	}
	nc, err := nats.Connect(c.urls(), nats.Name("spendgate-bench-setup"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ticker := time.NewTicker(clusterPoll)
	defer ticker.Stop()
	for {
		_, err := streams.Ensure(ctx, js, layout)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ensure streams: %w", err)
		case <-ticker.C:
		}
	}
	for !c.hasLeader(layout.StreamName()) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no ledger stream leader within %s", clusterSetupTimeout)
		case <-ticker.C:
		}
	}
	return c, nil
}

func (c *benchCluster) hasLeader(stream string) bool {
	for _, s := range c.nodes {
		if s.Running() && s.NATS().JetStreamIsStreamLeader(globalAccount, stream) {
			return true
		}
	}
	return false
}

// urls returns the nodes' client URLs, comma-joined.
func (c *benchCluster) urls() string {
	u := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		u[i] = s.ClientURL()
	}
	return strings.Join(u, ",")
}

func (c *benchCluster) shutdown() {
	for _, s := range c.nodes {
		s.Shutdown()
	}
}
