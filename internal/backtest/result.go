package backtest

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
)

// Result is what a replay found, next to what was recorded.
type Result struct {
	// Scope and Budget name the budget the policy changed (Budget's
	// period and unit; the scope's other budgets replay as recorded).
	Scope  events.Scope     `json:"scope"`
	Budget events.BudgetRef `json:"budget"`
	// Limit and FixedSlot are the policy's ("" when recorded).
	Limit     string `json:"limit,omitempty"`
	FixedSlot string `json:"fixed_slot,omitempty"`
	Reserve   bool   `json:"reservation_rule,omitempty"`
	Learn     string `json:"learn,omitempty"`
	// ExposureCap is the policy's exposure cap ("" when recorded).
	ExposureCap string `json:"exposure_cap,omitempty"`
	// From and To bound the admits reported (nil: open).
	From *time.Time `json:"from,omitempty"`
	To   *time.Time `json:"to,omitempty"`
	// Position is the stream position the history was read up to.
	Position uint64 `json:"position"`
	// Recorded and Replayed count the calls (admits and denials) of the
	// window: as they happened, and under the policy.
	Recorded Tally `json:"recorded"`
	Replayed Tally `json:"replayed"`
	// NewlyDenied are the calls admitted as recorded that the policy
	// denies: Asked what they asked to reserve, Spent what they cost (what
	// the policy would have saved). NewlyAdmitted are recorded denials
	// the policy admits (Asked is what they would have reserved and are
	// assumed to cost).
	NewlyDenied   Change `json:"newly_denied"`
	NewlyAdmitted Change `json:"newly_admitted"`
	// DeniedElsewhere counts the recorded denials another scope's budget
	// made, or one no limit changes (an unpriced model, an admit in
	// another currency than the budget's): denied again, whatever the
	// policy. An admit in another currency adds nothing to the denied
	// amounts, which are in the budget's unit.
	DeniedElsewhere int64 `json:"denied_elsewhere"`
	// PlacedByTime counts the recorded denials whose balance numbers
	// matched no recorded point: replayed at their time only.
	PlacedByTime int64 `json:"placed_by_time"`
	// Errors counts the replay's own failures (none in a whole history).
	Errors int64 `json:"errors"`
	// RanOut is, per period instance of the budget, the first time it
	// denied an admit on its limit: recorded and replayed.
	RanOut []RunOut `json:"ran_out"`
	// Balances are the budget's balances at the end: recorded (the last
	// numbers the ledger stated) and replayed.
	Balances []BalanceOutcome `json:"balances"`
	// Groups are the blocked calls by metadata key and value.
	Groups []Group `json:"groups"`
	// Exact is the replay compared with the record, step by step: only
	// under a policy that changes nothing (Checked); Same only then.
	Exact Exactness `json:"exact"`
}

// Tally counts calls.
type Tally struct {
	Admitted     int64        `json:"admitted"`
	Denied       int64        `json:"denied"`
	DeniedAmount events.Money `json:"denied_amount"`
	Spent        events.Money `json:"spent"`
	// ExposureCapDenied counts the denials of reason exposure_cap (only
	// of the replay), and Excess the part of the admitted calls' cost an
	// exposure cap kept out of spent (a settle is charged at most its
	// ceiling).
	ExposureCapDenied int64        `json:"exposure_cap_denied,omitempty"`
	Excess            events.Money `json:"excess,omitzero"`
}

// Change counts the calls whose decision the policy changed.
type Change struct {
	Calls int64        `json:"calls"`
	Asked events.Money `json:"asked"`
	Spent events.Money `json:"spent"`
}

// RunOut is when a balance first denied an admit on its limit.
type RunOut struct {
	Instance string     `json:"instance"`
	Recorded *time.Time `json:"recorded,omitempty"`
	Replayed *time.Time `json:"replayed,omitempty"`
}

// Numbers are a balance's numbers.
type Numbers struct {
	Limit    events.Money `json:"limit"`
	Spent    events.Money `json:"spent"`
	Reserved events.Money `json:"reserved"`
	Overrun  events.Money `json:"overrun"`
	Open     int64        `json:"open"`
	// Exposure is what the open reservations may still add above what
	// they hold (omitted when zero).
	Exposure events.Money `json:"exposure,omitzero"`
}

