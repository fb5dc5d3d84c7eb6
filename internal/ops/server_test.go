package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
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
