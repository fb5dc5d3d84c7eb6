package dashboard

import (
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/report"
)

//go:embed assets
var assets embed.FS

// Path is where the dashboard is mounted: Handle(Path, d).
const Path = "/dashboard/"

// MaxDenials is the most denials /api/denials returns.
const MaxDenials = 256

// Book is what the dashboard reads of a replica's fold (a *ledger.Ledger).
type Book interface {
	Budgets() []ledger.Budget
	Budget(events.BudgetRef) (ledger.Budget, bool)
	Balance(events.BalanceRef) ledger.Balance
}

// Config is what New needs. Book and Series are required.
type Config struct {
	Book Book
	// Series is the spend over time the replica's fold keeps
	// (report.Series): the charts and the burn rate.
	Series *report.Series
	// Ready reports whether the replica has folded the ledger (the page
	// says so until it has); nil: always.
	Ready func() bool
	// Denials returns the replica's recent denials, newest first
	// (the replica's recent denials, newest first); nil shows none.
	Denials func() []events.AdmitDenied
	// Shadow returns the check and shadow decisions f selects, grouped by
	// scope (the replica's report aggregate: report.Aggregator.Report's
	// Shadow); nil shows none.
	Shadow func(ctx context.Context, f report.Filter) ([]report.ShadowGroup, error)
	// Replica names this replica on the page (denials are per replica).
	Replica string
	// Now is the clock; default time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Reuse is how long one build of the budget rows answers
	// /api/budgets (DefaultReuse when 0; below 0, every request that
	// finds no build under way starts one).
	Reuse time.Duration
}

// DefaultReuse is how long a build of the budget rows answers
// /api/budgets (Config.Reuse): every request in that time after its start
// is answered from it, and a request that comes while it is built waits
// for it. One build runs at a time, however many tabs and scripts ask: a
// build reads every budget's balance and series and computes its forecast
// (hundreds of milliseconds at 30,000 budgets), and several at once
// starved the replica's admits of CPU.
const DefaultReuse = 2 * time.Second

// buildShare: a build is reused for at least this many times what it
// took, so that builds take at most a fifth of one core.
const buildShare = 5

// Dashboard serves the page and its JSON. It reads the replica's book and
// the spend series its fold keeps; it opens no consumer of its own.
type Dashboard struct {
	cfg Config
	mux *http.ServeMux

	// mu guards last and building: the latest build of the budget rows
	// and the one under way (nil: none).
	mu       sync.Mutex
	last     *build
	building *build
	// builds counts the builds started (the tests' hook).
	builds atomic.Int64
}

// build is every budget's row at now, sorted as /api/budgets pages them:
// shared by the requests that come while it is built and for Reuse after.
type build struct {
	now     time.Time     // the clock (Config.Now) when it started, in UTC
	started time.Time     // time.Now when it started (monotonic)
	took    time.Duration // how long it took (set once built)
	ready   bool
	rows    []BudgetRow
	done    chan struct{} // closed when rows are set
}

// New returns a Dashboard; mount it at Path and start Run.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Book == nil || cfg.Series == nil {
		return nil, errors.New("dashboard: Book and Series are required")
	}
	if cfg.Ready == nil {
		cfg.Ready = func() bool { return true }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Denials == nil {
		cfg.Denials = func() []events.AdmitDenied { return nil }
	}
	if cfg.Reuse == 0 {
		cfg.Reuse = DefaultReuse
	}
	d := &Dashboard{cfg: cfg, mux: http.NewServeMux()}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	d.mux.Handle("GET "+Path+"{$}", files)
	d.mux.Handle("GET "+Path+"app.js", files)
	d.mux.Handle("GET "+Path+"style.css", files)
	d.mux.HandleFunc("GET "+Path+"api/budgets", d.budgets)
	d.mux.HandleFunc("GET "+Path+"api/series", d.seriesOf)
	d.mux.HandleFunc("GET "+Path+"api/denials", d.denials)
	d.mux.HandleFunc("GET "+Path+"api/shadow", d.shadow)
	// Any other path or method under api/ is answered in the API's error
	// shape, not the mux's plain text: a script reading JSON gets a code.
	d.mux.HandleFunc(Path+"api/", d.apiOther)
	return d, nil
}

// Codes of the API's own errors about the request's path and method.
const (
	CodeNotFound events.Code = "not_found"
	CodeMethod   events.Code = "method_not_allowed"
)

