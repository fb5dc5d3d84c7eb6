// Package soak marks the tests too slow for the suite every change runs
// (process clusters paused and killed, kill loops): they run when
// SPENDGATE_SOAK is set, as .ci/run sets it for its soak step.
package soak

import (
	"os"
	"testing"
)

// Env is the variable that turns the soak tests on.
const Env = "SPENDGATE_SOAK"

// Only skips t unless Env is set.
func Only(t testing.TB) {
	t.Helper()
	if os.Getenv(Env) == "" {
		t.Skip("a soak test: set " + Env + "=1 to run it (.ci/run does)")
	}
}
