package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/config"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// refusedWithin bounds a refused start: at once, far below the readiness
// timeout a refusal used to wait out.
const refusedWithin = 5 * time.Second

// One data dir, one owner: a second serve on a data dir in use is refused
// at once, naming the process that holds it. The first one's hints show
// the address it really listens on.
func TestServe_DataDirInUse(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	port := strconv.Itoa(testenv.FreePort(t))
	first := startProc(t, true, "serve", "--data-dir", dir, "--listen", "127.0.0.1:"+port, "--sweep-interval", "1m")
	var ready string
	for _, line := range strings.Split(first.out.String(), "\n") {
		if strings.HasPrefix(line, "ready:") {
			ready = line
		}
	}
	require.Contains(t, ready, "nats://127.0.0.1:"+port)
	// Not the default port in a hint (a random port such as 42223 may
	// hold those digits).
	require.NotRegexp(t, `:4222\b`, ready)

	begin := time.Now()
	r := runCLI(t, nil, "serve", "--data-dir", dir, "--listen", "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)))
	require.Less(t, time.Since(begin), refusedWithin)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "locked by process "+strconv.Itoa(first.cmd.Process.Pid))
	require.Contains(t, r.stderr, dir)
	require.NotContains(t, r.stderr, "testenv")

	// Stopped, the first releases the data dir.
	first.stop(t)
	startProc(t, true, "serve", "--data-dir", dir, "--listen", "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)))
}

// With --log-format json every line serve writes is a JSON object, its
// ready line too (it was plain text among them, which a log shipper
// parsing JSON lines chokes on).
func TestServe_JSONLogsAreJSON(t *testing.T) {
	t.Parallel()
	p := startProc(t, true, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)), "--log-format", "json")
	p.stop(t)
	var ready int
	for _, line := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &obj), "a line that is not JSON: %q", line)
		if obj["msg"] == "ready: clients connect" {
			ready++
			require.Contains(t, obj["try"], "spendgate budget list --nats-url nats://127.0.0.1:")
		}
	}
	require.Equal(t, 1, ready, p.out.String())
}

// --trimmable on a ledger stream created without it cannot take effect
// (JetStream cannot lift deny-purge): serve says so at start, where it was
// silent and the operator learned it only when audit trim refused.
func TestServe_TrimmableTooLateIsSaid(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	listen := func() string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }
	first := startProc(t, true, "serve", "--data-dir", dir, "--listen", listen())
	first.stop(t)
	require.NotContains(t, first.out.String(), "--trimmable has no effect")
	again := startProc(t, true, "serve", "--data-dir", dir, "--listen", listen(), "--trimmable")
	again.stop(t)
	require.Contains(t, again.out.String(), "--trimmable has no effect: the ledger stream exists and denies purges")
}

func TestServe_PortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	begin := time.Now()
	r := runCLI(t, nil, "serve", "--data-dir", t.TempDir(), "--listen", l.Addr().String())
	require.Less(t, time.Since(begin), refusedWithin)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "cannot listen for clients on "+l.Addr().String())
	require.Contains(t, r.stderr, "address already in use")
	require.Contains(t, r.stderr, "choose another with --listen", "what to do about it")
	require.NotContains(t, r.stderr, "testenv")
}

// A data dir the user cannot write is named, with the cause. Root writes
// anywhere, so as root the binary runs as the unprivileged user nobody.
func TestServe_UnwritableDataDir(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	require.NoError(t, os.Mkdir(dir, 0o755))
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// nobody must reach the binary and the data dir, and not write it.
		const nobody = 65534
		cred = &syscall.Credential{Uid: nobody, Gid: nobody}
		for _, d := range []string{filepath.Dir(binPath), filepath.Dir(usageBinPath), base, filepath.Dir(base)} {
			require.NoError(t, os.Chmod(d, 0o755))
		}
	} else {
		require.NoError(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	}
	r := runCLIAs(t, cred, nil, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "data dir "+dir+" is not writable")
	require.Contains(t, r.stderr, "permission denied")
	require.NotContains(t, r.stderr, "testenv")
}

