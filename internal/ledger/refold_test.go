package ledger_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkRefold is how fast a replica hands out again what its fold
// passed (Ledger.Refold: each message read from the stream's leader, then
// the gate's decode): the pace at which a feed relay gets back the
// events it dropped, against the pace at which the ledger writes new
// ones, against reading each message through the stream's leader.
// revisions/s counts lane revisions of one reservation each.
//
//	go test -run '^$' -bench BenchmarkRefold -benchtime 5x ./internal/ledger/
func BenchmarkRefold(b *testing.B) {
	env := testenv.New(b)
	l := startLedger(b, env)
	ctx := context.Background()
	_, err := l.PutBudget(ctx, bal.Budget(), events.MustMoney("1000000"), "USD", t0)
	require.NoError(b, err)
	const n = 2000
	for i := range n {
		require.NoError(b, l.Submit(ctx, &openTx{id: "r" + strconv.Itoa(i), amount: events.MustMoney("1")}))
	}
	require.NoError(b, l.Sync(ctx))
	last := uint64(n + 1)
	b.Run("refold", func(b *testing.B) {
		got := 0
		for range b.N {
			next := uint64(1)
			for next <= last {
				revs, nx, err := l.Refold(ctx, next, last, 256)
				require.NoError(b, err)
				got += len(revs)
				next = nx
			}
		}
		require.Equal(b, b.N*int(last), got, "every revision handed out again")
		b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "revisions/s")
	})
	// The baseline: one read through the leader per message.
	b.Run("leader-reads", func(b *testing.B) {
		got := 0
		for range b.N {
			k, err := ledger.LeaderReads(ctx, l, 1, last)
			require.NoError(b, err)
			got += k
		}
		require.Equal(b, b.N*int(last), got)
		b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "revisions/s")
	})
}
