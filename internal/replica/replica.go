package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/alerting"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/health"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/settle"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/sweep"
)

// Config configures one spendgate replica.
type Config struct {
	Layout streams.Layout
	// Now is the clock of admissions, settles and the sweeper; default
	// the machine's clock corrected by its skew from the NATS server's
	// (ledger.Ledger.Now).
	Now func() time.Time
	// DefaultTTL, MinTTL, MaxTTL bound reservation TTLs; zero values take
	// the events package defaults.
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// RetireIdle maps a scope kind to how long a budget of that kind
	// created from a default may stay idle before this replica's sweeper
	// retires it (serve --retire-idle; sweep.WithIdleRetire); RetireIdleEvery
	// is how often it looks (0: sweep.DefaultIdleEvery).
	RetireIdle      map[string]time.Duration
	RetireIdleEvery time.Duration
	// SweepInterval is the sweeper's period; default sweep.DefaultInterval.
	// Negative disables the sweeper (tests drive it by hand).
	SweepInterval time.Duration
	// ReadyTimeout bounds the initial fold of the ledger stream; default 1m.
	ReadyTimeout time.Duration
	// LedgerOptions are passed to ledger.New.
	LedgerOptions []ledger.Option
	Log           *slog.Logger
	// Metrics, if set, receives the replica's requests, admissions,
	// commits, compare-and-set conflicts and sweeps, and gains gauges of
	// the follower's lag and the open reservations per budget (the top
	// MetricsBudgets by reserved amount; 0 means metrics.DefaultBudgetLimit).
	Metrics        *metrics.Set
	MetricsBudgets int
	// Feed runs a feed.Relay in the replica: it fills the live event feed
	// (stream streams.FeedStreamName) from the ledger stream. Any number
	// of replicas may relay at once; each event is appended once.
	Feed bool
	// FeedMaxAge is how long the feed keeps a message: 0 means
	// streams.DefaultFeedMaxAge, negative every message.
	FeedMaxAge time.Duration
	// FeedOptions are passed to the feed relay after the replica's own
	// (its logger, trust, signer and FeedMaxAge).
	FeedOptions []feed.Option
	// Reports runs a report.Aggregator in the replica: the spend report
	// the report endpoint answers, kept up to date from the ledger stream
	// and persisted in its own snapshots. ReportOptions are passed to it.
	Reports       bool
	ReportOptions []report.AggregatorOption
	// NoDenialRecords turns off the denial records: by default the replica
	// records every admit it denies on the denial stream
	// (streams.DenialStreamName), which the spend report counts.
	// DenialMaxAge is how long that stream keeps a record (0:
	// streams.DefaultDenialMaxAge); Name names the replica in its records
	// (default a random id per start); DenialBuffer bounds the records
	// waiting to be published (0: DefaultDenialBuffer).
	NoDenialRecords bool
	DenialMaxAge    time.Duration
	Name            string
	DenialBuffer    int
	// DenialMaxBytes caps the denial stream, the oldest records going
	// first (0: streams.DefaultDenialMaxBytes; negative: no cap).
	DenialMaxBytes int64
	// TenantLimits are the per-tenant limits (docs/tenant-limits.md): zero
	// fields take their defaults, negative ones are off. The admitter gets
	// the open reservations and budgets from defaults, the denial recorder
	// the denial bytes, the service the request rate.
	TenantLimits service.TenantLimits
	// TenantOwn, if set, gives some tenants limits of their own in place
	// of TenantLimits' (serve --tenant-limits); its Set takes effect at
	// once, on every part.
	TenantOwn *service.TenantTable
	// MaxInFlight bounds the requests the replica handles at once (see
	// service.Config.MaxInFlight); 0 means service.MaxInFlight.
	MaxInFlight int
	// ServiceConn, if set, is the connection the endpoints are served on
	// (callers' requests in, their answers out); nil serves them on the
	// replica's connection. A connection of its own is what production
	// wants: nats.go takes a connection's lock for every message it
	// publishes and while it flushes, so on one connection the callers'
	// traffic (a tenant's flood of requests and refusals included) and the
	// ledger's commits wait on each other; on two, a commit waits for no
	// caller's reply. spendgate serve and testenv give it one.
	ServiceConn *nats.Conn
	// ReadyMaxDelay is how long a revision the ledger stream's leader
	// reported may wait unfolded before Replica.Health reports the replica
	// unfit (0: health.DefaultMaxDelay, 10 s).
	ReadyMaxDelay time.Duration
}

