package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
)

var auditExportCommand = command{
	name:     "spendgate audit export",
	synopsis: "[--from RFC3339] [--to RFC3339] [--scope KIND:ID ...] [--tenant NAME] [--format csv|jsonl] [--times exact|sheet] [--decimal point|comma] [--metadata KEYS] [--totals FILE] [--as-of RFC3339|POSITION] [--shadow] (--trusted-keys KEYS | --unverified) [--within D] [--nats-url URL] [--bucket NAME]",
	about: `Writes one row per reservation on standard output: its request id, scopes,
balances, unit, reserved amount, opened / expires / settled / released /
expired times, status, actual (the cost the settle gave), overrun, excess
(what an exposure cap kept out of a budget), settle note, late, release
reason and every metadata key (CSV: one column "metadata.KEY" per key; JSONL: an object).

It streams: memory follows the reservations open at each point of the book,
not the number of rows. A row is written when its reservation closes, in the
order the book closed them; an expired reservation when a late settle comes
or 72 h (of the server's clock) after it expired; the reservations still open
at the end come last, in the order they opened. --from/--to select by the
time a reservation opened (from inclusive, to exclusive).
--as-of reads the book as it stood at a time, or at a book position (each
export ends with "as of book position N" on stderr): rows that closed later
are written as they were then (open, or expired), so the same command gives
the same file tomorrow.

CSV: RFC 4180 quoting, a header row, decimals exactly as recorded, RFC 3339
UTC times, an empty cell for what did not happen; a cell starting with = + -
@ (or a tab or CR) gets a leading ' so that a spreadsheet does not run it as
a formula. The metadata columns are the union of the keys of the selected
reservations: a first, cheap pass over the book collects them.
--times sheet writes CSV times as 2026-12-03 08:25:39 (UTC, whole seconds,
truncated), which spreadsheets open as dates and times; the default, exact,
writes them as recorded (2026-12-03T08:25:39.564075996Z), which they open as
text. JSONL times are always exact.
--decimal comma writes CSV decimals with a decimal comma (12,50) and separates
the fields with semicolons, as Excel expects in a locale with a decimal comma
(de-DE, fr-FR, ...); the totals file too.
--totals FILE writes the totals per unit (CSV, or JSONL with --format jsonl).

--shadow writes the check and shadow decisions instead (admits with "mode":
"check" or "shadow", which reserve nothing and are not in the book: the
replicas record them on the denial stream, kept 31 days by default), one
row per decision in the order they were recorded: at, replica, tenant,
mode, request_id, result (admitted or denied), reason, blocked_by, scopes,
amount, unit, model and one "metadata.KEY" column per key (JSONL: each
record as the replica wrote it, admit.checked.v1). --from/--to select by
the decision's time, --scope and --tenant as for reservations.
Exit status 1 on any error, a failed write included: a file that ends early
is never reported as complete.`,
}