// BalanceOutcome is one balance of the budget at the end: Recorded is
// nil for a balance the record states no numbers of (one only the replay
// reserved in).
type BalanceOutcome struct {
	Instance string   `json:"instance"`
	Recorded *Numbers `json:"recorded,omitempty"`
	Replayed Numbers  `json:"replayed"`
	// MaxExposure is the largest exposure the balance held after any step
	// of the replay, and MaxCommitted the largest spent + reserved +
	// exposure: what a budget with an exposure cap keeps within its cap
	// and within limit + cap (see docs/exposure.md).
	MaxExposure  events.Money `json:"max_exposure,omitzero"`
	MaxCommitted events.Money `json:"max_committed,omitzero"`
}

// Group is the blocked calls of one metadata value.
type Group struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// RecordedDenied and ReplayDenied count its calls denied as recorded
	// and under the policy; ReplayDeniedAmount what the latter asked.
	RecordedDenied     int64        `json:"recorded_denied"`
	ReplayDenied       int64        `json:"replay_denied"`
	ReplayDeniedAmount events.Money `json:"replay_denied_amount"`
	// NewlyDenied and NewlyAdmitted count the calls whose decision
	// changed; Saved is what the newly denied ones cost as recorded.
	NewlyDenied   int64        `json:"newly_denied"`
	NewlyAdmitted int64        `json:"newly_admitted"`
	Saved         events.Money `json:"saved"`
}

// Exactness is a replay under the recorded budgets compared with the
// record: every admit admitted, every denial denied by the same balance,
// and every balance, after every revision, at the numbers the revision
// stated.
type Exactness struct {
	Checked    bool     `json:"checked"`
	Same       bool     `json:"same"`
	Mismatches int64    `json:"mismatches"`
	Examples   []string `json:"examples,omitempty"`
}

func newResult(h *History, pol Policy, target events.BudgetRef, opts Options) *Result {
	res := &Result{Scope: h.Scope, Budget: target, Position: h.Position, Reserve: pol.Reserve != nil,
		RanOut: []RunOut{}, Balances: []BalanceOutcome{}, Groups: []Group{}}
	if pol.Limit != nil {
		res.Limit = pol.Limit.String()
	}
	if pol.FixedSlot != nil {
		res.FixedSlot = pol.FixedSlot.String()
	}
	if pol.Learn != nil {
		res.Learn = pol.Learn.String()
	}
	if pol.ExposureCap != nil {
		res.ExposureCap = pol.ExposureCap.String()
	}
	if !opts.From.IsZero() {
		t := opts.From
		res.From = &t
	}
	if !opts.To.IsZero() {
		t := opts.To
		res.To = &t
	}
	res.Exact.Checked = !pol.changes()
	return res
}

// grouper sums blocked calls by metadata key and value.
type grouper struct {
	by     []string // nil: every key
	keys   map[string]bool
	values map[string]map[string]*Group
}

func newGrouper(by []string) *grouper {
	return &grouper{by: by, keys: map[string]bool{}, values: map[string]map[string]*Group{}}
}

