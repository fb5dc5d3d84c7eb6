package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/internal/config"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/internal/httpapi"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/ops"
)

var gatewayCommand = command{
	name:     "spendgate gateway",
	synopsis: "[--upstream openai=URL|anthropic=URL ...] [--listen 127.0.0.1:8080] [flags]",
	about: `Runs an OpenAI- and Anthropic-compatible proxy that caps every call with
spendgate budgets: point an SDK's base URL at it (http://HOST:PORT/v1 for
OpenAI's, http://HOST:PORT for Anthropic's) and give it a key made with
spendgate keys create. Each call is priced from the pricing table, admitted
against the key's scopes, and its end user's and run's when the key has
those kinds (429 when a budget denies it, 503 when the ledger does not
answer), forwarded with the upstream's own key, and settled with the usage
the provider reports. GET /v1/models lists the priced models and GET /v1/key
a key's budgets (with X-Spendgate-End-User and X-Spendgate-Run, those a call
for them is charged against). The same listener serves the HTTP API
(POST /spendgate/<endpoint>, keys with --access), /metrics, /healthz and
/readyz; without --upstream it serves the HTTP API alone.

--upstream KIND=URL[,key-env=VAR][,models=PREFIX|...] takes the provider's
base URL as its SDK would (https://api.openai.com/v1, with /v1, for OpenAI;
https://api.anthropic.com for Anthropic) and reads the upstream's key from
$OPENAI_API_KEY or $ANTHROPIC_API_KEY (or VAR).`,
}

// journalOption is the gateway option of --journal path ("": none).
func journalOption(path string) []gateway.Option {
	if path == "" {
		return nil
	}
	return []gateway.Option{gateway.WithJournal(path)}
}

