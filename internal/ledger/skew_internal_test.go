package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The estimate is the least recent lag (the skew plus the least fold
// delay), and none without a sample in the window.
func TestClockSkew_Estimate(t *testing.T) {
	var c clockSkew
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	_, ok := c.estimate(now)
	require.False(t, ok, "nothing written yet")
	// A clock 10 minutes ahead: each revision folded a few ms after it
	// was stored reads 10 min and those ms.
	for i, delay := range []time.Duration{12, 3, 40, 7} {
		at := now.Add(time.Duration(i) * time.Second)
		c.add(at, at.Add(-10*time.Minute-delay*time.Millisecond))
	}
	d, ok := c.estimate(now.Add(5 * time.Second))
	require.True(t, ok)
	require.Equal(t, 10*time.Minute+3*time.Millisecond, d)
	// A clock behind reads negative.
	var b clockSkew
	b.add(now, now.Add(2*time.Minute))
	d, _ = b.estimate(now)
	require.Equal(t, -2*time.Minute, d)
	// Samples past the window no longer count.
	_, ok = c.estimate(now.Add(skewWindow + time.Minute))
	require.False(t, ok)
	// One warning per skewWarnEvery.
	require.True(t, c.shouldWarn(now))
	require.False(t, c.shouldWarn(now.Add(time.Minute)))
	require.True(t, c.shouldWarn(now.Add(skewWarnEvery)))
}
