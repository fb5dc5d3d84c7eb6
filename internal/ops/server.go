package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of the Server's options.
const (
	// DefaultShutdownTimeout bounds how long Run waits for requests in
	// flight once its context ends.
	DefaultShutdownTimeout = 5 * time.Second
	// ReadHeaderTimeout bounds how long a client may take to send its
	// request headers (slowloris).
	ReadHeaderTimeout = 10 * time.Second
)

// Server is the operator HTTP listener. Make one with New, add readiness
// checks and handlers, then Run it. Handle and AddCheck may also be called
// while it runs.
type Server struct {
	addr string
	mux  *http.ServeMux
	opts options

	mu      sync.Mutex
	checks  []check
	ln      net.Listener
	running bool
	// refused are the Host names refused so far, each logged once.
	refused map[string]bool
	// drains are the OnDrain hooks; draining is set once Run's context
	// ended (/readyz then answers 503).
	drains   []func(context.Context)
	draining bool
}

type check struct {
	name string
	f    func() error
}

// ReadyStatus is the JSON body of /readyz.
type ReadyStatus struct {
	Ready bool `json:"ready"`
	// Checks maps each check's name to "ok" or the reason it failed.
	Checks map[string]string `json:"checks"`
}

// New returns a Server that will listen on addr (host:port; port 0 picks a
// free one) and serve metrics at /metrics (nothing there if metrics is
// nil). It does not bind yet: see Listen and Run. It returns an error if an
// option is invalid.
func New(addr string, metrics http.Handler, opts ...Option) (*Server, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" && net.ParseIP(host) == nil {
		o.hosts[canonicalHost(host)] = true
	}
	s := &Server{addr: addr, mux: http.NewServeMux(), opts: o}
	if metrics != nil {
		s.HandleRestricted("GET /metrics", metrics)
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	return s, nil
}

// Handle registers h for pattern (net/http.ServeMux patterns, such as
// "GET /dashboard/"). It panics if pattern conflicts with one already
// registered, as ServeMux.Handle does.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// HandleRestricted registers h for pattern as Handle does, for a handler
// that answers without authentication (the metrics, the dashboard): it
// answers only a request whose Host is an IP address, localhost (or a name
// under .localhost), the name in the Server's address or one given by
// WithHosts. Any other name is refused 403, and logged once: a browser
// sends the name of the page that made the request, so a web page whose
// name its owner points at 127.0.0.1 (DNS rebinding) could otherwise read
// a listener bound to loopback.
func (s *Server) HandleRestricted(pattern string, h http.Handler) {
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			s.refuse(w, r.Host)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// hostAllowed reports whether a request's Host (name or address, with or
// without a port) is one HandleRestricted answers.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" || net.ParseIP(host) != nil {
		// No Host (HTTP/1.0) or an address: no name a page could
		// have pointed elsewhere.
		return true
	}
	c := canonicalHost(host)
	return c == "localhost" || strings.HasSuffix(c, ".localhost") || s.opts.hosts[c]
}

// maxRefusedLogged bounds the Host names remembered as logged, so that a
// stream of made-up names cannot grow the set.
const maxRefusedLogged = 64

func (s *Server) refuse(w http.ResponseWriter, host string) {
	s.mu.Lock()
	first := !s.refused[host] && len(s.refused) < maxRefusedLogged
	if first {
		if s.refused == nil {
			s.refused = map[string]bool{}
		}
		s.refused[host] = true
	}
	s.mu.Unlock()
	if first {
		s.opts.log.Warn("ops http: refused a request for a host name this listener does not answer to; if it is yours, add it to --http-hosts",
			"host", host)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "spendgate: this listener does not answer to the host name %q: it answers to IP addresses, localhost and the names given with --http-hosts (a web page could point any other name at it)\n", host)
}

// canonicalHost is a host name as compared: lower case, without a
// trailing dot.
func canonicalHost(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// AddCheck adds a readiness check: /readyz answers 200 only while every
// check returns nil. f is called on every /readyz request, possibly
// concurrently; it must be cheap and must not block (read a flag or a
// channel, such as the ledger's Ready channel or the NATS connection's
// status; do not make a round trip). The error's message is shown to the
// caller of /readyz, so it should say what the replica is waiting for.
// With no check at all, /readyz answers 200.
func (s *Server) AddCheck(name string, f func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, check{name: name, f: f})
}

