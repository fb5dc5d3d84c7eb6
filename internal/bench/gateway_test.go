package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRun_Gateway runs the gateway scenario briefly, with 20 streams at
// once instead of 200: every call through the gateway succeeds, every
// stream comes whole, and nothing stays reserved. The 1 ms target is
// reported, not asserted: it is a property of the machine. Its streams
// send a chunk every 7 ms instead of 20: 350 ms a stream, still longer
// than the run (300 ms), so the 20 callers' streams are open at once as
// before (one each, a way), while the two stream runs took a second each.
func TestRun_Gateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*benchTestBudget)
	defer cancel()
	defer func(n int, every time.Duration) { benchGatewayStreams, benchGatewayChunkEvery = n, every }(benchGatewayStreams, benchGatewayChunkEvery)
	benchGatewayStreams, benchGatewayChunkEvery = 20, 7*time.Millisecond
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	o.Duration = 300 * time.Millisecond
	o.Reps = 1
	o.JSON = true
	o.Scenarios = []string{"gateway"}
	err := Run(ctx, o, &out, &errOut)
	require.NoError(t, err, "stderr:\n%s\nstdout:\n%s", errOut.String(), out.String())
	var res []gatewayResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	require.Len(t, res, 1)
	g := res[0]
	require.Equal(t, "gateway", g.Scenario)
	require.Zero(t, g.Errors, g.FirstError)
	require.Equal(t, "0", g.LeftReserved)
	require.GreaterOrEqual(t, g.StreamsDone, int64(20))
	require.Positive(t, g.DirectP50)
	require.Positive(t, g.GatewayP50)
	require.Positive(t, g.GatewayFirstP50)
	t.Logf("gateway: adds %.0f µs at p50 (%.0f µs settling after the reply); streams first event p50 %.0f µs", g.AddedP50, g.AfterAddedP50, g.GatewayFirstP50)
}
