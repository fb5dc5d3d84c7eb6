package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spendgate/spendgate/events"
)

// Decimal is how a CSV file writes its decimals, and with them which
// character separates its fields.
type Decimal int

const (
	// DecimalPoint writes decimals as recorded ("12.50") and separates
	// fields with commas: RFC 4180, and what a spreadsheet in a locale
	// with a decimal point (en-US, en-GB, ja-JP, ...) opens with a double
	// click.
	DecimalPoint Decimal = iota
	// DecimalComma writes decimals with a decimal comma ("12,50") and
	// separates fields with semicolons: what Excel expects of a CSV file
	// in a locale with a decimal comma (de-DE, fr-FR, es-ES, it-IT,
	// nl-NL, pt-BR, ...), whose list separator is the semicolon. A
	// comma-separated file opens there as one cell per line, and "12.50"
	// as text or as a date. Only the decimal columns change, and only cells that are
	// plain decimals: a request id or a metadata value is written as it
	// is (quoted where it holds a semicolon).
	DecimalComma
)

// ParseDecimal parses the name of a Decimal: "point" or "comma".
func ParseDecimal(name string) (Decimal, error) {
	switch name {
	case "point":
		return DecimalPoint, nil
	case "comma":
		return DecimalComma, nil
	}
	return 0, fmt.Errorf("decimal %q: want point or comma", name)
}

// Separator is the field separator of a CSV file written with d.
func (d Decimal) Separator() rune {
	if d == DecimalComma {
		return ';'
	}
	return ','
}

// Number writes the decimal s ("12.50", as spendgate records decimals:
// digits, at most one point) with d's decimal mark. A cell that is not
// such a decimal is returned as it is.
func (d Decimal) Number(s string) string {
	if d != DecimalComma || !events.PlainDecimal(s) {
		return s
	}
	return strings.Replace(s, ".", ",", 1)
}

// CSVWriter writes a CSV file whose columns named as decimals hold
// decimals, in a Decimal's form.
type CSVWriter struct {
	*csv.Writer
	d        Decimal
	decimals []int
}

// NewCSVWriter returns a CSVWriter on w for a file whose header is header,
// the columns named in decimals holding decimals written with d. It does
// not write the header.
func NewCSVWriter(w io.Writer, d Decimal, header []string, decimals ...string) *CSVWriter {
	cw := csv.NewWriter(w)
	cw.Comma = d.Separator()
	out := &CSVWriter{Writer: cw, d: d}
	for i, name := range header {
		if slices.Contains(decimals, name) {
			out.decimals = append(out.decimals, i)
		}
	}
	return out
}

// Write writes rec, its decimal columns in the writer's Decimal. rec is
// not changed (a header or a row may be shared: a package's column
// names, another writer's record): a row with a decimal to change is
// written from a copy.
func (w *CSVWriter) Write(rec []string) error {
	out := rec
	for _, i := range w.decimals {
		if i >= len(rec) {
			continue
		}
		if v := w.d.Number(rec[i]); v != rec[i] {
			if len(out) > 0 && &out[0] == &rec[0] {
				out = slices.Clone(rec)
			}
			out[i] = v
		}
	}
	return w.Writer.Write(out)
}
