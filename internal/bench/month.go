package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/backtest"
	"github.com/spendgate/spendgate/internal/ledger"
)

// The month scenario: a synthetic month of LLM calls whose costs follow a
// heavy-tailed distribution, replayed through the backtest (ledger.Memory,
// the live admit and settle decisions) under each reservation rule, against
// one team's daily budget.
//
// Calls come in bursts (an agent fanning out): MonthBursts a day, between
// 08:00 and 20:00 UTC, each of its calls starting within 2 s and taking a
// lognormal time (median 10 s). Each call prices MonthInputMedian input
// tokens (lognormal, sigma 0.7) and a maximum of MonthMaxOutput output
// tokens, and uses a lognormal number of output tokens (median
// MonthOutputMedian, sigma 1.1, at most the maximum): the priced maximum
// is many times what a typical call spends. Token counts are sampled as
// floats and rounded to integers; every amount of money is a decimal
// (events.Money) from there on.
const (
	MonthDefaultCalls  = 60_000
	MonthDays          = 30
	MonthBursts        = 10
	MonthInputMedian   = 1200
	MonthOutputMedian  = 300
	MonthMaxOutput     = 4096
	monthBurstSpread   = 2 * time.Second
	monthLatencyMedian = 10 * time.Second
	monthTTL           = 10 * time.Minute
	// monthCalibration is how many first calls set the fixed slot (their
	// cost's 95th percentile): what an owner who looked at a sample would
	// pick.
	monthCalibration = 1000
)

// Prices of the synthetic model, per token.
var (
	monthInputPrice  = events.MustMoney("0.0000025") // 2.50 per million
	monthOutputPrice = events.MustMoney("0.00001")   // 10 per million
	// MonthCapShares are the exposure caps the learned rule runs under,
	// as shares of the daily budget: 50 %, 25 % and 10 %.
	MonthCapShares = []events.Money{events.MustMoney("0.5"), events.MustMoney("0.25"), events.MustMoney("0.1")}
	// MonthAllowances are the team's daily budgets the month runs
	// against, per call of a day (USD; 12 and 20 for the default 2,000
	// calls a day): one below what a day's calls cost (the money binds),
	// one above it (only reservations can bind).
	MonthAllowances = []events.Money{events.MustMoney("0.006"), events.MustMoney("0.010")}
)

// MonthOptions configure the month scenario.
type MonthOptions struct {
	// Calls over the month (at least MonthDays*MonthBursts); Seed seeds
	// the generator.
	Calls int
	Seed  uint64
}

// MonthRow is one reservation rule's month.
type MonthRow struct {
	// DayLimit is the daily budget; Rule the reservation rule.
	DayLimit string `json:"day_limit"`
	Rule     string `json:"rule"`
	// Admitted and Denied count the calls; Spent is what the admitted
	// calls cost; MoreCalls the calls admitted beyond the max rule's
	// under the same limit.
	Admitted  int64  `json:"admitted"`
	Denied    int64  `json:"denied"`
	Spent     string `json:"spent"`
	MoreCalls int64  `json:"more_calls"`
	// Utilization is Spent over the month's limits, in percent (one
	// decimal).
	Utilization string `json:"utilization_pct"`
	// MaxOverrun is the largest overrun of a day's balance (what settles
	// above their reservations added over the day); MaxOverLimit the
	// largest amount a day's spend went past its limit (the overshoot).
	// MaxExposure is the largest exposure a day's balance held at any
	// step (what its open reservations could still add above what they
	// held), and MaxAtRisk the largest spent + reserved + exposure - limit
	// at any step: the overshoot had every open reservation then settled
	// at its ceiling. ExposureCap is the cap the rule runs under ("" for
	// none): MaxOverLimit, MaxExposure and MaxAtRisk never exceed it.
	// CapRefused counts the admits the cap refused (exposure_cap), and
	// Excess is what the cap kept out of spent (the part of a settle
	// above its reservation's ceiling).
	MaxOverrun   string `json:"max_overrun"`
	MaxOverLimit string `json:"max_over_limit"`
	MaxExposure  string `json:"max_exposure"`
	MaxAtRisk    string `json:"max_at_risk"`
	ExposureCap  string `json:"exposure_cap,omitempty"`
	CapRefused   int64  `json:"cap_refused"`
	Excess       string `json:"excess"`
	// DaysRunOut counts the days the budget denied a call on its limit.
	DaysRunOut int `json:"days_run_out"`
}

