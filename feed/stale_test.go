package feed_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/feed"
	"github.com/spendgate/spendgate/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// A relay whose idea of the feed's end is stale (it lost a race long ago,
// beyond the Msg-Id dedupe window) appends nothing: the expected last
// sequence refuses the publish, and the relay re-reads the tail and skips
// past it. The message here has an id the feed has never seen, so only the
// expected-sequence check can stop it; without that header the feed would
// gain a message out of order and this test fails.
func TestRelay_StaleTailAppendsNothing(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := env.StartSpendgate(t, service.ReplicaConfig{SweepInterval: -1, Feed: true})
	for _, s := range []events.Scope{"org:a", "org:b", "org:c"} {
		_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: s, Period: events.PeriodMonth}, events.MustMoney("1"), "USD", time.Now())
		require.NoError(t, err)
	}
	rl, err := feed.NewRelay(env.JS, env.Layout)
	require.NoError(t, err)
	var seq uint64
	var last feed.Position
	testenv.WaitFor(t, 30*time.Second, "three events in the feed", func() bool {
		seq, last, err = rl.Tail(ctx)
		return err == nil && seq == 3
	})
	stale := feed.Message{Schema: streams.FeedSchema, ID: events.EventID(1, 7), SourceSeq: 1, Index: 7, Key: "budget.org.a.month",
		Type: events.TypeBudgetDefined, Event: []byte(`{"type":"budget.defined.v1","budget":{"scope":"org:a","period":"month"},"limit":"1","unit":"USD","at":"2026-01-01T00:00:00Z"}`)}
	nseq, nlast, err := rl.Append(ctx, 1, feed.Position{Seq: 1}, stale)
	require.NoError(t, err)
	require.Equal(t, seq, nseq, "the relay skipped to the feed's real end")
	require.Equal(t, last, nlast)
	require.Equal(t, uint64(1), rl.Lost())
	require.Equal(t, uint64(0), rl.Relayed())
	aseq, alast, err := rl.Tail(ctx)
	require.NoError(t, err)
	require.Equal(t, seq, aseq, "nothing was appended")
	require.Equal(t, last, alast)
}
