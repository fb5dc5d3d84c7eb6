package logbound_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/logbound"
)

// The first Burst a minute are logged, the rest counted, and the count is
// handed out once, with the first occurrence of the next minute.
func TestBound(t *testing.T) {
	b := logbound.Bound{Burst: 3}
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var logged, held int
	for i := range 10 {
		log, h := b.Note(t0.Add(time.Duration(i) * time.Second))
		if log {
			logged++
		}
		held += int(h)
	}
	require.Equal(t, 3, logged)
	require.Zero(t, held, "nothing summed up within the minute")
	log, h := b.Note(t0.Add(logbound.Every))
	require.True(t, log)
	require.Equal(t, int64(7), h, "the minute's 7 not logged, summed up once")
	_, h = b.Note(t0.Add(logbound.Every + time.Second))
	require.Zero(t, h)

	var z logbound.Bound
	n := 0
	for range logbound.DefaultBurst + 5 {
		if log, _ := z.Note(t0); log {
			n++
		}
	}
	require.Equal(t, logbound.DefaultBurst, n)
}
