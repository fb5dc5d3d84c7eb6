package testenv

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/embedded"
)

// FreePorts is embedded.FreePorts, failing t when no port is found: n
// distinct ports on 127.0.0.1, below the kernel's ephemeral range, never
// 4222.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := embedded.FreePorts(n)
	require.NoError(t, err)
	return ports
}

// FreePort is FreePorts(t, 1)[0].
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}
