package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
)

var reportCommand = command{
	name:     "spendgate report",
	synopsis: "--by scope|KEY [--from RFC3339] [--to RFC3339] [--scope KIND:ID ...] [--tenant NAME] [--format table|csv] [--nats-url URL] [--bucket NAME]",
	about: `Sums the reservations opened in [--from, --to) by scope or by the value of a
metadata key (--by model, --by user, ...; --by metadata.KEY names a key
called "scope"), one line per group and unit: reservations, open, settled,
released, expired, late, spend (settled actual cost), overrun, and reserved
(still held by open reservations). A reservation admitted in several scopes
counts in each of them under --by scope. Groups are sorted by unit, then by
spend, largest first. Replays the book of record; memory follows the open
reservations and the number of groups.

` + reportDenialsNote,
}

// reportDenialsNote says why a report has no denial counts.
const reportDenialsNote = `Denials are not recorded in the book of record (a denied admit writes
nothing), so a report does not count them.`

// reportColumns follow the group column of a report.
var reportColumns = []string{"unit", "reservations", "open", "settled", "released", "expired", "late", "spend", "overrun", "reserved"}

// report is spendgate report.
func report(args []string) int {
	cmd := reportCommand
	fs := newFlagSet("report")
	var r replayFlags
	r.register(fs)
	by := fs.String("by", "", `group by "scope" or by a metadata key (model, user, ...; metadata.KEY for any key)`)
	format := fs.String("format", "table", "table or csv")
	if code, ok := cmd.parse(fs, args); !ok {
		return code
	}
	f, err := r.filter()
	if err != nil {
		return cmd.usageError(fs, err.Error())
	}
	var group projector.GroupBy
	switch key, explicit := strings.CutPrefix(*by, projector.MetadataColumnPrefix); {
	case *by == "":
		return cmd.usageError(fs, "--by is required: scope or a metadata key such as model")
	case *by == "scope":
		group = projector.ByScope
	default:
		if err := events.ValidateToken("metadata key", key, 64); err != nil {
			if !explicit {
				return cmd.usageError(fs, fmt.Sprintf("--by %q: want scope or a metadata key: %v", *by, err))
			}
			return cmd.usageError(fs, fmt.Sprintf("--by %q: %v", *by, err))
		}
		group = projector.ByMetadata(key)
	}
	if *format != "table" && *format != "csv" {
		return cmd.usageError(fs, fmt.Sprintf("--format %q: want table or csv", *format))
	}
	p, ctx, done, err := r.projector("report")
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: report:", err)
		return exitError
	}
	defer done()
	rep, err := p.Report(ctx, f, group)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: report:", err)
		return exitError
	}
	name := strings.TrimPrefix(*by, projector.MetadataColumnPrefix)
	if *format == "csv" {
		fmt.Fprintln(os.Stderr, "spendgate: report:", strings.ReplaceAll(reportDenialsNote, "\n", " "))
		err = writeReportCSV(os.Stdout, name, rep)
	} else {
		err = writeReportTable(os.Stdout, name, r, rep)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: report: the report is incomplete:", err)
		return exitError
	}
	return exitOK
}

// reportCells are one group's cells after its value.
func reportCells(g projector.SpendGroup) []string {
	return []string{g.Unit, itoa(g.Reservations), itoa(g.Open), itoa(g.Settled), itoa(g.Released), itoa(g.Expired),
		itoa(g.Late), g.Spend.String(), g.Overrun.String(), g.Reserved.String()}
}

func itoa(n int64) string { return fmt.Sprint(n) }

// writeReportCSV writes rep as CSV with a header; the group column is
// named after --by. Cells go through projector.SafeCell.
func writeReportCSV(out io.Writer, name string, rep *projector.SpendReport) error {
	w := csv.NewWriter(out)
	if err := w.Write(append([]string{projector.SafeCell(name)}, reportColumns...)); err != nil {
		return err
	}
	for _, g := range rep.Groups {
		rec := append([]string{g.Value}, reportCells(g)...)
		for i := range rec {
			rec[i] = projector.SafeCell(rec[i])
		}
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}

// writeReportTable writes rep as an aligned table under a header that
// says what was read and that denials are not counted.
func writeReportTable(out io.Writer, name string, r replayFlags, rep *projector.SpendReport) error {
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
	head := append([]string{strings.ToUpper(name)}, reportColumns...)
	for i := range head {
		head[i] = strings.ToUpper(head[i])
	}
	table := [][]string{head}
	for _, g := range rep.Groups {
		v := g.Value
		if v == "" {
			v = "(none)"
		}
		table = append(table, append([]string{v}, reportCells(g)...))
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