// apiEndpoints are the API's paths under Path, each answering GET and HEAD.
var apiEndpoints = []string{"api/budgets", "api/series", "api/denials", "api/shadow"}

// apiOther answers what no API endpoint matched: 405 for a method other
// than GET or HEAD on an endpoint (saying Allow: GET, HEAD), else 404
// naming the endpoints.
func (d *Dashboard) apiOther(w http.ResponseWriter, r *http.Request) {
	rel := strings.TrimPrefix(r.URL.Path, Path)
	if slices.Contains(apiEndpoints, rel) {
		w.Header().Set("Allow", "GET, HEAD")
		writeErr(w, http.StatusMethodNotAllowed, events.Errorf(CodeMethod, "%s %s: the dashboard's API is read-only (GET or HEAD)", r.Method, r.URL.Path))
		return
	}
	writeErr(w, http.StatusNotFound, events.Errorf(CodeNotFound, "no endpoint %q: the dashboard's API has %s", r.URL.Path, Path+strings.Join(apiEndpoints, ", "+Path)))
}

// ServeHTTP serves Path and below, read-only (GET and HEAD).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	d.mux.ServeHTTP(w, r)
}

// BudgetRow is one budget in /api/budgets.
type BudgetRow struct {
	// Scope is the scope as the ledger stores it: a tenant's carries the
	// tenant ("acme/team:search"), also in Tenant; Kind is the scope's
	// kind as its tenant names it ("team").
	Scope  events.Scope  `json:"scope"`
	Tenant string        `json:"tenant,omitempty"`
	Kind   string        `json:"kind"`
	Period events.Period `json:"period"`
	// Instance is the ledger's current instance of the budget, in its
	// time zone TZ ("" for UTC); Forecast.ResetsAt is when it ends.
	Instance  string `json:"instance"`
	TZ        string `json:"tz,omitempty"`
	Unit      string `json:"unit"`
	Limit     string `json:"limit"`
	Spent     string `json:"spent"`
	Reserved  string `json:"reserved"`
	Overrun   string `json:"overrun"`
	Available string `json:"available"`
	Open      int    `json:"open"`
	// Disabled: the budget is disabled (budget disable), and every admit
	// naming it is denied budget_disabled, whatever it has available.
	Disabled bool `json:"disabled,omitempty"`
	// Retired: the budget was retired (budget retire). The dashboard
	// lists only live budgets; a series asked for a retired one says so,
	// with no points (its chart left with the retirement).
	Retired bool `json:"retired,omitempty"`
	// UsedBP is (spent + reserved) / limit and SpentBP spent / limit, in
	// basis points (10000 = the whole limit), rounded down.
	UsedBP   int64    `json:"used_bp"`
	SpentBP  int64    `json:"spent_bp"`
	Forecast Forecast `json:"forecast"`
	// Exposure is the live exposure bound of the balance: the most its
	// open reservations may still add above what they hold (each may
	// settle up to its ceiling), the figure of budget get and of the
	// gauge spendgate_exposure_amount; ExposureCap the budget's cap on
	// it. Both are omitted, as budget get omits them, when the budget has
	// no cap and nothing is exposed.
	Exposure    string `json:"exposure,omitempty"`
	ExposureCap string `json:"exposure_cap,omitempty"`
}

// BudgetsReply is one page of /api/budgets: budgets nearest their limit
// first (used_bp descending, then scope, then period).
type BudgetsReply struct {
	Now     time.Time   `json:"now"`
	Replica string      `json:"replica,omitempty"`
	Ready   bool        `json:"series_ready"`
	Budgets []BudgetRow `json:"budgets"`
	// NextCursor, when set, fetches the next page (?cursor=); empty on
	// the last page. Pages are cut by key, so a budget whose utilization
	// changes between two requests may move across the cut.
	NextCursor string `json:"next_cursor,omitempty"`
	// Total counts every budget, Near those at 80% or more of their limit
	// and below it, Over those at or over it: over all pages.
	Total int `json:"total"`
	Near  int `json:"near"`
	Over  int `json:"over"`
}

// Page sizes of /api/budgets (?limit=).
const (
	// DefaultBudgetPage is the page size without ?limit=.
	DefaultBudgetPage = 500
	// MaxBudgetPage is the largest ?limit= accepted.
	MaxBudgetPage = 1000
)