// The metrics are told of every revision the fold skips, with its reason.
var _ ledger.RejectObserver = (*metrics.Set)(nil)

// Replica is one running spendgate: the ledger follower, the service
// endpoints and the sweeper, all stopped by Stop.
type Replica struct {
	Ledger   *ledger.Ledger
	Admitter *admit.Admitter
	Settler  *settle.Settler
	Sweeper  *sweep.Sweeper
	Service  *service.Service
	// Alerts publishes the replica's alerts to the alert stream.
	Alerts *alerting.Publisher
	// Relay is the feed relay, nil unless Config.Feed.
	Relay *feed.Relay
	// Reports is the spend report aggregator, nil unless Config.Reports.
	Reports *report.Aggregator
	// Series is every budget's spend over time (the dashboard's charts).
	Series *report.Series
	// Denials records the admits the replica denies, nil when
	// Config.NoDenialRecords.
	Denials *service.DenialRecorder
	// Health tells whether the ledger stream has a leader and the
	// follower keeps up with its end (the replica's readiness).
	Health *health.Probe

	// cancel stops every task; tasks waits for them, in the reverse
	// order of their start.
	cancel context.CancelFunc
	tasks  closers
	// foldErr is why the follower stopped, once tasks has waited for it.
	foldErr error
	failed  chan struct{}
	err     error

	stopOnce sync.Once
	stopErr  error
	log      *slog.Logger
}

// closers is a stack of teardown steps, run in the reverse order they
// were pushed.
type closers []func()

func (c *closers) push(f func()) { *c = append(*c, f) }

func (c *closers) close() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}

// goTask runs f in a goroutine and pushes the wait for it.
func (r *Replica) goTask(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	r.tasks.push(func() { <-done })
}

// teardown stops every task started so far and waits for them.
func (r *Replica) teardown() {
	r.cancel()
	r.tasks.close()
}

