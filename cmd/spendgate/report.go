package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

var reportCommand = command{
	name:     "spendgate report",
	synopsis: "--by scope|KEY [--period YYYY-MM|YYYY-Www|YYYY-MM-DD | --from RFC3339 --to RFC3339] [--tenant NAME] [--format table|csv] [--decimal point|comma] [--shadow] [--replay (--trusted-keys KEYS | --unverified) [--scope KIND:ID ...] [--as-of RFC3339|POSITION] [--bucket NAME]] [--nats-url URL]",
	about: `Sums the reservations opened in [--from, --to) (or in the UTC month, week or day
--period names) by scope or by the value of a metadata key (--by model,
--by user, ...; --by metadata.KEY names a key called "scope"), one line per
group and unit: reservations, open, settled,
released, expired, late, spend (settled actual cost), overrun, reserved
(still held by open reservations), and denials (admits denied in the group,
by the time they were denied). A reservation, or a denied admit, in several
scopes counts in each of them under --by scope. Groups are sorted by unit, then by
spend, largest first.

By default it asks a running replica (the report endpoint), which keeps
these sums per hour as it folds the ledger: --from and --to must then fall
on whole UTC hours, and the answer costs the hours it covers. A replica
keeps, per tenant, the first 32 metadata keys and 500 values per key, and
the first 500 scopes of each of 32 scope kinds (the part before ':'). The
values past a key's 500 add up in a group shown as (other); the scopes
past a kind's 500 in a group named as the kind's default (run:*), and
those of kinds past 32 in (other). With --replay it
replays the book of record instead (any --from/--to, --scope, no limits;
memory follows the open reservations and the number of groups): the same
numbers, for auditors to cross-check. --as-of (with --replay) reports the
book as it stood at a book position (as a report or export printed it) or
an RFC 3339 time, with the denials and checks of that instant or before:
the month's close report, the same however often it runs.

Check and shadow decisions (admits with "mode": "check" or "shadow", which
reserve nothing) are reported apart from the spend: the table ends with
them, grouped the same way, by mode and unit (would admit, would deny,
amount they would have reserved, amount the denied asked, the denied per
reason); --shadow prints only them (and is the way to get them as CSV).
They come from the same records as denials.

` + reportDenialsNote,
}

// shadowColumns follow the group column of a report's shadow decisions.
var shadowColumns = []string{"mode", "unit", "admitted", "denied", "amount", "asked", "reasons"}

// reportDenialsNote says where a report's denial counts come from.
const reportDenialsNote = `Denials come from the denial records each replica keeps (stream
<bucket>_denials, 31 days by default), not from the book of record: a
denied admit writes nothing to the ledger.`

// reportColumns follow the group column of a report.
var reportColumns = []string{"unit", "reservations", "open", "settled", "released", "expired", "late", "spend", "overrun", "reserved", "denials"}