// budgetCursor is the key of the last row of a page.
type budgetCursor struct {
	UsedBP int64         `json:"u"`
	Scope  events.Scope  `json:"s"`
	Period events.Period `json:"p"`
}

// after reports whether row r sorts after cursor c.
func (c budgetCursor) after(r BudgetRow) bool {
	if r.UsedBP != c.UsedBP {
		return r.UsedBP < c.UsedBP
	}
	if r.Scope != c.Scope {
		return r.Scope > c.Scope
	}
	return r.Period > c.Period
}

func (c budgetCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (budgetCursor, error) {
	var c budgetCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return c, events.Errorf(events.CodeInvalidRequest, "cursor is not one this dashboard returned (next_cursor)")
	}
	return c, nil
}

// current returns a build of every budget's row no older than Reuse by
// the clock and the wall clock, else the build under way, else a new one
// (built here, while the requests that come meanwhile wait for it); nil
// if ctx ends first.
func (d *Dashboard) current(ctx context.Context) *build {
	now := d.cfg.Now().UTC()
	d.mu.Lock()
	if b := d.last; b != nil {
		reuse := d.cfg.Reuse
		if reuse > 0 {
			// A build that took long is reused longer: the dashboard
			// spends at most a fifth of one core on builds, however many
			// ask (at 100,000 budgets a build takes about 6 s).
			reuse = max(reuse, buildShare*b.took)
		}
		if age := now.Sub(b.now); age >= 0 && age < reuse && time.Since(b.started) < reuse {
			d.mu.Unlock()
			return b
		}
	}
	if b := d.building; b != nil {
		d.mu.Unlock()
		select {
		case <-b.done:
			return b
		case <-ctx.Done():
			return nil
		}
	}
	b := &build{now: now, started: time.Now(), done: make(chan struct{})}
	d.building = b
	d.builds.Add(1)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.building = nil
		if b.rows != nil {
			b.took = time.Since(b.started)
			d.last = b
		}
		d.mu.Unlock()
		close(b.done)
	}()
	b.ready = d.cfg.Ready()
	b.rows = d.rows(now)
	return b
}

// rows are every budget's row at now, the nearest to its limit first
// (used_bp descending, then scope, then period). Each budget's balance is
// read under the book's lock and its recent points under the series' on
// their own: no lock is held for more than a copy of one budget's.
func (d *Dashboard) rows(now time.Time) []BudgetRow {
	budgets := d.cfg.Book.Budgets()
	denied := d.deniedAt()
	out := make([]BudgetRow, 0, len(budgets))
	for _, b := range budgets {
		if b.Retired {
			continue // over for good (budget retire): nothing to watch
		}
		out = append(out, d.row(b, now, denied))
	}
	// The nearest to the limit first.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].UsedBP != out[j].UsedBP {
			return out[i].UsedBP > out[j].UsedBP
		}
		if out[i].Scope != out[j].Scope {
			return out[i].Scope < out[j].Scope
		}
		return out[i].Period < out[j].Period
	})
	return out
}

// Forecasts returns the forecast the page shows for any budget at now,
// for a reader other than the page (the replica's per-budget gauges); the
// recent denials are read once, here.
func (d *Dashboard) Forecasts(now time.Time) func(b ledger.Budget) Forecast {
	denied := d.deniedAt()
	return func(b ledger.Budget) Forecast { return d.row(b, now, denied).Forecast }
}

// instanceRef is a budget's balance in one instance: its scope and
// period, and its unit, which tells a scope's money budget from its
// requests budget in the same period.
type instanceRef struct {
	budget   events.BudgetRef
	instance string
	unit     string
}

// deniedAt maps each budget instance to its latest limit_reached denial
// among the recent denials (Config.Denials).
func (d *Dashboard) deniedAt() map[instanceRef]*events.AdmitDenied {
	out := map[instanceRef]*events.AdmitDenied{}
	for _, x := range d.cfg.Denials() {
		n := x.Denial
		if n.Reason != events.ReasonLimitReached || n.Scope == "" {
			continue
		}
		k := instanceRef{events.BudgetRef{Scope: events.TenantScope(x.Tenant, n.Scope.Local()), Period: n.Period}, n.Instance, n.Unit}
		if prev := out[k]; prev == nil || x.At.After(prev.At) {
			out[k] = &x
		}
	}
	return out
}

