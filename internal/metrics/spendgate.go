package metrics

import (
	"math"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
)

// Label values of spendgate_admits_total's result label.
const (
	ResultAdmitted = "admitted"
	ResultDenied   = "denied"
)

// Label values of spendgate_ledger_busy_total's cause label.
const (
	// BusyInflight: the request was refused because the in-flight limit was
	// reached.
	BusyInflight = "inflight_limit"
	// BusyConflicts: the commit lost compare-and-set too many times.
	BusyConflicts = "cas_exhausted"
)

// CodeOK is the code label of a request answered without an error.
const CodeOK = "ok"

// BuildInfo is what spendgate_build_info reports.
type BuildInfo struct {
	Version string
	Commit  string
}

// Set is spendgate's metrics, registered in a Registry of their own (never
// Prometheus' global one, so that several Sets live in one process, as
// tests and embedders need). Every field is ready to use after New; the
// families computed from other parts (RegisterBudgets, RegisterFollowerLag,
// RegisterSnapshotAge, ...) appear once those are called. The package doc
// lists every name and label.
type Set struct {
	// Registry holds every family below, with the Go runtime's (go_*)
	// and the process' (process_*); Handler serves it at /metrics.
	Registry *prometheus.Registry

	// Admits counts admit decisions: WithLabelValues(result, reason),
	// result ResultAdmitted (reason "", replays included) or ResultDenied
	// (reason the denial's code, e.g. "limit_reached").
	Admits *prometheus.CounterVec
	// AdmitChecks counts the admits answered without reserving, apart
	// from Admits: WithLabelValues(mode, result, reason), mode "check" or
	// "shadow" (shadow or evaluation traffic), result and reason as for
	// Admits.
	AdmitChecks *prometheus.CounterVec
	// Requests counts answered requests: WithLabelValues(endpoint, code),
	// endpoint the service endpoint ("admit", "settle", "release",
	// "budget.put", ...), code CodeOK or the error code of the reply.
	Requests *prometheus.CounterVec
	// RequestDuration is the time from taking a request to replying, in
	// seconds: WithLabelValues(endpoint).
	RequestDuration *prometheus.HistogramVec
	// Inflight is the number of requests being handled now.
	Inflight prometheus.Gauge
	// LedgerBusy counts ledger_busy answers: WithLabelValues(cause),
	// BusyInflight or BusyConflicts.
	LedgerBusy *prometheus.CounterVec
	// Commits counts successful ledger writes (a lane revision or an atomic
	// batch over lanes).
	Commits prometheus.Counter
	// CommitTxs is the number of transactions decided in each successful
	// commit (group commit's batch size).
	CommitTxs prometheus.Histogram
	// CASConflicts counts writes lost to compare-and-set.
	CASConflicts prometheus.Counter
	// SweeperReleased counts reservations the sweeper expired.
	SweeperReleased prometheus.Counter
	// RevisionsRejected counts ledger revisions the replica skipped
	// instead of folding: WithLabelValues(reason), a signing.Reason
	// (unsigned, untrusted-key, bad-signature, malformed, replay, chain).
	RevisionsRejected *prometheus.CounterVec

	// tenants are the per-tenant counters (tenants.go): TenantLimited,
	// TenantUnknownScopeDenial.
	tenants *tenantFamilies
}

