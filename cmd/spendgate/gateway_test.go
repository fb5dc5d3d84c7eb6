package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/fakellm"
	"github.com/spendgate/spendgate/testenv"
)

// TestGateway_Commands runs the binaries as docs/guide.md's gateway does:
// serve, a price and a team budget, a key with a budget of one request,
// and spendgate gateway in front of a fake provider. The first call
// succeeds and the second is denied 429; keys list shows the key and no
// hash; a rotated key's old secret is refused and its new one accepted; a
// disabled key is refused; the HTTP API answers an admin key; /metrics
// counts the calls; SIGTERM stops the gateway cleanly.
func TestGateway_Commands(t *testing.T) {
	t.Parallel()
	url, cli := serveForGateway(t)
	fake := httptest.NewServer(fakellm.New("sk-upstream"))
	t.Cleanup(fake.Close)
	cli("pricing", "put", "--model", "gpt-4o-mini", "--input", "0.15", "--output", "0.60")
	cli("budget", "put", "--scope", "team:search", "--period", "month", "--limit", "5.00", "--unit", "USD")
	secret := cli("keys", "create", "--scope", "team:search", "--budget", "1", "--unit", "requests", "--secret-only")
	id, ok := events.ParseAPIKey(secret)
	require.True(t, ok, secret)
	admin := cli("keys", "create", "--access", "admin", "--secret-only")

	gwAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gw := startGateway(t, url, gwAddr, "--upstream", "openai="+fake.URL+"/v1", "--key-cache", "100ms")
	base := "http://" + gwAddr
	oks := 0 // the calls answered 200, for /metrics below
	call := func(secret string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],"max_tokens":300}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		if resp.StatusCode == http.StatusOK {
			oks++
		}
		return resp.StatusCode, string(b), resp.Header
	}
	status, body, _ := call(secret)
	require.Equal(t, http.StatusOK, status, body)
	status, body, hdr := call(secret)
	require.Equal(t, http.StatusTooManyRequests, status, body)
	require.Contains(t, body, "limit_reached")
	require.Contains(t, body, "key:"+id)
	require.NotEmpty(t, hdr.Get("Retry-After"))
	require.Len(t, fake.Config.Handler.(*fakellm.Server).Calls(), 1)

	var team events.BudgetView
	require.NoError(t, json.Unmarshal([]byte(cli("budget", "get", "--scope", "team:search", "--period", "month")), &team))
	require.NotEqual(t, "0", team.Spent, "the call's cost landed in the team's budget")
	require.Equal(t, "0", team.Reserved)

	list := cli("keys", "list")
	require.Contains(t, list, id)
	require.Contains(t, list, `"prefix": "sgk_`+id+`_"`)
	require.NotContains(t, list, events.HashAPIKey(secret))

	var rotated struct {
		Secret string `json:"secret"`
		events.APIKeyView
	}
	require.NoError(t, json.Unmarshal([]byte(cli("keys", "rotate", "--id", id)), &rotated))
	require.NotNil(t, rotated.RotatedAt)
	testenv.WaitFor(t, 10*time.Second, "the old secret is refused", func() bool {
		status, _, _ := call(secret)
		return status == http.StatusUnauthorized
	})
	status, body, _ = call(rotated.Secret)
	require.Equal(t, http.StatusTooManyRequests, status, "the new secret opens the key (whose budget is spent): %s", body)
	// Its scopes changed to the team's alone, the key's spent budget no
	// longer binds it.
	var updated events.APIKeyPutReply
	require.NoError(t, json.Unmarshal([]byte(cli("keys", "update", "--id", id, "--scope", "team:search", "--name", "search")), &updated))
	require.Equal(t, []string{"scopes", "name"}, updated.Changed)
	testenv.WaitFor(t, 10*time.Second, "the key admitted against its new scopes", func() bool {
		status, _, _ := call(rotated.Secret)
		return status == http.StatusOK
	})
	cli("keys", "disable", "--id", id)
	testenv.WaitFor(t, 10*time.Second, "the disabled key is refused", func() bool {
		status, body, _ := call(rotated.Secret)
		return status == http.StatusUnauthorized && strings.Contains(body, "key_disabled")
	})

	req, err := http.NewRequest(http.MethodPost, base+"/spendgate/budget.get", strings.NewReader(`{"scope":"team:search","period":"month"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"scope":"team:search"`)

	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), fmt.Sprintf(`spendgate_gateway_calls_total{api="chat.completions",outcome="ok"} %d`, oks))
	require.Regexp(t, `(?m)^spendgate_gateway_denials_total\{reason="limit_reached"\} [1-9][0-9]*$`, string(b), "the denials counted (the series is there from the start, at 0)")
	require.Contains(t, string(b), `spendgate_httpapi_requests_total{code="ok",endpoint="budget.get"} 1`)
	require.Contains(t, gw.out.String(), `msg="gateway call"`, "one log line per call")
	gw.stop(t)
}

