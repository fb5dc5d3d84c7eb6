package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/testenv"
)

// TestSecure_SeedNeverPrinted runs every path of the binary that reads a
// key with a seed where it does not belong, and with seed and creds files
// that others may read. No output holds the seed; a loose file is refused
// naming chmod 600 and --insecure-key-permissions, which accepts it. On
// main, serve --trusted-keys keys/r2.nk (the flags swapped) logged the
// whole seed in "is not a public nkey", a seed given inline or as a file
// name was printed too, and a 0644 seed file was accepted silently.
func TestSecure_SeedNeverPrinted(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	dir := t.TempDir()
	r1, r2 := filepath.Join(dir, "r1.nk"), filepath.Join(dir, "r2.nk")
	pub1 := strings.TrimSpace(runKey(t, r1))
	runKey(t, r2)
	seed := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	seed1, seed2 := seed(r1), seed(r2)
	noSeed := func(r cliResult, what string) {
		t.Helper()
		for _, s := range []string{seed1, seed2} {
			require.NotContains(t, r.stdout+r.stderr, s[2:30], what)
		}
	}
	serve := func(env2 []string, args ...string) cliResult {
		t.Helper()
		return runCLI(t, env2, append([]string{"serve", "--nats-url", env.URL(), "--replicas", "1", "--ready-timeout", "5s"}, args...)...)
	}

	// The flags swapped: the seed file where the public keys go.
	r := serve(nil, "--signing-key", r1, "--trusted-keys", r2)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "private nkey seed (redacted) where public keys belong")
	noSeed(r, "--trusted-keys seed file")
	// The seed itself in the list, alone or after a key.
	for _, spec := range []string{seed2, pub1 + "," + seed2} {
		r = serve(nil, "--signing-key", r1, "--trusted-keys", spec)
		require.Equal(t, 1, r.code, r.stderr)
		noSeed(r, "--trusted-keys inline seed")
	}
	// The seed itself where its file belongs.
	r = serve(nil, "--signing-key", seed1, "--trusted-keys", pub1)
	require.Equal(t, 1, r.code, r.stderr)
	noSeed(r, "--signing-key seed")
	// SPENDGATE_SIGNING_SEED with a torn seed (one character changed).
	swap := "A"
	if seed1[20] == 'A' {
		swap = "B"
	}
	torn := seed1[:20] + swap + seed1[21:]
	r = serve([]string{"SPENDGATE_SIGNING_SEED=" + torn}, "--trusted-keys", pub1)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "SPENDGATE_SIGNING_SEED")
	require.NotContains(t, r.stderr, torn[2:30])

	// A seed file its group or others may read.
	require.NoError(t, os.Chmod(r1, 0o644))
	r = serve(nil, "--signing-key", r1, "--trusted-keys", pub1)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "chmod 600 "+r1)
	require.Contains(t, r.stderr, "--insecure-key-permissions")
	r = runCLI(t, nil, "key", "--file", r1)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "chmod 600 "+r1)
	r = runCLI(t, nil, "key", "--file", r1, "--insecure-key-permissions")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, pub1, strings.TrimSpace(r.stdout))
	p := startProc(t, true, "serve", "--nats-url", env.URL(), "--replicas", "1", "--signing-key", r1, "--trusted-keys", pub1, "--insecure-key-permissions")
	p.stop(t)
	require.NotContains(t, p.out.String(), seed1[2:30])

	// The client's --nkey: a loose seed file, and the seed itself.
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	useed, err := kp.Seed()
	require.NoError(t, err)
	unk := filepath.Join(dir, "user.nk")
	require.NoError(t, os.WriteFile(unk, useed, 0o644))
	r = runCLI(t, []string{"NATS_URL=" + env.URL()}, "budget", "list", "--nkey", unk)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "chmod 600 "+unk)
	r = runCLI(t, []string{"NATS_URL=" + env.URL(), "NATS_NKEY=" + string(useed)}, "budget", "list")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "is an nkey seed, not a file name")
	require.NotContains(t, r.stderr, string(useed[2:30]))
}