// MonthResult is the month scenario's outcome.
type MonthResult struct {
	Calls     int        `json:"calls"`
	Seed      uint64     `json:"seed"`
	MedianMax string     `json:"median_max_cost"`
	MedianUse string     `json:"median_cost"`
	P95Use    string     `json:"p95_cost"`
	Rows      []MonthRow `json:"rows"`
}

// monthCall is one synthetic call.
type monthCall struct {
	at, done    time.Time
	in          int64 // input tokens
	max, actual events.Money
	user, feat  string
}

// monthScope is the budget's scope; monthModel the calls' model (what a
// learned reservation learns by).
const (
	monthScope events.Scope = "team:synthetic"
	monthModel string       = "synthetic-model"
)

// generateMonth returns o.Calls calls of November 2026, in start order.
func generateMonth(o MonthOptions) []monthCall {
	rng := rand.New(rand.NewPCG(o.Seed, 0x6d6f6e7468)) // "month"
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	bursts := MonthDays * MonthBursts
	per := o.Calls / bursts
	calls := make([]monthCall, 0, o.Calls)
	lognormal := func(median, sigma float64) float64 { return median * math.Exp(sigma*rng.NormFloat64()) }
	tokens := func(median, sigma float64, most int64) int64 {
		return min(max(int64(math.Round(lognormal(median, sigma))), 1), most)
	}
	for b := range bursts {
		day := start.Add(time.Duration(b/MonthBursts) * 24 * time.Hour)
		at := day.Add(8*time.Hour + time.Duration(rng.Int64N(int64(12*time.Hour))))
		n := per
		if b < o.Calls%bursts {
			n++
		}
		for i := range n {
			in := tokens(MonthInputMedian, 0.7, 100_000)
			out := tokens(MonthOutputMedian, 1.1, MonthMaxOutput)
			inCost := events.MoneyFromInt(in).Mul(monthInputPrice)
			c := monthCall{
				at:     at.Add(time.Duration(rng.Int64N(int64(monthBurstSpread)))),
				in:     in,
				max:    inCost.Add(events.MoneyFromInt(MonthMaxOutput).Mul(monthOutputPrice)),
				actual: inCost.Add(events.MoneyFromInt(out).Mul(monthOutputPrice)),
				user:   fmt.Sprintf("u%d", rng.IntN(20)),
				feat:   []string{"chat", "search", "agent"}[i%3],
			}
			lat := time.Duration(lognormal(float64(monthLatencyMedian), 0.6))
			c.done = c.at.Add(min(max(lat, 500*time.Millisecond), 2*time.Minute))
			calls = append(calls, c)
		}
	}
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })
	return calls
}