// Start ensures the streams, folds the ledger, and starts serving on nc.
// It returns once the replica answers requests; on an error, what it had
// started is stopped.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (_ *Replica, err error) {
	machineClock := cfg.Now == nil
	if machineClock {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = time.Minute
	}
	s, err := streams.Ensure(ctx, js, cfg.Layout)
	if err != nil {
		return nil, err
	}
	if cfg.Layout.Config().Trimmable && s.CachedInfo().Config.DenyPurge {
		cfg.Log.Warn("--trimmable has no effect: the ledger stream exists and denies purges, which JetStream cannot lift; spendgate audit trim will refuse it (archive it, and trim a stream created with --trimmable)",
			"stream", cfg.Layout.StreamName())
	}
	lopts := []ledger.Option{ledger.WithLogger(cfg.Log)}
	if cfg.Metrics != nil {
		lopts = append(lopts, ledger.WithObserver(cfg.Metrics))
	}
	l, err := ledger.New(ctx, nc, js, cfg.Layout, append(lopts, cfg.LedgerOptions...)...)
	if err != nil {
		return nil, err
	}
	if machineClock {
		// The machine's clock corrected by its measured skew from the
		// NATS server's: replicas whose clocks disagree still agree on
		// expiry and periods.
		cfg.Now = l.Now
	}
	// Alerts: the threshold alerts are derived from the fold (every
	// crossing any replica committed: every replica publishes, the alert
	// stream keeps each once), the blocking alerts from this replica's
	// admitter.
	if _, err := streams.EnsureAlerts(ctx, js, cfg.Layout); err != nil {
		return nil, err
	}
	if err := cfg.TenantLimits.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	alerts := alerting.New(js, cfg.Layout, alerting.WithLogger(cfg.Log), alerting.WithClock(cfg.Now),
		alerting.WithSigner(l.Signer), alerting.WithTrust(l.Trust))
	if err := l.AddReader(alerts); err != nil {
		return nil, err
	}
	// A tenant's limits kept in the ledger replace its --tenant-limits
	// line; the caller's table is not changed (several replicas may share
	// it).
	cfg.TenantOwn = service.OverLedger(cfg.TenantOwn, func(tenant string) (service.TenantLimits, bool) {
		t, ok := l.TenantLimitsOf(tenant)
		if !ok || t.Empty() {
			return service.TenantLimits{}, false // removed: its file line, if any
		}
		return service.LedgerLimits(t.TenantLimitValues), true
	})
	a, st, sw, err := engine(l, cfg, admit.WithBlocking(alerts.Blocked))
	if err != nil {
		return nil, err
	}
	var hopts []health.Option
	if cfg.ReadyMaxDelay != 0 {
		hopts = append(hopts, health.WithMaxDelay(cfg.ReadyMaxDelay))
	}
	probe, err := health.New(l, hopts...)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Replica{Ledger: l, Admitter: a, Settler: st, Sweeper: sw, Health: probe, Alerts: alerts, cancel: cancel, failed: make(chan struct{}), log: cfg.Log}
	defer func() {
		if err != nil {
			r.teardown()
		}
	}()
	// The ledger's health is probed and exported from here on, through the
	// start's fold: an operator scraping a replica that is still folding
	// sees spendgate_ledger_ready 0 and the lag shrink, not no series at
	// all (an alert on ready == 0 does not fire on an absent series).
	if cfg.Metrics != nil {
		registerHealth(cfg, l, probe)
	}
	r.goTask(func() { _ = probe.Run(runCtx) })
	// The readers of the ledger are fed by the replica's one fold (the
	// spend report is kept whether or not the report endpoint answers: it
	// travels in the snapshots, which every replica must be able to load).
	agg, series, err := AddReadModels(l, js, cfg.Layout, cfg.Log, cfg.ReportOptions...)
	if err != nil {
		return nil, err
	}
	r.Series = series
	// The feed relay is a reader of the fold too; it runs before the fold
	// starts, so that what the fold hands it while it folds the stream
	// drains as it goes.
	if cfg.Feed {
		if err := r.startRelay(runCtx, js, cfg); err != nil {
			return nil, err
		}
	}
	r.goTask(func() { _ = alerts.Run(runCtx) })
	if cfg.Metrics != nil {
		cfg.Metrics.RegisterAlerts(alerts.Published, alerts.Duplicates, alerts.Dropped, alerts.Failed, alerts.Forged, alerts.Retrying)
	}
	// The fold. A follower that stops on its own leaves this replica's
	// book behind the ledger: it must stop answering (Failed).
	r.goTask(func() {
		err := l.Run(runCtx)
		if runCtx.Err() == nil {
			cfg.Log.Error("ledger follower stopped", "err", err)
			r.err = err
			close(r.failed)
		}
		r.foldErr = err
	})
	select {
	case <-l.Ready():
	case <-r.failed:
		return nil, fmt.Errorf("replica: ledger follower stopped: %w", r.err)
	case <-time.After(cfg.ReadyTimeout):
		return nil, r.foldTimedOut(l, cfg.ReadyTimeout)
	}
	// Who may write is the ledger's: this replica's own trusted keys are
	// merged into the ledger's trust revision (the first one, if the
	// ledger has none), and a replica whose key the ledger does not trust
	// refuses to start rather than write revisions every replica skips.
	if _, err := l.PublishTrust(ctx, l.Gate().Anchor(), cfg.Now()); err != nil {
		return nil, fmt.Errorf("replica: writing this replica's trusted keys into the ledger: %w", err)
	}
	if err := l.CheckWriter(); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if cfg.Reports {
		r.Reports = agg
		r.goTask(func() {
			if err := agg.Run(runCtx); err != nil {
				cfg.Log.Error("spend report stopped; report answers ledger_unavailable", "err", err)
			}
		})
		if cfg.Metrics != nil {
			cfg.Metrics.RegisterReport(agg.Size)
		}
	}
	if !cfg.NoDenialRecords {
		if err := r.startDenials(ctx, runCtx, js, cfg); err != nil {
			return nil, err
		}
	}
	snc := nc
	if cfg.ServiceConn != nil {
		snc = cfg.ServiceConn
	}
	svc, err := service.Start(snc, service.Config{Ledger: l, Admitter: a, Settler: st, Now: cfg.Now, Log: cfg.Log, Metrics: cfg.Metrics,
		MaxInFlight: cfg.MaxInFlight, Reports: r.Reports, Denials: r.Denials, TenantLimits: cfg.TenantLimits, TenantOwn: cfg.TenantOwn})
	if err != nil {
		return nil, err
	}
	r.Service = svc
	if cfg.Metrics != nil {
		registerMetrics(cfg, l, svc, r.RecentDenials, r.Series)
	}
	if cfg.Feed { // the tenants' feed consumers, checked at start and every minute
		tc, _ := feed.NewTenantCheck(js, cfg.Layout, feed.CheckLogger(cfg.Log)) // errs on a nil logger only; cfg.Log is set
		if cfg.Metrics != nil {
			cfg.Metrics.RegisterTenantConsumerCheck(tc.Problems, tc.Bad)
		}
		checked := tc.Start(runCtx)
		r.tasks.push(func() { <-checked })
	}
	if cfg.SweepInterval >= 0 {
		r.goTask(func() { _ = sw.Run(runCtx) })
	}
	return r, nil
}

