package embedded_test

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/embedded"
)

// TestFreePorts: distinct ports, never 4222, below the kernel's ephemeral
// range (where outgoing connections take theirs), and free to bind.
func TestFreePorts(t *testing.T) {
	ports, err := embedded.FreePorts(30)
	require.NoError(t, err)
	seen := map[int]bool{}
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		lo, _ = strconv.Atoi(strings.Fields(string(b))[0])
	}
	for _, p := range ports {
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
		require.NotEqual(t, 4222, p)
		require.Less(t, p, lo, "port %d is in the ephemeral range", p)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err)
		require.NoError(t, l.Close())
	}
}