// monthHistory is the calls as a history: the daily budget, then every
// admit (priced: its input tokens and MonthMaxOutput at the model's
// prices, asking the priced maximum) and settle (the actual) in time
// order. A replay decides each admit as the ledger decides a priced one.
func monthHistory(calls []monthCall, limit events.Money) *backtest.History {
	def := &ledger.Budget{Ref: events.BudgetRef{Scope: monthScope, Period: events.PeriodDay}, Limit: limit, Unit: "USD"}
	steps := make([]backtest.Step, 0, 2*len(calls)+1)
	steps = append(steps, backtest.Step{Kind: backtest.KindBudget, At: calls[0].at.Add(-time.Hour), Budget: def})
	for i, c := range calls {
		id := fmt.Sprintf("call-%d", i)
		steps = append(steps,
			backtest.Step{Kind: backtest.KindAdmit, At: c.at, ReservationID: id, RequestID: id, Amount: c.max, Unit: "USD",
				Count: 1, TTL: monthTTL, Metadata: map[string]string{"user": c.user, "feature": c.feat, "model": monthModel},
				Pricing: &events.PriceQuote{Model: monthModel, Unit: "USD", Input: monthInputPrice.Mul(million), Output: monthOutputPrice.Mul(million),
					InputTokens: c.in, MaxOutputTokens: MonthMaxOutput}},
			backtest.Step{Kind: backtest.KindSettle, At: c.done, ReservationID: id, Amount: c.actual})
	}
	// Time order; at one instant the budget, then admits, then settles
	// in call order (a stable sort of steps built in call order).
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].At.Before(steps[j].At) })
	return &backtest.History{Scope: monthScope, Steps: steps}
}

// million turns a price per token into the pricing table's, per million
// tokens.
var million = events.MoneyFromInt(1_000_000)

// monthRule is one reservation rule of the month; capShare, when set, is
// its exposure cap as a share of the daily budget.
type monthRule struct {
	name     string
	pol      backtest.Policy
	capShare *events.Money
}