// add applies f to the group of each key's value in metadata.
func (g *grouper) add(metadata map[string]string, f func(*Group)) {
	keys := g.by
	if keys == nil {
		for k := range metadata {
			if !g.keys[k] && len(g.keys) >= MaxGroupKeys {
				continue
			}
			g.keys[k] = true
		}
		keys = make([]string, 0, len(g.keys))
		for k := range g.keys {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		v, ok := metadata[k]
		if !ok || v == "" {
			v = NoValue
		}
		vs := g.values[k]
		if vs == nil {
			vs = map[string]*Group{}
			g.values[k] = vs
		}
		grp := vs[v]
		if grp == nil {
			if len(vs) >= MaxGroupValues {
				v = OtherValue
				grp = vs[v]
			}
			if grp == nil {
				grp = &Group{Key: k, Value: v}
				vs[v] = grp
			}
		}
		f(grp)
	}
}

// groups returns the groups by key, then by calls denied under the
// policy (most first), then by value.
func (g *grouper) groups() []Group {
	out := []Group{}
	for _, vs := range g.values {
		for _, grp := range vs {
			out = append(out, *grp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		if a.ReplayDenied != b.ReplayDenied {
			return a.ReplayDenied > b.ReplayDenied
		}
		return a.Value < b.Value
	})
	return out
}

// Formats of WriteTo.
const (
	FormatTable = "table"
	FormatCSV   = "csv"
	FormatJSON  = "json"
)

// Write writes res as format (FormatTable, FormatCSV or FormatJSON).
func (res *Result) Write(w io.Writer, format string) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	case FormatCSV:
		return res.writeCSV(w, report.DecimalPoint)
	case FormatTable:
		return res.writeTable(w)
	}
	return events.Errorf(events.CodeInvalidRequest, "format %q: want table, csv or json", format)
}

// WriteCSV writes res as FormatCSV, its amounts in d (report.DecimalComma:
// 12,50, and fields separated by semicolons).
func (res *Result) WriteCSV(w io.Writer, d report.Decimal) error { return res.writeCSV(w, d) }

