package dashboard

import (
	"time"

	"github.com/cockroachdb/apd/v3"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
)

// The burn rate. A budget's pace is the spend of its current period
// instance over a recent window, weighted so that it decays when the
// budget is idle: a spend of x that happened a ago counts
// x * 2^(-a/PaceHalfLife), and spend older than PaceWindow counts
// nothing. The weighted sum, times ln 2 / PaceHalfLife, is the pace per
// unit of time: a steady pace reads as itself, and a pace that stops
// halves every PaceHalfLife of idleness and is gone PaceWindow after the
// last spend. So a burst followed by 19 idle minutes reads at under a
// tenth of the burst's pace, and an idle hour shows no pace (and no
// "runs out") at all.
const (
	// PaceHalfLife is how long an idle budget's burn rate takes to halve.
	PaceHalfLife = 5 * time.Minute
	// PaceWindow is the trailing window of the burn rate: older spend
	// does not count.
	PaceWindow = time.Hour
	// MinPaceSpends is how many moments of spend in the window make a
	// forecast (ExhaustsAt) on their own; fewer forecast only when what
	// they spent is at least what is left.
	MinPaceSpends = 3
)

// MaxPoints bounds the points kept per budget (report.MaxPoints).
const MaxPoints = report.MaxPoints

// point is a balance after a revision.
type point = report.Point

// dec converts Money to an apd.Decimal (Money keeps its decimal private).
func dec(m events.Money) *apd.Decimal {
	d, _, err := apd.NewFromString(m.String())
	if err != nil {
		return apd.New(0, 0)
	}
	return d
}

// calc is the context of the dashboard's divisions: they round, unlike the
// money path, and only ever feed a display.
var calc = apd.BaseContext.WithPrecision(34)

// basisPoints is amount / limit in 1/10000, rounded down; 0 for a zero
// limit and nothing used, and capped at 999999.
func basisPoints(amount, limit events.Money) int64 {
	if limit.Sign() <= 0 {
		if amount.Sign() > 0 {
			return 10000
		}
		return 0
	}
	var q, r apd.Decimal
	if _, err := calc.Mul(&q, dec(amount), apd.New(10000, 0)); err != nil {
		return 0
	}
	if _, err := calc.QuoInteger(&r, &q, dec(limit)); err != nil {
		return 0
	}
	v, err := r.Int64()
	if err != nil || v > 999999 {
		return 999999
	}
	return v
}

// Forecast is a budget's burn rate, when it runs out at that pace, and
// whether it already has.
type Forecast struct {
	// PerHour is the burn rate (see PaceHalfLife): spend per hour, a
	// decimal string rounded to 2 places, or below 1 to 3 significant
	// digits (at most 12 places: a per-user budget spends fractions of a
	// cent an hour); "" without spend in the last PaceWindow.
	PerHour string `json:"per_hour,omitempty"`
	// LastSpendAt is when the budget's spent last grew in this instance.
	LastSpendAt *time.Time `json:"last_spend_at,omitempty"`
	// ExhaustsAt is when spent + reserved reaches the limit at that pace;
	// absent without a pace, and when exhausted.
	ExhaustsAt *time.Time `json:"exhausts_at,omitempty"`
	// Exhausted is set when nothing more can be admitted: nothing is
	// available (spent + reserved is at or over the limit: ExhaustedBy
	// "limit"), or the latest admit this budget denied in this instance
	// (limit_reached, at DeniedAt, asking DeniedAmount) would still not
	// fit in what is available now (ExhaustedBy "denied"; not for a call
	// that asked more than the whole limit, which never fits). A budget at 98%
	// that denies every call is exhausted; it stops being so when enough
	// is freed (a settle under its reservation, a release, an expiry) for
	// that call to fit, or its period resets.
	Exhausted    bool       `json:"exhausted,omitempty"`
	ExhaustedBy  string     `json:"exhausted_by,omitempty"`
	DeniedAt     *time.Time `json:"denied_at,omitempty"`
	DeniedAmount string     `json:"denied_amount,omitempty"`
	// ResetsAt is when the period instance ends (absent for lifetime),
	// in UTC, and ResetsLocal the same instant in the budget's zone
	// ("2026-12-03 00:00 +14"); BeforeReset tells whether ExhaustsAt
	// comes first.
	ResetsAt    *time.Time `json:"resets_at,omitempty"`
	ResetsLocal string     `json:"resets_local,omitempty"`
	BeforeReset bool       `json:"before_reset,omitempty"`
}

