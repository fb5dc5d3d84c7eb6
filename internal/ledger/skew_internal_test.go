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

// A correction needs proof: a busy machine, whose stamps arrive late, is
// never corrected for a skew it does not have; a clock proven ahead is
// corrected by the least upper bound, one proven behind by the upper
// bound too; samples that disagree (a clock stepped) correct nothing.
// How we know it can fail: correcting by the estimate alone corrected the
// busy machine by 3 s.
func TestClockSkew_CorrectsOnlyWhatIsProven(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	corr := func(c *clockSkew) time.Duration {
		c.refresh(now)
		return time.Duration(c.corr.Load())
	}
	// On time, but every stamp read 3 s late (a fold, an answer waiting
	// for a core): the request went out before the stamp.
	var busy clockSkew
	busy.add(now, now.Add(-3*time.Second))
	busy.addRound(now.Add(-4*time.Second), now, now.Add(-3*time.Second))
	require.Zero(t, corr(&busy))
	// Ten minutes ahead, the answer 20 ms after the request.
	var ahead clockSkew
	ahead.addRound(now.Add(-20*time.Millisecond), now, now.Add(-10*time.Minute-5*time.Millisecond))
	ahead.add(now, now.Add(-10*time.Minute-2*time.Millisecond))
	require.Equal(t, 10*time.Minute+2*time.Millisecond, corr(&ahead), "the least upper bound")
	// Ten minutes behind: proven by a fold alone.
	var behind clockSkew
	behind.add(now, now.Add(10*time.Minute-4*time.Millisecond))
	require.Equal(t, -10*time.Minute+4*time.Millisecond, corr(&behind))
	// Within a second: nothing.
	var near clockSkew
	near.addRound(now.Add(-time.Millisecond), now, now.Add(-800*time.Millisecond))
	require.Zero(t, corr(&near))
	// Stepped: an old sample says ten minutes ahead, a new one on time.
	var stepped clockSkew
	stepped.addRound(now.Add(-20*time.Second), now.Add(-20*time.Second), now.Add(-20*time.Second-10*time.Minute))
	stepped.addRound(now.Add(-time.Millisecond), now, now)
	require.Zero(t, corr(&stepped))
	// Stepped forward from ten minutes behind: the newest fold says on
	// time, and the old bound no longer corrects.
	var fixed clockSkew
	fixed.add(now.Add(-10*time.Second), now.Add(-10*time.Second+10*time.Minute))
	require.Equal(t, -10*time.Minute, corr(&fixed))
	fixed.add(now, now.Add(-2*time.Millisecond))
	require.Zero(t, corr(&fixed), "a stale correction would run ten minutes ahead")
	// And once the samples age out, nothing.
	ahead.refresh(now.Add(skewWindow + time.Second))
	require.Zero(t, ahead.corr.Load())
}