// engine makes the admitter, settler and sweeper over l.
func engine(l *ledger.Ledger, cfg Config, extra ...admit.Option) (*admit.Admitter, *settle.Settler, *sweep.Sweeper, error) {
	aopts := []admit.Option{admit.WithClock(cfg.Now), admit.WithTenantLimits(admit.TenantLimits{
		MaxOpen: cfg.TenantLimits.MaxOpen, MaxDefaultBudgets: cfg.TenantLimits.MaxDefaultBudgets})}
	if own := cfg.TenantOwn; own != nil {
		aopts = append(aopts, admit.WithTenantOwnLimits(func(tenant string) (admit.TenantLimits, bool) {
			l, ok := own.Get(tenant)
			return admit.TenantLimits{MaxOpen: l.MaxOpen, MaxDefaultBudgets: l.MaxDefaultBudgets, Source: l.Source}, ok
		}))
	}
	aopts = append(aopts, extra...)
	if cfg.DefaultTTL != 0 || cfg.MinTTL != 0 || cfg.MaxTTL != 0 {
		def, lo, hi := cfg.DefaultTTL, cfg.MinTTL, cfg.MaxTTL
		if def == 0 {
			def = 5 * time.Minute
		}
		if lo == 0 {
			lo = time.Second
		}
		if hi == 0 {
			hi = 24 * time.Hour
		}
		aopts = append(aopts, admit.WithTTL(def, lo, hi))
	}
	a, err := admit.New(l, aopts...)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := settle.New(l, settle.WithClock(cfg.Now))
	if err != nil {
		return nil, nil, nil, err
	}
	sopts := []sweep.Option{sweep.WithClock(cfg.Now), sweep.WithLogger(cfg.Log)}
	if cfg.SweepInterval > 0 {
		sopts = append(sopts, sweep.WithInterval(cfg.SweepInterval))
	}
	if cfg.Metrics != nil {
		sopts = append(sopts, sweep.WithOnExpired(cfg.Metrics.Expired))
	}
	if len(cfg.RetireIdle) > 0 {
		sopts = append(sopts, sweep.WithIdleRetire(l, cfg.RetireIdle, cfg.RetireIdleEvery))
	}
	sw, err := sweep.New(l, st, sopts...)
	if err != nil {
		return nil, nil, nil, err
	}
	return a, st, sw, nil
}

