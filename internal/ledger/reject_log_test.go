package ledger_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// TestLedger_RejectionLogBounded: 300 garbage revisions of one reason are
// each counted, but only the first 100 are logged one by one (a login that
// may write the stream must not fill every replica's log with a line per
// message). How it can fail: the earlier log wrote all 300 lines.
func TestLedger_RejectionLogBounded(t *testing.T) {
	env := testenv.New(t)
	var logs testenv.LogBuffer
	l := startLedger(t, env, ledger.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 300 {
		_, err := env.JS.Publish(ctx, env.Layout.Subject("lane.0"), []byte("junk"))
		require.NoError(t, err)
	}
	testenv.WaitFor(t, 20*time.Second, "every garbage revision skipped", func() bool { return l.Stats().Rejected == 300 })
	require.Equal(t, 100, strings.Count(logs.String(), "revision skipped; not folded"), "the burst, then quiet until a minute has passed")
}
