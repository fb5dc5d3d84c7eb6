package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// TestCLI_BudgetLifecycle: budget put with --tz, --allow-zero; a put
// changes only the options it gives, --replace all; budget disable and
// enable keep the definition and flip only "disabled"; admit --mode check
// reserves nothing.
func TestCLI_BudgetLifecycle(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	url := "nats://" + listen
	startProc(t, true, "serve", "--data-dir", t.TempDir(), "--listen", listen)
	cli := func(args ...string) (int, []byte) { t.Helper(); return e2eCLI(t, url, args...) }

	code, out := cli("budget", "put", "--scope", "org:acme", "--period", "week", "--limit", "12", "--unit", "USD", "--tz", "Europe/Berlin", "--threshold", "0.9")
	require.Equal(t, 0, code)
	v := e2eJSON[events.BudgetPutReply](t, out)
	require.True(t, v.Created)
	require.Equal(t, "Europe/Berlin", v.TZ)

	// A put with only --limit changes the limit and keeps the zone and the
	// thresholds (before, it reset the zone to UTC, dropped the
	// thresholds and said so in "changed").
	code, out = cli("budget", "put", "--scope", "org:acme", "--period", "week", "--limit", "10")
	require.Equal(t, 0, code)
	v = e2eJSON[events.BudgetPutReply](t, out)
	require.Equal(t, []string{"limit"}, v.Changed)
	require.Equal(t, "Europe/Berlin", v.TZ)
	require.Equal(t, []string{"0.9"}, v.Thresholds)
	// --replace puts the whole definition.
	code, out = cli("budget", "put", "--scope", "org:acme", "--period", "week", "--limit", "10", "--unit", "USD", "--tz", "Europe/Berlin", "--replace")
	require.Equal(t, 0, code)
	require.Equal(t, []string{"thresholds"}, e2eJSON[events.BudgetPutReply](t, out).Changed)
	// Defining a budget needs --unit.
	code, out = cli("budget", "put", "--scope", "org:new", "--period", "week", "--limit", "10")
	require.Equal(t, 1, code)
	require.Equal(t, events.CodeInvalidUnit, e2eJSON[events.ErrorReply](t, out).Error.Code)

	code, out = cli("budget", "put", "--scope", "org:acme", "--period", "week", "--limit", "0", "--unit", "USD", "--tz", "Europe/Berlin")
	require.Equal(t, 1, code)
	require.Equal(t, events.CodeInvalidAmount, e2eJSON[events.ErrorReply](t, out).Error.Code)

	code, out = cli("budget", "disable", "--scope", "org:acme", "--period", "week")
	require.Equal(t, 0, code)
	v = e2eJSON[events.BudgetPutReply](t, out)
	require.Equal(t, []string{"disabled"}, v.Changed)
	require.True(t, v.Disabled)
	require.Equal(t, "Europe/Berlin", v.TZ)
	require.Equal(t, "10", v.Limit)

	code, out = cli("admit", "--scope", "org:acme", "--amount", "1")
	require.Equal(t, 2, code)
	require.Equal(t, events.ReasonBudgetDisabled, e2eJSON[events.AdmitReply](t, out).Denial.Reason)

	code, out = cli("budget", "enable", "--scope", "org:acme", "--period", "week")
	require.Equal(t, 0, code)
	require.Equal(t, []string{"disabled"}, e2eJSON[events.BudgetPutReply](t, out).Changed)

	code, out = cli("admit", "--scope", "org:acme", "--amount", "1", "--mode", "check")
	require.Equal(t, 0, code)
	a := e2eJSON[events.AdmitReply](t, out)
	require.True(t, a.Admitted)
	require.Equal(t, events.ModeCheck, a.Mode)
	require.Empty(t, a.ReservationID)
	require.Equal(t, "9", a.Budgets[0].Available)

	code, out = cli("budget", "get", "--scope", "org:acme", "--period", "week")
	require.Equal(t, 0, code)
	require.Equal(t, "0", e2eJSON[events.BudgetView](t, out).Reserved)

	code, _ = cli("budget", "disable", "--scope", "org:acme")
	require.Equal(t, exitUsage, code)
}
