package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/ledger"
)

// TestLateSettleWindow_IsTheLedgers: the gateway retries a settle until
// its reservation's expiry plus the window a replica still takes a late
// settle in; a window longer than the ledger's would only earn
// unknown_reservation, a shorter one would give up on spend the ledger
// would still record. How it can fail: the ledger's default changes and
// this copy does not.
func TestLateSettleWindow_IsTheLedgers(t *testing.T) {
	require.Equal(t, ledger.DefaultExpiredRetention, lateSettleWindow)
}