// serve reads only the SPENDGATE_* variables it lists, each named in its
// --help: SPENDGATE_REPLICAS, set in the environment for something else,
// is not --replicas (it is logged as not read), while SPENDGATE_LOG_FORMAT
// is --log-format. An earlier build read every SPENDGATE_<FLAG> variable:
// SPENDGATE_REPLICAS=2 asked the embedded single server for an R2
// ledger stream, and serve failed to start.
func TestServe_EnvWhitelist(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	p := startProcEnv(t, []string{"SPENDGATE_REPLICAS=2", "SPENDGATE_LOG_FORMAT=json"}, true, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", listen)
	out := p.out.String()
	require.Contains(t, out, `"msg":"environment variable not read: serve takes this setting from its flag or --config only","var":"SPENDGATE_REPLICAS"`)
	require.Contains(t, out, `"replicas":1`)
	p.stop(t)

	help := runHelp(t, "serve", "--help") // as TestCLI_HelpExitsZero reads it
	require.Equal(t, 0, help.code, help.stderr)
	for _, name := range serveEnv {
		require.Contains(t, help.stdout, "$"+config.EnvName(name), "serve --help names the variable of --%s", name)
	}
	require.NotContains(t, help.stdout, "$SPENDGATE_REPLICAS")
}

// A clean stop (SIGTERM) of serve with --http, on its embedded server or
// joining one with --nats-url, logs nothing at WARN or ERROR: in an
// earlier build the --nats-url replica's stop ended on "WARN nats
// disconnected err=<nil>", which reads like a failure.
func TestServe_CleanStopLogsNoWarning(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"embedded", []string{"--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}},
		{"nats-url", []string{"--nats-url", env.URL(), "--replicas", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--sweep-interval", "1m",
				"--http", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}, tc.args...)
			// Race-built: serve.go's own stop (the signal, the replica's
			// stop, the two connections' drains while the last replies
			// flush) is run race-instrumented here, on both ways serve
			// connects; other tests stop a plain serve.
			p := startProcBin(t, raceBin(), testDir(t), nil, true, args...)
			p.stop(t)
			out := p.out.String()
			_, stopping, ok := strings.Cut(out, "shutting down")
			require.True(t, ok, "no stop logged:\n%s", out)
			for _, line := range strings.Split(stopping, "\n") {
				require.NotContains(t, line, "level=WARN", "a clean stop logged:\n%s", stopping)
				require.NotContains(t, line, "level=ERROR", "a clean stop logged:\n%s", stopping)
			}
		})
	}
}

// confKey matches a setting of the sample config file, set or shown
// commented out: "key = value" or "# key = value".
var confKey = regexp.MustCompile(`(?m)^(# )?([a-z][a-z0-9-]*) = (.*)$`)

// docs/spendgate.conf.example is true: every key it sets or shows is a
// serve flag, every serve flag is in it (but --config and the secrets, which
// it names in prose), serve accepts it as it is and with every line
// uncommented, and the environment variables it names are the ones serve
// reads.
func TestServe_ConfigExample(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "docs", "spendgate.conf.example")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	help := runHelp(t, "serve", "--help")
	require.Equal(t, 0, help.code)
	_, own, conn := helpSections(t, help.stdout)
	shown := map[string]bool{}
	for _, m := range confKey.FindAllStringSubmatch(string(data), -1) {
		key := m[2]
		require.True(t, own[key] || conn[key], "%s names %q, which is not a flag of serve", path, key)
		require.False(t, shown[key], "%s shows %q twice", path, key)
		shown[key] = true
	}
	for _, flags := range []map[string]bool{own, conn} {
		for name := range flags {
			switch name {
			case "config", "password", "token":
				require.Contains(t, string(data), name)
			default:
				require.True(t, shown[name], "%s does not show --%s", path, name)
			}
		}
	}
	// As it is, and with every setting uncommented: config.Apply takes
	// every line (an unknown key or a bad value is a usage error naming the
	// file), and serve goes on to refuse --max-inflight 0, a check it makes
	// after reading the file and before it starts anything.
	all := filepath.Join(t.TempDir(), "all.conf")
	require.NoError(t, os.WriteFile(all, []byte(confKey.ReplaceAllString(string(data), "$2 = $3")), 0o600))
	for _, file := range []string{path, all} {
		r := runCLI(t, []string{"SPENDGATE_NATS_URL="}, "serve", "--config", file, "--max-inflight", "0")
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, "--max-inflight must be at least 1", "%s: %s", file, r.stderr)
	}
	// The variables it names are those serve reads.
	want := map[string]bool{envSigningSeed: true}
	for _, name := range serveEnv {
		want[config.EnvName(name)] = true
	}
	got := map[string]bool{}
	for _, v := range regexp.MustCompile(`\bSPENDGATE_[A-Z_]+`).FindAllString(string(data), -1) {
		got[v] = true
	}
	require.Equal(t, want, got)
	for _, v := range regexp.MustCompile(`\bNATS_[A-Z_]+`).FindAllString(string(data), -1) {
		require.Contains(t, help.stdout, "$"+v, "serve does not read $%s", v)
	}
}