// reportCmd is spendgate report.
func reportCmd(args []string) int {
	cmd := reportCommand
	fs := newFlagSet("report")
	var r replayFlags
	r.register(fs)
	by := fs.String("by", "", `group by "scope" or by a metadata key (model, user, ...; metadata.KEY for any key)`)
	format := fs.String("format", "table", "table or csv")
	replay := fs.Bool("replay", false, "replay the book of record instead of asking a replica")
	shadow := fs.Bool("shadow", false, "print the check and shadow decisions (not spend) only")
	period := fs.String("period", "", "a UTC month (2026-11), ISO week (2026-W49) or day (2026-11-30): --from and --to for you")
	decimal := decimalFlag(fs)
	asOf := fs.String("as-of", "", "with --replay: the book as it stood at this RFC 3339 time or book position (as an export or report printed it), denials up to that instant: the same report however often it runs")
	if code, ok := cmd.parse(fs, args); !ok {
		return code
	}
	dec, err := report.ParseDecimal(*decimal)
	if err != nil {
		return cmd.usageError(fs, "--decimal "+strconv.Quote(*decimal)+": want point or comma")
	}
	if dec != report.DecimalPoint && *format != "csv" {
		return cmd.usageError(fs, "--decimal comma is for --format csv")
	}
	if *period != "" {
		if r.from != "" || r.to != "" {
			return cmd.usageError(fs, "--period replaces --from and --to: give one or the other")
		}
		from, to, err := periodBounds(*period)
		if err != nil {
			return cmd.usageError(fs, err.Error())
		}
		r.from, r.to = from.Format(time.RFC3339), to.Format(time.RFC3339)
	}
	if len(r.scopes) > 0 && !*replay {
		return cmd.usageError(fs, "--scope needs --replay: a replica's report covers every reservation")
	}
	f, err := r.filter()
	if err != nil {
		return cmd.usageError(fs, err.Error())
	}
	if *asOf != "" {
		if !*replay {
			return cmd.usageError(fs, "--as-of needs --replay: a replica's report is of the book now")
		}
		if msg := parseAsOf(*asOf, &f); msg != "" {
			return cmd.usageError(fs, msg)
		}
	}
	if *replay {
		if _, err := r.verify.keys(); err != nil {
			return cmd.usageError(fs, "--replay "+err.Error())
		}
	}
	var group report.GroupBy
	switch key, explicit := strings.CutPrefix(*by, report.MetadataColumnPrefix); {
	case *by == "":
		return cmd.usageError(fs, "--by is required: scope or a metadata key such as model")
	case *by == "scope":
		group = report.ByScope
	default:
		if err := events.ValidateToken("metadata key", key, 64); err != nil {
			if !explicit {
				return cmd.usageError(fs, fmt.Sprintf("--by %q: want scope or a metadata key: %v", *by, err))
			}
			return cmd.usageError(fs, fmt.Sprintf("--by %q: %v", *by, err))
		}
		group = report.ByMetadata(key)
	}
	if *format != "table" && *format != "csv" {
		return cmd.usageError(fs, fmt.Sprintf("--format %q: want table or csv", *format))
	}
	var rep *report.SpendReport
	if *replay {
		p, ctx, done, err := r.reader("report")
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: report:", err)
			return exitError
		}
		defer done()
		if rep, err = p.Report(ctx, f, group); errors.Is(err, projector.ErrPastEnd) {
			fmt.Fprintf(os.Stderr, "spendgate: report: --as-of %s: %v; give a position an export or report printed, or leave --as-of out for the book now\n", *asOf, err)
			return exitUsage
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: report:", err)
			return exitError
		}
	} else {
		var reply events.ReportReply
		// One tenant's report is asked on its subject: the replica takes
		// the tenant from there, never from the body.
		endpoint := streams.EndpointReport
		if r.tenant != "" {
			endpoint = streams.TenantToken + "." + r.tenant + "." + streams.EndpointReport
		}
		if code := r.client.fetch(endpoint, events.ReportRequest{By: *by, From: r.from, To: r.to, Shadow: true}, &reply); code != 0 {
			return code
		}
		if r.tenant != "" && group == report.ByScope {
			storedScopes(r.tenant, &reply)
		}
		if rep, err = reportOf(group, f, reply); err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: report:", err)
			return exitError
		}
		if reply.Folded > 0 {
			fmt.Fprintf(os.Stderr, "spendgate: report: the %d groups with the least spend are summed in (other) so that the reply fits one message; spendgate report --replay lists every group\n", reply.Folded)
		}
	}
	name := strings.TrimPrefix(*by, report.MetadataColumnPrefix)
	switch {
	case *shadow && *format == "csv":
		err = writeShadowCSV(os.Stdout, name, rep, dec)
	case *shadow:
		err = writeShadowTable(os.Stdout, name, r, rep)
	case *format == "csv":
		err = writeReportCSV(os.Stdout, name, rep, dec)
		if err == nil {
			// The table's header names the book position; a CSV has no
			// place for it that a spreadsheet would not take for a row.
			fmt.Fprintf(os.Stderr, "spendgate: report: as of book position %d\n", rep.Position)
		}
	default:
		err = writeReportTable(os.Stdout, name, r, rep)
		if err == nil && len(rep.Shadow) > 0 {
			_, err = fmt.Fprintln(os.Stdout)
			if err == nil {
				err = writeShadowTable(os.Stdout, name, r, rep)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: report: the report is incomplete:", err)
		return exitError
	}
	return exitOK
}

// periodBounds reads --period: a UTC month "2026-11", ISO week "2026-W49"
// or day "2026-11-30", as [start, end) (the calendar's instance: report
// buckets are UTC hours, so the calendar is UTC's).
func periodBounds(p string) (time.Time, time.Time, error) {
	for _, period := range []events.Period{events.PeriodMonth, events.PeriodWeek, events.PeriodDay} {
		if start, end, ok := events.CalendarOf(period, nil).InstanceBounds(p); ok {
			return start, end, nil
		}
	}
	return time.Time{}, time.Time{}, fmt.Errorf("--period %q: want a UTC month like 2026-11, a week like 2026-W49 or a day like 2026-11-30", p)
}

// otherValue names, in a printed report, the one Other group (value ""):
// the metadata values past what a replica tracks, or the scopes of the
// kinds past it. The Other group of a scope kind keeps its value
// ("run:*"), which no scope has.
const otherValue = "(other)"

// storedScopes names the scopes of tenant's report by scope as stored,
// as the replay prints them: a kind's Other group too (acme/run:*), not
// the one Other group (value "").
func storedScopes(tenant string, reply *events.ReportReply) {
	for i := range reply.Groups {
		if reply.Groups[i].Value != "" {
			reply.Groups[i].Value = string(events.TenantScope(tenant, events.Scope(reply.Groups[i].Value)))
		}
	}
	for i := range reply.Shadow {
		if reply.Shadow[i].Value != "" {
			reply.Shadow[i].Value = string(events.TenantScope(tenant, events.Scope(reply.Shadow[i].Value)))
		}
	}
}

// reportOf reads a report endpoint's reply as a SpendReport.
func reportOf(by report.GroupBy, f report.Filter, reply events.ReportReply) (*report.SpendReport, error) {
	rep := &report.SpendReport{By: by, Filter: f, Position: reply.Position}
	for _, g := range reply.Groups {
		sg := report.SpendGroup{Value: g.Value, Unit: g.Unit, Reservations: g.Reservations, Open: g.Open,
			Settled: g.Settled, Released: g.Released, Expired: g.Expired, Late: g.Late, Denials: g.Denials}
		if g.Other && g.Value == "" {
			sg.Value = otherValue
		}
		for _, m := range []struct {
			to *events.Money
			s  string
		}{{&sg.Spend, g.Spend}, {&sg.Overrun, g.Overrun}, {&sg.Reserved, g.Reserved}} {
			v, err := events.ParseSum(m.s)
			if err != nil {
				return nil, fmt.Errorf("the reply holds %q: %w", m.s, err)
			}
			*m.to = v
		}
		rep.Groups = append(rep.Groups, sg)
	}
	for _, g := range reply.Shadow {
		sg := report.ShadowGroup{Value: g.Value, Other: g.Other, Mode: g.Mode, Unit: g.Unit, Admitted: g.Admitted, Denied: g.Denied, Reasons: g.Reasons}
		if g.Other && g.Value == "" {
			sg.Value = otherValue
		}
		for _, m := range []struct {
			to *events.Money
			s  string
		}{{&sg.Amount, g.Amount}, {&sg.Asked, g.Asked}} {
			v, err := events.ParseSum(m.s)
			if err != nil {
				return nil, fmt.Errorf("the reply holds %q: %w", m.s, err)
			}
			*m.to = v
		}
		rep.Shadow = append(rep.Shadow, sg)
	}
	return rep, nil
}

// shadowCells are one shadow group's cells after its value; reasons are
// "reason=count" pairs, sorted, space-separated.
func shadowCells(g report.ShadowGroup) []string {
	reasons := make([]string, 0, len(g.Reasons))
	for r, n := range g.Reasons {
		reasons = append(reasons, string(r)+"="+itoa(n))
	}
	slices.Sort(reasons)
	return []string{g.Mode, g.Unit, itoa(g.Admitted), itoa(g.Denied), g.Amount.String(), g.Asked.String(), strings.Join(reasons, " ")}
}

// writeShadowCSV writes rep's shadow decisions as CSV with a header.
func writeShadowCSV(out io.Writer, name string, rep *report.SpendReport, d report.Decimal) error {
	return writeCSV(out, d, name, shadowColumns, shadowRows(rep), "amount", "asked")
}

// shadowRows are rep's shadow groups as rows, the group value first.
func shadowRows(rep *report.SpendReport) [][]string {
	rows := make([][]string, 0, len(rep.Shadow))
	for _, g := range rep.Shadow {
		rows = append(rows, append([]string{g.Value}, shadowCells(g)...))
	}
	return rows
}

// writeShadowTable writes rep's shadow decisions as an aligned table
// under a header that says they are not spend.
func writeShadowTable(out io.Writer, name string, r replayFlags, rep *report.SpendReport) error {
	from, to := r.from, r.to
	if from == "" {
		from = "the start"
	}
	if to == "" {
		to = "now"
	}
	if _, err := fmt.Fprintf(out, "# check and shadow decisions by %s from %s to %s: answers that reserved nothing, not spend\n", name, from, to); err != nil {
		return err
	}
	return writeTable(out, name, shadowColumns, shadowRows(rep))
}

// reportCells are one group's cells after its value.
func reportCells(g report.SpendGroup) []string {
	return []string{g.Unit, itoa(g.Reservations), itoa(g.Open), itoa(g.Settled), itoa(g.Released), itoa(g.Expired),
		itoa(g.Late), g.Spend.String(), g.Overrun.String(), g.Reserved.String(), itoa(g.Denials)}
}

func itoa(n int64) string { return fmt.Sprint(n) }

// writeReportCSV writes rep as CSV with a header; the group column is
// named after --by. Cells go through report.SafeCell.
func writeReportCSV(out io.Writer, name string, rep *report.SpendReport, d report.Decimal) error {
	rows := make([][]string, 0, len(rep.Groups))
	for _, g := range rep.Groups {
		rows = append(rows, append([]string{g.Value}, reportCells(g)...))
	}
	return writeCSV(out, d, name, reportColumns, rows, "spend", "overrun", "reserved")
}

// writeCSV writes a header (the group column name, then columns) and
// rows as CSV, every cell through report.SafeCell, the columns named in
// decimals written in d (never the group column, whatever --by named it).
func writeCSV(out io.Writer, d report.Decimal, name string, columns []string, rows [][]string, decimals ...string) error {
	header := append([]string{name}, columns...)
	w := report.NewCSVWriter(out, d, append([]string{""}, columns...), decimals...)
	for _, rec := range append([][]string{header}, rows...) {
		for i := range rec {
			rec[i] = report.SafeCell(rec[i])
		}
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}

// writeReportTable writes rep as an aligned table under a header that
// says what was read and where the denial counts come from.
func writeReportTable(out io.Writer, name string, r replayFlags, rep *report.SpendReport) error {
	from, to := r.from, r.to
	if from == "" {
		from = "the start"
	}
	if to == "" {
		to = "the end of the book"
	}
	in := ""
	if len(r.scopes) > 0 {
		in = " in " + strings.Join(r.scopes, " or ")
	}
	if _, err := fmt.Fprintf(out, "# spend by %s of the reservations%s opened from %s to %s (book position %d)\n# %s\n",
		name, in, from, to, rep.Position, strings.ReplaceAll(reportDenialsNote, "\n", "\n# ")); err != nil {
		return err
	}
	rows := make([][]string, 0, len(rep.Groups))
	for _, g := range rep.Groups {
		rows = append(rows, append([]string{g.Value}, reportCells(g)...))
	}
	return writeTable(out, name, reportColumns, rows)
}

// writeTable writes rows under an upper-case header (the group column
// named after --by, then columns) as an aligned table; an empty group
// value shows as (none).
func writeTable(out io.Writer, name string, columns []string, rows [][]string) error {
	head := append([]string{name}, columns...)
	for i := range head {
		head[i] = strings.ToUpper(head[i])
	}
	table := [][]string{head}
	for _, row := range rows {
		if row[0] == "" {
			row[0] = "(none)"
		}
		table = append(table, row)
	}
	return writeAligned(out, table)
}

// writeAligned writes rows as columns two spaces apart: the first column
// (a name) left-aligned, the others (numbers) right-aligned.
func writeAligned(out io.Writer, rows [][]string) error {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		b.Reset()
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteByte('\n')
		if _, err := io.WriteString(out, b.String()); err != nil {
			return err
		}
	}
	return nil
}
