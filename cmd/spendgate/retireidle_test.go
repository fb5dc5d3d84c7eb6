package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseRetireIdle: --retire-idle takes KIND=DURATION pairs, each kind
// once and each at least a minute; anything else is refused with a
// message that says what it wants.
func TestParseRetireIdle(t *testing.T) {
	rules, err := parseRetireIdle("run=24h, job=90m")
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{"run": 24 * time.Hour, "job": 90 * time.Minute}, rules)
	rules, err = parseRetireIdle("")
	require.NoError(t, err)
	require.Nil(t, rules)
	for _, bad := range []string{"run", "run=", "run=30s", "run=1d", "Run=1h", "run=1h,run=2h", "r*n=1h", "=1h"} {
		_, err := parseRetireIdle(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "--retire-idle", bad)
	}
}