// TestGateway_KilledMidCallSettlesOnRestart: a gateway killed (SIGKILL)
// while a call is at the provider leaves its reservation open; started
// again in the same directory (its default --journal), it settles the
// call at its whole reservation, noted reservation_gateway_restart: the
// provider may have billed it in full. How we know it can fail: without
// the journal nothing closes the reservation until the sweeper releases
// it at its expiry (the upstream timeout plus a minute), and the spend is
// in no budget; the last wait below then times out.
func TestGateway_KilledMidCallSettlesOnRestart(t *testing.T) {
	t.Parallel()
	url, cli := serveForGateway(t)
	fakeLLM := fakellm.New("sk-upstream")
	fake := httptest.NewServer(fakeLLM)
	t.Cleanup(fake.Close)
	cli("pricing", "put", "--model", "gpt-4o-mini", "--input", "0.15", "--output", "0.60")
	cli("budget", "put", "--scope", "team:crash", "--period", "month", "--limit", "5.00", "--unit", "USD")
	secret := cli("keys", "create", "--scope", "team:crash", "--secret-only")
	budget := func() events.BudgetView {
		t.Helper()
		var b events.BudgetView
		require.NoError(t, json.Unmarshal([]byte(cli("budget", "get", "--scope", "team:crash", "--period", "month")), &b))
		return b
	}

	gwAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gw := startGateway(t, url, gwAddr, "--upstream", "openai="+fake.URL+"/v1")
	go func() {
		// A streaming call whose provider waits an hour before its first
		// chunk: it is at the provider when the gateway dies.
		req, _ := http.NewRequest(http.MethodPost, "http://"+gwAddr+"/v1/chat/completions", strings.NewReader(
			`{"model":"gpt-4o-mini","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"fake:slow=1h"}]}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	testenv.WaitFor(t, 30*time.Second, "the call at the provider", func() bool { return len(fakeLLM.Calls()) == 1 })
	gw.kill(t)
	held := budget()
	require.NotEqual(t, "0", held.Reserved, "the killed gateway's call holds its reservation")
	require.Equal(t, "0", held.Spent)

	gw = startGateway(t, url, gwAddr, "--upstream", "openai="+fake.URL+"/v1")
	testenv.WaitFor(t, 30*time.Second, "the restarted gateway to settle the call", func() bool { return budget().Reserved == "0" })
	require.Equal(t, held.Reserved, budget().Spent, "settled at the whole reservation")
	testenv.WaitFor(t, 10*time.Second, "the recovery's log line", func() bool {
		return strings.Contains(gw.out.String(), "closed a call left open by an earlier run")
	})
	export := cli("audit", "export", "--unverified")
	require.Contains(t, export, "reservation_gateway_restart")

	// A second gateway in the same directory: the default journal is the
	// first's, so it serves without one, and says so; told that journal
	// in so many words, it refuses to start.
	second := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gw2 := startGateway(t, url, second, "--upstream", "openai="+fake.URL+"/v1")
	// Logged before it was ready, but its output reaches gw2.out through
	// a pipe the test process copies on its own time.
	testenv.WaitFor(t, 10*time.Second, "the second gateway's warning", func() bool {
		return strings.Contains(gw2.out.String(), "running without a journal")
	})
	gw2.stop(t)
	r := runCLI(t, []string{"OPENAI_API_KEY=sk-upstream", "SPENDGATE_NATS_URL=" + url}, "gateway", "--listen", second,
		"--upstream", "openai="+fake.URL+"/v1", "--journal", filepath.Join(testDir(t), "spendgate-gateway.journal"))
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "in use by another gateway")
	gw.stop(t)
}

// serveForGateway starts spendgate serve on a free port and returns its
// NATS URL and a runner of commands against it that must succeed (their
// stdout, trimmed).
func serveForGateway(t *testing.T) (url string, cli func(args ...string) string) {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	url = "nats://" + listen
	startProc(t, true, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", listen)
	env := []string{"SPENDGATE_NATS_URL=" + url}
	return url, func(args ...string) string {
		t.Helper()
		r := runCLI(t, env, args...)
		require.Equal(t, 0, r.code, "%v: %s %s", args, r.stdout, r.stderr)
		return strings.TrimSpace(r.stdout)
	}
}

// TestGateway_ListenFromItsOwnVariable: the gateway's address comes from
// $SPENDGATE_GATEWAY_LISTEN, so one environment can also hold serve's
// $SPENDGATE_LISTEN (its NATS address); with only $SPENDGATE_LISTEN set,
// as earlier builds read it, the gateway still listens there and warns.
// How it can fail: reading $SPENDGATE_LISTEN first, the first gateway
// tried serve's NATS address (taken) and exited.
func TestGateway_ListenFromItsOwnVariable(t *testing.T) {
	url, _ := serveForGateway(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gw := startProcEnv(t, []string{"SPENDGATE_NATS_URL=" + url, "SPENDGATE_LISTEN=" + strings.TrimPrefix(url, "nats://"),
		"SPENDGATE_GATEWAY_LISTEN=" + addr}, false, "gateway", "--journal", "")
	waitGateway(t, addr)
	require.NotContains(t, gw.out.String(), "SPENDGATE_LISTEN")
	gw.stop(t)

	old := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gw = startProcEnv(t, []string{"SPENDGATE_NATS_URL=" + url, "SPENDGATE_LISTEN=" + old}, false, "gateway", "--journal", "")
	waitGateway(t, old)
	require.Contains(t, gw.out.String(), "set $SPENDGATE_GATEWAY_LISTEN for the gateway instead")
	gw.stop(t)
}

// startGateway starts spendgate gateway on addr with args (the upstream's
// key sk-upstream, the ledger at url) and waits until its /readyz answers.
func startGateway(t *testing.T, url, addr string, args ...string) *proc {
	t.Helper()
	gw := startProcEnv(t, []string{"OPENAI_API_KEY=sk-upstream", "SPENDGATE_NATS_URL=" + url}, false,
		append([]string{"gateway", "--listen", addr}, args...)...)
	waitGateway(t, addr)
	return gw
}

// waitGateway waits until the gateway at addr answers /readyz.
func waitGateway(t *testing.T, addr string) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "the gateway at "+addr+" is ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestGateway_SIGTERMDrains: on SIGTERM the gateway's /readyz answers 503
// draining at once while its listener still answers, a stream in flight
// that ends within --shutdown-timeout runs to its end, and one still
// running at the timeout is cut: it ends in the provider's error event
// gateway_shutdown and is settled with the note
// reservation_gateway_shutdown, never reservation_caller_gone; then the
// gateway exits 0. Before, the listener closed at once (/readyz refused),
// every stream was cut 5 s later as a bare connection drop, and its
// settle blamed the caller.
func TestGateway_SIGTERMDrains(t *testing.T) {
	t.Parallel()
	url, cli := serveForGateway(t)
	fake := httptest.NewServer(fakellm.New("sk-upstream"))
	t.Cleanup(fake.Close)
	cli("pricing", "put", "--model", "gpt-4o-mini", "--input", "0.15", "--output", "0.60")
	cli("budget", "put", "--scope", "team:drain", "--period", "month", "--limit", "5.00", "--unit", "USD")
	secret := cli("keys", "create", "--scope", "team:drain", "--secret-only")
	gwAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gw := startGateway(t, url, gwAddr, "--upstream", "openai="+fake.URL+"/v1", "--shutdown-timeout", "3s")
	base := "http://" + gwAddr

	type stream struct {
		body chan string
	}
	open := func(prompt string) stream {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(
			`{"model":"gpt-4o-mini","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"`+prompt+`"}]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		s := stream{body: make(chan string, 1)}
		go func() {
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				b = append(b, "\nread error: "+err.Error()...)
			}
			s.body <- string(b)
		}()
		return s
	}
	short := open("fake:slow=100ms fake:out=15")
	long := open("fake:slow=100ms fake:out=1000")
	require.NoError(t, gw.cmd.Process.Signal(syscall.SIGTERM))
	testenv.WaitFor(t, 10*time.Second, "/readyz says draining", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "draining")
	})
	body := <-short.body
	require.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "the short stream ran to its end: %s", body)
	body = <-long.body
	require.Contains(t, body, `"code":"gateway_shutdown"`, body)
	require.NotContains(t, body, "read error", "the cut stream ends cleanly, in its error event")
	select {
	case <-gw.done:
		require.NoError(t, gw.err, gw.out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not exit:\n%s", gw.out.String())
	}
	export := cli("audit", "export", "--unverified")
	require.Contains(t, export, "reservation_gateway_shutdown")
	require.NotContains(t, export, "reservation_caller_gone")
}