// gatewayCmd is spendgate gateway.
func gatewayCmd(args []string) int {
	var c clientFlags
	fs := newFlagSet("gateway")
	c.register(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address of the proxy, the HTTP API and /metrics")
	httpHosts := fs.String("http-hosts", "", "host names, comma-separated, that /metrics answers to besides IP addresses, localhost and the name in --listen (the proxy and the HTTP API answer to any: they take a key); a request naming any other is refused 403")
	var ups, maxOuts multiFlag
	fs.Var(&ups, "upstream", "an upstream: openai=URL or anthropic=URL, with ,key-env=VAR and ,models=PREFIX|... (repeatable)")
	fs.Var(&maxOuts, "max-output", "MODEL=N or PREFIX*=N: the output a call of that model naming no max_tokens reserves (repeatable)")
	defOut := fs.Int64("max-output-tokens", gateway.DefaultMaxOutputTokens, "the output a call naming no max_tokens reserves, for models no --max-output names")
	imageTokens := fs.Int64("image-tokens", gateway.ImageTokens, "the input one image or file counts, inline or by reference (a URL, a file_id): raise it for models that bill an image above it (gpt-4o-mini: up to 25501)")
	keyCache := fs.Duration("key-cache", gateway.DefaultKeyCache, "how long a key is trusted without asking the ledger: a disabled or rotated key is refused at most this long after")
	authFailures := fs.Int("auth-failures", gateway.DefaultAuthFailures, "unknown API keys a second one client address may present (a burst of twice this): past it, a key not cached as valid is refused 429 without a ledger lookup; 0 for no limit")
	upTimeout := fs.Duration("upstream-timeout", gateway.DefaultUpstreamTimeout, "bound of the wait for the provider: its response headers, then a plain answer's end or each gap between a stream's chunks; a plain call's reservation has a TTL of this plus 1m")
	maxStream := fs.Duration("max-stream", gateway.DefaultMaxStream, "bound of a streamed call as a whole (at least --upstream-timeout): a stream still running then is cut as a silent one is; a streamed call's reservation has a TTL of this plus 1m")
	drainAbandoned := fs.Duration("drain-abandoned", gateway.DefaultDrainAbandoned, "how long the gateway keeps reading the answer of a call whose caller left before its end (a chat's stop, a client timeout), passing nothing on, for the usage the provider reports: settled from it within this (settle note caller_gone), else cut then and charged the whole reservation (reservation_caller_gone); 0 cuts at once. The provider generates, and bills, the rest of the answer meanwhile")
	shutdownTimeout := fs.Duration("shutdown-timeout", defaultGatewayShutdown, "on SIGTERM or SIGINT, how long the calls in flight may run to their end while /readyz answers 503 and new calls are refused 503 gateway_draining; the calls still running then are cut (settle note reservation_gateway_shutdown)")
	ledgerTimeout := fs.Duration("ledger-timeout", time.Second, "bound of one attempt of a ledger request (key lookup, admit, void, settle; 2 attempts each): a call the ledger does not answer fails closed with 503 after up to 4x this (admit, then its void), 2x for a key not cached")
	maxBody := fs.Int64("max-body", gateway.DefaultMaxBody, "largest request body, in bytes")
	maxBodies := fs.Int64("max-bodies-in-flight", gateway.DefaultMaxBodiesInFlight, "bytes of request bodies held at once (at least --max-body); a call past it is refused 503 gateway_busy before its body is read")
	settleAfter := fs.Bool("settle-after-reply", false, "settle a call after its answer went to the caller (one ledger round trip less per call; the reservation holds the call's maximum until the settle lands)")
	httpAPI := fs.Bool("http-api", true, "serve the HTTP API (POST /spendgate/<endpoint>) to keys made with --access")
	journal := fs.String("journal", "spendgate-gateway.journal", "file of the calls in flight and the settles not landed yet: a gateway killed mid-call and started again on it settles them (at the whole reservation when nothing better is known); \"\" for none, one file per gateway")
	config.AddFileFlag(fs)
	var logging config.Logging
	logging.AddFlags(fs)
	// The settings the gateway takes from the environment (each named in
	// its flag's --help); every other one comes from a flag or --config.
	env := config.EnvFlags(fs, "listen", "nats-url")
	// --listen is an HTTP address here and serve's NATS address there, so
	// one environment holds both: $SPENDGATE_GATEWAY_LISTEN is the
	// gateway's. $SPENDGATE_LISTEN, which earlier builds read here, is
	// still read when that is unset, with a warning (below).
	env.As(fs, "listen", gatewayListenEnv)
	if code, ok := gatewayCommand.parse(fs, args); !ok {
		return code
	}
	oldListen := os.Getenv(gatewayListenEnv) == "" && os.Getenv(config.EnvName("listen")) != "" && !visited(fs, "listen")
	if oldListen {
		env.As(fs, "listen", config.EnvName("listen"))
	}
	if err := config.Apply(fs, env); err != nil {
		return gatewayCommand.usageError(fs, err.Error())
	}
	cfg := gateway.Config{DefaultMaxOutput: *defOut, ImageTokens: *imageTokens, KeyCache: *keyCache, UpstreamTimeout: *upTimeout, MaxStream: *maxStream, MaxBody: *maxBody,
		MaxBodiesInFlight: max(*maxBodies, *maxBody), MaxOutputTokens: map[string]int64{}, SettleAfterReply: *settleAfter}
	switch {
	case *drainAbandoned < 0:
		return gatewayCommand.usageError(fs, "--drain-abandoned must be at least 0 (0: cut at once)")
	case *drainAbandoned == 0:
		cfg.DrainAbandoned = -1
	default:
		cfg.DrainAbandoned = *drainAbandoned
	}
	switch {
	case *authFailures < 0:
		return gatewayCommand.usageError(fs, "--auth-failures must be at least 0 (0: no limit)")
	case *authFailures == 0:
		cfg.AuthFailures = -1
	default:
		cfg.AuthFailures = *authFailures
	}
	for _, spec := range ups {
		u, err := gateway.ParseUpstream(spec, os.Getenv)
		if err != nil {
			return gatewayCommand.usageError(fs, "--upstream: "+err.Error())
		}
		cfg.Upstreams = append(cfg.Upstreams, u)
	}
	if len(cfg.Upstreams) == 0 && !*httpAPI {
		return gatewayCommand.usageError(fs, "--upstream is required (e.g. --upstream openai=https://api.openai.com/v1), unless the gateway serves the HTTP API alone")
	}
	for _, m := range maxOuts {
		model, n, ok := strings.Cut(m, "=")
		v, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil {
			return gatewayCommand.usageError(fs, fmt.Sprintf("--max-output %q: want MODEL=N", m))
		}
		cfg.MaxOutputTokens[model] = v
	}
	if *shutdownTimeout <= 0 {
		return gatewayCommand.usageError(fs, "--shutdown-timeout must be positive")
	}
	if *ledgerTimeout <= 0 || *ledgerTimeout > client.MaxTimeout {
		return gatewayCommand.usageError(fs, fmt.Sprintf("--ledger-timeout must be in (0, %s]", client.MaxTimeout))
	}
	log := logging.New(os.Stderr)
	if oldListen {
		log.Warn("the gateway's --listen came from $SPENDGATE_LISTEN, which is also serve's NATS address; set $"+gatewayListenEnv+" for the gateway instead (a later release reads only that)",
			"listen", *listen)
	}

	reg := metrics.NewRegistry()
	srv, err := ops.New(*listen, metrics.Handler(reg), ops.WithLogger(log), ops.WithHosts(strings.Split(*httpHosts, ",")...),
		ops.WithShutdownTimeout(*shutdownTimeout))
	if err == nil {
		err = srv.Listen()
	}
	if err != nil {
		log.Error("cannot serve --listen", "err", err)
		return exitError
	}
	nc, err := c.conn.Connect("spendgate-gateway", nats.MaxReconnects(-1))
	if err != nil {
		log.Error("cannot connect to NATS", "err", err)
		return exitError
	}
	defer nc.Close()
	clients, err := gateway.NewClientSet(nc, c.prefix, client.WithTimeout(*ledgerTimeout), client.WithRetries(2),
		client.WithBriefReplies(), client.WithLogger(log))
	if err != nil {
		log.Error("gateway", "err", err)
		return exitError
	}
	root, _ := clients.For("")
	keys := gateway.NewKeys(root, *keyCache)
	// The proxy and the HTTP API share the limit of unknown keys.
	keys.LimitUnknown(cfg.AuthFailures, time.Now)
	// Without an upstream the listener serves the HTTP API alone.
	wait := func() {}
	if len(cfg.Upstreams) > 0 {
		opts := []gateway.Option{gateway.WithLogger(log), gateway.WithMetrics(gateway.NewMetrics(reg))}
		g, err := gateway.New(clients, keys, cfg, append(opts, journalOption(*journal)...)...)
		if err != nil && *journal != "" && !visited(fs, "journal") {
			// The default journal, in a working directory it cannot use
			// (read-only, or another gateway's): serving without it beats
			// not serving, loudly.
			log.Warn("gateway: running without a journal: a gateway killed mid-call leaves its calls to the sweeper; give --journal a file of its own",
				"journal", *journal, "err", err)
			g, err = gateway.New(clients, keys, cfg, opts...)
		}
		if err != nil {
			return gatewayCommand.usageError(fs, err.Error())
		}
		g.Register(srv)
		// On SIGTERM the listener stays up, /readyz answering 503, until
		// the calls in flight end or --shutdown-timeout cuts them.
		srv.OnDrain(g.Drain)
		wait = func() {
			g.Wait()
			if err := g.Close(); err != nil {
				log.Error("gateway: closing the journal", "err", err)
			}
		}
		// What an earlier run left open is closed beside the new calls.
		go func() {
			closed, left := g.RecoverJournal(context.Background())
			if closed+left > 0 {
				log.Info("gateway: journal recovered", "closed", closed, "left_for_next_start", left)
			}
		}()
	}
	if *httpAPI {
		api, err := httpapi.New(nc, c.prefix, keys, httpapi.WithLogger(log), httpapi.WithMetrics(reg))
		if err != nil {
			log.Error("http api", "err", err)
			return exitError
		}
		api.Register(srv)
	}
	srv.AddCheck("nats", func() error {
		if !nc.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return nil
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	names := []string{}
	for _, u := range cfg.Upstreams {
		names = append(names, u.Kind+"="+u.BaseURL)
	}
	log.Info("gateway listening", "addr", srv.Addr(), "upstreams", strings.Join(names, " "), "nats", nc.ConnectedUrlRedacted())
	err = srv.Run(ctx)
	wait()
	if err != nil {
		log.Error("gateway", "err", err)
		return exitError
	}
	return exitOK
}

// defaultGatewayShutdown is gateway --shutdown-timeout's default: streams
// of long generations run for minutes.
const defaultGatewayShutdown = 2 * time.Minute

// gatewayListenEnv is the variable of gateway --listen.
const gatewayListenEnv = config.EnvPrefix + "GATEWAY_LISTEN"
