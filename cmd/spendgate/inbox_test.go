package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/roles"
)

// TestSecure_WrongInboxFailsFast: under the roles' layout, a command run
// without its role's --inbox-prefix (its replies would come on _INBOX.>,
// which the role may not receive) fails at once and says which flag is
// missing, whether it calls an endpoint or reads streams. How we know it
// can fail: without natsconn's inbox check, audit check was still waiting
// after a minute, when runCLI killed it.
func TestSecure_WrongInboxFailsFast(t *testing.T) {
	t.Parallel()
	w := newWalkthrough(t, nil, "--account", "SPENDGATE")
	for _, tc := range []struct {
		role string
		args []string
	}{
		{roles.Finance, []string{"audit", "check", "--trusted-keys", w.path("trusted-keys")}},
		{roles.Finance, []string{"report", "--by", "scope", "--replay", "--trusted-keys", w.path("trusted-keys")}},
		{roles.Admin, []string{"budget", "list"}},
		{roles.Service, []string{"admit", "--scope", "org:x", "--amount", "0.25"}},
	} {
		start := time.Now()
		r := runCLI(t, append(w.as(tc.role), "SPENDGATE_INBOX_PREFIX="), tc.args...)
		took := time.Since(start)
		require.Equal(t, 1, r.code, "%v: %s", tc.args, r.stdout)
		require.Contains(t, r.stderr, "--inbox-prefix", "%v", tc.args)
		require.Less(t, took, 10*time.Second, "%v: %s", tc.args, r.stderr)
		t.Logf("%v as %s: %v: %s", tc.args, tc.role, took.Round(time.Millisecond), r.stderr)
	}
}
