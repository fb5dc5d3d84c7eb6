package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// A record that waited in the buffer longer than readers count a record
// after its time is not published, and is counted as failed: a reader
// would skip it as a replay. How we know it can fail: with no wait bound
// (or with the default, five minutes) the same records are published.
func TestDenialRecorder_DropsRecordsThatWaitedTooLong(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := streams.EnsureDenials(ctx, env.JS, env.Layout, 0, 0)
	require.NoError(t, err)
	run := func(wait time.Duration) *service.DenialRecorder {
		t.Helper()
		d, err := service.NewDenialRecorder(env.JS, env.Layout, "r-"+wait.String(), 0, nil)
		require.NoError(t, err)
		d.WaitAtMost(wait)
		for i := range 3 {
			require.True(t, d.Record(events.AdmitDenied{Type: events.TypeAdmitDenied, At: time.Now(),
				RequestID: "w-" + wait.String() + "-" + string(rune('a'+i)), Scopes: []string{"org:acme"}, Amount: "1",
				Denial: events.Denial{Reason: events.ReasonLimitReached}}))
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(rctx) }()
		require.NoError(t, d.Flush(ctx))
		stop()
		<-done
		return d
	}
	late := run(time.Nanosecond)
	require.Zero(t, late.Recorded())
	require.Equal(t, uint64(3), late.Failed())
	onTime := run(streams.DenialMaxDelay)
	require.Equal(t, uint64(3), onTime.Recorded())
	require.Zero(t, onTime.Failed())
}