// foldTimedOut is the error of a start whose fold of the ledger stream
// did not finish within the ready timeout d: how far it got, what to
// raise, and, when the feed relay's queue is full, that the fold waits
// for the feed's back-fill (a replica with a feed loads no snapshot past
// the feed's end, so a feed far behind is back-filled at start, at the
// feed's pace).
func (r *Replica) foldTimedOut(l *ledger.Ledger, d time.Duration) error {
	msg := fmt.Sprintf("replica: ledger fold did not finish in time (%s, --ready-timeout): folded to stream sequence %d, %d revisions to go; give the replica a longer --ready-timeout",
		d, l.Applied(), l.Lag())
	if r.Relay != nil && r.Relay.Queued() > 0 {
		msg += fmt.Sprintf(" (the fold waits for the feed relay, which back-fills the feed from where it ends and holds %d events not appended yet: the fold goes at the feed's pace)", r.Relay.Queued())
	}
	return errors.New(msg)
}

// startRelay adds the feed relay to the fold's readers and runs it.
func (r *Replica) startRelay(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	l := r.Ledger
	fopts := []feed.Option{feed.WithLogger(cfg.Log), feed.WithTrust(l.Trust), feed.WithSigner(l.Signer), feed.WithRefold(l.RefoldPassed)}
	if cfg.FeedMaxAge != 0 {
		fopts = append(fopts, feed.WithMaxAge(max(0, cfg.FeedMaxAge)))
	}
	rl, err := feed.NewRelay(js, cfg.Layout, append(fopts, cfg.FeedOptions...)...)
	if err != nil {
		return err
	}
	if err := l.AddReader(rl); err != nil {
		return err
	}
	r.Relay = rl
	if cfg.Metrics != nil {
		cfg.Metrics.RegisterFeedRelay(metrics.FeedRelayStats{
			Relayed: rl.Relayed, Lost: rl.Lost, Forged: rl.Forged, Drift: rl.Drift,
			Queued:  func() uint64 { return uint64(rl.Queued()) },
			Dropped: rl.Dropped, Refolded: rl.Refolded,
			Stalled: func() uint64 {
				if rl.Stalled() {
					return 1
				}
				return 0
			},
			CheckpointLoaded:  func() uint64 { return rl.CheckpointStats().Loaded },
			CheckpointWritten: func() uint64 { return rl.CheckpointStats().Written },
		})
	}
	r.goTask(func() { _ = rl.Run(ctx) })
	return nil
}

// startDenials starts the recorder of the admits this replica denies.
func (r *Replica) startDenials(ctx, runCtx context.Context, js jetstream.JetStream, cfg Config) error {
	name := cfg.Name
	if name == "" {
		name = nuid.Next()
	}
	s, err := streams.EnsureDenials(ctx, js, cfg.Layout, cfg.DenialMaxAge, cfg.DenialMaxBytes)
	if err != nil {
		return err
	}
	if got := s.CachedInfo().Config.MaxBytes; cfg.DenialMaxBytes == 0 && got > 0 && got < streams.DefaultDenialMaxBytes {
		cfg.Log.Warn("the denial stream's cap was lowered to fit the JetStream storage the server has left; "+
			"the oldest denial records go first past it. Free disk space and restart to have the default back, or set --denial-max-bytes",
			"stream", s.CachedInfo().Config.Name, "max_bytes", got, "default_max_bytes", streams.DefaultDenialMaxBytes)
	}
	d, err := service.NewDenialRecorder(js, cfg.Layout, name, cfg.DenialBuffer, cfg.Log)
	if err != nil {
		return err
	}
	d.SignWith(r.Ledger.Signer)
	d.WaitAtMost(streams.DenialRecordDelay(s.CachedInfo().Config.Duplicates))
	var limited func(tenant string)
	if m := cfg.Metrics; m != nil {
		limited = func(tenant string) { m.TenantLimited(tenant, events.LimitDenialBytes) }
	}
	d.LimitTenantBytes(cfg.TenantLimits.WithDefaults().DenialBytes, cfg.TenantOwn, limited)
	r.Denials = d
	if cfg.Metrics != nil {
		cfg.Metrics.RegisterDenials(d.Recorded, d.Dropped, d.Failed, d.Limited)
	}
	r.goTask(func() { _ = d.Run(runCtx) })
	return nil
}

