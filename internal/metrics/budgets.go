package metrics

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/apd/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spendgate/spendgate/events"
)

// DefaultBudgetLimit is how many budgets the per-budget gauges expose when
// the caller of RegisterBudgets asks for 0.
const DefaultBudgetLimit = 100

// BudgetSample is one budget in its current period, as the in-memory book
// has it. Amounts are the ledger's exact decimal strings
// (events.Money.String()).
type BudgetSample struct {
	Scope  string // "kind:id", with the tenant when there is one
	Period string // month, week, day, hour, minute, lifetime
	Unit   string
	Open   int
	// Spent, Reserved and Limit are the budget's exact amounts in Unit.
	Spent, Reserved, Limit string
	// Exposure is what its open reservations may still add above what
	// they hold ("" or "0": nothing).
	Exposure string
	// Forecast, if set, is the dashboard's forecast of the budget (its
	// burn rate and when it runs out), read only for the budgets whose
	// gauges are written.
	Forecast func() BudgetForecast
}

// BudgetForecast is when a budget runs out at its burn rate (the
// dashboard's forecast).
type BudgetForecast struct {
	// Exhausted: nothing more fits now. Paced: it has a burn rate, and
	// ExhaustsIn is when spent + reserved reaches the limit at it (Paced
	// and not Exhausted; 0 beyond any horizon). BeforeReset: that comes
	// before the period resets (always, for lifetime).
	Exhausted, Paced, BeforeReset bool
	ExhaustsIn                    time.Duration
}

// maxDecimalLen caps the length of an amount string before it is parsed
// (the ledger's amounts are at most 40 characters).
const maxDecimalLen = 64

// decCtx adds two amounts of at most maxDecimalLen digits exactly; the
// utilization ratio is rounded to 34 digits (far below a float64's
// precision loss) before it becomes a sample.
var (
	decCtx   = apd.BaseContext.WithPrecision(2 * maxDecimalLen)
	ratioCtx = apd.BaseContext.WithPrecision(34)
)

// parseDecimal returns s as a finite decimal, or false.
func parseDecimal(s string) (apd.Decimal, bool) {
	var d apd.Decimal
	if len(s) == 0 || len(s) > maxDecimalLen || strings.ContainsAny(s, "eEnNiI") {
		return d, false
	}
	if _, _, err := d.SetString(s); err != nil || d.Form != apd.Finite {
		return d, false
	}
	return d, true
}

// sampleValue is the float64 a Prometheus server stores for the exact
// decimal s: strconv.ParseFloat rounds correctly, as the server's own
// parser of the text format does, so converting here loses nothing the
// server would keep. It is NaN when s is not a finite decimal. The ledger
// and its audit keep the exact figure; this is only its picture.
func sampleValue(s string) float64 {
	if _, ok := parseDecimal(s); !ok {
		return math.NaN()
	}
	f, _ := strconv.ParseFloat(s, 64) // out of range: ±Inf, as the server's
	return f
}

// budgetRow is a BudgetSample with its utilization, ready to rank.
type budgetRow struct {
	BudgetSample
	used, limit apd.Decimal // spent + reserved; limit
	ok          bool        // every amount parsed
}

func newBudgetRow(b BudgetSample) budgetRow {
	r := budgetRow{BudgetSample: b}
	spent, ok1 := parseDecimal(b.Spent)
	reserved, ok2 := parseDecimal(b.Reserved)
	limit, ok3 := parseDecimal(b.Limit)
	r.ok = ok1 && ok2 && ok3
	if r.ok {
		_, _ = decCtx.Add(&r.used, &spent, &reserved)
		r.limit = limit
	}
	return r
}

// full reports whether the budget is used beyond every finite utilization:
// a zero limit with something used.
func (r *budgetRow) full() bool { return r.limit.IsZero() && r.used.Sign() > 0 }

// utilization is (spent + reserved) / limit: 1 for a zero limit with
// nothing used (nothing more fits), +Inf for a zero limit with something
// used, NaN when an amount did not parse.
func (r *budgetRow) utilization() float64 {
	switch {
	case !r.ok:
		return math.NaN()
	case r.full():
		return math.Inf(1)
	case r.limit.IsZero():
		return 1
	}
	var q apd.Decimal
	_, _ = ratioCtx.Quo(&q, &r.used, &r.limit)
	f, err := q.Float64()
	if err != nil {
		return math.NaN()
	}
	return f
}