// New returns spendgate's metrics with build info recorded, in a new
// Registry (NewRegistry).
func New(info BuildInfo) *Set {
	s := &Set{
		Registry: NewRegistry(),
		Admits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_admits_total",
			Help: "Admit decisions by result (admitted, denied) and denial reason."}, []string{"result", "reason"}),
		AdmitChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_admit_checks_total",
			Help: "Admits answered without reserving (mode check or shadow), by mode, result and denial reason."}, []string{"mode", "result", "reason"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_requests_total",
			Help: "Requests answered, by endpoint and reply code (ok or the error code)."}, []string{"endpoint", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "spendgate_request_duration_seconds",
			Help: "Time from taking a request to replying, by endpoint.", Buckets: LatencyBuckets}, []string{"endpoint"}),
		Inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spendgate_inflight_requests", Help: "Requests being handled now."}),
		LedgerBusy: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_ledger_busy_total",
			Help: "ledger_busy answers, by cause (inflight_limit, cas_exhausted)."}, []string{"cause"}),
		Commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "spendgate_commits_total",
			Help: "Successful ledger writes (one lane revision or one atomic batch over lanes)."}),
		CommitTxs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spendgate_commit_txs",
			Help: "Transactions decided per successful ledger write (group commit size).", Buckets: TxBuckets}),
		CASConflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "spendgate_cas_conflicts_total",
			Help: "Ledger writes lost to compare-and-set (another writer was first)."}),
		SweeperReleased: prometheus.NewCounter(prometheus.CounterOpts{Name: "spendgate_sweeper_released_total",
			Help: "Reservations the sweeper released because their TTL had passed."}),
		RevisionsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spendgate_revisions_rejected_total",
			Help: "Ledger revisions this replica skipped instead of folding (forged, garbage, replayed, off the chain), by reason."}, []string{"reason"}),
		tenants: newTenantFamilies(),
	}
	build := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": info.Version, "commit": info.Commit, "go_version": runtime.Version()}},
		func() float64 { return 1 })
	s.preset()
	s.Registry.MustRegister(s.Admits, s.AdmitChecks, s.Requests, s.RequestDuration, s.Inflight, s.LedgerBusy,
		s.Commits, s.CommitTxs, s.CASConflicts, s.SweeperReleased, s.RevisionsRejected, build,
		s.tenants.limited, s.tenants.unknownScope)
	return s
}

// preset creates every series of the labelled counters whose label values
// are known in advance, at 0. A series that first appears at 1 has no
// earlier sample, so Prometheus' rate and increase miss its first count:
// an alert on the first forged revision, or on the first ledger_busy,
// would never fire.
func (s *Set) preset() {
	s.Admits.WithLabelValues(ResultAdmitted, "")
	for _, mode := range []string{events.ModeCheck, events.ModeShadow} {
		s.AdmitChecks.WithLabelValues(mode, ResultAdmitted, "")
	}
	for _, r := range events.DenialReasons {
		s.Admits.WithLabelValues(ResultDenied, string(r))
		for _, mode := range []string{events.ModeCheck, events.ModeShadow} {
			s.AdmitChecks.WithLabelValues(mode, ResultDenied, string(r))
		}
	}
	for _, cause := range []string{BusyInflight, BusyConflicts} {
		s.LedgerBusy.WithLabelValues(cause)
	}
	for _, r := range signing.Reasons {
		s.RevisionsRejected.WithLabelValues(string(r))
	}
}

// Handler serves the Set's Registry at /metrics (see Handler).
func (s *Set) Handler() http.Handler { return Handler(s.Registry) }

// RegisterBudgets adds the per-budget gauges, each labelled scope, period
// and unit: spendgate_open_reservations, spendgate_reserved_amount,
// spendgate_spent_amount, spendgate_limit_amount and
// spendgate_budget_utilization_ratio ((spent + reserved) / limit), and
// spendgate_budgets_not_exposed. f is called once a scrape; it must not
// block, should only read the book, and must not modify a slice it
// returned earlier (it may return a shared one). To bound the number of
// series, only the limit budgets nearest their limit (exact utilization,
// ties by more open reservations, then by scope, period and unit) are
// exposed; limit 0 means DefaultBudgetLimit. spendgate_budgets_not_exposed
// says how many were left out. Call it once.
func (s *Set) RegisterBudgets(limit int, f func() []BudgetSample) {
	if limit <= 0 {
		limit = DefaultBudgetLimit
	}
	s.Registry.MustRegister(newBudgetCollector(limit, f))
}

// RegisterFollowerLag adds spendgate_follower_lag_revisions, the number of
// ledger stream messages this replica has not folded yet: the stream's
// last sequence as its leader last reported it, minus the folded one. f
// must not block: it should return a value the replica maintains, not ask
// NATS.
func (s *Set) RegisterFollowerLag(f func() uint64) {
	s.Registry.MustRegister(gaugeFunc("spendgate_follower_lag_revisions",
		"Ledger stream messages this replica has not folded yet (against the last sequence the stream's leader reported).", f))
}