// TestGateway_DrainAbandonedFlag: a caller that reads a few events of a
// stream and leaves has its call settled from the provider's usage (note
// caller_gone) by a gateway with the default --drain-abandoned, and at
// its whole reservation (note reservation_caller_gone) by one with
// --drain-abandoned 0. How we know it can fail: 0 passed on as it is
// would be the library's default (2m), not "cut at once", and the second
// gateway's call would be settled from its usage too; and a gateway
// without the drain settles the first at its reservation.
func TestGateway_DrainAbandonedFlag(t *testing.T) {
	t.Parallel()
	url, cli := serveForGateway(t)
	fake := httptest.NewServer(fakellm.New("sk-upstream"))
	t.Cleanup(fake.Close)
	cli("pricing", "put", "--model", "gpt-4o-mini", "--input", "0.15", "--output", "0.60")
	budget := func(scope string) events.BudgetView {
		t.Helper()
		var b events.BudgetView
		require.NoError(t, json.Unmarshal([]byte(cli("budget", "get", "--scope", scope, "--period", "month")), &b))
		return b
	}
	// leave sends a stream through the gateway at addr, reads its first
	// three events and leaves; it returns what the call reserved.
	leave := func(addr, secret string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(
			`{"model":"gpt-4o-mini","stream":true,"max_tokens":400,"messages":[{"role":"user","content":"fake:slow=20ms fake:out=40"}]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		br := bufio.NewReader(resp.Body)
		for seen := 0; seen < 3; {
			line, err := br.ReadString('\n')
			require.NoError(t, err)
			if strings.HasPrefix(line, "data:") {
				seen++
			}
		}
		cancel()
		resp.Body.Close()
		amount, _, _ := strings.Cut(resp.Header.Get("X-Spendgate-Reserved"), " ")
		return amount
	}
	for _, tc := range []struct {
		scope, note string
		args        []string
	}{
		{"team:drained", "caller_gone", nil},
		{"team:cut-at-once", "reservation_caller_gone", []string{"--drain-abandoned", "0", "--journal", ""}},
	} {
		cli("budget", "put", "--scope", tc.scope, "--period", "month", "--limit", "5.00", "--unit", "USD")
		secret := cli("keys", "create", "--scope", tc.scope, "--secret-only")
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		gw := startGateway(t, url, addr, append([]string{"--upstream", "openai=" + fake.URL + "/v1"}, tc.args...)...)
		reserved := leave(addr, secret)
		testenv.WaitFor(t, 30*time.Second, tc.scope+": the call is settled", func() bool {
			b := budget(tc.scope)
			return b.Reserved == "0" && b.Spent != "0"
		})
		spent := events.MustMoney(budget(tc.scope).Spent)
		if tc.note == "caller_gone" {
			require.Negative(t, spent.Cmp(events.MustMoney(reserved)), "settled from the usage, under the reservation")
		} else {
			require.Zero(t, spent.Cmp(events.MustMoney(reserved)), "settled at the reservation")
		}
		var row struct {
			SettleNote *string `json:"settle_note"`
		}
		rows := strings.Split(strings.TrimSpace(cli("audit", "export", "--unverified", "--format", "jsonl", "--scope", tc.scope)), "\n")
		require.Len(t, rows, 1)
		require.NoError(t, json.Unmarshal([]byte(rows[0]), &row))
		require.NotNil(t, row.SettleNote)
		require.Equal(t, tc.note, *row.SettleNote)
		gw.stop(t)
	}
}