// summary is the result's lines as (section, what, recorded, replayed).
func (res *Result) summary() [][4]string {
	n := func(v int64) string { return fmt.Sprint(v) }
	t := func(p *time.Time) string {
		if p == nil {
			return "-"
		}
		return p.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	rows := [][4]string{
		{"calls", "admitted", n(res.Recorded.Admitted), n(res.Replayed.Admitted)},
		{"calls", "denied", n(res.Recorded.Denied), n(res.Replayed.Denied)},
		{"calls", "denied_amount", res.Recorded.DeniedAmount.String(), res.Replayed.DeniedAmount.String()},
		{"calls", "spent", res.Recorded.Spent.String(), res.Replayed.Spent.String()},
		{"change", "newly_denied", "", n(res.NewlyDenied.Calls)},
		{"change", "newly_denied_asked", "", res.NewlyDenied.Asked.String()},
		{"change", "newly_denied_spent", "", res.NewlyDenied.Spent.String()},
		{"change", "newly_admitted", "", n(res.NewlyAdmitted.Calls)},
		{"change", "newly_admitted_asked", "", res.NewlyAdmitted.Asked.String()},
		{"change", "denied_elsewhere", n(res.DeniedElsewhere), n(res.DeniedElsewhere)},
	}
	if res.ExposureCap != "" || res.Recorded.ExposureCapDenied != 0 || res.Replayed.ExposureCapDenied != 0 {
		rows = append(rows,
			[4]string{"calls", "exposure_cap_denied", n(res.Recorded.ExposureCapDenied), n(res.Replayed.ExposureCapDenied)},
			[4]string{"calls", "excess", res.Recorded.Excess.String(), res.Replayed.Excess.String()})
	}
	for _, ro := range res.RanOut {
		rows = append(rows, [4]string{"ran_out", ro.Instance, t(ro.Recorded), t(ro.Replayed)})
	}
	for _, b := range res.Balances {
		rec := Numbers{}
		if b.Recorded != nil {
			rec = *b.Recorded
		}
		for _, f := range []struct {
			what string
			a, b string
		}{{"limit", rec.Limit.String(), b.Replayed.Limit.String()},
			{"spent", rec.Spent.String(), b.Replayed.Spent.String()},
			{"reserved", rec.Reserved.String(), b.Replayed.Reserved.String()},
			{"overrun", rec.Overrun.String(), b.Replayed.Overrun.String()},
			{"open", n(rec.Open), n(b.Replayed.Open)}} {
			if b.Recorded == nil {
				f.a = "-"
			}
			rows = append(rows, [4]string{"balance " + b.Instance, f.what, f.a, f.b})
		}
	}
	return rows
}

var groupColumns = []string{"key", "value", "recorded_denied", "replay_denied", "replay_denied_amount", "newly_denied", "newly_admitted", "saved"}

func groupCells(g Group) []string {
	return []string{g.Key, g.Value, fmt.Sprint(g.RecordedDenied), fmt.Sprint(g.ReplayDenied), g.ReplayDeniedAmount.String(),
		fmt.Sprint(g.NewlyDenied), fmt.Sprint(g.NewlyAdmitted), g.Saved.String()}
}

// writeCSV writes the summary as section,what,recorded,replayed rows, a
// blank line, then the groups with a header. Cells go through
// report.SafeCell.
func (res *Result) writeCSV(out io.Writer, d report.Decimal) error {
	summary := []string{"section", "what", "recorded", "replayed"}
	// recorded and replayed hold counts and amounts: only the amounts,
	// the cells shaped as decimals, change with d.
	w := report.NewCSVWriter(out, d, summary, "recorded", "replayed")
	write := func(w *report.CSVWriter, rec []string) error {
		for i := range rec {
			rec[i] = report.SafeCell(rec[i])
		}
		return w.Write(rec)
	}
	if err := write(w, summary); err != nil {
		return err
	}
	for _, r := range res.summary() {
		if err := write(w, r[:]); err != nil {
			return err
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	if _, err := io.WriteString(out, "\n"); err != nil {
		return err
	}
	g := report.NewCSVWriter(out, d, groupColumns, "replay_denied_amount", "saved")
	if err := write(g, append([]string(nil), groupColumns...)); err != nil {
		return err
	}
	for _, gr := range res.Groups {
		if err := write(g, groupCells(gr)); err != nil {
			return err
		}
	}
	g.Flush()
	return g.Error()
}

// writeTable writes a header, the summary and the groups as aligned
// tables.
func (res *Result) writeTable(out io.Writer) error {
	policy := []string{}
	if res.Limit != "" {
		policy = append(policy, "limit "+res.Limit)
	}
	if res.FixedSlot != "" {
		policy = append(policy, "fixed slot "+res.FixedSlot)
	}
	if res.Learn != "" {
		policy = append(policy, "learned reservations ("+res.Learn+")")
	} else if res.Reserve {
		policy = append(policy, "a reservation rule")
	}
	if res.ExposureCap != "" {
		policy = append(policy, "exposure cap "+res.ExposureCap)
	}
	if len(policy) == 0 {
		policy = append(policy, "the recorded budgets")
	}
	from, to := "the start", "the end of the book"
	if res.From != nil {
		from = res.From.UTC().Format(time.RFC3339)
	}
	if res.To != nil {
		to = res.To.UTC().Format(time.RFC3339)
	}
	if _, err := fmt.Fprintf(out, "# backtest of %s per %s under %s, calls from %s to %s (book position %d)\n",
		res.Scope, res.Budget.Period, strings.Join(policy, ", "), from, to, res.Position); err != nil {
		return err
	}
	if res.Exact.Checked {
		verdict := "the replay reproduces every recorded decision and balance"
		if !res.Exact.Same {
			verdict = fmt.Sprintf("the replay differs from the record in %d places", res.Exact.Mismatches)
		}
		if _, err := fmt.Fprintf(out, "# exact: %s\n", verdict); err != nil {
			return err
		}
	}
	rows := [][]string{{"SECTION", "WHAT", "RECORDED", "REPLAYED"}}
	for _, r := range res.summary() {
		rows = append(rows, []string{r[0], r[1], r[2], r[3]})
	}
	if err := writeAligned(out, rows); err != nil {
		return err
	}
	if len(res.Groups) == 0 {
		return nil
	}
	if _, err := io.WriteString(out, "\n# blocked calls by metadata\n"); err != nil {
		return err
	}
	rows = [][]string{{}}
	for _, c := range groupColumns {
		rows[0] = append(rows[0], strings.ToUpper(c))
	}
	for _, g := range res.Groups {
		rows = append(rows, groupCells(g))
	}
	return writeAligned(out, rows)
}

// writeAligned writes rows as columns two spaces apart (text/tabwriter).
func writeAligned(out io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		if _, err := io.WriteString(tw, strings.Join(row, "\t")+"\n"); err != nil {
			return err
		}
	}
	return tw.Flush()
}
