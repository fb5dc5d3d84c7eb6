package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/config"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/health"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/ops"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/internal/secret"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/sweep"
)

var serveCommand = command{
	name:     "spendgate serve",
	synopsis: "[--data-dir DIR] [--listen HOST:PORT] [--nats-url URL] [flags]",
	about: `Runs a spendgate replica. By default it embeds a NATS server with JetStream
file storage in --data-dir, listening for clients on --listen; the data dir is
locked, so a second serve on it is refused. With --nats-url it joins an
existing NATS server or cluster instead (run as many replicas as you like).`,
}

func serve(args []string) int {
	fs := newFlagSet("serve")
	dataDir := fs.String("data-dir", "./spendgate-data", "JetStream file storage of the embedded server")
	listen := fs.String("listen", "127.0.0.1:4222", "client address of the embedded server")
	insecureListen := fs.Bool("insecure-listen", false, "let the embedded server, which has no authentication, listen on an address other machines reach (refused otherwise)")
	var conn natsconn.Options
	registerConnection(fs, &conn)
	// serve embeds a server unless told otherwise: NATS_URL, which the nats
	// CLI and other clients read, does not count, only --nats-url and
	// $SPENDGATE_NATS_URL do.
	conn.URL = os.Getenv(natsconn.EnvSpendgateURL)
	if f := fs.Lookup("nats-url"); f != nil {
		f.Usage = "join this NATS server or cluster (comma-separated URLs) instead of embedding one ($" +
			natsconn.EnvSpendgateURL + "; serve does not read $NATS_URL; empty: embed a server)"
		f.DefValue = conn.URL
	}
	natsURL := &conn.URL
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	prefix := fs.String("prefix", streams.DefaultPrefix, "service subject prefix")
	replicas := fs.Int("replicas", 0, "ledger stream replicas (default 1 embedded, 3 with --nats-url)")
	lanes := fs.Int("lanes", streams.DefaultLanes, "commit lanes of a new ledger stream (fixed when the stream is created; must match an existing one)")
	syncAlways := fs.Bool("sync-always", true, "embedded server: fsync every write before acknowledging it, so a power loss loses nothing acknowledged (false: fsync every 2 minutes, faster; see docs/operator.md, Durability)")
	defTTL := fs.Duration("default-ttl", 5*time.Minute, "reservation TTL when the request names none")
	maxTTL := fs.Duration("max-ttl", 24*time.Hour, "largest TTL a request may ask for")
	sweepEvery := fs.Duration("sweep-interval", sweep.DefaultInterval, "how often this replica releases expired reservations (each pass releases everything due, in group commits)")
	retireIdle := fs.String("retire-idle", "", "retire the budgets created from a kind's default once idle this long: KIND=DURATION, comma-separated (run=24h: a run's budget with nothing open and no call for 24 hours is retired, as spendgate budget retire does; at least 1m each; empty: never)")
	verbose := fs.Bool("v", false, "log debug output, the embedded server's included (--log-level debug)")
	httpAddr := fs.String("http", "", "serve /metrics, /healthz, /readyz and the spend dashboard (/dashboard/) on this address (e.g. 127.0.0.1:8081; the gateway listens on 8080 by default); off when empty")
	httpHosts := fs.String("http-hosts", "", "host names, comma-separated, that /metrics and the dashboard answer to besides IP addresses, localhost and the name in --http (a request naming any other is refused 403, so that no web page can read them by pointing its own name at this machine)")
	dashboardOn := fs.Bool("dashboard", true, "serve the spend dashboard (/dashboard/) on --http; false: only /metrics, /healthz and /readyz there")
	metricsBudgets := fs.Int("metrics-budgets", metrics.DefaultBudgetLimit, "per-budget gauges for at most this many budgets, the nearest their limit first")
	feedOn := fs.Bool("feed", false, "relay every ledger event to the live event feed (stream <bucket>_feed, subjects <prefix>feed.v1.>); off by default: it stores each event a second time, and turning it on later back-fills from the ledger's start")
	feedMaxAge := fs.Duration("feed-max-age", streams.DefaultFeedMaxAge, "with --feed: how long the feed keeps each message, so how long a consumer may be away and resume without missing an event (0: keep every message; give every relaying replica the same value)")
	reportsOn := fs.Bool("reports", true, "keep the spend report (the report endpoint, spendgate report): sums per hour, scope and metadata value, kept as the ledger folds and saved in its own snapshots in the snapshot bucket; false answers report_unavailable")
	denialsOn := fs.Bool("denial-records", true, "record every admit this replica denies on the denial stream (<bucket>_denials, subjects <prefix>denial.v1.>), off the request path, and every check or shadow answer, so spend reports count denials and shadow decisions; false records none")
	denialMaxAge := fs.Duration("denial-max-age", streams.DefaultDenialMaxAge, "how long the denial stream keeps a denial record, so how far back reports count denials (give every replica the same value)")
	snapRevisions := fs.Uint64("snapshot-revisions", ledger.DefaultSnapshotRevisions, "write a snapshot of the book once the stream has moved this many revisions past the newest one (0: never; spendgate snapshot writes one on demand)")
	snapInterval := fs.Duration("snapshot-interval", ledger.DefaultSnapshotInterval, "write a snapshot this long after the newest one if the stream moved")
	trimmable := fs.Bool("trimmable", false, "create the ledger stream so that spendgate audit trim may drop archived history (only when the stream is created)")
	readyTimeout := fs.Duration("ready-timeout", time.Minute, "how long the replica may take to fold the ledger stream at start")
	readyMaxDelay := fs.Duration("ready-max-delay", health.DefaultMaxDelay, "/readyz fails while a ledger revision the stream's leader reported has waited longer than this unfolded (the follower is behind or cannot read its copy), and while the stream has no leader")
	maxInflight := fs.Int("max-inflight", service.MaxInFlight, "requests this replica handles at once; beyond it callers get ledger_busy at once")
	tenantFlags := addTenantLimitFlags(fs)
	signingKey := fs.String("signing-key", "", "nkey seed file that signs this replica's revisions (or the seed itself in $"+envSigningSeed+"; default <data-dir>/"+signingKeyFile+", created on first start: replicas started from one data dir share it); re-read on SIGHUP")
	trustedKeys := fs.String("trusted-keys", "", "this replica's own trusted keys, merged into the ledger's at start and on SIGHUP: keys or files of keys, comma-separated (default with the embedded server <data-dir>/"+trustedKeysFile+", created on first start; with --nats-url none: the ledger's trusted keys are followed, the first written trusted on first use)")
	config.AddFileFlag(fs)
	var logging config.Logging
	logging.AddFlags(fs)
	// The settings serve takes from the environment, each named in its
	// flag's --help; every other one comes from a flag or --config (a
	// SPENDGATE_* variable meant for something else never acts on serve).
	env := config.EnvFlags(fs, serveEnv...)
	if code, ok := serveCommand.parse(fs, args); !ok {
		return code
	}
	if err := config.Apply(fs, env); err != nil {
		return serveCommand.usageError(fs, err.Error())
	}
	if *maxInflight < 1 {
		return serveCommand.usageError(fs, "--max-inflight must be at least 1")
	}
	tenantLimits, denialMaxBytes, err := tenantFlags.limits()
	if err != nil {
		return serveCommand.usageError(fs, err.Error())
	}
	// The tenants with limits of their own: read now, and again on SIGHUP.
	var tenantOwn *service.TenantTable
	if *tenantFlags.own != "" {
		own, err := readTenantLimits(*tenantFlags.own)
		if err != nil {
			return serveCommand.usageError(fs, err.Error())
		}
		tenantOwn = service.NewTenantTable(own)
	}
	if *snapRevisions > 0 && (*snapInterval < time.Second || *snapInterval > 24*time.Hour) {
		return serveCommand.usageError(fs, "--snapshot-interval must be 1s..24h")
	}
	if *feedMaxAge < 0 || (*feedMaxAge > 0 && *feedMaxAge < time.Minute) {
		return serveCommand.usageError(fs, "--feed-max-age must be 0 (keep every message) or at least 1m")
	}
	if *denialMaxAge < time.Minute {
		return serveCommand.usageError(fs, "--denial-max-age must be at least 1m")
	}
	if *sweepEvery <= 0 {
		return serveCommand.usageError(fs, "--sweep-interval must be positive")
	}
	idleRules, err := parseRetireIdle(*retireIdle)
	if err != nil {
		return serveCommand.usageError(fs, err.Error())
	}
	if *readyMaxDelay <= 0 {
		return serveCommand.usageError(fs, "--ready-max-delay must be positive")
	}
	if *readyTimeout <= 0 {
		return serveCommand.usageError(fs, "--ready-timeout must be positive (how long the fold of the ledger stream at start may take)")
	}
	if *maxTTL < events.MinTTL || *maxTTL > events.MaxTTL {
		return serveCommand.usageError(fs, fmt.Sprintf("--max-ttl %v must be %v..%v", *maxTTL, events.MinTTL, events.MaxTTL))
	}
	if *defTTL < events.MinTTL || *defTTL > *maxTTL {
		return serveCommand.usageError(fs, fmt.Sprintf("--default-ttl %v must be %v..%v (--max-ttl)", *defTTL, events.MinTTL, *maxTTL))
	}
	if *metricsBudgets < 0 {
		return serveCommand.usageError(fs, "--metrics-budgets must not be negative (0: no per-budget gauges)")
	}
	if *lanes < 1 || *lanes > streams.MaxLanes {
		return serveCommand.usageError(fs, fmt.Sprintf("--lanes must be 1..%d", streams.MaxLanes))
	}
	// --sync-always is honoured or refused, never ignored: given with
	// --nats-url (by flag, environment or file, either value) it is refused.
	if *natsURL != "" && visited(fs, "sync-always") {
		return serveCommand.usageError(fs, "--sync-always applies to the embedded server, but a NATS URL is set ("+*natsURL+
			", by --nats-url, $"+natsconn.EnvSpendgateURL+" or --config), so serve would join that server: drop --sync-always, "+
			"and set sync_interval in that server's configuration; or unset the URL to embed a server")
	}
	// --listen is refused the same way: it is the embedded server's
	// address, and a replica that joins a server listens on nothing, so
	// beside a NATS URL it would be ignored. The URL often comes from
	// $SPENDGATE_NATS_URL, exported for the CLI, so the message shows it.
	if *natsURL != "" && visited(fs, "listen") {
		return serveCommand.usageError(fs, "--listen is the embedded server's address, but a NATS URL is set ("+*natsURL+
			", by --nats-url, $"+natsconn.EnvSpendgateURL+" or --config), so serve would join that server and listen on nothing; drop one of the two")
	}
	if *httpAddr == "" && visited(fs, "dashboard") {
		return serveCommand.usageError(fs, "--dashboard applies to the --http listener, which is off: give --http HOST:PORT too")
	}
	if *natsURL != "" && visited(fs, "insecure-listen") {
		return serveCommand.usageError(fs, "--insecure-listen applies to the embedded server's --listen, but a NATS URL is set ("+*natsURL+"); drop one of the two")
	}
	// The embedded server has no authentication: on an address other
	// machines reach, whoever reaches it could define budgets, create
	// gateway keys and delete the ledger stream. As ssh refuses a key file
	// others may read, serve refuses that unless told in so many words.
	exposed := *natsURL == "" && reachableByOthers(*listen)
	if exposed && !*insecureListen {
		return serveCommand.usageError(fs, "--listen "+*listen+" is reachable from other machines, and the embedded server has no authentication: "+
			"whoever reaches it could define budgets, create gateway keys and delete the ledger. Listen on 127.0.0.1, "+
			"or run nats-server with the roles spendgate roles prints and join it with --nats-url (docs/security.md); "+
			"on a network you trust, pass --insecure-listen")
	}
	if *verbose {
		logging.Level = slog.LevelDebug
	}
	// No log line shows a seed, whatever an error quotes.
	stderr := secret.Writer(os.Stderr)
	log := logging.New(stderr)
	for _, v := range env.Ignored(fs) {
		log.Warn("environment variable not read: serve takes this setting from its flag or --config only", "var", v)
	}
	if tenantOwn != nil {
		log.Info("tenants with limits of their own", "file", *tenantFlags.own, "tenants", tenantOwn.Len())
	}

	// The operator's HTTP view binds first, so a busy port fails at once.
	m := metrics.New(metrics.BuildInfo{Version: buildVersion(), Commit: buildCommit()})
	var started atomic.Bool
	var opsSrv *ops.Server
	if *httpAddr != "" {
		var err error
		if opsSrv, err = ops.New(*httpAddr, m.Handler(), ops.WithLogger(log), ops.WithHosts(strings.Split(*httpHosts, ",")...)); err == nil {
			err = opsSrv.Listen()
		}
		if err != nil {
			log.Error("cannot serve --http", "err", err)
			return 1
		}
		opsSrv.AddCheck("ledger", func() error {
			if !started.Load() {
				return errors.New("folding the ledger stream")
			}
			return nil
		})
	}

	url := *natsURL
	var connOpts []nats.Option
	if url == "" {
		// The server's own log: warnings and errors, everything with -v.
		srvLog := log
		if logging.Level > slog.LevelDebug {
			warn := logging
			warn.Level = max(logging.Level, slog.LevelWarn)
			srvLog = warn.New(stderr)
		}
		srv, err := embedded.Start(*dataDir,
			embedded.WithListen(*listen),
			embedded.WithServerName("spendgate"),
			embedded.WithSyncAlways(*syncAlways),
			embedded.WithLogger(srvLog))
		if err != nil {
			msg := "cannot start the embedded NATS server"
			if errors.Is(err, syscall.EADDRINUSE) {
				msg += ": another program holds the address; stop it, or choose another with --listen " +
					"(and give the other commands the same address with --nats-url or $NATS_URL)"
			}
			log.Error(msg, "err", err)
			return 1
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
		// The replica talks to its own embedded server in process (no TCP
		// loopback): a compare-and-set round trip is roughly half as long,
		// and a hot budget commits that much more often. Callers still
		// connect over TCP at url.
		connOpts = append(connOpts, nats.InProcessServer(srv))
		log.Info("embedded NATS server with JetStream", "url", url, "data_dir", *dataDir, "sync_always", *syncAlways)
		if exposed {
			log.Warn("the embedded NATS server has no authentication and listens where other machines reach it (--insecure-listen): "+
				"whoever reaches it can define budgets, create gateway keys and delete the ledger", "listen", *listen)
		}
		if *replicas == 0 {
			*replicas = 1
		}
	} else if *replicas == 0 {
		*replicas = 3
	}

	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: *prefix, Replicas: *replicas, Lanes: *lanes, Trimmable: *trimmable})
	if err != nil {
		log.Error("config", "err", err)
		return 1
	}
	// Two connections: the ledger's (its commits, its fold, the streams)
	// and the endpoints' (callers' requests and answers), so that no
	// commit waits on the connection's lock behind callers' traffic
	// (replica.Config.ServiceConn).
	if len(connOpts) == 0 {
		conn.Log = log
		log.Info("connecting", "nats", conn.Describe())
	}
	dial := func(name string) (*nats.Conn, <-chan struct{}, error) {
		closed := make(chan struct{})
		onClosed := nats.ClosedHandler(func(*nats.Conn) { close(closed) })
		if len(connOpts) > 0 { // the embedded server, in process
			nc, err := nats.Connect(url, append(connOpts[:len(connOpts):len(connOpts)], nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond), onClosed)...)
			return nc, closed, err
		}
		nc, err := conn.Connect(name, onClosed)
		return nc, closed, err
	}
	nc, closed, err := dial("spendgate")
	if err != nil {
		log.Error("connect", "err", err)
		return 1
	}
	defer nc.Close()
	snc, sclosed, err := dial("spendgate-endpoints")
	if err != nil {
		log.Error("connect", "err", err)
		return 1
	}
	defer snc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("jetstream", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	keys, err := loadReplicaKeys(ctx, log, js, layout, *dataDir, *signingKey, *trustedKeys, *natsURL == "", conn.InsecureKeyPermissions)
	if err != nil {
		log.Error("signing keys", "err", err)
		return 1
	}
	opsDone := make(chan error, 1)
	if opsSrv != nil {
		opsSrv.AddCheck("nats", func() error {
			for _, c := range []*nats.Conn{nc, snc} {
				if st := c.Status(); st != nats.CONNECTED {
					return fmt.Errorf("NATS connection %s %s", c.Opts.Name, st)
				}
			}
			return nil
		})
		opsCtx, opsStop := context.WithCancel(context.Background())
		defer func() { opsStop(); <-opsDone }()
		go func() { opsDone <- opsSrv.Run(opsCtx) }()
	}
	r, err := replica.Start(ctx, nc, js, replica.Config{
		Layout: layout, DefaultTTL: *defTTL, MaxTTL: *maxTTL, SweepInterval: *sweepEvery, RetireIdle: idleRules, Log: log,
		LedgerOptions: []ledger.Option{ledger.WithSnapshotEvery(*snapRevisions, *snapInterval),
			ledger.WithSigner(keys.signer), ledger.WithTrust(keys.trust)},
		ReadyTimeout: *readyTimeout, Metrics: m, MetricsBudgets: *metricsBudgets, Feed: *feedOn,
		MaxInFlight: *maxInflight, Reports: *reportsOn, FeedMaxAge: feedAge(*feedMaxAge),
		NoDenialRecords: !*denialsOn, DenialMaxAge: *denialMaxAge, Name: replicaName(),
		ReadyMaxDelay: *readyMaxDelay, TenantLimits: tenantLimits, TenantOwn: tenantOwn, DenialMaxBytes: denialMaxBytes,
		ServiceConn: snc,
	})
	if err != nil {
		log.Error("start", "err", err)
		// The log line quotes the error (its line breaks as \n); the
		// operator at a terminal reads it whole here.
		fmt.Fprintf(os.Stderr, "spendgate serve: cannot start: %v\n", err)
		if notClustered(err) {
			log.Error("the NATS server is not part of a cluster, so it cannot keep " + strconv.Itoa(*replicas) +
				" copies of the ledger stream: pass --replicas 1 (serve keeps 3 when it joins a server)")
		}
		return 1
	}
	started.Store(true)
	if opsSrv != nil {
		// Ready only while the ledger stream has a leader and this
		// replica's follower keeps up with it (internal/health).
		opsSrv.AddCheck("ledger_stream", r.Health.Check)
		// The spend dashboard, read-only, on the operator listener.
		if *dashboardOn {
			host, _ := os.Hostname()
			dash, err := dashboard.New(dashboard.Config{Book: r.Ledger, Series: r.Series, Denials: r.RecentDenials,
				Shadow: dashboard.ShadowOf(r.Reports), Replica: host, Log: log})
			if err != nil {
				log.Error("dashboard", "err", err)
				_ = r.Stop()
				return 1
			}
			opsSrv.HandleRestricted(dashboard.Path, dash)
			if reachableByOthers(*httpAddr) {
				log.Warn("the spend dashboard has no authentication and --http listens where other machines reach it: "+
					"whoever reaches it sees every budget, tenant and denial; bind --http to 127.0.0.1, "+
					"or pass --dashboard=false to serve only /metrics, /healthz and /readyz there", "http", *httpAddr)
			}
		}
	}
	log.Info("spendgate serving", "service", streams.ServiceName, "prefix", layout.Prefix(), "stream", layout.StreamName(), "replicas", *replicas, "lanes", layout.Lanes())
	shown := displayURL(url)
	login := loginHint(conn, layout)
	tryCLI := fmt.Sprintf("spendgate budget list --nats-url %s%s", shown, login.spendgate)
	tryNATS := fmt.Sprintf("nats --server %s%s micro info %s", shown, login.nats, streams.ServiceName)
	if logging.JSON {
		// One object a line, as every other line: a log shipper takes
		// the whole stream.
		attrs := []any{"url", shown, "try", tryCLI, "or", tryNATS}
		if login.note != "" {
			attrs = append(attrs, "note", login.note)
		}
		log.Info("ready: clients connect", attrs...)
	} else {
		ready := fmt.Sprintf("ready: clients connect to %s; try  %s  or  %s\n", shown, tryCLI, tryNATS)
		if login.note != "" {
			ready += "       " + login.note + "\n"
		}
		fmt.Fprint(os.Stderr, ready)
	}
	// SIGHUP reads the --tenant-limits file, the signing key and the
	// trusted keys again (key rotation without a restart; see
	// docs/security.md, Keys).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	code := 0
wait:
	for {
		select {
		case <-hup:
			if tenantOwn != nil {
				if own, err := readTenantLimits(*tenantFlags.own); err != nil {
					log.Error("SIGHUP: tenant limits not reloaded; the old ones stay in use", "err", err)
				} else {
					tenantOwn.Set(own)
					log.Info("SIGHUP: tenant limits reloaded", "file", *tenantFlags.own, "tenants", len(own))
				}
			}
			changed, err := keys.reload()
			if err != nil {
				log.Error("SIGHUP: keys not reloaded; the old ones stay in use", "err", err)
				continue
			}
			// Trust first: the new set is merged into the ledger's before
			// anything is signed with a new key.
			r.Ledger.SetTrust(keys.trust)
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = r.Ledger.PublishTrust(pctx, keys.trust, time.Now())
			pcancel()
			if err != nil {
				log.Error("SIGHUP: the trusted keys could not be written into the ledger; the old signing key stays in use", "err", err)
				continue
			}
			old := r.Ledger.Signer()
			r.Ledger.SetSigner(keys.signer)
			if err := r.Ledger.CheckWriter(); err != nil {
				r.Ledger.SetSigner(old)
				log.Error("SIGHUP: the ledger does not trust the new signing key; the old one stays in use", "err", err)
				continue
			}
			log.Info("SIGHUP: keys reloaded", "changed", changed, "public_key", keys.signer.PublicKey(), "trusted_keys", len(keys.trust.Keys()), "unsigned_until", keys.trust.UnsignedUntil())
		case <-ctx.Done():
			log.Info("shutting down: answering requests in flight")
			break wait
		case <-r.Failed():
			log.Error("ledger follower failed; stopping", "err", r.Err())
			code = 1
			break wait
		}
	}
	if err := r.Stop(); err != nil {
		log.Error("stop", "err", err)
		code = 1
	}
	// Flush the last replies before the connections (and an embedded
	// server) go away.
	for _, c := range []struct {
		nc     *nats.Conn
		closed <-chan struct{}
	}{{snc, sclosed}, {nc, closed}} {
		if err := c.nc.Drain(); err == nil {
			select {
			case <-c.closed:
			case <-time.After(10 * time.Second):
			}
		}
	}
	return code
}