// percentile is the p-th percentile (0..100) of sorted amounts, nearest
// rank.
func percentile(sorted []events.Money, p int) events.Money {
	if len(sorted) == 0 {
		return events.Zero
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func sortedMoney(ms []events.Money) []events.Money {
	out := append([]events.Money(nil), ms...)
	sort.Slice(out, func(i, j int) bool { return out[i].Cmp(out[j]) < 0 })
	return out
}

// Month runs the month scenario: the same synthetic month under maximum
// reservations, under a fixed slot at the calibration calls' p95 cost,
// under learned reservations (events.DefaultLearnRule: p95 of the last 100
// calls, the maximum until 20 are known), and under learned reservations
// with each exposure cap of MonthCapShares. Errors: a bad option, ctx's,
// the replay's, a capped rule whose overshoot, exposure or amount at risk
// passed its cap at any step.
func Month(ctx context.Context, o MonthOptions) (*MonthResult, error) {
	if o.Calls < MonthDays*MonthBursts {
		return nil, fmt.Errorf("--month-calls must be at least %d", MonthDays*MonthBursts)
	}
	calls := generateMonth(o)
	actuals := make([]events.Money, 0, len(calls))
	maxes := make([]events.Money, 0, len(calls))
	for _, c := range calls {
		actuals, maxes = append(actuals, c.actual), append(maxes, c.max)
	}
	sa := sortedMoney(actuals)
	res := &MonthResult{Calls: len(calls), Seed: o.Seed,
		MedianMax: percentile(sortedMoney(maxes), 50).String(), MedianUse: percentile(sa, 50).String(), P95Use: percentile(sa, 95).String()}
	slot := percentile(sortedMoney(actuals[:min(monthCalibration, len(actuals))]), 95)
	learned := events.DefaultLearnRule()
	rules := []monthRule{
		{name: "max"},
		{name: "fixed-slot " + slot.String(), pol: backtest.Policy{FixedSlot: &slot}},
		{name: fmt.Sprintf("learned p%d", learned.Percentile), pol: backtest.Policy{Learn: &learned}},
	}
	for _, share := range MonthCapShares {
		rules = append(rules, monthRule{name: fmt.Sprintf("learned p%d, cap %s%%", learned.Percentile, share.Mul(events.MoneyFromInt(100))),
			pol: backtest.Policy{Learn: &learned}, capShare: &share})
	}
	for _, allowance := range MonthAllowances {
		limit := allowance.Mul(events.MoneyFromInt(int64(o.Calls / MonthDays)))
		h := monthHistory(calls, limit)
		monthLimit := limit.Mul(events.MoneyFromInt(MonthDays))
		var base int64
		for i, rule := range rules {
			var capAt *events.Money
			if rule.capShare != nil {
				c := limit.Mul(*rule.capShare)
				capAt = &c
				rule.pol.ExposureCap = capAt
			}
			r, err := backtest.Replay(ctx, h, rule.pol, backtest.Options{By: []string{}})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rule.name, err)
			}
			row := MonthRow{DayLimit: limit.String(), Rule: rule.name, Admitted: r.Replayed.Admitted, Denied: r.Replayed.Denied,
				Spent: r.Replayed.Spent.String(), DaysRunOut: len(r.RanOut)}
			if i == 0 {
				base = row.Admitted
			}
			row.MoreCalls = row.Admitted - base
			row.Utilization = percent(r.Replayed.Spent, monthLimit)
			over, overLimit, exposure, atRisk := events.Zero, events.Zero, events.Zero, events.Zero
			for _, b := range r.Balances {
				over = over.Max(b.Replayed.Overrun)
				overLimit = overLimit.Max(b.Replayed.Spent.Sub(b.Replayed.Limit))
				exposure = exposure.Max(b.MaxExposure)
				atRisk = atRisk.Max(b.MaxCommitted.Sub(b.Replayed.Limit))
			}
			row.MaxOverrun, row.MaxOverLimit, row.MaxExposure, row.MaxAtRisk = over.String(), overLimit.String(), exposure.String(), atRisk.String()
			row.CapRefused, row.Excess = r.Replayed.ExposureCapDenied, r.Replayed.Excess.String()
			if capAt != nil {
				row.ExposureCap = capAt.String()
				for what, v := range map[string]events.Money{"overshoot past the limit": overLimit, "exposure": exposure, "amount at risk": atRisk} {
					if v.Cmp(*capAt) > 0 {
						return nil, fmt.Errorf("%s: a day's %s %s exceeds its exposure cap %s", rule.name, what, v, capAt)
					}
				}
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// percent is a/b in percent with one decimal (b > 0).
func percent(a, b events.Money) string {
	// Integer division of the decimals' integer parts: rounded down to
	// 0.1 %.
	n, d := truncInt(a.Mul(events.MoneyFromInt(1000))), truncInt(b)
	if d == 0 {
		return "-"
	}
	v := n / d
	return fmt.Sprintf("%d.%d", v/10, v%10)
}

// truncInt is m's integer part.
func truncInt(m events.Money) int64 {
	s := m.String()
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	var n int64
	fmt.Sscan(s, &n)
	return n
}

// WriteMonth writes res as a table, or as JSON.
func WriteMonth(w io.Writer, res *MonthResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if _, err := fmt.Fprintf(w, "month: %d synthetic calls over %d days (seed %d) against a daily budget; cost per call (USD) median %s, p95 %s, priced maximum median %s\n",
		res.Calls, MonthDays, res.Seed, res.MedianUse, res.P95Use, res.MedianMax); err != nil {
		return err
	}
	rows := [][]string{{"DAY_LIMIT", "RULE", "ADMITTED", "DENIED", "MORE_CALLS", "SPENT", "UTILIZATION_%", "DAYS_RUN_OUT", "MAX_OVERRUN",
		"MAX_OVER_LIMIT", "MAX_EXPOSURE", "MAX_AT_RISK", "EXPOSURE_CAP", "CAP_REFUSED", "EXCESS"}}
	for _, r := range res.Rows {
		cap := r.ExposureCap
		if cap == "" {
			cap = "-"
		}
		rows = append(rows, []string{r.DayLimit, r.Rule, fmt.Sprint(r.Admitted), fmt.Sprint(r.Denied), fmt.Sprintf("%+d", r.MoreCalls), r.Spent,
			r.Utilization, fmt.Sprint(r.DaysRunOut), r.MaxOverrun, r.MaxOverLimit, r.MaxExposure, r.MaxAtRisk, cap, fmt.Sprint(r.CapRefused), r.Excess})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		if _, err := fmt.Fprintln(tw, strings.Join(row, "\t")); err != nil {
			return err
		}
	}
	return tw.Flush()
}
