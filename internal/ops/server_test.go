package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/ops"
)

// start runs srv on 127.0.0.1:0 until the test ends and returns its base URL.
func start(t *testing.T, srv *ops.Server) (string, <-chan error) {
	t.Helper()
	require.NoError(t, srv.Listen())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return "http://" + srv.Addr(), done
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

func TestServer_Endpoints(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{Version: "v0", Commit: "c0"})
	m.Admits.WithLabelValues(metrics.ResultDenied, "limit_reached").Inc()
	srv, err := ops.New("127.0.0.1:0", m.Handler())
	require.NoError(t, err)
	require.Empty(t, srv.Addr())
	srv.Handle("GET /dashboard/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "dash") }))
	base, _ := start(t, srv)

	code, body, _ := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	code, body, hdr := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, metrics.ContentType, hdr.Get("Content-Type"))
	require.Contains(t, body, `spendgate_admits_total{reason="limit_reached",result="denied"} 1`+"\n")

	code, body, _ = get(t, base+"/dashboard/x")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "dash", body)

	code, _, _ = get(t, base+"/nothing")
	require.Equal(t, http.StatusNotFound, code)

	resp, err := http.Post(base+"/healthz", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestServer_Readyz(t *testing.T) {
	srv, err := ops.New("127.0.0.1:0", nil)
	require.NoError(t, err)
	var folded, connected atomic.Bool
	srv.AddCheck("fold", func() error {
		if !folded.Load() {
			return errors.New("folding the ledger stream")
		}
		return nil
	})
	srv.AddCheck("nats", func() error {
		if !connected.Load() {
			return errors.New("not connected to NATS")
		}
		return nil
	})
	base, _ := start(t, srv)

	readyz := func() (int, ops.ReadyStatus) {
		code, body, hdr := get(t, base+"/readyz")
		require.Equal(t, "application/json", hdr.Get("Content-Type"))
		var st ops.ReadyStatus
		require.NoError(t, json.Unmarshal([]byte(body), &st), body)
		return code, st
	}
	code, st := readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, ops.ReadyStatus{Ready: false, Checks: map[string]string{"fold": "folding the ledger stream", "nats": "not connected to NATS"}}, st)

	connected.Store(true)
	code, st = readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, map[string]string{"fold": "folding the ledger stream", "nats": "ok"}, st.Checks)

	folded.Store(true)
	code, st = readyz()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, ops.ReadyStatus{Ready: true, Checks: map[string]string{"fold": "ok", "nats": "ok"}}, st)

	// Liveness does not depend on readiness.
	connected.Store(false)
	code, _, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
}

func TestServer_RunAddressInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	srv, err := ops.New(busy.Addr().String(), nil)
	require.NoError(t, err)
	err = srv.Run(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), "ops: cannot listen on "+busy.Addr().String()+": address already in use")

	srv, err = ops.New("127.0.0.1:notaport", nil)
	require.NoError(t, err)
	require.ErrorContains(t, srv.Listen(), "ops: cannot listen on 127.0.0.1:notaport")
}

// TestServer_RunGraceful cancels Run while a request is in flight: the
// request must still complete, new connections must be refused, and Run
// must return nil once the request is done. It fails if shutdown cuts off
// requests in flight or returns before they finish.
func TestServer_RunGraceful(t *testing.T) {
	srv, err := ops.New("127.0.0.1:0", nil, ops.WithShutdownTimeout(10*time.Second))
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	srv.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	require.NoError(t, srv.Listen())
	addr := srv.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()

	type result struct {
		body string
		err  error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			slow <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		slow <- result{string(b), err}
	}()
	<-entered
	cancel()
	// Wait (bounded) until the listener is closed: new connections fail.
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case err := <-ran:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}
	close(release)
	r := <-slow
	require.NoError(t, r.err)
	require.Equal(t, "done", r.body)
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestNew_Options(t *testing.T) {
	_, err := ops.New(":0", nil, ops.WithShutdownTimeout(0))
	require.Error(t, err)
	_, err = ops.New(":0", nil, ops.WithLogger(nil))
	require.Error(t, err)
}

