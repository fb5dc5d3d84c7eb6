package service_test

import (
	"testing"

	"github.com/spendgate/spendgate/internal/parallel"
	"github.com/spendgate/spendgate/internal/testbin"
)

// TestMain runs up to twice GOMAXPROCS of the parallel tests at once,
// unless -test.parallel is given. Each parallel test has a harness of its
// own and spends much of its time waiting on round trips to its server and
// on its replicas' commits, so at the default (GOMAXPROCS) the cores sit
// partly idle, and this package, the last large one of `go test ./...`,
// ran alone at the end of it. The timing-sensitive tests stay serial
// (harness_test.go lists them) and run before the parallel ones start.
// Then it removes the links to the process tests' builds (testbin).
func TestMain(m *testing.M) { parallel.Main(m, testbin.Remove) }
