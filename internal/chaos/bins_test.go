package chaos

import (
	"os"
	"testing"

	"github.com/spendgate/spendgate/internal/testbin"
)

// binaries returns the paths of nats-server (at the version go.mod
// requires) and spendgate, both built without the race detector by
// package testbin, which cmd/spendgate's tests share, and kept between
// runs.
func binaries(t *testing.T) (nats, spendgate string) {
	t.Helper()
	nats, err := testbin.Path(testbin.NATSServer)
	if err != nil {
		t.Fatalf("build binaries: %v", err)
	}
	spendgate, err = testbin.Path(testbin.Spendgate)
	if err != nil {
		t.Fatalf("build binaries: %v", err)
	}
	return nats, spendgate
}

// TestMain removes the links to the builds after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}
