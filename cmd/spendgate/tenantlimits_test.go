package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// serve's tenant limit flags: their defaults are the packages' defaults, a
// flag's 0 turns its limit off (the config's negative), and a bad value is
// refused (TestCLI_UsageErrors runs the refusals through serve).
func TestServe_TenantLimitFlags(t *testing.T) {
	t.Parallel()
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
		MaxBudgets: service.DefaultTenantMaxBudgets, Rate: service.DefaultTenantRate, DenialBytes: service.DefaultTenantDenialBytes}, l)
	require.Zero(t, maxBytes, "unset, the replica's default: the stream's, lowered if the server has no room")
	_, maxBytes, err = parse("--denial-max-bytes", strconv.Itoa(streams.DefaultDenialMaxBytes))
	require.NoError(t, err)
	require.Equal(t, int64(streams.DefaultDenialMaxBytes), maxBytes, "given, exactly that")

	l, maxBytes, err = parse("--tenant-max-open", "0", "--tenant-rate", "0", "--tenant-max-default-budgets", "7",
		"--tenant-max-budgets", "0", "--tenant-denial-bytes", "0", "--denial-max-bytes", "0")
	require.NoError(t, err)
	require.Equal(t, service.TenantLimits{MaxOpen: -1, MaxDefaultBudgets: 7, MaxBudgets: -1, Rate: -1, DenialBytes: -1}, l)
	l, _, err = parse("--tenant-max-budgets", "300")
	require.NoError(t, err)
	require.Equal(t, 300, l.MaxBudgets)
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
	_, _, err = parse("--tenant-max-budgets", "-1")
	require.ErrorContains(t, err, "--tenant-max-budgets must not be negative")
	_, _, err = parse("--tenant-max-budgets", "1073741825")
	require.ErrorContains(t, err, "--tenant-max-budgets 1073741825: at most 1073741824")
}

// A --tenant-limits file: each line a tenant and its own limits; a flag's
// 0 is the config's negative, a key left out keeps the flag's value (a
// zero field), and each mistake is refused with its line.
func TestReadTenantLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, fmt.Sprintf("limits-%d", len(body)))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	own, err := readTenantLimits(write("# big customers\nacme max-open=50000 rate=2000\n\n  globex   max-default-budgets=0 burst=900 denial-bytes=1\nfree max-budgets=50\nbig max-budgets=0\n"))
	require.NoError(t, err)
	require.Equal(t, map[string]service.TenantLimits{
		"acme":   {MaxOpen: 50000, Rate: 2000},
		"globex": {MaxDefaultBudgets: -1, Burst: 900, DenialBytes: 1},
		"free":   {MaxBudgets: 50},
		"big":    {MaxBudgets: -1},
	}, own)

	for body, want := range map[string]string{
		"acme\n":                         ":1: tenant acme has no limits",
		"acme rate=1\nacme rate=2\n":     ":2: tenant acme is named twice",
		"# x\nAcme rate=1\n":             `:2: tenant "Acme" must be lower case`,
		"acme speed=1\n":                 `:1: unknown key "speed"`,
		"acme rate=-1\n":                 ":1: rate=-1: want a number, at least 0",
		"acme rate=fast\n":               ":1: rate=fast: want a number",
		"acme rate\n":                    `:1: "rate" is not key=value`,
		"acme rate=1 rate=2\n":           ":1: rate is given twice",
		"acme burst=0\n":                 ":1: burst=0: leave burst out",
		"acme denial-bytes=2000000000\n": ":1: denial-bytes=2000000000: at most",
		"acme max-open=1073741825\n":     ":1: max-open=1073741825: at most 1073741824",
	} {
		_, err := readTenantLimits(write(body))
		require.ErrorContains(t, err, want, body)
		require.ErrorContains(t, err, "--tenant-limits "+dir, body)
	}
	_, err = readTenantLimits(filepath.Join(dir, "nope"))
	require.ErrorContains(t, err, "no such file")

	// docs/tenant-limits.md's example reads as it says.
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "tenant-limits.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "### In a file")
	require.True(t, ok)
	_, block, ok := strings.Cut(section, "```\n")
	require.True(t, ok)
	block, _, _ = strings.Cut(block, "```")
	own, err = readTenantLimits(write(block))
	require.NoError(t, err, block)
	require.Equal(t, map[string]service.TenantLimits{
		"acme":      {MaxOpen: 50000, Rate: 2000},
		"free-tier": {MaxOpen: 100, MaxDefaultBudgets: 100, Rate: 20},
	}, own)
}