// LocalLayout is how ResetsLocal shows an instant in a budget's zone.
const LocalLayout = "2006-01-02 15:04 MST"

// Exhaustion causes (Forecast.ExhaustedBy).
const (
	ExhaustedLimit  = "limit"
	ExhaustedDenied = "denied"
)

// paceIn is what forecast reads of one budget.
type paceIn struct {
	// pts are the current instance's points, gap the series' resolution
	// (report.Series.Resolution). From a report.Recent, pts are only the
	// latest (those in PaceWindow, led by the one before them: before),
	// and lastSpend is when the spend last grew (recent).
	pts       []point
	gap       time.Duration
	before    bool
	recent    bool
	lastSpend time.Time
	// limit and used (spent + reserved) are the budget's, now.
	limit, used events.Money
	cal         events.Calendar
	now         time.Time
	// denied is the latest limit_reached denial by the budget in this
	// instance (nil: none seen).
	denied *events.AdmitDenied
}

// paceCalc is the context of the decay weights (display only).
var paceCalc = apd.BaseContext.WithPrecision(24)

// ln2 is ln 2 in paceCalc, computed once: computed for every point, as
// it was, it took 64% of a budgets page's time (BenchmarkBudgetsAPI's
// CPU profile).
var ln2 = func() *apd.Decimal {
	var d apd.Decimal
	if _, err := paceCalc.Ln(&d, apd.New(2, 0)); err != nil {
		panic(err)
	}
	return &d
}()

// decayCalc is the context of a decay weight: 16 digits, more than a
// burn rate shown to the cent and a forecast to the second need, and an
// Exp at 24 digits took 6 times as long (66% of a budgets page's time
// once ln2 was computed once).
var decayCalc = apd.BaseContext.WithPrecision(16)

// decay is 2^(-age/PaceHalfLife), for age >= 0.
func decay(age time.Duration) *apd.Decimal {
	var x, out apd.Decimal
	if _, err := decayCalc.Quo(&x, apd.New(int64(age), 0), apd.New(int64(PaceHalfLife), 0)); err != nil {
		return apd.New(0, 0)
	}
	x.Neg(&x)
	if _, err := decayCalc.Mul(&x, &x, ln2); err != nil {
		return apd.New(0, 0)
	}
	if _, err := decayCalc.Exp(&out, &x); err != nil {
		return apd.New(0, 0)
	}
	return &out
}

// pace is the burn rate of pts at now, per hour (zero without spend in
// the window). A point's spend (its spent minus the point before's)
// happened at its time while the series is one point per revision (gap
// 0); after a downsampling, somewhere since the point before, and it is
// spread evenly over that stretch. Over a stretch of ages [a, b] a spend
// x contributes x * (2^(-a/H) - 2^(-b/H)) / (b - a) per unit of time (the
// mean of the decay over the stretch, times ln 2 / H); at one instant
// (a = b), x * 2^(-a/H) * ln 2 / H.
//
// n counts the points that spent in the window and sum what they spent.
// With before, pts[0] is only the point before the others: its spent and
// time, not a spend.
func pace(pts []point, before bool, gap time.Duration, now time.Time) (rate *apd.Decimal, last time.Time, n int, sum events.Money) {
	total := apd.New(0, 0)
	prev := events.Zero
	for i, p := range pts {
		x := p.Spent.Sub(prev)
		prev = p.Spent
		if i == 0 && before {
			continue
		}
		if x.Sign() <= 0 {
			continue
		}
		last = p.T
		newest := max(now.Sub(p.T), 0)
		if newest >= PaceWindow {
			continue
		}
		n, sum = n+1, sum.Add(x)
		oldest := newest
		if gap > 0 && i > 0 {
			oldest = min(max(now.Sub(pts[i-1].T), 0), PaceWindow)
		}
		var c apd.Decimal
		if oldest == newest {
			// x * 2^(-a/H) * ln 2 / H, per hour.
			_, _ = paceCalc.Mul(&c, dec(x), decay(newest))
			_, _ = paceCalc.Mul(&c, &c, ln2)
			_, _ = paceCalc.Mul(&c, &c, apd.New(int64(time.Hour), 0))
			_, _ = paceCalc.Quo(&c, &c, apd.New(int64(PaceHalfLife), 0))
		} else {
			// The share of x inside the window, spread over its stretch.
			var w apd.Decimal
			_, _ = paceCalc.Sub(&w, decay(newest), decay(oldest))
			_, _ = paceCalc.Mul(&c, dec(x), &w)
			_, _ = paceCalc.Mul(&c, &c, apd.New(int64(time.Hour), 0))
			full := max(now.Sub(pts[i-1].T), 0) - newest // the whole stretch
			_, _ = paceCalc.Quo(&c, &c, apd.New(int64(full), 0))
		}
		_, _ = paceCalc.Add(total, total, &c)
	}
	return total, last, n, sum
}