// registerHealth gives cfg.Metrics the ledger's health gauges, which are
// exported from before the start's fold: ready is 0 until that fold has
// finished.
func registerHealth(cfg Config, l *ledger.Ledger, probe *health.Probe) {
	// Lag and health against the stream's end as its leader has it, not
	// as the follower's own consumer (on any copy) reports it.
	cfg.Metrics.RegisterFollowerLag(probe.Lag)
	cfg.Metrics.RegisterSnapshotAge(l.SnapshotAge)
	cfg.Metrics.RegisterClockSkew(l.ClockSkew)
	cfg.Metrics.RegisterBook(func() metrics.BookStats {
		st := l.Stats()
		return metrics.BookStats{Balances: st.Balances, Window: st.Window, Pruned: st.Pruned, Budgets: st.Budgets, Retired: st.Retired, Learned: st.Learned}
	})
	cfg.Metrics.RegisterLedgerHealth(func() metrics.LedgerHealth {
		st := probe.Status()
		folded := false
		select {
		case <-l.Ready():
			folded = true
		default:
		}
		return metrics.LedgerHealth{Ready: folded && probe.Check() == nil, Leader: st.Leader, Delay: st.Delay}
	})
}

// RecentDenials are the newest denials the dashboard shows: every
// replica's, from the denial stream as the spend report reads it (signed
// records only; they outlive a restart, the stream being read again from
// its start), when this replica keeps a report and records denials; else
// this replica's own, kept in memory.
func (r *Replica) RecentDenials() []events.AdmitDenied {
	if r.Reports != nil && r.Denials != nil {
		return r.Reports.RecentDenials()
	}
	return r.Service.RecentDenials()
}

// registerMetrics gives cfg.Metrics the replica's other gauges, once it
// serves.
func registerMetrics(cfg Config, l *ledger.Ledger, svc *service.Service, recent func() []events.AdmitDenied, series *report.Series) {
	// The per-tenant gauges, from the book's counts (the counters are the
	// service's and the denial recorder's).
	cfg.Metrics.RegisterTenants(func() []metrics.TenantSample {
		counts := l.TenantCounts()
		out := make([]metrics.TenantSample, len(counts))
		for i, c := range counts {
			held := svc.HeldTo(c.Tenant)
			out[i] = metrics.TenantSample{Tenant: c.Tenant, Open: c.Open, DefaultBudgets: c.DefaultBudgets, Budgets: c.Budgets,
				MaxOpen: held.MaxOpen, MaxDefaultBudgets: held.MaxDefaultBudgets, MaxBudgets: held.MaxBudgets}
		}
		return out
	})
	// The dashboard's forecast (burn rate, when a budget runs out) for the
	// budgets whose gauges are written; the dashboard need not be served.
	var forecasts *dashboard.Dashboard
	if series != nil {
		forecasts, _ = dashboard.New(dashboard.Config{Book: l, Series: series, Denials: recent, Now: cfg.Now}) // errs only without Book or Series
	}
	cfg.Metrics.RegisterBudgets(cfg.MetricsBudgets, func() []metrics.BudgetSample {
		budgets := l.Budgets()
		out := make([]metrics.BudgetSample, 0, len(budgets))
		var forecastOf func(ledger.Budget) dashboard.Forecast
		now := cfg.Now()
		for _, b := range budgets {
			if b.Retired {
				continue // over for good: no gauge
			}
			v, err := svc.BudgetView(b.Ref)
			if err != nil {
				continue
			}
			// The label is the stored scope: a tenant's carries the
			// tenant ("acme/team:search").
			sample := metrics.BudgetSample{Scope: string(b.Ref.Scope), Period: string(v.Period), Unit: v.Unit, Open: int(v.Open),
				Spent: v.Spent, Reserved: v.Reserved, Limit: v.Limit, Exposure: v.Exposure}
			if forecasts != nil {
				sample.Forecast = func() metrics.BudgetForecast {
					if forecastOf == nil {
						forecastOf = forecasts.Forecasts(now)
					}
					return budgetForecast(forecastOf(b), now)
				}
			}
			out = append(out, sample)
		}
		return out
	})
}