// A tenant with limits of its own is held to them, from the file serve
// was started with and, after the file changed, from the next SIGHUP;
// another tenant keeps the common limits. The refusal names the tenant's
// own limit. Without the table, acme's second admit would be admitted
// (the common limit is 10,000 open reservations).
func TestServe_TenantOwnLimitsReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tenant-limits")
	require.NoError(t, os.WriteFile(file, []byte("acme max-open=1\n"), 0o600))
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	p := startProc(t, true, "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", listen, "--sweep-interval", "1m",
		"--tenant-limits", file)
	require.Contains(t, p.out.String(), "tenants with limits of their own")
	nc, err := nats.Connect("nats://" + listen)
	require.NoError(t, err)
	defer nc.Close()
	admitAs := func(tenant, id string) string {
		t.Helper()
		msg, err := nc.Request("spendgate.t."+tenant+".admit", []byte(`{"request_id":"`+id+`","scopes":["org:a"],"amount":"1"}`), 5*time.Second)
		require.NoError(t, err)
		return string(msg.Data)
	}
	for _, tenant := range []string{"acme", "globex"} {
		r := runCLI(t, []string{"SPENDGATE_NATS_URL=nats://" + listen}, "budget", "put", "--tenant", tenant, "--scope", "org:a", "--period", "month", "--limit", "100", "--unit", "USD")
		require.Equal(t, 0, r.code, r.stderr)
	}
	require.Contains(t, admitAs("acme", "a1"), `"admitted":true`)
	refused := admitAs("acme", "a2")
	require.Contains(t, refused, `"code":"tenant_limit"`)
	require.Contains(t, refused, "its own, --tenant-limits max-open=1")
	for i := range 3 {
		require.Contains(t, admitAs("globex", fmt.Sprintf("g%d", i)), `"admitted":true`, "globex keeps the common limit")
	}

	require.NoError(t, os.WriteFile(file, []byte("acme max-open=2\n"), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	testenv.WaitFor(t, 10*time.Second, "the tenant limits reloaded", func() bool {
		return strings.Contains(p.out.String(), "SIGHUP: tenant limits reloaded")
	})
	require.Contains(t, admitAs("acme", "a3"), `"admitted":true`)
	require.Contains(t, admitAs("acme", "a4"), `"code":"tenant_limit"`)

	// A file that no longer reads keeps the limits in use, and says so.
	require.NoError(t, os.WriteFile(file, []byte("acme max-open=x\n"), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	testenv.WaitFor(t, 10*time.Second, "the failed reload logged", func() bool {
		return strings.Contains(p.out.String(), "SIGHUP: tenant limits not reloaded")
	})
	require.Contains(t, admitAs("acme", "a5"), "its own, --tenant-limits max-open=2")
	p.stop(t)
}

// TestServe_TenantLimitsInLedger: the operator's `tenant-limits put`
// holds a tenant to its own limit at once, `get` and `list` show it, and
// after a restart (from the snapshot the graceful stop wrote) the replica
// still holds the tenant to it; its limit of budgets refuses a second
// budget put for it, the operator's `budget put --tenant` included, and
// its count of budgets survives the restart. How it can fail: limits kept
// only in the replica's memory are lost on the restart (a3 would be
// admitted), and a put the replica did not fold would leave acme at the
// common limit.
func TestServe_TenantLimitsInLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	env := []string{"SPENDGATE_NATS_URL=nats://" + listen}
	serve := func() *proc {
		return startProc(t, true, "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", listen, "--sweep-interval", "1m")
	}
	p := serve()
	admitAs := func(tenant, id string) string {
		t.Helper()
		nc, err := nats.Connect("nats://" + listen)
		require.NoError(t, err)
		defer nc.Close()
		msg, err := nc.Request("spendgate.t."+tenant+".admit", []byte(`{"request_id":"`+id+`","scopes":["org:a"],"amount":"1"}`), 5*time.Second)
		require.NoError(t, err)
		return string(msg.Data)
	}
	r := runCLI(t, env, "budget", "put", "--tenant", "acme", "--scope", "org:a", "--period", "month", "--limit", "100", "--unit", "USD")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, env, "tenant-limits", "put", "--tenant", "acme", "--max-open", "1", "--max-budgets", "1", "--rate", "0")
	require.Equal(t, 0, r.code, r.stderr)
	var put events.TenantLimitsPutReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &put), r.stdout)
	require.True(t, put.Created)
	require.Equal(t, int64(1), *put.MaxOpen)
	require.Equal(t, int64(0), *put.Rate, "0, no limit, is kept apart from left out")
	require.Nil(t, put.Burst)
	require.Equal(t, int64(1), *put.MaxBudgets)
	// acme has its one budget: a put of another, even the operator's
	// acting for it, is refused (exit 1); a change of the one it has is not.
	r = runCLI(t, env, "budget", "put", "--tenant", "acme", "--scope", "org:b", "--period", "month", "--limit", "100", "--unit", "USD")
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stdout, `"code": "tenant_limit"`)
	require.Contains(t, r.stdout, "its own, tenant-limits put max-budgets=1")
	r = runCLI(t, env, "budget", "put", "--tenant", "acme", "--scope", "org:a", "--period", "month", "--limit", "200")
	require.Equal(t, 0, r.code, r.stderr)

	require.Contains(t, admitAs("acme", "a1"), `"admitted":true`)
	refused := admitAs("acme", "a2")
	require.Contains(t, refused, `"code":"tenant_limit"`)
	require.Contains(t, refused, "its own, tenant-limits put max-open=1")

	r = runCLI(t, env, "tenant-limits", "list")
	require.Equal(t, 0, r.code, r.stderr)
	var list events.TenantLimitsListReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Equal(t, []events.TenantLimitsView{put.TenantLimitsView}, list.Tenants)

	p.stop(t)
	p = serve()
	r = runCLI(t, env, "tenant-limits", "get", "--tenant", "acme")
	require.Equal(t, 0, r.code, r.stderr)
	var got events.TenantLimitsView
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Equal(t, put.TenantLimitValues, got.TenantLimitValues)
	require.Equal(t, put.Version, got.Version)
	require.Equal(t, int64(1), got.HeldTo.MaxOpen)
	require.Equal(t, "tenant-limits put", got.HeldTo.From["max_open"])
	require.Equal(t, 1, got.Usage.OpenReservations, "a1 is still open after the restart")
	require.Equal(t, 1, got.Usage.Budgets, "its budget is counted after the restart")
	require.Equal(t, int64(1), got.HeldTo.MaxBudgets)
	r = runCLI(t, env, "budget", "put", "--tenant", "acme", "--scope", "org:b", "--period", "month", "--limit", "100", "--unit", "USD")
	require.Equal(t, 1, r.code, "the limit of budgets survives the restart: %s", r.stdout)
	require.Contains(t, admitAs("acme", "a3"), "its own, tenant-limits put max-open=1", "the limit survives the restart")
	p.stop(t)
}