// compareUtil compares the utilizations of a and b exactly
// (events.CompareUtilization): unparsable rows first.
func compareUtil(a, b *budgetRow) int {
	if !a.ok || !b.ok {
		return cmp.Compare(boolInt(a.ok), boolInt(b.ok))
	}
	return events.CompareUtilization(&a.used, &a.limit, &b.used, &b.limit)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rankBudgets returns limit budgets, the nearest their limit first
// (utilization, exact, then more open reservations, then scope, period
// and unit), taken kind by kind: the nearest of each scope kind (with its
// tenant: "acme/team"), then the next of each, and so on. A kind with many
// budgets near their limit (a budget per agent run, each spent for good)
// then cannot push every other kind's out: an org or team at 99 % keeps its
// gauges, and the alerting rules on them keep firing. all is not modified.
func rankBudgets(all []BudgetSample, limit int) []budgetRow {
	rows := make([]budgetRow, len(all))
	for i, b := range all {
		rows[i] = newBudgetRow(b)
	}
	if len(rows) <= limit {
		return rows
	}
	slices.SortFunc(rows, func(a, b budgetRow) int {
		if c := compareUtil(&b, &a); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Open, a.Open); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Period, b.Period), strings.Compare(a.Unit, b.Unit))
	})
	var kinds []string // in the order of each kind's nearest
	byKind := map[string][]budgetRow{}
	for _, r := range rows {
		k, _, _ := strings.Cut(r.Scope, ":")
		if byKind[k] == nil {
			kinds = append(kinds, k)
		}
		byKind[k] = append(byKind[k], r)
	}
	out := make([]budgetRow, 0, limit)
	for round := 0; len(out) < limit; round++ {
		for _, k := range kinds {
			if round < len(byKind[k]) && len(out) < limit {
				out = append(out, byKind[k][round])
			}
		}
	}
	return out
}

// budgetCollector writes the per-budget gauges from one read of the book
// per scrape.
type budgetCollector struct {
	limit                                     int
	f                                         func() []BudgetSample
	open, spent, reserved, limitD, util, left *prometheus.Desc
	exposure, exhaustsIn, beforeReset         *prometheus.Desc
}

var budgetLabels = []string{"scope", "period", "unit"}

func newBudgetCollector(limit int, f func() []BudgetSample) *budgetCollector {
	return &budgetCollector{
		limit: limit,
		f:     f,
		open: prometheus.NewDesc("spendgate_open_reservations",
			"Open reservations per budget in its current period (the budgets nearest their limit; see spendgate_budgets_not_exposed).", budgetLabels, nil),
		reserved: prometheus.NewDesc("spendgate_reserved_amount",
			"Amount held by open reservations per budget in its current period, in the budget's unit.", budgetLabels, nil),
		spent: prometheus.NewDesc("spendgate_spent_amount",
			"Amount settled per budget in its current period, in the budget's unit.", budgetLabels, nil),
		limitD: prometheus.NewDesc("spendgate_limit_amount",
			"Limit of each budget, in the budget's unit.", budgetLabels, nil),
		util: prometheus.NewDesc("spendgate_budget_utilization_ratio",
			"(spent + reserved) / limit per budget in its current period: 1 is full (+Inf for a zero limit with something used).", budgetLabels, nil),
		exposure: prometheus.NewDesc("spendgate_exposure_amount",
			"What the open reservations of each budget may still add above what they hold in its current period (each may settle up to its ceiling), in the budget's unit.", budgetLabels, nil),
		exhaustsIn: prometheus.NewDesc("spendgate_budget_exhausts_in_seconds",
			"When spent + reserved reaches the limit at the budget's burn rate (the dashboard's forecast): 0 when nothing more fits now; absent without spend in the last hour.", budgetLabels, nil),
		beforeReset: prometheus.NewDesc("spendgate_budget_exhausts_before_reset",
			"1 when the budget is exhausted, or runs out at its burn rate before its period resets (always, for lifetime), else 0.", budgetLabels, nil),
		left: prometheus.NewDesc("spendgate_budgets_not_exposed",
			"Budgets left out of the per-budget gauges by their series limit.", nil, nil),
	}
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.open, c.reserved, c.spent, c.limitD, c.util, c.exposure, c.exhaustsIn, c.beforeReset, c.left} {
		ch <- d
	}
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	all := c.f()
	for _, r := range rankBudgets(all, c.limit) {
		// A label value must be UTF-8, or the whole scrape fails.
		lv := []string{strings.ToValidUTF8(r.Scope, "\uFFFD"), strings.ToValidUTF8(r.Period, "\uFFFD"), strings.ToValidUTF8(r.Unit, "\uFFFD")}
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(r.Open), lv...)
		ch <- prometheus.MustNewConstMetric(c.reserved, prometheus.GaugeValue, sampleValue(r.Reserved), lv...)
		ch <- prometheus.MustNewConstMetric(c.spent, prometheus.GaugeValue, sampleValue(r.Spent), lv...)
		ch <- prometheus.MustNewConstMetric(c.limitD, prometheus.GaugeValue, sampleValue(r.Limit), lv...)
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, r.utilization(), lv...)
		exposure := r.Exposure
		if exposure == "" {
			exposure = "0"
		}
		ch <- prometheus.MustNewConstMetric(c.exposure, prometheus.GaugeValue, sampleValue(exposure), lv...)
		if r.Forecast == nil {
			continue
		}
		f := r.Forecast()
		switch {
		case f.Exhausted:
			ch <- prometheus.MustNewConstMetric(c.exhaustsIn, prometheus.GaugeValue, 0, lv...)
		case f.Paced && f.ExhaustsIn > 0:
			ch <- prometheus.MustNewConstMetric(c.exhaustsIn, prometheus.GaugeValue, f.ExhaustsIn.Seconds(), lv...)
		}
		before := 0.0
		if f.Exhausted || f.Paced && f.ExhaustsIn > 0 && f.BeforeReset {
			before = 1
		}
		ch <- prometheus.MustNewConstMetric(c.beforeReset, prometheus.GaugeValue, before, lv...)
	}
	ch <- prometheus.MustNewConstMetric(c.left, prometheus.GaugeValue, float64(max(0, len(all)-c.limit)))
}