// budgetForecast is f as the per-budget gauges show it.
func budgetForecast(f dashboard.Forecast, now time.Time) metrics.BudgetForecast {
	out := metrics.BudgetForecast{Exhausted: f.Exhausted, Paced: f.PerHour != "", BeforeReset: f.BeforeReset}
	if f.ExhaustsAt != nil {
		out.ExhaustsIn = max(time.Nanosecond, f.ExhaustsAt.Sub(now))
	}
	return out
}

// Failed is closed if the ledger follower stops on its own (a revision it
// cannot fold, or the stream is gone); Err then says why. The replica's
// owner should Stop it: a replica whose book no longer advances must not keep
// answering.
func (r *Replica) Failed() <-chan struct{} { return r.failed }

// Err returns why the follower failed, after Failed is closed.
func (r *Replica) Err() error {
	select {
	case <-r.failed:
		return r.err
	default:
		return nil
	}
}

// Stop stops taking requests, answers those in flight, writes a snapshot,
// then stops every task in the reverse order of their start. It is safe
// to call more than once.
func (r *Replica) Stop() error {
	r.stopOnce.Do(func() {
		err := r.Service.Stop()
		// A graceful stop leaves a snapshot at the stream's end, so the
		// restart costs what is live (bounded: a stop never hangs on it).
		sctx, scancel := context.WithTimeout(context.Background(), FinalSnapshotTimeout)
		if serr := r.Ledger.FinalSnapshot(sctx); serr != nil {
			r.log.Warn("no snapshot written on stop; the restart folds from the last one", "err", serr)
		}
		scancel()
		r.teardown()
		if ferr := r.foldErr; ferr != nil && !errors.Is(ferr, context.Canceled) && err == nil {
			err = ferr
		}
		r.stopErr = err
	})
	return r.stopErr
}

// FinalSnapshotTimeout bounds the snapshot a replica writes when it stops
// gracefully.
const FinalSnapshotTimeout = 30 * time.Second

// AddReadModels adds to l, before it runs, the read models every replica
// keeps and every snapshot carries as sections: the spend report
// (report.Aggregator; its denials are read from js) and the spend
// series (report.Series). A snapshot written without them cannot be
// loaded by a replica that keeps them, so every writer of snapshots (a
// replica, spendgate snapshot) adds both.
func AddReadModels(l *ledger.Ledger, js jetstream.JetStream, layout streams.Layout, log *slog.Logger, opts ...report.AggregatorOption) (*report.Aggregator, *report.Series, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	agg, err := report.NewAggregator(js, layout, append([]report.AggregatorOption{report.WithAggregatorLogger(log), report.WithSync(l.Sync),
		report.WithDenialTrust(l.Trust)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	// The report and the series copy under the book's lock and encode
	// after it (ledger.SectionCopier), so a snapshot does not hold admits
	// while the reservations the report tracks and thousands of budgets'
	// series are encoded.
	series := report.NewSeries()
	var _ ledger.SectionCopier = series
	var _ ledger.SectionCopier = agg
	for _, r := range []ledger.Reader{agg, series} {
		if err := l.AddReader(r); err != nil {
			return nil, nil, err
		}
	}
	return agg, series, nil
}
