package ledger

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A refusal the ring evicted reads as forgotten, never as passed, and
// Refold asks about each sequence once, under the ring's lock. Before,
// Refold asked "forgotten?" once at the start of a call and "refused?" per
// sequence: more than maxSkips refusals arriving between the two looks
// evicted a refusal, and the refused revision (a replay, say) read as
// passed and went to the feed. That race is not driven here (it needs
// 65,536 refusals inside one call); this pins the one look it rests on.
func TestSkips_EvictedRefusalIsForgottenNotPassed(t *testing.T) {
	var s skips
	s.add(10)
	refused, forgotten := s.refused(10)
	require.True(t, refused)
	require.False(t, forgotten)
	refused, forgotten = s.refused(11)
	require.False(t, refused, "never refused: passed")
	require.False(t, forgotten)

	for seq := uint64(100); seq < 100+maxSkips; seq++ {
		s.add(seq)
	}
	refused, forgotten = s.refused(10)
	require.False(t, refused)
	require.True(t, forgotten, "10 was evicted: Refold cannot tell, so it must not hand it out")
	refused, forgotten = s.refused(9)
	require.False(t, refused)
	require.True(t, forgotten, "at or below an evicted refusal nothing can be told")
	refused, forgotten = s.refused(11)
	require.False(t, refused, "above it every refusal is still in the ring (evicted in sequence order): 11 passed")
	require.False(t, forgotten)
	refused, forgotten = s.refused(100 + maxSkips - 1)
	require.True(t, refused)
	require.False(t, forgotten)

	s.reset()
	refused, forgotten = s.refused(10)
	require.False(t, refused)
	require.False(t, forgotten)
}