// serveEnv are the flags serve reads from the environment (config.EnvFlags):
// where it runs and how it connects, logs and signs; never what the ledger
// is or does. SPENDGATE_SIGNING_SEED and, through natsconn, the NATS_*
// variables and SPENDGATE_INBOX_PREFIX are read too (each flag's help says
// so).
var serveEnv = []string{"config", "data-dir", "listen", "nats-url", "inbox-prefix", "http", "http-hosts", "log-level", "log-format", "signing-key", "trusted-keys"}

// displayURL is url as a client on this machine can use it in a hint: the
// wildcard hosts become 127.0.0.1, and user info is left out, never printed.
func displayURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := neturl.Parse(strings.TrimSpace(p))
		if err != nil || u.Host == "" {
			continue
		}
		u.User = nil
		if h := u.Hostname(); h == "0.0.0.0" || h == "::" || h == "" {
			u.Host = net.JoinHostPort("127.0.0.1", u.Port())
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// readyLogin is what the ready line adds to its two commands so that they
// log in as serve does: the flags of the spendgate CLI, those of the nats
// CLI, and a line saying whose login they need.
type readyLogin struct{ spendgate, nats, note string }

// loginHint returns the ready line's login for a serve that joined a
// server with conn's login. serve logs in as the replica role, whose
// permissions do not cover the commands the line suggests (budget list
// needs the admin role's), so the hint names the kind of login and not
// serve's own: never a secret, a file or a user of serve's. A serve with
// no login (the embedded server) needs none.
func loginHint(conn natsconn.Options, layout streams.Layout) readyLogin {
	var h readyLogin
	if conn.InboxPrefix != "" && conn.InboxPrefix == roles.InboxPrefix(layout, roles.Replica) {
		// Each role of spendgate roles has a private inbox.
		admin := roles.InboxPrefix(layout, roles.Admin)
		h.spendgate += " --inbox-prefix " + admin
		h.nats += " --inbox-prefix " + admin
	}
	if conn.TLSCA != "" {
		h.spendgate += " --tls-ca " + conn.TLSCA
		h.nats += " --tlsca " + conn.TLSCA
	}
	const note = "(serve's own login is the replica role's, which may not run them; see spendgate roles)"
	switch {
	case conn.Creds != "":
		h.spendgate += " --creds ADMIN.creds"
		h.nats += " --creds ADMIN.creds"
		h.note = "with the credentials file of a user with the admin role " + note
	case conn.NKey != "":
		h.spendgate += " --nkey ADMIN.nk"
		h.nats += " --nkey ADMIN.nk"
		h.note = "with the nkey seed of a user with the admin role " + note
	case conn.User != "":
		h.spendgate += " --user admin"
		h.nats += " --user admin --password \"$" + natsconn.EnvPassword + "\""
		h.note = "with $" + natsconn.EnvPassword + " set to the admin role's password " + note
	case conn.Token != "":
		h.note = "with $" + natsconn.EnvToken + " set to the server's token"
	case conn.TLSCert != "":
		h.spendgate += " --tls-cert admin.pem --tls-key admin-key.pem"
		h.nats += " --tlscert admin.pem --tlskey admin-key.pem"
		h.note = "with a client certificate that logs in as the admin role (CN=admin) " + note
	}
	return h
}

// feedAge maps --feed-max-age (0: keep every message) to
// ReplicaConfig.FeedMaxAge (negative: keep every message).
func feedAge(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// replicaName names this replica in its denial records: host and process,
// so a restarted replica is another name (its records were published or
// lost with the process).
func replicaName() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "replica"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// reachableByOthers reports whether a listener on HOST:PORT is reachable
// from other machines: every interface (an empty host, 0.0.0.0, ::), an
// address that is not a loopback one, or a name one of whose addresses is
// not. An address serve cannot parse or a name that does not resolve is
// left to the bind, which fails and says why.
func reachableByOthers(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return !ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return true
		}
	}
	return false
}

