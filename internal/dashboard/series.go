package dashboard

import (
	"time"

	"github.com/cockroachdb/apd/v3"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
)

// PaceWindow is the trailing window of the burn rate: the pace is the
// spend since the first point in it, over the time since that point.
const PaceWindow = 24 * time.Hour

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

// Forecast is a budget's burn rate and when it runs out at that pace.
type Forecast struct {
	// PerHour is the spend per hour over the pace window, a decimal
	// string rounded to 2 places ("" without a pace).
	PerHour string `json:"per_hour,omitempty"`
	// ExhaustsAt is when spent reaches the limit at that pace; absent
	// without a pace. Exhausted is set when spent is already at or over
	// the limit.
	ExhaustsAt *time.Time `json:"exhausts_at,omitempty"`
	Exhausted  bool       `json:"exhausted,omitempty"`
	// ResetsAt is when the period instance ends (absent for lifetime);
	// BeforeReset tells whether ExhaustsAt comes first.
	ResetsAt    *time.Time `json:"resets_at,omitempty"`
	BeforeReset bool       `json:"before_reset,omitempty"`
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

// forecast computes the pace from pts (the current instance's points) at
// now, with exact decimals; the result is rounded to the nanosecond. cal
// is the budget's calendar (its period in its zone).
func forecast(pts []point, limit events.Money, cal events.Calendar, now time.Time) Forecast {
	f := Forecast{ResetsAt: resetAt(cal, now)}
	if len(pts) == 0 {
		return f
	}
	last := pts[len(pts)-1]
	if limit.Sign() > 0 && last.Spent.Cmp(limit) >= 0 {
		f.Exhausted = true
	}
	first := -1
	for i, p := range pts {
		if !p.T.Before(now.Add(-PaceWindow)) {
			first = i
			break
		}
	}
	// The pace starts at the last point before the window when there is
	// one (the spend level entering the window), else at the window's
	// first point.
	if first > 0 {
		first--
	}
	if first < 0 {
		return f
	}
	start := pts[first]
	elapsed := now.Sub(start.T)
	spent := last.Spent.Sub(start.Spent)
	if elapsed <= 0 || spent.Sign() <= 0 {
		return f
	}
	// per hour = spent * 1h / elapsed
	var ph apd.Decimal
	if _, err := calc.Mul(&ph, dec(spent), apd.New(int64(time.Hour), 0)); err != nil {
		return f
	}
	if _, err := calc.Quo(&ph, &ph, apd.New(int64(elapsed), 0)); err != nil {
		return f
	}
	var shown apd.Decimal
	if _, err := calc.Quantize(&shown, &ph, -2); err == nil {
		shown.Reduce(&shown)
		f.PerHour = shown.Text('f')
	}
	if f.Exhausted || limit.Sign() <= 0 {
		return f
	}
	// remaining time = (limit - spent) * elapsed / spent
	var ns apd.Decimal
	if _, err := calc.Mul(&ns, dec(limit.Sub(last.Spent)), apd.New(int64(elapsed), 0)); err != nil {
		return f
	}
	if _, err := calc.QuoInteger(&ns, &ns, dec(spent)); err != nil {
		return f
	}
	n, err := ns.Int64()
	if err != nil || n > int64(100*365*24*time.Hour) {
		return f // beyond any horizon worth showing
	}
	at := now.Add(time.Duration(n)).UTC()
	f.ExhaustsAt = &at
	f.BeforeReset = f.ResetsAt == nil || at.Before(*f.ResetsAt)
	return f
}