// LedgerHealth is what RegisterLedgerHealth's gauges show.
type LedgerHealth struct {
	// Ready: the ledger stream has a leader and the follower keeps up
	// (what /readyz's ledger_stream check says).
	Ready bool
	// Leader: the last read of the stream's end was answered by its
	// leader.
	Leader bool
	// Delay is how long the oldest revision the leader reported has waited
	// unfolded.
	Delay time.Duration
}

// RegisterLedgerHealth adds spendgate_ledger_ready (1 or 0),
// spendgate_ledger_stream_leader (1 when the stream's leader answered the
// last read of its end, 0 when none did) and
// spendgate_follower_delay_seconds (how long the oldest revision the
// leader reported has waited unfolded). f must not block.
func (s *Set) RegisterLedgerHealth(f func() LedgerHealth) {
	one := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge := func(name, help string, v func() float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v)
	}
	s.Registry.MustRegister(
		gauge("spendgate_ledger_ready", "1 when the ledger stream has a leader and this replica's follower keeps up with it, else 0 (/readyz fails).",
			func() float64 { return one(f().Ready) }),
		gauge("spendgate_ledger_stream_leader", "1 when the ledger stream's leader answered the last read of the stream's end, else 0.",
			func() float64 { return one(f().Leader) }),
		gauge("spendgate_follower_delay_seconds", "How long the oldest ledger revision the stream's leader reported has waited unfolded by this replica.",
			func() float64 { return f().Delay.Seconds() }),
	)
}

// BookStats are the sizes of the replica's book, read at each scrape
// (ledger.Stats); f must not block for long.
type BookStats struct {
	// Balances held, balances dropped since the start (past minute and
	// hour balances, retired budgets'), and closed reservations in the
	// idempotency window.
	Balances, Window int
	Pruned           int64
	// Budgets held, of which Retired are retired (tombstones), and
	// learned-reservation windows held.
	Budgets, Retired, Learned int
}

// RegisterBook adds spendgate_book_balances, spendgate_book_window,
// spendgate_book_balances_pruned_total, spendgate_book_budgets (by state)
// and spendgate_book_learned_windows: how big the book is, and whether
// retiring budgets frees memory.
func (s *Set) RegisterBook(f func() BookStats) {
	s.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_book_balances",
			Help: "Balances this replica's book holds (each budget's period instances, until pruned)."}, func() float64 { return float64(f().Balances) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_book_window",
			Help: "Closed reservations in this replica's idempotency window."}, func() float64 { return float64(f().Window) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spendgate_book_balances_pruned_total",
			Help: "Balances this replica's book dropped since it started: past minute and hour balances, and retired budgets' once nothing can change them."},
			func() float64 { return float64(f().Pruned) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_book_budgets", ConstLabels: prometheus.Labels{"state": "live"},
			Help: "Budgets this replica's book holds, by state: live, or retired (a tombstone each)."},
			func() float64 { st := f(); return float64(st.Budgets - st.Retired) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_book_budgets", ConstLabels: prometheus.Labels{"state": "retired"},
			Help: "Budgets this replica's book holds, by state: live, or retired (a tombstone each)."},
			func() float64 { return float64(f().Retired) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_book_learned_windows",
			Help: "Learned-reservation windows this replica's book holds (one per scope and model; a retired scope's are dropped)."},
			func() float64 { return float64(f().Learned) }),
	)
}

// RegisterClockSkew adds spendgate_clock_skew_seconds, how far this
// machine's clock is ahead of the NATS server's (negative: behind), as f
// measures it (NaN before it has).
func (s *Set) RegisterClockSkew(f func() (time.Duration, bool)) {
	s.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_clock_skew_seconds",
		Help: "How far this machine's clock is ahead of the NATS server's (negative: behind), from the messages its follower folded and the stream infos read in the last 30 seconds (NaN when none was). Past a second the replica corrects its clock by it; alert past a second all the same (fix the host's NTP)."}, func() float64 {
		d, ok := f()
		if !ok {
			return math.NaN()
		}
		return d.Seconds()
	}))
}

