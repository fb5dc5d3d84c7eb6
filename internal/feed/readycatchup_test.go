package feed_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// A replica whose start fold is slow (here paced by its feed's back-fill)
// while the stream grows under traffic is ready only once it has folded to
// about the stream's end, not merely to the end the stream had when the
// fold began. How we know it can fail: live, a replica that back-filled its
// feed for five minutes said "ready" 20,000 revisions behind, and answered
// its callers "ledger follower is behind" (fail closed) until it caught
// up; here it was ready 140 revisions behind.
func TestReplica_ReadyOnlyWhenCaughtUp(t *testing.T) {
	env := testenv.New(t)
	ctx := ctxT(t)
	w := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	seed(t, ctx, w, "s", 100)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // traffic through the start
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			rep, err := w.Admitter.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("t-%d", i), Scopes: []string{"team:ads"}, Amount: "1"})
			if err == nil && rep.Admitted {
				_, _ = w.Settler.Release(ctx, events.ReleaseRequest{ReservationID: rep.ReservationID})
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	slow := feed.UnsafeAppendFaultForTesting(func() error {
		time.Sleep(10 * time.Millisecond) // the feed's pace
		return nil
	})
	r, err := replica.Start(ctx, env.Connect(t), env.JS, replica.Config{Layout: env.Layout, SweepInterval: -1, Feed: true,
		FeedOptions: []feed.Option{slow, feed.WithQueue(1), feed.WithQueueWait(time.Minute)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	s, err := env.JS.Stream(context.Background(), env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	behind := int64(info.State.LastSeq) - int64(r.Ledger.Applied())
	t.Logf("ready at seq %d, the stream at %d", r.Ledger.Applied(), info.State.LastSeq)
	require.LessOrEqual(t, behind, int64(60), "ready while behind the stream's end")
}
