// Package soak marks the tests too slow for the suite every change runs
// (process clusters paused and killed, kill loops): they run when
// SPENDGATE_SOAK is set, as .ci/run sets it for its soak step. A test that
// is in the suite at a smaller size runs its full size then (Long).
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

// Long says whether Env is set: a test that runs a smaller history (fewer
// seeds, reservations, rounds) in the suite every change runs uses its full
// size then. .ci/run's soak step must name such a test in its -run pattern.
func Long() bool { return os.Getenv(Env) != "" }
