package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The restart scenario reads durations from the replica's JSON log, which
// writes them with their unit; a replica of an earlier build wrote
// nanoseconds. Reading the unit form as a number gave 0 and "no snapshot
// on stop in its log".
func TestLogDuration(t *testing.T) {
	require.Equal(t, 52300*time.Microsecond, logDuration("52.3ms"))
	require.Equal(t, 2*time.Second, logDuration(float64(2e9)))
	require.Zero(t, logDuration(nil))
	require.Zero(t, logDuration("soon"))
}
