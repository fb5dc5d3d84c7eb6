package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestServe_KilledWhileSweepingAndSnapshotting: 1,000 reservations with a
// 1 s TTL come due while a serve process sweeps every 100 ms and writes a
// snapshot on every check of its periodic writer; it is SIGKILLed as soon
// as the sweep has begun (some released, not all), restarted (from its
// newest snapshot, which may be older than the kill or missing if the kill
// cut its write), killed again right after it is ready, and restarted.
// Every reservation ends released exactly once (the audit replay refuses a
// second release of a part), replay equals live, and the newest snapshot
// equals the replay at its sequence. How it can fail: a double release
// across the restart fails the replay and makes the expiries outnumber the
// reservations; a snapshot torn by the kill and loaded anyway would leave
// the restarted replica's balances wrong, which the live comparison sees.
func TestServe_KilledWhileSweepingAndSnapshotting(t *testing.T) {
	t.Parallel()
	const n = 1000
	env := testenv.New(t)
	args := []string{"serve", "--nats-url", env.URL(), "--replicas", "1", "--sweep-interval", "100ms",
		"--snapshot-revisions", "1", "--snapshot-interval", "1s"}
	p := startProc(t, true, args...)
	c := &crashClient{nc: connect(t, env.URL()), layout: env.Layout, deadline: time.Now().Add(2 * time.Minute)}
	require.NoError(t, c.do(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "org:sweep", Period: "month", Limit: "100000", Unit: "USD"}, nil))
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				var ar events.AdmitReply
				err := c.do(streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprintf("sw-%d", i), Scopes: []string{"org:sweep"}, Amount: "0.5", TTL: "1s"}, &ar)
				if err == nil && !ar.Admitted {
					err = fmt.Errorf("admit %d denied: %+v", i, ar.Denial)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	open := func() int64 {
		var v events.BudgetView
		if err := c.do(streams.EndpointBudgetGet, events.BudgetGetRequest{Scope: "org:sweep", Period: "month"}, &v); err != nil {
			return -1
		}
		return v.Open
	}
	var atKill int64
	testenv.WaitFor(t, time.Minute, "the sweep under way", func() bool { atKill = open(); return atKill >= 0 && atKill < n })
	p.kill(t)
	t.Logf("%v: killed while sweeping, %d of %d reservations open when it was seen under way", time.Now().Format(time.StampMilli), atKill, n)

	p = startProc(t, true, args...)
	t.Logf("%v: restarted", time.Now().Format(time.StampMilli))
	p.kill(t) // again, right after it is ready (a snapshot write may be under way)
	startProc(t, true, args...)
	testenv.WaitFor(t, time.Minute, "every reservation released", func() bool { return open() == 0 })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	st, err := projector.New(env.JS, env.Layout).CatchUp(ctx)
	require.NoError(t, err)
	var expired int64
	for _, b := range st.Balances() {
		expired += b.Expired
	}
	require.EqualValues(t, n, expired, "one expiry per reservation")
	snaps, err := ledger.ListSnapshots(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	t.Logf("%d snapshots; audit: %s", len(snaps), rep)
}
