package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// serve's tenant limit flags: their defaults are the packages' defaults, a
// flag's 0 turns its limit off (the config's negative), and a bad value is
// refused (TestCLI_UsageErrors runs the refusals through serve).
func TestServe_TenantLimitFlags(t *testing.T) {
	parse := func(args ...string) (service.TenantLimits, int64, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := addTenantLimitFlags(fs)
		require.NoError(t, fs.Parse(args))
		return f.limits()
	}
	l, maxBytes, err := parse()
	require.NoError(t, err)
	require.Equal(t, service.TenantLimits{MaxOpen: admit.DefaultTenantMaxOpen, MaxDefaultBudgets: admit.DefaultTenantMaxDefaultBudgets,
		Rate: service.DefaultTenantRate, DenialBytes: service.DefaultTenantDenialBytes}, l)
	require.Equal(t, int64(streams.DefaultDenialMaxBytes), maxBytes)

	l, maxBytes, err = parse("--tenant-max-open", "0", "--tenant-rate", "0", "--tenant-max-default-budgets", "7",
		"--tenant-denial-bytes", "0", "--denial-max-bytes", "0")
	require.NoError(t, err)
	require.Equal(t, service.TenantLimits{MaxOpen: -1, MaxDefaultBudgets: 7, Rate: -1, DenialBytes: -1}, l)
	require.Equal(t, int64(-1), maxBytes)

	l, _, err = parse("--tenant-burst", "1000")
	require.NoError(t, err)
	require.Equal(t, 1000, l.Burst)
	require.Equal(t, 1000, l.WithDefaults().Burst)
	l, _, err = parse("--tenant-rate", "20000")
	require.NoError(t, err)
	require.Equal(t, 2000, l.WithDefaults().Burst, "a tenth of a second's worth of the rate")

	_, _, err = parse("--tenant-max-default-budgets", "-1")
	require.ErrorContains(t, err, "--tenant-max-default-budgets must not be negative")
}