// resetAt is when the instance of cal containing now ends (the
// calendar's reset), in UTC; nil for lifetime.
func resetAt(cal events.Calendar, now time.Time) *time.Time {
	end, ok := cal.ResetAt(now)
	if !ok {
		return nil
	}
	end = end.UTC()
	return &end
}

// forecast computes the burn rate, exhaustion and reset of one budget;
// times are rounded to the nanosecond.
func forecast(in paceIn) Forecast {
	f := Forecast{ResetsAt: resetAt(in.cal, in.now)}
	if f.ResetsAt != nil {
		f.ResetsLocal = f.ResetsAt.In(in.cal.Location()).Format(LocalLayout)
	}
	if in.used.Cmp(in.limit) >= 0 {
		// A limit of 0 (allow_zero) is exhausted from the start: it
		// admits nothing.
		f.Exhausted, f.ExhaustedBy = true, ExhaustedLimit
	}
	if in.denied != nil {
		at := in.denied.At.UTC()
		f.DeniedAt, f.DeniedAmount = &at, in.denied.Denial.Requested
		asked, err := events.ParseMoney(in.denied.Denial.Requested)
		// A call asking more than the whole limit never fits: it says
		// nothing of what the budget can still admit.
		if !f.Exhausted && err == nil && in.limit.Sub(in.used).Cmp(asked) < 0 && asked.Cmp(in.limit) <= 0 {
			f.Exhausted, f.ExhaustedBy = true, ExhaustedDenied
		}
	}
	rate, last, spends, sum := pace(in.pts, in.before, in.gap, in.now)
	if in.recent {
		last = in.lastSpend
	}
	if !last.IsZero() {
		l := last.UTC()
		f.LastSpendAt = &l
	}
	if rate.Sign() <= 0 {
		return f
	}
	f.PerHour = shownRate(rate)
	if f.Exhausted || in.limit.Sign() <= 0 {
		return f
	}
	if spends < MinPaceSpends && in.limit.Sub(in.used).Cmp(sum) > 0 {
		// One or two calls are no pace: extrapolated, a single call of
		// 1% of a month's budget "runs out" in days for half an hour.
		// They forecast only when as much again would use up the rest.
		return f
	}
	// remaining time = (limit - used) / rate, in nanoseconds.
	var ns apd.Decimal
	if _, err := calc.Mul(&ns, dec(in.limit.Sub(in.used)), apd.New(int64(time.Hour), 0)); err != nil {
		return f
	}
	if _, err := calc.QuoInteger(&ns, &ns, rate); err != nil {
		return f
	}
	n, err := ns.Int64()
	if err != nil || n > int64(100*365*24*time.Hour) {
		return f // beyond any horizon worth showing
	}
	at := in.now.Add(time.Duration(n)).UTC()
	f.ExhaustsAt = &at
	f.BeforeReset = f.ResetsAt == nil || at.Before(*f.ResetsAt)
	return f
}

// shownRate is a positive burn rate as Forecast.PerHour shows it: 2
// places, or 3 significant digits below 1 (at most 12 places, the
// places an amount has).
func shownRate(rate *apd.Decimal) string {
	exp := int32(-2)
	if adj := int32(rate.NumDigits()) + rate.Exponent - 1; adj < 0 {
		exp = max(adj-2, -12)
	}
	var shown apd.Decimal
	if _, err := calc.Quantize(&shown, rate, exp); err != nil {
		return ""
	}
	shown.Reduce(&shown)
	return shown.Text('f')
}