// TestServer_RestrictedHosts: /metrics and a HandleRestricted handler
// answer a request naming an IP address, localhost or a name given to
// WithHosts (in any case, with a trailing dot), and refuse 403 one naming
// any other host: what a browser sends for a page whose name was pointed at
// 127.0.0.1 (DNS rebinding). /healthz, /readyz and Handle's handlers (which
// authenticate their callers) answer any. How it can fail: without the
// check every request below is 200.
func TestServer_RestrictedHosts(t *testing.T) {
	m := metrics.New(metrics.BuildInfo{Version: "v0", Commit: "c0"})
	var logged bytes.Buffer
	srv, err := ops.New("127.0.0.1:0", m.Handler(), ops.WithHosts("spendgate-1.internal", " "),
		ops.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	require.NoError(t, err)
	srv.HandleRestricted("GET /dashboard/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "dash") }))
	srv.Handle("GET /v1/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "api") }))
	base, _ := start(t, srv)
	port := strings.TrimPrefix(base, "http://127.0.0.1:")

	getHost := func(path, host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"127.0.0.1:" + port, "[::1]:" + port, "10.0.0.7", "localhost:" + port, "LOCALHOST", "app.localhost",
		"spendgate-1.internal:" + port, "SpendGate-1.Internal.", "spendgate-1.internal"} {
		for _, path := range []string{"/metrics", "/dashboard/"} {
			code, body := getHost(path, host)
			require.Equal(t, http.StatusOK, code, "%s %s: %s", host, path, body)
		}
	}
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "spendgate-1.internal.attacker.example", "localhost.attacker.example"} {
		for _, path := range []string{"/metrics", "/dashboard/"} {
			code, body := getHost(path, host)
			require.Equal(t, http.StatusForbidden, code, "%s %s: %s", host, path, body)
			require.Contains(t, body, "--http-hosts")
			require.NotContains(t, body, "spendgate_", "nothing of the metrics")
		}
		for _, path := range []string{"/healthz", "/readyz", "/v1/x"} {
			code, body := getHost(path, host)
			require.Equal(t, http.StatusOK, code, "%s %s: %s", host, path, body)
		}
	}
	// Each refused name is logged once.
	require.Equal(t, 1, strings.Count(logged.String(), `host=attacker.example:`+port))

	_, err = ops.New(":0", nil, ops.WithHosts("host:80"))
	require.ErrorContains(t, err, "not a host name")
}

// TestServer_DrainHooks: once Run's context ends, /readyz answers 503
// with the check "shutdown" at once while the listener still serves, the
// OnDrain hooks run, and only when they return does the listener stop;
// a hook is given a context that ends at the shutdown timeout. Without
// the drain phase the listener closes at once (/readyz is refused, not
// 503) and a hook never runs.
func TestServer_DrainHooks(t *testing.T) {
	srv, err := ops.New("127.0.0.1:0", nil, ops.WithShutdownTimeout(300*time.Millisecond))
	require.NoError(t, err)
	srv.Handle("GET /work", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") }))
	entered, release := make(chan struct{}), make(chan struct{})
	var hookEnded atomic.Bool
	srv.OnDrain(func(ctx context.Context) {
		close(entered)
		<-release
		<-ctx.Done() // ends at the shutdown timeout
		hookEnded.Store(true)
	})
	require.NoError(t, srv.Listen())
	base := "http://" + srv.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	code, _, _ := get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code)

	cancel()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain hook did not run")
	}
	code, body, _ := get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	var st ops.ReadyStatus
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, ops.Draining, st.Checks["shutdown"])
	code, body, _ = get(t, base+"/work")
	require.Equal(t, http.StatusOK, code, "the listener serves while draining")
	require.Equal(t, "served", body)
	close(release)
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its hook")
	}
	require.True(t, hookEnded.Load(), "the hook's context ended at the shutdown timeout")
	_, err = net.DialTimeout("tcp", srv.Addr(), time.Second)
	require.Error(t, err, "the listener is closed after the hooks")
}