// RegisterSnapshotAge adds spendgate_snapshot_age_seconds, the age of the
// newest book snapshot; f returns a negative duration when there is none,
// which is written as NaN.
func (s *Set) RegisterSnapshotAge(f func() time.Duration) {
	s.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_snapshot_age_seconds",
		Help: "Age of the newest book snapshot (NaN when there is none)."}, func() float64 {
		d := f()
		if d < 0 {
			return math.NaN()
		}
		return d.Seconds()
	}))
}

// FeedRelayStats are the feed relay's counts, read at each scrape; none
// may block.
type FeedRelayStats struct {
	// Relayed: events appended to the feed. Lost: appends lost to another
	// replica's relay, which had appended the same event first.
	Relayed, Lost func() uint64
	// Forged: feed messages (or checkpoints) no trusted key signed, which
	// the relay skipped: someone with the feed's write permission wrote
	// them, worth an alert. Drift: the times the relay found the feed
	// stream's limits changed under it (and set them back).
	Forged, Drift func() uint64
	// Queued: events the fold handed the relay that the feed has not
	// taken yet (a full queue holds the fold back).
	Queued func() uint64
	// Stalled: 1 while the relay cannot tell where the feed stands and
	// appends nothing (feed.Relay.Stalled), else 0.
	Stalled func() uint64
	// Dropped: events the relay dropped because its queue stayed full
	// (feed.Relay.Dropped); the feed stops before them until it resumes.
	// Refolded: those of them it got back from its replica's fold
	// (feed.Relay.Refolded).
	Dropped, Refolded func() uint64
	// CheckpointLoaded and CheckpointWritten: the feed sequence of the
	// checkpoint the relay started from (0: none needed) and of the
	// newest one it wrote.
	CheckpointLoaded, CheckpointWritten func() uint64
}

// RegisterFeedRelay adds the feed relay's counters and gauges:
// spendgate_feed_events_relayed_total, spendgate_feed_appends_lost_total,
// spendgate_feed_forged_total, spendgate_feed_limits_changed_total,
// spendgate_feed_queued_events, spendgate_feed_stalled,
// spendgate_feed_dropped_events_total,
// spendgate_feed_refolded_events_total,
// spendgate_feed_checkpoint_loaded_seq and
// spendgate_feed_checkpoint_written_seq.
func (s *Set) RegisterFeedRelay(st FeedRelayStats) {
	s.Registry.MustRegister(
		counterFunc("spendgate_feed_events_relayed_total",
			"Ledger events this replica's relay appended to the live event feed.", st.Relayed),
		counterFunc("spendgate_feed_appends_lost_total",
			"Feed appends this replica's relay lost to another relay that appended the same event first.", st.Lost),
		counterFunc("spendgate_feed_forged_total",
			"Feed messages and checkpoints no trusted key signed, which this replica's relay skipped.", st.Forged),
		counterFunc("spendgate_feed_limits_changed_total",
			"Times this replica's relay found the feed stream's limits changed under it, and set them back.", st.Drift),
		gaugeFunc("spendgate_feed_queued_events",
			"Events this replica's fold handed its relay that the feed has not taken yet.", st.Queued),
		counterFunc("spendgate_feed_dropped_events_total",
			"Events this replica's relay dropped because its queue stayed full (the feed took nothing), so that the ledger kept serving; the feed stops before them until the relay reads them back from the ledger (spendgate_feed_refolded_events_total), another relay appends them or this replica restarts.", st.Dropped),
		counterFunc("spendgate_feed_refolded_events_total",
			"Events this replica's relay had dropped and got back from its replica's fold once the feed took appends again.", st.Refolded),
		gaugeFunc("spendgate_feed_stalled",
			"1 while this replica's relay cannot find the last feed message a trusted key signed (junk after it) and appends nothing; no event is lost, the feed falls behind.", st.Stalled),
		gaugeFunc("spendgate_feed_checkpoint_loaded_seq",
			"Feed sequence of the checkpoint this replica's relay started from (0: none needed).", st.CheckpointLoaded),
		gaugeFunc("spendgate_feed_checkpoint_written_seq",
			"Feed sequence of the newest checkpoint this replica's relay wrote (0: none yet).", st.CheckpointWritten),
	)
}

