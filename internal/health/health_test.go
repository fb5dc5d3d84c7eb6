package health_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/health"
)

// ledger is a Source whose stream end and folded position the test sets.
type ledger struct {
	mu      sync.Mutex
	end     uint64
	err     error
	applied uint64
}

func (l *ledger) StreamEnd(context.Context) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end, l.err
}

func (l *ledger) Applied() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applied
}

func (l *ledger) set(end, applied uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.end, l.applied, l.err = end, applied, err
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestProbe_Check(t *testing.T) {
	src := &ledger{}
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p, err := health.New(src, health.WithMaxDelay(10*time.Second), health.WithClock(clk.Now))
	require.NoError(t, err)
	ctx := context.Background()
	require.ErrorContains(t, p.Check(), "not been read yet")

	// Caught up.
	src.set(100, 100, nil)
	p.Probe(ctx)
	require.NoError(t, p.Check())
	require.Zero(t, p.Lag())

	// A little behind, briefly: ready, with the lag against the leader.
	src.set(150, 120, nil)
	p.Probe(ctx)
	clk.add(9 * time.Second)
	require.NoError(t, p.Check())
	require.Equal(t, uint64(30), p.Lag())

	// Still short of 150 after the bound: the follower is behind, even
	// though it moved.
	src.set(200, 149, nil)
	p.Probe(ctx)
	clk.add(2 * time.Second)
	err = p.Check()
	require.ErrorContains(t, err, "the follower is behind")
	require.ErrorContains(t, err, "folded 149")
	st := p.Status()
	require.True(t, st.Behind)
	require.Equal(t, 11*time.Second, st.Delay)

	// It folds 150: the wait is measured from when 200 was read.
	src.set(200, 150, nil)
	require.NoError(t, p.Check())
	require.Equal(t, 2*time.Second, p.Status().Delay)
	src.set(200, 200, nil)
	require.NoError(t, p.Check())
	require.Zero(t, p.Status().Delay)

	// The leader is lost: not ready at the next read, with the error and
	// for how long; the lag is kept against the last end read.
	src.set(0, 200, errors.New("no leader"))
	p.Probe(ctx)
	clk.add(3 * time.Second)
	p.Probe(ctx)
	err = p.Check()
	require.ErrorContains(t, err, "no answer from the ledger stream's leader (for 3s): no leader")
	st = p.Status()
	require.False(t, st.Leader)
	require.Equal(t, uint64(200), st.End)

	// A leader again: ready.
	src.set(210, 210, nil)
	p.Probe(ctx)
	require.NoError(t, p.Check())
}

// A follower that never folds what the leader reports (it sits on a copy it
// cannot read) is not ready once the bound passes, however often the probe
// reads.
func TestProbe_StuckFollower(t *testing.T) {
	src := &ledger{}
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p, err := health.New(src, health.WithMaxDelay(5*time.Second), health.WithClock(clk.Now))
	require.NoError(t, err)
	for i := 0; i < 200; i++ {
		src.set(15_788+uint64(i)*25, 15_787, nil)
		p.Probe(context.Background())
		clk.add(100 * time.Millisecond)
	}
	err = p.Check()
	require.ErrorContains(t, err, "the follower is behind")
	require.Equal(t, uint64(15_787+25*199+1-15_787), p.Lag())
	require.Equal(t, 20*time.Second, p.Status().Delay, "measured from the oldest end not folded")
}

func TestNew_Options(t *testing.T) {
	for _, o := range []health.Option{health.WithInterval(0), health.WithMaxDelay(-1), health.WithReadTimeout(0), health.WithClock(nil)} {
		_, err := health.New(&ledger{}, o)
		require.Error(t, err)
	}
}

// Run probes until its context ends.
func TestProbe_Run(t *testing.T) {
	src := &ledger{}
	src.set(5, 5, nil)
	p, err := health.New(src, health.WithInterval(10*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for p.Check() != nil {
		require.True(t, time.Now().Before(deadline), "never probed")
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded above
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
