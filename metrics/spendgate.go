package metrics

import (
	"cmp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spendgate/spendgate/signing"
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

// DefaultBudgetLimit is how many budgets the per-budget gauges expose when
// the caller of RegisterBudgets asks for 0.
const DefaultBudgetLimit = 100

// BuildInfo is what spendgate_build_info reports.
type BuildInfo struct {
	Version string
	Commit  string
}

// Set is spendgate's metrics, registered in its own Registry. Every field
// is ready to use after New; the families computed from other parts
// (RegisterBudgets, RegisterFollowerLag, RegisterSnapshotAge) appear once
// those are called. The package doc lists every name and label.
type Set struct {
	// Registry holds every family below; serve it at /metrics.
	Registry *Registry

	// Admits counts admit decisions: With(result, reason), result
	// ResultAdmitted (reason "", replays included) or ResultDenied (reason
	// the denial's code, e.g. "limit_reached").
	Admits *CounterVec
	// AdmitChecks counts the admits answered without reserving, apart
	// from Admits: With(mode, result, reason), mode "check" or "shadow"
	// (shadow or evaluation traffic), result and reason as for Admits.
	AdmitChecks *CounterVec
	// Requests counts answered requests: With(endpoint, code), endpoint the
	// service endpoint ("admit", "settle", "release", "budget.put", ...),
	// code CodeOK or the error code of the reply.
	Requests *CounterVec
	// RequestDuration is the time from taking a request to replying, in
	// seconds: With(endpoint).
	RequestDuration *HistogramVec
	// Inflight is the number of requests being handled now.
	Inflight *Gauge
	// LedgerBusy counts ledger_busy answers: With(cause), BusyInflight or
	// BusyConflicts.
	LedgerBusy *CounterVec
	// Commits counts successful ledger writes (a lane revision or an atomic
	// batch over lanes).
	Commits *Counter
	// CommitTxs is the number of transactions decided in each successful
	// commit (group commit's batch size).
	CommitTxs *Histogram
	// CASConflicts counts writes lost to compare-and-set.
	CASConflicts *Counter
	// SweeperReleased counts reservations the sweeper expired.
	SweeperReleased *Counter
	// RevisionsRejected counts ledger revisions the replica skipped
	// instead of folding: With(reason), a signing.Reason (unsigned,
	// untrusted-key, bad-signature, malformed, replay, chain).
	RevisionsRejected *CounterVec

	// tenants are the per-tenant counters (tenants.go): TenantLimited,
	// TenantUnknownScopeDenial.
	tenants tenantFamilies
}

// New returns spendgate's metrics with build info recorded.
func New(info BuildInfo) *Set {
	s := &Set{
		Registry:        NewRegistry(),
		Admits:          NewCounterVec("spendgate_admits_total", "Admit decisions by result (admitted, denied) and denial reason.", "result", "reason"),
		AdmitChecks:     NewCounterVec("spendgate_admit_checks_total", "Admits answered without reserving (mode check or shadow), by mode, result and denial reason.", "mode", "result", "reason"),
		Requests:        NewCounterVec("spendgate_requests_total", "Requests answered, by endpoint and reply code (ok or the error code).", "endpoint", "code"),
		RequestDuration: NewHistogramVec("spendgate_request_duration_seconds", "Time from taking a request to replying, by endpoint.", LatencyBuckets, "endpoint"),
		Inflight:        NewGauge("spendgate_inflight_requests", "Requests being handled now."),
		LedgerBusy:      NewCounterVec("spendgate_ledger_busy_total", "ledger_busy answers, by cause (inflight_limit, cas_exhausted).", "cause"),
		Commits:         NewCounter("spendgate_commits_total", "Successful ledger writes (one lane revision or one atomic batch over lanes)."),
		CommitTxs:       NewHistogram("spendgate_commit_txs", "Transactions decided per successful ledger write (group commit size).", TxBuckets),
		CASConflicts:    NewCounter("spendgate_cas_conflicts_total", "Ledger writes lost to compare-and-set (another writer was first)."),
		SweeperReleased: NewCounter("spendgate_sweeper_released_total", "Reservations the sweeper released because their TTL had passed."),
		RevisionsRejected: NewCounterVec("spendgate_revisions_rejected_total",
			"Ledger revisions this replica skipped instead of folding (forged, garbage, replayed, off the chain), by reason.", "reason"),
	}
	s.tenants = newTenantFamilies()
	s.Registry.MustRegister(s.tenants.limited, s.tenants.unknownScope)
	build := NewGaugeVec("spendgate_build_info", "Always 1; the labels say which build is running.", "version", "commit", "go_version")
	build.With(info.Version, info.Commit, runtime.Version()).Set(1)
	s.Registry.MustRegister(s.Admits, s.AdmitChecks, s.Requests, s.RequestDuration, s.Inflight, s.LedgerBusy,
		s.Commits, s.CommitTxs, s.CASConflicts, s.SweeperReleased, s.RevisionsRejected, build)
	return s
}

// BudgetSample is one budget's open reservations and reserved amount in its
// current period, as the in-memory book has them.
type BudgetSample struct {
	Scope  string // "kind:id"
	Period string // month, day, lifetime
	Unit   string
	Open   int
	// Reserved is the exact decimal string of the amount held by open
	// reservations (events.Money.String()). It is written verbatim; see
	// Decimal.
	Reserved string
}

// RegisterBudgets adds spendgate_open_reservations{scope,period},
// spendgate_reserved_amount{scope,period,unit} and
// spendgate_budgets_not_exposed. f is called three times a scrape, once for
// each family; it must not block, should only read the book, and must not
// modify a slice it returned earlier (it may return a shared one). To bound the number of series, only the limit budgets
// with the largest reserved amount (exact decimal comparison, ties by more
// open reservations, then by scope and period) are exposed; limit 0 means
// DefaultBudgetLimit. spendgate_budgets_not_exposed says how many were
// left out. Call it once.
func (s *Set) RegisterBudgets(limit int, f func() []BudgetSample) {
	if limit <= 0 {
		limit = DefaultBudgetLimit
	}
	top := func() []BudgetSample {
		all := f()
		if len(all) <= limit {
			return all
		}
		all = slices.Clone(all)
		slices.SortFunc(all, func(a, b BudgetSample) int {
			if c := compareDecimal(b.Reserved, a.Reserved); c != 0 {
				return c
			}
			if c := cmp.Compare(b.Open, a.Open); c != 0 {
				return c
			}
			return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Period, b.Period))
		})
		return all[:limit]
	}
	s.Registry.MustRegister(
		NewGaugeVecFunc("spendgate_open_reservations", "Open reservations per budget in its current period (the top budgets by reserved amount; see spendgate_budgets_not_exposed).",
			[]string{"scope", "period"}, func() []Sample {
				bs := top()
				out := make([]Sample, len(bs))
				for i, b := range bs {
					out[i] = Sample{LabelValues: []string{b.Scope, b.Period}, Value: Int(int64(b.Open))}
				}
				return out
			}),
		NewGaugeVecFunc("spendgate_reserved_amount", "Amount held by open reservations per budget in its current period, in the budget's unit, exact decimal.",
			[]string{"scope", "period", "unit"}, func() []Sample {
				bs := top()
				out := make([]Sample, len(bs))
				for i, b := range bs {
					out[i] = Sample{LabelValues: []string{b.Scope, b.Period, b.Unit}, Value: Decimal(b.Reserved)}
				}
				return out
			}),
		NewGaugeFunc("spendgate_budgets_not_exposed", "Budgets left out of the per-budget gauges by their series limit.", func() float64 {
			return float64(max(0, len(f())-limit))
		}),
	)
}