// RegisterTenantConsumerCheck adds the check of the tenants' feed
// consumers (feed.TenantCheck): the wrong ones it found
// (spendgate_feed_tenant_consumer_problems_total) and how many the last
// check found (spendgate_feed_tenant_consumers_wrong).
func (s *Set) RegisterTenantConsumerCheck(problems func() uint64, wrong func() int64) {
	s.Registry.MustRegister(
		counterFunc("spendgate_feed_tenant_consumer_problems_total",
			"Tenants' feed consumers found push or with a filter other than the tenant's (each once, and again when it changes): a tenant may read others' events; fix with spendgate feed consumer --tenant NAME --replace.", problems),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_feed_tenant_consumers_wrong",
			Help: "Tenants' feed consumers the last check found push or with a filter other than the tenant's."},
			func() float64 { return float64(wrong()) }),
	)
}

// RegisterDenials adds the denial records this replica published to the
// denial stream (spendgate_denials_recorded_total), those it dropped
// because its buffer was full (spendgate_denials_dropped_total) and those
// whose publish failed (spendgate_denials_failed_total), and those left
// out past a bound of bytes per second (spendgate_denials_limited_total).
func (s *Set) RegisterDenials(recorded, dropped, failed, limited func() uint64) {
	s.Registry.MustRegister(
		counterFunc("spendgate_denials_recorded_total",
			"Denied admits this replica recorded on the denial stream.", recorded),
		counterFunc("spendgate_denials_dropped_total",
			"Denied admits this replica did not record because its denial buffer was full.", dropped),
		counterFunc("spendgate_denials_failed_total",
			"Denied admits this replica did not record because the publish failed.", failed),
		counterFunc("spendgate_denials_limited_total",
			"Denied admits (and check and shadow answers) this replica did not record past a bound of bytes per second: a tenant's (also in spendgate_tenant_limited_total), or the untenanted deployment's for budgets it does not have (unknown_budget).", limited),
	)
}

// RegisterReport adds the spend report aggregate's size:
// spendgate_report_cells (its sums: hour buckets, UTC days past
// report.HourDays, x groups x units that saw a reservation) and spendgate_report_reservations (the open or
// recently expired reservations it follows). f must not block long.
func (s *Set) RegisterReport(f func() (cells, tracked int)) {
	s.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_report_cells",
			Help: "Cells (hour bucket, or UTC day past 62 days; group; unit) of the spend report this replica keeps."},
			func() float64 { c, _ := f(); return float64(c) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spendgate_report_reservations",
			Help: "Reservations the spend report follows (open, or expired and waiting for a late settle)."},
			func() float64 { _, t := f(); return float64(t) }),
	)
}

// counterFunc is a counter read from a count another part keeps; f must
// never decrease, be safe to call concurrently and not block.
func counterFunc(name, help string, f func() uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
}

// gaugeFunc is a gauge read from a value another part keeps; f must be
// safe to call concurrently and not block.
func gaugeFunc(name, help string, f func() uint64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
}

// ObserveRequest records one answered request: it counts it in Requests
// under (endpoint, code) and its duration in RequestDuration under
// endpoint. code is CodeOK or the reply's error code.
func (s *Set) ObserveRequest(endpoint, code string, took time.Duration) {
	s.Requests.WithLabelValues(endpoint, code).Inc()
	s.RequestDuration.WithLabelValues(endpoint).Observe(took.Seconds())
}

// Committed records one successful ledger write carrying txs transactions.
// With Conflicted it makes a *Set a ledger.Observer (without this package
// importing the ledger).
func (s *Set) Committed(txs int) {
	s.Commits.Inc()
	s.CommitTxs.Observe(float64(txs))
}

// Conflicted records a ledger write lost to compare-and-set.
func (s *Set) Conflicted() { s.CASConflicts.Inc() }

// Rejected counts one ledger revision the replica skipped, by reason (the
// ledger's RejectObserver).
func (s *Set) Rejected(reason string) { s.RevisionsRejected.WithLabelValues(reason).Inc() }

// Expired records n reservations released by the sweeper.
func (s *Set) Expired(n int) {
	if n > 0 {
		s.SweeperReleased.Add(float64(n))
	}
}