// auditExport is spendgate audit export.
func auditExport(args []string) int {
	cmd := auditExportCommand
	fs := newFlagSet("audit export")
	var r replayFlags
	r.register(fs)
	format := fs.String("format", "csv", "csv or jsonl")
	totals := fs.String("totals", "", "also write the totals per unit to this file")
	shadow := fs.Bool("shadow", false, "write the check and shadow decisions instead of the reservations")
	times := fs.String("times", "exact", "CSV times: exact (RFC 3339, as recorded) or sheet (2026-12-03 08:25:39, UTC, whole seconds: a spreadsheet reads it as a date)")
	decimal := decimalFlag(fs)
	metaCols := fs.String("metadata", "", "CSV: these metadata keys' columns, comma-separated, in this order, set or not, and no others (default: one per key seen, sorted), so a spreadsheet's columns stay put from one file to the next")
	asOf := fs.String("as-of", "", "the book as it stood at this RFC 3339 time, or at this book position (as an earlier export printed it): the same rows however often it runs; default now")
	if code, ok := cmd.parse(fs, args); !ok {
		return code
	}
	f, err := r.filter()
	if err != nil {
		return cmd.usageError(fs, err.Error())
	}
	if *asOf != "" {
		if *shadow {
			return cmd.usageError(fs, "--as-of is for reservations: not with --shadow")
		}
		if msg := parseAsOf(*asOf, &f); msg != "" {
			return cmd.usageError(fs, msg)
		}
	}
	if *format != "csv" && *format != "jsonl" {
		return cmd.usageError(fs, fmt.Sprintf("--format %q: want csv or jsonl", *format))
	}
	if f.Times, err = report.ParseTimeFormat(*times); err != nil {
		return cmd.usageError(fs, fmt.Sprintf("--times %q: want exact or sheet", *times))
	}
	if f.Times != report.TimesExact && *format != "csv" {
		return cmd.usageError(fs, "--times sheet is for CSV: JSONL times are always exact")
	}
	if f.Decimal, err = report.ParseDecimal(*decimal); err != nil {
		return cmd.usageError(fs, "--decimal "+strconv.Quote(*decimal)+": want point or comma")
	}
	if f.Decimal != report.DecimalPoint && *format != "csv" {
		return cmd.usageError(fs, "--decimal comma is for CSV: JSONL decimals are always as recorded")
	}
	if *metaCols != "" {
		if *format != "csv" {
			return cmd.usageError(fs, "--metadata is for CSV: a JSONL line has every key in its metadata object")
		}
		f.MetadataColumns = []string{}
		for k := range strings.SplitSeq(*metaCols, ",") {
			k = strings.TrimSpace(k)
			if k == "" || slices.Contains(f.MetadataColumns, k) {
				return cmd.usageError(fs, fmt.Sprintf("--metadata %q: want distinct keys, comma-separated", *metaCols))
			}
			f.MetadataColumns = append(f.MetadataColumns, k)
		}
	}
	if *shadow && *totals != "" {
		return cmd.usageError(fs, "--totals is for reservations: not with --shadow")
	}
	if _, err := r.verify.keys(); err != nil {
		return cmd.usageError(fs, err.Error())
	}
	p, ctx, done, err := r.reader("export")
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: audit export:", err)
		return exitError
	}
	defer done()
	if *shadow {
		if *format == "csv" {
			_, err = p.ExportShadowCSV(ctx, os.Stdout, f)
		} else {
			_, err = p.ExportShadowJSONL(ctx, os.Stdout, f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: audit export: the export is incomplete:", err)
			return exitError
		}
		return exitOK
	}
	var tot report.Totals
	if *format == "csv" {
		tot, err = p.ExportCSV(ctx, os.Stdout, f)
	} else {
		tot, err = p.ExportJSONL(ctx, os.Stdout, f)
	}
	if errors.Is(err, projector.ErrPastEnd) {
		// Nothing was written: the read refuses before its first row.
		fmt.Fprintf(os.Stderr, "spendgate: audit export: --as-of %s: %v; give a position an export or report printed, or leave --as-of out for the book now\n", *asOf, err)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: audit export: the export is incomplete:", err)
		return exitError
	}
	if *totals != "" {
		if err := writeTotalsFile(*totals, *format, f.Decimal, tot); err != nil {
			fmt.Fprintf(os.Stderr, "spendgate: audit export: the totals file %s is incomplete: %v\n", *totals, err)
			return exitError
		}
	}
	// Two exports (or an export and a report) agree row for row when
	// they read up to the same position.
	fmt.Fprintf(os.Stderr, "spendgate: audit export: %d rows, as of book position %d\n", tot.Rows(), tot.Position)
	if tot.Rows() == 0 && len(f.Scopes) > 0 {
		// A scope misspelt exports a header and nothing else: say so.
		fmt.Fprintf(os.Stderr, "spendgate: audit export: no reservation in the range names %s; check the spelling against spendgate budget list\n", scopeList(f.Scopes))
	}
	return exitOK
}

// writeTotalsFile writes tot to path in format (a CSV's decimals in d)
// and closes it, checking every error.
func writeTotalsFile(path, format string, d report.Decimal, tot report.Totals) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if format == "csv" {
		err = report.WriteTotalsCSV(out, tot, d)
	} else {
		err = report.WriteTotalsJSON(out, tot)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// decimalFlag registers --decimal, how a CSV writes decimals.
func decimalFlag(fs *flag.FlagSet) *string {
	return fs.String("decimal", "point",
		"CSV decimals: point (12.50, fields separated by commas) or comma (12,50, fields separated by semicolons: "+
			"what Excel expects in a locale with a decimal comma, such as de-DE or fr-FR)")
}

// scopeList names scopes for a message: "team:a" or "team:a or team:b".
func scopeList(scopes []events.Scope) string {
	names := make([]string, len(scopes))
	for i, sc := range scopes {
		names[i] = string(sc.Local())
	}
	return strings.Join(names, " or ")
}

// parseAsOf sets f's AsOf (a book position) or AsOfTime (an RFC 3339
// time, not in the future) from an --as-of value, or returns what is
// wrong with it.
func parseAsOf(v string, f *report.Filter) string {
	pos, err := strconv.ParseUint(v, 10, 64)
	if err == nil && pos > 0 {
		f.AsOf = pos
		return ""
	}
	at, err := parseTimeFlag("as-of", v)
	if err != nil {
		return fmt.Sprintf("--as-of %q: want an RFC 3339 time like %s, or a book position (a whole number > 0)", v, timeExample)
	}
	if at.After(time.Now().Add(atFutureSlack)) {
		return fmt.Sprintf("--as-of %q is in the future; leave --as-of out for the book now", v)
	}
	f.AsOfTime = at
	return ""
}
