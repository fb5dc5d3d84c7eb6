package embedded

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago, for servers that must be told their port before they start
// (cluster nodes' client and route ports, a nats-server's config, serve
// --listen). It picks them below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), holding each open until all
// are picked: a port taken with 127.0.0.1:0 comes from that range, which
// every outgoing connection draws from too, so the nodes' own route dials
// could take it before the server that was told it binds it (a cluster
// node then fails at start, "address already in use"). It never returns
// 4222.
func FreePorts(n int) ([]int, error) {
	elo, ehi := ephemeralRange()
	lo, hi := 10000, elo
	if hi-lo < 1000 {
		lo, hi = ehi+1, 65536
	}
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("embedded: no free port in %d..%d after %d tries", lo, hi-1, tries)
		}
		p := lo + rand.IntN(hi-lo)
		if p == 4222 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken: another
		}
		listeners = append(listeners, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralRange is the kernel's range of ports for outgoing connections
// (32768-60999 when it cannot be read).
func ephemeralRange() (int, int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, err1 := strconv.Atoi(f[0])
			hi, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && lo > 0 && hi >= lo {
				return lo, hi
			}
		}
	}
	return 32768, 60999
}