// RegisterFollowerLag adds spendgate_follower_lag_revisions, the number of
// ledger stream messages this replica has not folded yet: the stream's
// last sequence as its leader last reported it, minus the folded one. f
// must not block: it should return a value the replica maintains, not ask
// NATS.
func (s *Set) RegisterFollowerLag(f func() uint64) {
	s.Registry.MustRegister(NewGaugeFunc("spendgate_follower_lag_revisions",
		"Ledger stream messages this replica has not folded yet (against the last sequence the stream's leader reported).", func() float64 { return float64(f()) }))
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
	s.Registry.MustRegister(
		NewGaugeFunc("spendgate_ledger_ready", "1 when the ledger stream has a leader and this replica's follower keeps up with it, else 0 (/readyz fails).",
			func() float64 { return one(f().Ready) }),
		NewGaugeFunc("spendgate_ledger_stream_leader", "1 when the ledger stream's leader answered the last read of the stream's end, else 0.",
			func() float64 { return one(f().Leader) }),
		NewGaugeFunc("spendgate_follower_delay_seconds", "How long the oldest ledger revision the stream's leader reported has waited unfolded by this replica.",
			func() float64 { return f().Delay.Seconds() }),
	)
}

// RegisterSnapshotAge adds spendgate_snapshot_age_seconds, the age of the
// newest book snapshot; f returns a negative duration when there is none,
// which is written as NaN.
func (s *Set) RegisterSnapshotAge(f func() time.Duration) {
	s.Registry.MustRegister(NewGaugeFunc("spendgate_snapshot_age_seconds",
		"Age of the newest book snapshot (NaN when there is none).", func() float64 {
			d := f()
			if d < 0 {
				return nan()
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
	// CheckpointLoaded and CheckpointWritten: the feed sequence of the
	// checkpoint the relay started from (0: none needed) and of the
	// newest one it wrote.
	CheckpointLoaded, CheckpointWritten func() uint64
}

// RegisterFeedRelay adds the feed relay's counters and gauges:
// spendgate_feed_events_relayed_total, spendgate_feed_appends_lost_total,
// spendgate_feed_forged_total, spendgate_feed_limits_changed_total,
// spendgate_feed_queued_events, spendgate_feed_checkpoint_loaded_seq and
// spendgate_feed_checkpoint_written_seq.
func (s *Set) RegisterFeedRelay(st FeedRelayStats) {
	gauge := func(f func() uint64) func() float64 { return func() float64 { return float64(f()) } }
	s.Registry.MustRegister(
		NewCounterFunc("spendgate_feed_events_relayed_total",
			"Ledger events this replica's relay appended to the live event feed.", st.Relayed),
		NewCounterFunc("spendgate_feed_appends_lost_total",
			"Feed appends this replica's relay lost to another relay that appended the same event first.", st.Lost),
		NewCounterFunc("spendgate_feed_forged_total",
			"Feed messages and checkpoints no trusted key signed, which this replica's relay skipped.", st.Forged),
		NewCounterFunc("spendgate_feed_limits_changed_total",
			"Times this replica's relay found the feed stream's limits changed under it, and set them back.", st.Drift),
		NewGaugeFunc("spendgate_feed_queued_events",
			"Events this replica's fold handed its relay that the feed has not taken yet.", gauge(st.Queued)),
		NewGaugeFunc("spendgate_feed_checkpoint_loaded_seq",
			"Feed sequence of the checkpoint this replica's relay started from (0: none needed).", gauge(st.CheckpointLoaded)),
		NewGaugeFunc("spendgate_feed_checkpoint_written_seq",
			"Feed sequence of the newest checkpoint this replica's relay wrote (0: none yet).", gauge(st.CheckpointWritten)),
	)
}

// RegisterTenantConsumerCheck adds the check of the tenants' feed
// consumers (feed.TenantCheck): the wrong ones it found
// (spendgate_feed_tenant_consumer_problems_total) and how many the last
// check found (spendgate_feed_tenant_consumers_wrong).
func (s *Set) RegisterTenantConsumerCheck(problems func() uint64, wrong func() int64) {
	s.Registry.MustRegister(
		NewCounterFunc("spendgate_feed_tenant_consumer_problems_total",
			"Tenants' feed consumers found push or with a filter other than the tenant's (each once, and again when it changes): a tenant may read others' events; fix with spendgate feed consumer --tenant NAME --replace.", problems),
		NewGaugeFunc("spendgate_feed_tenant_consumers_wrong",
			"Tenants' feed consumers the last check found push or with a filter other than the tenant's.", func() float64 { return float64(wrong()) }),
	)
}

// RegisterDenials adds the denial records this replica published to the
// denial stream (spendgate_denials_recorded_total), those it dropped
// because its buffer was full (spendgate_denials_dropped_total) and those
// whose publish failed (spendgate_denials_failed_total).
func (s *Set) RegisterDenials(recorded, dropped, failed func() uint64) {
	s.Registry.MustRegister(
		NewCounterFunc("spendgate_denials_recorded_total",
			"Denied admits this replica recorded on the denial stream.", recorded),
		NewCounterFunc("spendgate_denials_dropped_total",
			"Denied admits this replica did not record because its denial buffer was full.", dropped),
		NewCounterFunc("spendgate_denials_failed_total",
			"Denied admits this replica did not record because the publish failed.", failed),
	)
}

// RegisterReport adds the spend report aggregate's size:
// spendgate_report_cells (its sums: hour buckets x groups x units that saw
// a reservation) and spendgate_report_reservations (the open or
// recently expired reservations it follows). f must not block long.
func (s *Set) RegisterReport(f func() (cells, tracked int)) {
	s.Registry.MustRegister(
		NewGaugeFunc("spendgate_report_cells",
			"Cells (hour bucket, group, unit) of the spend report this replica keeps.", func() float64 { c, _ := f(); return float64(c) }),
		NewGaugeFunc("spendgate_report_reservations",
			"Reservations the spend report follows (open, or expired and waiting for a late settle).", func() float64 { _, t := f(); return float64(t) }),
	)
}

// compareDecimal compares two decimal strings exactly, without converting
// them to floats: plain decimals (as Decimal accepts) in numeric order,
// anything else before every plain decimal.
func compareDecimal(a, b string) int {
	pa, pb := plainDecimal(a), plainDecimal(b)
	switch {
	case !pa && !pb:
		return strings.Compare(a, b)
	case !pa:
		return -1
	case !pb:
		return 1
	}
	na, nb := strings.HasPrefix(a, "-"), strings.HasPrefix(b, "-")
	a, b = strings.TrimPrefix(a, "-"), strings.TrimPrefix(b, "-")
	c := compareAbs(a, b)
	if c == 0 && allZero(a) && allZero(b) {
		return 0 // -0 == 0
	}
	switch {
	case na && nb:
		return -c
	case na:
		return -1
	case nb:
		return 1
	}
	return c
}

func allZero(s string) bool { return strings.Trim(s, "0.") == "" }

func compareAbs(a, b string) int {
	ai, af, _ := cutByte(a, '.')
	bi, bf, _ := cutByte(b, '.')
	ai, bi = strings.TrimLeft(ai, "0"), strings.TrimLeft(bi, "0")
	if c := cmp.Compare(len(ai), len(bi)); c != 0 {
		return c
	}
	if c := strings.Compare(ai, bi); c != 0 {
		return c
	}
	for i := 0; i < max(len(af), len(bf)); i++ {
		da, db := byte('0'), byte('0')
		if i < len(af) {
			da = af[i]
		}
		if i < len(bf) {
			db = bf[i]
		}
		if c := cmp.Compare(da, db); c != 0 {
			return c
		}
	}
	return 0
}

// ObserveRequest records one answered request: it counts it in Requests
// under (endpoint, code) and its duration in RequestDuration under
// endpoint. code is CodeOK or the reply's error code.
func (s *Set) ObserveRequest(endpoint, code string, took time.Duration) {
	s.Requests.With(endpoint, code).Inc()
	s.RequestDuration.With(endpoint).ObserveDuration(took)
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
func (s *Set) Rejected(reason signing.Reason) { s.RevisionsRejected.With(string(reason)).Inc() }

// Expired records n reservations released by the sweeper.
func (s *Set) Expired(n int) {
	if n > 0 {
		s.SweeperReleased.Add(uint64(n))
	}
}
