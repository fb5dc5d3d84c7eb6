package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// A command whose stdout is made from the reply (a key's secret with
// --secret-only, as the README captures it in $(...)) writes an error
// reply to stderr, never where the secret goes: export KEY=$(...) would
// otherwise hold the error and exit 0.
func TestCLI_SecretOnlyErrorGoesToStderr(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	url := env.URL()
	for _, args := range [][]string{
		{"keys", "create", "--scope", "team:chat", "--budget", "1", "--unit", "bogus", "--secret-only"},
		{"keys", "rotate", "--id", "0123456789ab", "--secret-only"},
	} {
		code, out, errOut := e2eCLIErr(t, url, args...)
		require.Equal(t, 1, code, "%v", args)
		require.Empty(t, out, "%v: an error reply must not be captured as the secret", args)
		require.Contains(t, errOut, `"code": "`, "%v", args)
	}
}
