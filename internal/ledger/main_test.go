package ledger_test

import (
	"testing"

	"github.com/spendgate/spendgate/internal/parallel"
)

// TestMain runs up to twice GOMAXPROCS of the parallel tests at once,
// unless -test.parallel is given, as internal/service and cmd/spendgate
// do. The parallel tests are the package's longest (three quarters of its
// wall time when they ran one after the other): each has an embedded
// server of its own (testenv.New) or none, shares no package state, and
// bounds its waits by watchdogs, never by a duration it asserts. Several
// wait on the product's clock (TestSnapshot_Periodic on the periodic
// writer's half-second check, TestPrune_AuditAgrees on a one-second
// retention), which left a core idle. The tests whose outcome depends on
// timing (TestSnapshot_LateSettleFoldedAheadOfFollower's follower waiting
// a couple of seconds for its committer, the submit deadline tests) stay
// serial, and go test runs the serial tests before the parallel ones.
func TestMain(m *testing.M) { parallel.Main(m) }