// row is budget b in its period instance at now, in the budget's zone
// (the ledger's instance: the one its admits reserve in); denied is
// deniedAt's.
func (d *Dashboard) row(b ledger.Budget, now time.Time, denied map[instanceRef]*events.AdmitDenied) BudgetRow {
	cal := events.CalendarOf(b.Ref.Period, b.Loc)
	inst := cal.Instance(now)
	bal := d.cfg.Book.Balance(events.BalanceRef{Scope: b.Ref.Scope, Period: b.Ref.Period, Instance: inst, Unit: b.Ref.Unit})
	used := bal.Spent.Add(bal.Reserved)
	row := BudgetRow{Scope: b.Ref.Scope, Tenant: b.Ref.Scope.Tenant(), Kind: b.Ref.Scope.Local().Kind(), Period: b.Ref.Period, Instance: inst, TZ: b.TZ, Unit: b.Unit,
		Limit: b.Limit.String(), Spent: bal.Spent.String(), Reserved: bal.Reserved.String(), Overrun: bal.Overrun.String(),
		Available: b.Limit.Sub(used).String(), Open: bal.Open, Disabled: b.Disabled, Retired: b.Retired,
		UsedBP: basisPoints(used, b.Limit), SpentBP: basisPoints(bal.Spent, b.Limit)}
	if b.Retired {
		row.Available = "0" // every admit naming it is denied, as budget get says
	}
	if b.Limit.IsZero() {
		// A limit of 0 admits nothing: at its limit, as the per-budget
		// utilization gauge says (1), and counted with the budgets at or
		// over theirs.
		row.UsedBP = 10000
	}
	if b.ExposureCap != nil || !bal.Exposure.IsZero() {
		row.Exposure = bal.Exposure.String()
	}
	if b.ExposureCap != nil {
		row.ExposureCap = b.ExposureCap.String()
	}
	if b.Retired {
		return row // no pace and no exhaustion date: it admits nothing any more
	}
	ref := events.BudgetRef{Scope: b.Ref.Scope, Period: b.Ref.Period}
	// Only the points in the burn rate's window (and the one before
	// them), not every point of the series.
	rec, _ := d.cfg.Series.Recent(b.Ref, inst, now.Add(-PaceWindow))
	row.Forecast = forecast(paceIn{pts: rec.Points, before: rec.Before, gap: rec.Gap, recent: true, lastSpend: rec.LastSpend,
		limit: b.Limit, used: used, cal: cal, now: now, denied: denied[instanceRef{ref, inst, b.Unit}]})
	return row
}

// tenantParam reads the optional ?tenant=NAME of r: every endpoint of the
// API shows only that tenant's budgets and denials when it is given, and
// every tenant's and the untenanted deployment's when it is not.
func tenantParam(r *http.Request) (tenant string, all bool, err error) {
	q := r.URL.Query()
	if !q.Has("tenant") {
		return "", true, nil
	}
	tenant = q.Get("tenant")
	if tenant != "" {
		err = events.ValidateTenant(tenant)
	}
	return tenant, false, err
}

// budgets answers one page of budgets (of ?tenant=, when given): ?limit=
// (1..MaxBudgetPage, default DefaultBudgetPage) from ?cursor= (a
// NextCursor). A bad limit or cursor is a 400 with code invalid_request.
func (d *Dashboard) budgets(w http.ResponseWriter, r *http.Request) {
	tenant, all, err := tenantParam(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	q := r.URL.Query()
	limit := DefaultBudgetPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxBudgetPage {
			writeErr(w, http.StatusBadRequest, events.Errorf(events.CodeInvalidRequest, "limit must be a whole number from 1 to %d", MaxBudgetPage))
			return
		}
		limit = n
	}
	var cur *budgetCursor
	if v := q.Get("cursor"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		cur = &c
	}
	b := d.current(r.Context())
	if b == nil {
		return // the client is gone
	}
	if b.rows == nil {
		// The build this request waited for failed (a panic in the
		// request that ran it).
		writeErr(w, http.StatusServiceUnavailable, &events.Error{Code: events.CodeLedgerUnavailable, Message: "the budgets could not be read; try again"})
		return
	}
	rows := b.rows
	if !all {
		// The tenant's, in the build's order.
		mine := make([]BudgetRow, 0)
		for _, row := range rows {
			if row.Tenant == tenant {
				mine = append(mine, row)
			}
		}
		rows = mine
	}
	out := BudgetsReply{Now: b.now, Replica: d.cfg.Replica, Ready: b.ready, Total: len(rows), Budgets: []BudgetRow{}}
	for _, row := range rows {
		switch {
		case row.UsedBP >= 10000:
			out.Over++
		case row.UsedBP >= 8000:
			out.Near++
		}
	}
	start := 0
	if cur != nil {
		start = sort.Search(len(rows), func(i int) bool { return cur.after(rows[i]) })
	}
	end := min(len(rows), start+limit)
	out.Budgets = append(out.Budgets, rows[start:end]...)
	if end < len(rows) && end > start {
		last := rows[end-1]
		out.NextCursor = budgetCursor{UsedBP: last.UsedBP, Scope: last.Scope, Period: last.Period}.encode()
	}
	writeJSON(w, http.StatusOK, out)
}