// serve joining a single server (not a cluster) with its default of three
// ledger replicas fails to start, and says what to pass instead of only
// quoting the server's "replicas > 1 not supported in non-clustered mode".
func TestServe_JoinSingleServerNamesReplicasFlag(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	r := runCLI(t, nil, "serve", "--nats-url", env.URL(), "--data-dir", filepath.Join(t.TempDir(), "data"))
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "err_code=10074")
	require.Contains(t, r.stderr, "the NATS server is not part of a cluster, so it cannot keep 3 copies of the ledger stream: pass --replicas 1")
}

// The embedded server has no authentication, so serve refuses to let it
// listen where other machines reach it (every interface, or an address
// that is not a loopback one) unless told --insecure-listen, and it refuses
// before it creates the data dir or binds anything. An earlier build
// started on 0.0.0.0:4222 without a word: whoever reached the port could
// define budgets, create gateway keys and delete the ledger stream.
func TestServe_ExposedListenRefused(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:%d", ":%d", "[::]:%d"} {
		port := testenv.FreePort(t)
		addr := fmt.Sprintf(listen, port)
		dir := filepath.Join(t.TempDir(), "data")
		r := runUsage(t, nil, "serve", "--data-dir", dir, "--listen", addr)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, "--listen "+addr+" is reachable from other machines, and the embedded server has no authentication")
		require.Contains(t, r.stderr, "pass --insecure-listen")
		require.NoDirExists(t, dir, "refused before anything starts")
	}
}

func TestReachableByOthers(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:4222":            false,
		"127.1.2.3:4222":            false,
		"[::1]:4222":                false,
		"localhost:4222":            false,
		"LocalHost:0":               false,
		"0.0.0.0:4222":              true,
		":4222":                     true,
		"[::]:4222":                 true,
		"10.1.2.3:4222":             true,
		"192.168.0.10:4222":         true,
		"no-such-host.invalid:4222": false, // left to the bind, which names the cause
		"127.0.0.1":                 false, // no port: left to the address check
	} {
		require.Equal(t, want, reachableByOthers(addr), addr)
	}
}