// visited reports whether the flag name was set (on the command line, by
// its environment variable or by --config).
func visited(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// notClustered reports whether err is the server's refusal of a stream
// with more than one replica on a server outside a cluster.
func notClustered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported
}

// errCodeReplicasNotSupported is nats-server's JSStreamReplicasNotSupportedErr
// ("replicas > 1 not supported in non-clustered mode"); nats.go has no name
// for it.
const errCodeReplicasNotSupported jetstream.ErrorCode = 10074

// parseRetireIdle parses --retire-idle: KIND=DURATION, comma-separated,
// each kind a scope kind named once, each duration at least a minute.
func parseRetireIdle(v string) (map[string]time.Duration, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	rules := map[string]time.Duration{}
	for _, part := range strings.Split(v, ",") {
		kind, d, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("--retire-idle %q: want KIND=DURATION (run=24h)", part)
		}
		if _, err := events.ParseScope(kind + ":x"); err != nil || kind == "" {
			return nil, fmt.Errorf("--retire-idle %q: %q is not a scope kind (lower case letters, digits, '_' or '-', starting with a letter)", part, kind)
		}
		if _, dup := rules[kind]; dup {
			return nil, fmt.Errorf("--retire-idle: kind %s named twice", kind)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur < time.Minute {
			return nil, fmt.Errorf("--retire-idle %q: want a duration of at least 1m (24h, 90m)", part)
		}
		rules[kind] = dur
	}
	return rules, nil
}