// SeriesPoint is one point of /api/series.
type SeriesPoint struct {
	T        time.Time `json:"t"`
	Spent    string    `json:"spent"`
	Reserved string    `json:"reserved"`
	SpentBP  int64     `json:"spent_bp"`
	UsedBP   int64     `json:"used_bp"`
}

// SeriesReply is /api/series.
type SeriesReply struct {
	Budget   BudgetRow     `json:"budget"`
	Points   []SeriesPoint `json:"points"`
	Start    time.Time     `json:"start"`
	Now      time.Time     `json:"now"`
	Ready    bool          `json:"series_ready"`
	Capacity int           `json:"capacity"`
}

func (d *Dashboard) seriesOf(w http.ResponseWriter, r *http.Request) {
	tenant, all, err := tenantParam(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	// With ?tenant= the scope is as the tenant names it; without, as the
	// ledger stores it (a row's scope).
	var scope events.Scope
	if all {
		scope, err = events.ParseStoredScope(r.URL.Query().Get("scope"))
	} else if scope, err = events.ParseScope(r.URL.Query().Get("scope")); err == nil {
		scope = events.TenantScope(tenant, scope)
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	period, err := events.ParsePeriod(r.URL.Query().Get("period"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	// ?unit= picks one of a scope's two budgets in the period (money and
	// requests); without it, the first.
	unit := r.URL.Query().Get("unit")
	now := d.cfg.Now().UTC()
	var row *BudgetRow
	var cal events.Calendar
	var ref events.BudgetRef
	for _, b := range d.cfg.Book.Budgets() {
		if b.Ref.Scope == scope && b.Ref.Period == period && (unit == "" || b.Unit == unit) {
			r := d.row(b, now, d.deniedAt())
			row, cal, ref = &r, events.CalendarOf(b.Ref.Period, b.Loc), b.Ref
			break
		}
	}
	if row == nil {
		writeErr(w, http.StatusNotFound, events.Errorf(events.CodeUnknownBudget, "no budget is defined for %s per %s%s", scope, period, unitSuffix(unit)))
		return
	}
	limit, _ := events.ParseMoney(row.Limit)
	var pts []report.Point
	if !row.Retired {
		// A retired budget's chart left with the retirement. The series
		// drops it when its own reader of the fold reaches the retiring
		// revision, which may be just after the book did: the row's flag,
		// read from the book, decides, so the reply never pairs "retired"
		// with a chart.
		pts = d.cfg.Series.Points(ref, row.Instance)
	}
	out := SeriesReply{Budget: *row, Now: now, Ready: d.cfg.Ready(), Capacity: MaxPoints, Points: make([]SeriesPoint, 0, len(pts))}
	if start, _, ok := cal.Bounds(now); ok {
		out.Start = start.UTC()
	} else if len(pts) > 0 {
		out.Start = pts[0].T
	} else {
		out.Start = now.Add(-time.Hour)
	}
	for _, p := range pts {
		out.Points = append(out.Points, SeriesPoint{T: p.T, Spent: p.Spent.String(), Reserved: p.Reserved.String(),
			SpentBP: basisPoints(p.Spent, limit), UsedBP: basisPoints(p.Spent.Add(p.Reserved), limit)})
	}
	writeJSON(w, http.StatusOK, out)
}

// DenialsReply is /api/denials.
type DenialsReply struct {
	Replica string               `json:"replica,omitempty"`
	Denials []events.AdmitDenied `json:"denials"`
}

func (d *Dashboard) denials(w http.ResponseWriter, r *http.Request) {
	tenant, all, err := tenantParam(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	ds := d.cfg.Denials()
	if ds == nil {
		ds = []events.AdmitDenied{}
	}
	if !all {
		mine := []events.AdmitDenied{}
		for _, x := range ds {
			if x.Tenant == tenant {
				mine = append(mine, x)
			}
		}
		ds = mine
	}
	ds = ds[:min(len(ds), MaxDenials)]
	for i := range ds {
		d.withResetsAt(&ds[i])
	}
	writeJSON(w, http.StatusOK, DenialsReply{Replica: d.cfg.Replica, Denials: ds})
}

// withResetsAt sets x's ResetsAt where the denial has none (a record read
// from the denial stream leaves it out) and waiting ends it: a
// limit_reached denial of a request within the limit, or an exposure_cap
// one; the end, in the denying budget's zone, of its period instance at
// the denial's time, as the denial's reply said it.
func (d *Dashboard) withResetsAt(x *events.AdmitDenied) {
	n := &x.Denial
	if n.ResetsAt != nil || n.Scope == "" || n.Period == "" {
		return
	}
	switch n.Reason {
	case events.ReasonLimitReached:
		limit, err1 := events.ParseMoney(n.Limit)
		asked, err2 := events.ParseMoney(n.Requested)
		if err1 != nil || err2 != nil || asked.Cmp(limit) > 0 {
			return // it can never fit: no wait ends it
		}
	case events.ReasonExposureCap:
	default:
		return
	}
	ref := events.BudgetRef{Scope: events.TenantScope(x.Tenant, n.Scope.Local()), Period: n.Period}
	b, ok := d.cfg.Book.Budget(ref)
	if !ok {
		ref.Unit = n.Unit
		if b, ok = d.cfg.Book.Budget(ref); !ok {
			return
		}
	}
	if end, ok := events.CalendarOf(n.Period, b.Loc).ResetAt(x.At); ok {
		end = end.UTC()
		n.ResetsAt = &end
	}
}

// ShadowOf is Config.Shadow read from a replica's report aggregate (nil
// for none: the page then says the replica keeps no report).
func ShadowOf(a *report.Aggregator) func(context.Context, report.Filter) ([]report.ShadowGroup, error) {
	if a == nil {
		return nil
	}
	return func(ctx context.Context, f report.Filter) ([]report.ShadowGroup, error) {
		rep, err := a.Report(ctx, report.ByScope, f)
		if err != nil {
			return nil, err
		}
		return rep.Shadow, nil
	}
}

// ShadowWindow is how far back /api/shadow looks: the hour now is in and
// the 23 before it (whole hours, as the report's buckets).
const ShadowWindow = 24 * time.Hour

// shadowTimeout bounds /api/shadow's wait for the report aggregate.
const shadowTimeout = 5 * time.Second

// ShadowReply is /api/shadow: the check and shadow decisions of [From, To)
// by scope, apart from the spend (the replica's report of the denial
// stream: every replica's decisions, the same on each).
type ShadowReply struct {
	From      time.Time            `json:"from"`
	To        time.Time            `json:"to"`
	Available bool                 `json:"available"`
	Groups    []events.ShadowGroup `json:"groups"`
}

func (d *Dashboard) shadow(w http.ResponseWriter, r *http.Request) {
	tenant, all, err := tenantParam(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	to := d.cfg.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	out := ShadowReply{From: to.Add(-ShadowWindow), To: to, Groups: []events.ShadowGroup{}}
	if d.cfg.Shadow == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), shadowTimeout)
	defer cancel()
	gs, err := d.cfg.Shadow(ctx, report.Filter{From: out.From, To: out.To, OneTenant: !all, Tenant: tenant})
	if err != nil {
		d.cfg.Log.Warn("dashboard: shadow decisions", "err", err)
		writeErr(w, http.StatusServiceUnavailable, &events.Error{Code: events.CodeReportUnavailable, Message: "the shadow decisions could not be read: " + err.Error()})
		return
	}
	out.Available = true
	for _, g := range gs {
		x := g.Wire()
		if !all {
			x.Value = string(events.Scope(x.Value).Local())
		}
		out.Groups = append(out.Groups, x)
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	var e *events.Error
	if !errors.As(err, &e) {
		e = &events.Error{Code: events.CodeInvalidRequest, Message: err.Error()}
	}
	writeJSON(w, code, events.ErrorReply{Error: e})
}

// unitSuffix is " in UNIT" for a unit given, "" for none.
func unitSuffix(unit string) string {
	if unit == "" {
		return ""
	}
	return " in " + unit
}