// --dashboard=false leaves /metrics, /healthz and /readyz on the --http
// listener and takes the dashboard (page and JSON) off it, for an --http
// that Prometheus on another machine scrapes; the dashboard is on by
// default. --dashboard without --http would do nothing, and is refused.
func TestServe_DashboardOff(t *testing.T) {
	t.Parallel()
	get := func(url string) int {
		resp, err := http.Get(url)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, on := range []bool{true, false} {
		httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		p := startProc(t, true, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--sweep-interval", "1m",
			"--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--http", httpAddr, "--dashboard="+strconv.FormatBool(on))
		base := "http://" + httpAddr
		require.Equal(t, http.StatusOK, get(base+"/metrics"))
		testenv.WaitFor(t, 10*time.Second, "ready", func() bool { return get(base+"/readyz") == http.StatusOK })
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		require.Equal(t, want, get(base+dashboard.Path), "--dashboard=%v", on)
		require.Equal(t, want, get(base+dashboard.Path+"api/budgets"), "--dashboard=%v", on)
		require.NotContains(t, p.out.String(), "level=WARN", "loopback --http: no warning")
		p.stop(t)
	}
	r := runUsage(t, nil, "serve", "--dashboard=false")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--dashboard applies to the --http listener, which is off")
}

// TestServe_BadValuesRefused: a serve flag value that cannot work is a
// usage error (exit 64) naming the flag, before the embedded server
// starts (no data dir is made), whether it comes from the command line or
// the --config file. How it can fail: a negative --ready-timeout started
// everything and then stopped with "ledger fold did not finish in time";
// --default-ttl above --max-ttl stopped with "ttl default 5m0s must lie in
// [1s, 1s] within [1s, 24h0m0s]", naming no flag; a negative
// --metrics-budgets was taken; --lanes -3 was refused only after the
// embedded server started; --sync-always beside a URL from
// $SPENDGATE_NATS_URL did not say where the URL came from.
func TestServe_BadValuesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--ready-timeout", "-1s"}, nil, "--ready-timeout must be positive"},
		{[]string{"--ready-timeout", "0"}, nil, "--ready-timeout must be positive"},
		{[]string{"--max-ttl", "1s", "--default-ttl", "5m"}, nil, "--default-ttl 5m0s must be 1s..1s (--max-ttl)"},
		{[]string{"--default-ttl", "100ms"}, nil, "--default-ttl 100ms must be 1s..24h0m0s"},
		{[]string{"--max-ttl", "48h"}, nil, "--max-ttl 48h0m0s must be 1s..24h0m0s"},
		{[]string{"--metrics-budgets", "-1"}, nil, "--metrics-budgets must not be negative"},
		{[]string{"--lanes", "-3"}, nil, "--lanes must be 1..1024"},
		{[]string{"--lanes", "0"}, nil, "--lanes must be 1..1024"},
		{[]string{"--sync-always=false"}, []string{"SPENDGATE_NATS_URL=nats://127.0.0.1:1"}, "but a NATS URL is set (nats://127.0.0.1:1, by --nats-url, $SPENDGATE_NATS_URL or --config)"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"serve", "--data-dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}, tc.args...)
		r := runUsage(t, tc.env, args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, tc.args)
		require.NoDirExists(t, dir, "%v: refused before anything starts", tc.args)
	}
	// The same from the --config file.
	conf := filepath.Join(t.TempDir(), "spendgate.conf")
	require.NoError(t, os.WriteFile(conf, []byte("ready-timeout = -5s\n"), 0o600))
	r := runUsage(t, nil, "serve", "--config", conf, "--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--ready-timeout must be positive")
}

// TestLoginHint: the ready line's commands log in the way serve does, as
// the admin role, and never print serve's own secret, file or user.
func TestLoginHint(t *testing.T) {
	layout := streams.Default()
	for _, tc := range []struct {
		name      string
		conn      natsconn.Options
		spendgate string
		note      string
	}{
		{"embedded", natsconn.Options{}, "", ""},
		{"password under roles", natsconn.Options{User: "replica", Password: "s3cret", InboxPrefix: roles.InboxPrefix(layout, roles.Replica)},
			" --inbox-prefix _INBOX_spendgate_admin --user admin", "$NATS_PASSWORD set to the admin role's password"},
		{"creds", natsconn.Options{Creds: "/etc/spendgate/replica.creds"}, " --creds ADMIN.creds", "credentials file of a user with the admin role"},
		{"nkey over TLS", natsconn.Options{NKey: "/etc/spendgate/replica.nk", TLSCA: "ca.pem"}, " --tls-ca ca.pem --nkey ADMIN.nk", "nkey seed"},
		{"client certificate", natsconn.Options{TLSCA: "ca.pem", TLSCert: "replica.pem", TLSKey: "replica-key.pem"},
			" --tls-ca ca.pem --tls-cert admin.pem --tls-key admin-key.pem", "CN=admin"},
		{"token", natsconn.Options{Token: "t0ken"}, "", "$NATS_TOKEN"},
		{"another inbox prefix", natsconn.Options{User: "svc", InboxPrefix: "_INBOX_mine"}, " --user admin", "admin role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := loginHint(tc.conn, layout)
			require.Equal(t, tc.spendgate, h.spendgate)
			require.Contains(t, h.note, tc.note)
			for _, secret := range []string{"s3cret", "t0ken", "replica.creds", "replica.nk", "replica.pem", "replica-key.pem", "user replica"} {
				require.NotContains(t, h.spendgate+h.nats+h.note, secret)
			}
		})
	}
}