// OnDrain adds a hook that Run calls once its context ends, before it
// stops the listener: f is given a context that ends at the shutdown
// timeout (WithShutdownTimeout), and should return once its work in
// flight has ended, or soon after that context ends, having cut what was
// left. Meanwhile the listener still answers, /readyz with 503
// (draining), so that a load balancer takes the server out of rotation
// while it finishes. The hooks run at once, each in its own goroutine.
func (s *Server) OnDrain(f func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drains = append(s.drains, f)
}

// Draining is the reason /readyz gives, under the check "shutdown", from
// the moment Run's context ends.
const Draining = "draining: the server is shutting down"

// Ready runs the checks and reports the result /readyz would give.
func (s *Server) Ready() ReadyStatus {
	s.mu.Lock()
	checks := append([]check(nil), s.checks...)
	draining := s.draining
	s.mu.Unlock()
	st := ReadyStatus{Ready: !draining, Checks: make(map[string]string, len(checks)+1)}
	if draining {
		st.Checks["shutdown"] = Draining
	}
	for _, c := range checks {
		if err := c.f(); err != nil {
			st.Ready = false
			st.Checks[c.name] = err.Error()
		} else {
			st.Checks[c.name] = "ok"
		}
	}
	return st
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	st := s.Ready()
	body, err := json.Marshal(st)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !st.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(append(body, '\n'))
}

// Listen binds the address, so that a start-up can fail early (before the
// ledger starts) and a test can read Addr. Run calls it if it was not
// called. Errors name the address and the cause: "address already in
// use", "permission denied" (a port below 1024) or the system's error.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return fmt.Errorf("ops: cannot listen on %s: address already in use (another spendgate or another program holds it; choose another address): %w", s.addr, err)
		case errors.Is(err, syscall.EACCES):
			return fmt.Errorf("ops: cannot listen on %s: permission denied (ports below 1024 need privileges): %w", s.addr, err)
		}
		return fmt.Errorf("ops: cannot listen on %s: %w", s.addr, err)
	}
	s.ln = ln
	return nil
}

// Addr returns the address the Server is bound to ("127.0.0.1:43127"), or
// "" before Listen (or Run) has bound it.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Run binds the address if Listen was not called, serves until ctx ends,
// then shuts down gracefully: /readyz answers 503 (Draining) at once, the
// OnDrain hooks run while the listener still answers, up to the shutdown
// timeout (WithShutdownTimeout); then it stops accepting, lets requests in
// flight finish for what is left of the shutdown timeout (at least
// DefaultShutdownTimeout when there were hooks), and returns nil. It
// returns Listen's error if binding fails, an error if the server fails
// while serving, an error if requests were still running at the shutdown
// timeout (they are then cut off), and an error if Run was already called.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("ops: Run called twice")
	}
	s.running = true
	ln := s.ln
	s.mu.Unlock()

	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(s.opts.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.opts.log.Info("ops http listening", "addr", ln.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("ops: serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	deadline := time.Now().Add(s.opts.shutdownTimeout)
	s.mu.Lock()
	s.draining = true
	drains := s.drains
	s.mu.Unlock()
	if len(drains) > 0 {
		s.opts.log.Info("ops http draining", "timeout", s.opts.shutdownTimeout.String())
		dctx, dcancel := context.WithDeadline(context.Background(), deadline)
		var wg sync.WaitGroup
		for _, f := range drains {
			wg.Go(func() { f(dctx) })
		}
		wg.Wait()
		dcancel()
		// What the hooks left (the HTTP API's requests, say) gets at
		// least the default's time.
		deadline = later(deadline, time.Now().Add(DefaultShutdownTimeout))
	}
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-served // http.ErrServerClosed
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("ops: requests still running after %s at shutdown: %w", s.opts.shutdownTimeout, err)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
