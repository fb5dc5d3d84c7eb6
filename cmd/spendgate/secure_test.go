package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/feed"
	"github.com/spendgate/spendgate/roles"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestSecure_RolesWalkthrough runs the README's "Securing spendgate" steps
// with the binary: `spendgate roles` renders the permission layout, a real
// nats-server loads it (passwords from its environment), `serve` joins it
// as the replica, and each command runs under its role with credentials
// and inbox prefix from the NATS_* and SPENDGATE_* variables only (nothing
// secret in argv). The admin defines a budget, the calling service admits,
// finance audits; the service's budget.put and a wrong password are
// refused. It fails if a command ignores the connection variables (it
// could not authenticate) or if the layout lets a role do what it must not.
func TestSecure_RolesWalkthrough(t *testing.T) {
	t.Setenv("SPENDGATE_NATS_URL", "")
	dir := t.TempDir()
	r := runCLI(t, nil, "roles")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "spendgate-roles.conf"), []byte(r.stdout), 0o600))
	pw := func(user string) string { return "pw-" + user + "-x" }
	for _, u := range roles.Names {
		t.Setenv(roles.PasswordEnv(u), pw(u))
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\ninclude ./spendgate-roles.conf\n", filepath.Join(dir, "js"))
	confPath := filepath.Join(dir, "server.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(confPath)
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second))
	url := s.ClientURL()

	as := func(role string) []string {
		return []string{"NATS_URL=" + url, "NATS_USER=" + role, "NATS_PASSWORD=" + pw(role),
			"SPENDGATE_INBOX_PREFIX=" + roles.InboxPrefix(streams.Default(), role)}
	}

	// The replica: serve joins the server with the replica's identity.
	// NATS_URL alone does not make serve leave its embedded server, so
	// the URL is given as SPENDGATE_NATS_URL.
	serveCmd := exec.Command(binPath, "serve", "--replicas", "1")
	serveCmd.Env = append(os.Environ(), append(as(roles.Replica), "SPENDGATE_NATS_URL="+url)...)
	out := &syncBuffer{}
	serveCmd.Stdout, serveCmd.Stderr = out, out
	require.NoError(t, serveCmd.Start())
	done := make(chan error, 1)
	go func() { done <- serveCmd.Wait() }()
	t.Cleanup(func() {
		_ = serveCmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("serve:\n%s", out.String())
		}
	})
	testenv.WaitFor(t, 30*time.Second, "serve ready under the replica role", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "ready:")
	})

	r = runCLI(t, as(roles.Admin), "budget", "put", "--scope", "org:sec", "--period", "month", "--limit", "1.00", "--unit", "USD")
	require.Equal(t, 0, r.code, "admin budget put: %s", r.stderr)

	r = runCLI(t, as(roles.Service), "admit", "--scope", "org:sec", "--amount", "0.25")
	require.Equal(t, 0, r.code, "service admit: %s", r.stderr)
	require.Contains(t, r.stdout, `"admitted": true`)

	// The calling service may not define budgets: its publish is refused
	// by the server, so no reply comes.
	r = runCLI(t, as(roles.Service), "budget", "put", "--scope", "org:sec", "--period", "month", "--limit", "500", "--unit", "USD", "--timeout", "1s")
	require.Equal(t, 1, r.code, "service budget put must fail: %s", r.stdout)

	r = runCLI(t, as(roles.Finance), "audit", "check")
	require.Equal(t, 0, r.code, "finance audit check: %s %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "OK")

	// Finance reads the spend report from the replica (which keeps it
	// under the replica role) and replays it: the same bytes. The calling
	// service may not ask for it.
	r = runCLI(t, as(roles.Finance), "report", "--by", "scope")
	require.Equal(t, 0, r.code, "finance report: %s %s", r.stdout, r.stderr)
	require.Regexp(t, `(?m)^org:sec\s+USD\s+1\s+1\s`, r.stdout)
	replay := runCLI(t, as(roles.Finance), "report", "--by", "scope", "--replay")
	require.Equal(t, 0, replay.code, "finance report --replay: %s", replay.stderr)
	require.Equal(t, r.stdout, replay.stdout)
	r = runCLI(t, as(roles.Service), "report", "--by", "scope", "--timeout", "1s")
	require.Equal(t, 1, r.code, "service report must fail: %s", r.stdout)

	// The limit is unchanged: the refused put wrote nothing.
	r = runCLI(t, as(roles.Admin), "budget", "get", "--scope", "org:sec", "--period", "month")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"limit": "1"`)

	// A wrong password is refused with the server's reason.
	bad := append(as(roles.Admin), "NATS_PASSWORD=wrong")
	r = runCLI(t, bad, "budget", "list")
	require.Equal(t, 1, r.code)
	require.Contains(t, strings.ToLower(r.stderr), "authorization")
}

// TestSecure_TenantsWalkthrough runs the README's "Tenants" steps with the
// binary: `spendgate roles --tenant acme --tenant globex` renders the
// accounts, a real nats-server loads them, serve runs as the replica with
// --feed, the operator creates each tenant's feed consumer as the feed role
// (spendgate feed consumer --tenant), its admin defines each tenant's
// budget with --tenant, and each tenant calls the plain subjects from its
// own account with no flag naming it. globex lists only its budget, its
// lock attack on acme reserves in its own budget, acme still admits, and
// neither can release the other's reservation; acme pulls its own events
// from the consumer the operator made, and cannot make one itself. It fails
// if the tenant came from anything but the account's import (the tenants
// would share one budget), if a path leaked a budget, or if the command
// made a consumer the tenant cannot read or the layout let the tenant
// create one (the earlier layout did).
func TestSecure_TenantsWalkthrough(t *testing.T) {
	t.Setenv("SPENDGATE_NATS_URL", "")
	dir := t.TempDir()
	r := runCLI(t, nil, "roles", "--tenant", "acme", "--tenant", "globex")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "spendgate-roles.conf"), []byte(r.stdout), 0o600))
	pw := func(user string) string { return "pw-" + user + "-x" }
	for _, u := range append(append([]string{}, roles.Names...), "acme", "globex") {
		t.Setenv(roles.PasswordEnv(u), pw(u))
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\ninclude ./spendgate-roles.conf\n", filepath.Join(dir, "js"))
	confPath := filepath.Join(dir, "server.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(confPath)
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second))
	url := s.ClientURL()

	as := func(role string) []string {
		return []string{"NATS_URL=" + url, "NATS_USER=" + role, "NATS_PASSWORD=" + pw(role),
			"SPENDGATE_INBOX_PREFIX=" + roles.InboxPrefix(streams.Default(), role)}
	}
	// A tenant's user: its own account, the default inbox.
	tenant := func(name string) []string {
		return []string{"NATS_URL=" + url, "NATS_USER=" + name, "NATS_PASSWORD=" + pw(name), "SPENDGATE_INBOX_PREFIX="}
	}

	serveCmd := exec.Command(binPath, "serve", "--replicas", "1", "--feed")
	serveCmd.Env = append(os.Environ(), append(as(roles.Replica), "SPENDGATE_NATS_URL="+url)...)
	out := &syncBuffer{}
	serveCmd.Stdout, serveCmd.Stderr = out, out
	require.NoError(t, serveCmd.Start())
	done := make(chan error, 1)
	go func() { done <- serveCmd.Wait() }()
	t.Cleanup(func() {
		_ = serveCmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("serve:\n%s", out.String())
		}
	})
	testenv.WaitFor(t, 30*time.Second, "serve ready under the replica role", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "ready:")
	})

	// The operator creates each tenant's feed consumer once the relay
	// has made the feed stream (the command says when it has not).
	testenv.WaitFor(t, 30*time.Second, "acme's feed consumer created", func() bool {
		r = runCLI(t, as(roles.Admin), "feed", "consumer", "--tenant", "acme")
		require.True(t, r.code == 0 || strings.Contains(r.stderr, "--feed"), "feed consumer --tenant acme: %s %s", r.stdout, r.stderr)
		return r.code == 0
	})
	require.Contains(t, r.stdout, `"consumer": "t-acme"`)
	r = runCLI(t, as(roles.Admin), "feed", "consumer", "--tenant", "globex")
	require.Equal(t, 0, r.code, "feed consumer --tenant globex: %s %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `"created": true`)
	r = runCLI(t, as(roles.Admin), "feed", "consumer", "--tenant", "globex")
	require.Equal(t, 0, r.code, "feed consumer --tenant globex again: %s %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `"created": false`)

	r = runCLI(t, as(roles.Admin), "budget", "put", "--tenant", "acme", "--scope", "team:search", "--period", "month", "--limit", "1.00", "--unit", "USD")
	require.Equal(t, 0, r.code, "admin budget put for acme: %s %s", r.stdout, r.stderr)
	r = runCLI(t, as(roles.Admin), "budget", "put", "--tenant", "globex", "--scope", "team:search", "--period", "month", "--limit", "50", "--unit", "USD")
	require.Equal(t, 0, r.code, "admin budget put for globex: %s %s", r.stdout, r.stderr)

	r = runCLI(t, tenant("acme"), "admit", "--scope", "team:search", "--amount", "0.25")
	require.Equal(t, 0, r.code, "acme admit: %s %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `"admitted": true`)
	require.Contains(t, r.stdout, `"scope": "team:search"`)
	var acmeRes events.AdmitReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &acmeRes))

	r = runCLI(t, tenant("globex"), "budget", "list")
	require.Equal(t, 0, r.code, "globex budget list: %s %s", r.stdout, r.stderr)
	var list events.BudgetListReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list.Budgets, 1, r.stdout)
	require.Equal(t, "50", list.Budgets[0].Limit)

	r = runCLI(t, tenant("globex"), "admit", "--scope", "team:search", "--amount", "1.00", "--ttl", "24h")
	require.Equal(t, 0, r.code, "globex admit: %s %s", r.stdout, r.stderr)
	var globexRes events.AdmitReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &globexRes))
	r = runCLI(t, tenant("acme"), "admit", "--scope", "team:search", "--amount", "0.75")
	require.Equal(t, 0, r.code, "acme admit after globex's lock attack: %s %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `"admitted": true`)

	// Neither can release the other's reservation.
	r = runCLI(t, tenant("acme"), "release", "--reservation", globexRes.ReservationID)
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stdout, `"unknown_reservation"`)
	r = runCLI(t, tenant("globex"), "release", "--reservation", acmeRes.ReservationID)
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stdout, `"unknown_reservation"`)

	// A tenant does not define budgets: budget.put is not imported.
	r = runCLI(t, tenant("acme"), "budget", "put", "--scope", "team:search", "--period", "month", "--limit", "500", "--unit", "USD", "--timeout", "1s")
	require.Equal(t, 1, r.code, "acme budget put must fail: %s", r.stdout)
	r = runCLI(t, as(roles.Admin), "budget", "get", "--tenant", "acme", "--scope", "team:search", "--period", "month")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"limit": "1"`)
	require.Contains(t, r.stdout, `"reserved": "1"`)

	r = runCLI(t, as(roles.Finance), "audit", "check")
	require.Equal(t, 0, r.code, "finance audit check: %s %s", r.stdout, r.stderr)

	// Finance exports one tenant's reservations: acme's two admits.
	r = runCLI(t, as(roles.Finance), "audit", "export", "--tenant", "acme", "--format", "jsonl")
	require.Equal(t, 0, r.code, "finance audit export --tenant acme: %s", r.stderr)
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, rows, 2, r.stdout)
	for _, row := range rows {
		require.Contains(t, row, `"acme/team:search"`)
		require.NotContains(t, row, "globex")
	}

	// acme pulls its own events from the consumer the operator made (its
	// budget and its two admits), and may not create one: the create is
	// refused to its user.
	nc, err := nats.Connect(url, nats.UserInfo("acme", pw("acme")))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.NewWithAPIPrefix(nc, roles.TenantJSPrefix(streams.Default()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, streams.Default().FeedStreamName(), streams.TenantFeedConsumer("acme"))
	require.NoError(t, err)
	var got []string
	for len(got) < 3 {
		require.NoError(t, ctx.Err(), "acme's feed: %v", got)
		batch, err := cons.Fetch(3-len(got), jetstream.FetchMaxWait(time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			require.Contains(t, m.Subject(), ".t.acme.")
			got = append(got, m.Headers().Get(streams.HeaderFeedType))
			require.NoError(t, m.Ack())
		}
	}
	require.Equal(t, []string{"budget.defined.v2", "reservation.opened.v1", "reservation.opened.v1"}, got)
	cctx, ccancel := context.WithTimeout(ctx, time.Second)
	defer ccancel()
	_, err = js.CreateOrUpdateConsumer(cctx, streams.Default().FeedStreamName(), feed.TenantConsumerConfig(streams.Default(), "acme"))
	require.Error(t, err, "acme created its own consumer")
}

// TestSecure_RolesNSC: `spendgate roles --nsc` prints roles.NSC for the
// flags, tenants included (package roles runs what it prints, in operator
// mode). It fails if the command refused --tenant with --nsc, as it once
// did, or dropped a flag.
func TestSecure_RolesNSC(t *testing.T) {
	r := runCLI(t, nil, "roles", "--nsc", "--account", "OPS", "--tenant", "acme")
	require.Equal(t, 0, r.code, r.stderr)
	want, err := roles.NSC(streams.Default(), "OPS", "acme")
	require.NoError(t, err)
	require.Equal(t, want, r.stdout)
	r = runCLI(t, nil, "roles", "--nsc", "--tenant", "OPS!")
	require.Equal(t, 1, r.code, r.stdout)
}
