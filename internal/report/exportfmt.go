package report

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spendgate/spendgate/events"
)

// ExportColumns are the fixed columns of a CSV export, in order; one
// column per metadata key follows, named MetadataColumnPrefix + key. The
// seven from model to cached_input_tokens are set for a reservation
// priced from a model (empty otherwise): the model and price version it
// was priced at, the input and the most output tokens it was reserved
// for, and the tokens its settle reported (empty for a settle with an
// actual). count is the count its count budgets hold (Row.Count; empty
// when it names none). price_input, price_output and price_cached_input
// are the prices per million tokens the reservation was priced at (its
// quote's, at price_version; empty when not priced from a model, and
// price_cached_input when the model had no cached price), so that a
// row's cost can be recomputed from the row alone. tenant is the tenant
// whose scopes the reservation was admitted in (empty for the untenanted
// deployment's): its request_id, scopes and balances carry the tenant's
// prefix ("acme/..."), as the book stores them.
var ExportColumns = []string{
	"reservation_id", "request_id", "scopes", "balances", "unit", "reserved",
	"opened_at", "expires_at", "settled_at", "released_at", "expired_at",
	"status", "actual", "overrun", "excess", "settle_note", "late", "release_reason",
	"model", "price_version", "quoted_input_tokens", "quoted_max_output_tokens",
	"input_tokens", "output_tokens", "cached_input_tokens", "count",
	"price_input", "price_output", "price_cached_input", "tenant",
}

// MetadataColumnPrefix starts the name of a metadata column of a CSV
// export ("metadata.model"), so that no key can collide with a fixed
// column.
const MetadataColumnPrefix = "metadata."

// ListSeparator joins the scopes and balances of one reservation in one
// CSV cell. Neither a scope nor a balance can hold a space.
const ListSeparator = " "

// TimeFormat is how a CSV export writes times.
type TimeFormat int

const (
	// TimesExact writes RFC 3339 in UTC with all nine fractional digits
	// ("2026-12-03T08:25:39.564075990Z"): the time exactly as recorded,
	// every one the same width, so that sorting the column as text sorts
	// it in time (RFC3339Nano's trimmed zeros would put ".56407599Z"
	// after ".564075996Z"). JSONL exports always write this form.
	TimesExact TimeFormat = iota
	// TimesSheet writes "2026-12-03 08:25:39", UTC, whole seconds
	// (truncated): the form spreadsheets read as a date and time when they
	// open a CSV file. LibreOffice (en-US, en-GB and de-DE locales) opens
	// TimesExact's form as text (the zone suffix keeps it so), and this
	// form with fractional seconds as a date only where the decimal
	// separator is a point (not de-DE).
	TimesSheet
)

// exactLayout and sheetLayout are TimesExact's and TimesSheet's layouts.
const (
	exactLayout = "2006-01-02T15:04:05.000000000Z07:00"
	sheetLayout = "2006-01-02 15:04:05"
)

// ParseTimeFormat parses the name of a TimeFormat: "exact" or "sheet".
func ParseTimeFormat(name string) (TimeFormat, error) {
	switch name {
	case "exact":
		return TimesExact, nil
	case "sheet":
		return TimesSheet, nil
	}
	return 0, fmt.Errorf("time format %q: want exact or sheet", name)
}

// format writes t in f, "" for the zero time.
func (f TimeFormat) format(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if f == TimesSheet {
		return t.UTC().Format(sheetLayout)
	}
	return t.UTC().Format(exactLayout)
}

// formatTime writes t as TimesExact, "" for the zero time.
func formatTime(t time.Time) string { return TimesExact.format(t) }

// SafeCell guards a CSV cell against formula injection: a cell that starts
// with '=', '+', '-', '@', a tab or a carriage return gets a leading single
// quote, so that a spreadsheet shows it as text instead of evaluating it.
// Every cell of a CSV export goes through it; spendgate's own numbers are
// never negative, so only caller-supplied text (request ids, scopes,
// metadata values) can be changed.
func SafeCell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}

// Totals sums an export per unit.
type Totals struct {
	// Units holds one UnitTotals per unit, sorted by unit.
	Units []UnitTotals
	// Position is the stream sequence the export read up to.
	Position uint64
}

// Rows is how many rows were written, over every unit.
func (t Totals) Rows() (n int64) {
	for _, u := range t.Units {
		n += u.Rows
	}
	return n
}

// UnitTotals is the sum of the rows of one unit.
type UnitTotals struct {
	Unit string
	// Rows counts rows; Open, Settled, Released, Expired rows by status;
	// Late rows settled late.
	Rows, Open, Settled, Released, Expired, Late int64
	// Reserved sums the rows' reserved amounts, Actual, Overrun and
	// Excess those of the settled rows.
	Reserved, Actual, Overrun, Excess events.Money
}

// TotalsColumns is the header of WriteTotalsCSV.
var TotalsColumns = []string{"unit", "rows", "open", "settled", "released", "expired", "late", "reserved", "actual", "overrun", "excess"}

// totalsDecimals are the decimal columns of TotalsColumns.
var totalsDecimals = []string{"reserved", "actual", "overrun", "excess"}

// exportDecimals are the decimal columns of ExportColumns.
var exportDecimals = []string{"reserved", "actual", "overrun", "excess", "count", "price_input", "price_output", "price_cached_input"}

type totaller struct{ by map[string]*UnitTotals }

func (t *totaller) add(r *Row) {
	if t.by == nil {
		t.by = map[string]*UnitTotals{}
	}
	u := t.by[r.Unit]
	if u == nil {
		u = &UnitTotals{Unit: r.Unit}
		t.by[r.Unit] = u
	}
	u.Rows++
	switch r.Status {
	case events.StatusOpen:
		u.Open++
	case events.StatusSettled:
		u.Settled++
	case events.StatusReleased:
		u.Released++
	case events.StatusExpired:
		u.Expired++
	}
	if r.Late {
		u.Late++
	}
	u.Reserved = u.Reserved.Add(r.Reserved)
	if r.Settled {
		u.Actual = u.Actual.Add(r.Actual)
		u.Overrun = u.Overrun.Add(r.Overrun)
		u.Excess = u.Excess.Add(r.Excess)
	}
}

func (t *totaller) totals(pos uint64) Totals {
	out := Totals{Position: pos}
	for _, u := range t.by {
		out.Units = append(out.Units, *u)
	}
	slices.SortFunc(out.Units, func(a, b UnitTotals) int { return strings.Compare(a.Unit, b.Unit) })
	return out
}

// WriteTotalsCSV writes totals as CSV: a header (TotalsColumns) and one
// row per unit, its decimals in d. It returns the first write or flush
// error.
func WriteTotalsCSV(w io.Writer, t Totals, d Decimal) error {
	cw := NewCSVWriter(w, d, TotalsColumns, totalsDecimals...)
	if err := cw.Write(TotalsColumns); err != nil {
		return err
	}
	for _, u := range t.Units {
		if err := cw.Write([]string{SafeCell(u.Unit), itoa(u.Rows), itoa(u.Open), itoa(u.Settled), itoa(u.Released),
			itoa(u.Expired), itoa(u.Late), u.Reserved.String(), u.Actual.String(), u.Overrun.String(), u.Excess.String()}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTotalsJSON writes totals as one JSON object per unit, one a line,
// with the field names of TotalsColumns.
func WriteTotalsJSON(w io.Writer, t Totals) error {
	bw := bufio.NewWriter(w)
	for _, u := range t.Units {
		b, err := json.Marshal(struct {
			Unit     string       `json:"unit"`
			Rows     int64        `json:"rows"`
			Open     int64        `json:"open"`
			Settled  int64        `json:"settled"`
			Released int64        `json:"released"`
			Expired  int64        `json:"expired"`
			Late     int64        `json:"late"`
			Reserved events.Money `json:"reserved"`
			Actual   events.Money `json:"actual"`
			Overrun  events.Money `json:"overrun"`
			Excess   events.Money `json:"excess"`
		}{u.Unit, u.Rows, u.Open, u.Settled, u.Released, u.Expired, u.Late, u.Reserved, u.Actual, u.Overrun, u.Excess})
		if err != nil {
			return err
		}
		if _, err := bw.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ExportCSV writes the reservations f selects as CSV on w, one row each in
// the order Rows hands them over: a header of ExportColumns and then one
// column per metadata key, sorted. To know the metadata columns before
// the first row while still streaming, it reads the stream twice: a first
// pass collects only the metadata keys (memory bounded by the number of
// distinct keys), a second, up to the same position, writes the rows.
// Cells are quoted as RFC 4180 says and guarded by SafeCell; decimals are
// written exactly as recorded (with a decimal comma, and fields separated
// by semicolons, with f.Decimal DecimalComma); times are as f.Times says; an empty cell
// means "did not happen" (or, for a metadata column, "not set").
//
// It returns the totals of what it wrote, or Rows' errors, or the first
// write or flush error: a file that ends early is never reported as
// complete.
func (p *Reader) ExportCSV(ctx context.Context, w io.Writer, f Filter) (Totals, error) {
	keys, last, err := p.MetadataKeys(ctx, f)
	if err != nil {
		return Totals{}, err
	}
	if f.MetadataColumns != nil {
		// The columns asked for, in their order, whether or not a row
		// sets them (the first pass still fixes the position read up to).
		keys = f.MetadataColumns
	}
	header := slices.Clone(ExportColumns)
	for _, k := range keys {
		header = append(header, SafeCell(MetadataColumnPrefix+k))
	}
	cw := NewCSVWriter(w, f.Decimal, header, exportDecimals...)
	if err := cw.Write(header); err != nil {
		return Totals{}, err
	}
	var tot totaller
	if last == 0 {
		cw.Flush()
		return tot.totals(0), cw.Error()
	}
	rec := make([]string, len(header))
	pos, err := p.rows(ctx, f, last, func(r *Row) error {
		r = f.view(r)
		tot.add(r)
		fillRecord(rec, r, keys, f.Times)
		if err := cw.Write(rec); err != nil {
			return err
		}
		return cw.Error() // a failed flush of an earlier buffer
	})
	if err != nil {
		return Totals{}, err
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return Totals{}, err
	}
	return tot.totals(pos), nil
}

// fillRecord writes r into rec, in the columns of ExportColumns and keys,
// its times in tf.
func fillRecord(rec []string, r *Row, keys []string, tf TimeFormat) {
	scopes := make([]string, len(r.Scopes))
	for i, s := range r.Scopes {
		scopes[i] = string(s)
	}
	balances := make([]string, len(r.Balances))
	for i, b := range r.Balances {
		balances[i] = b.String()
	}
	actual, overrun, excess := "", "", ""
	if r.Settled {
		actual, overrun, excess = r.Actual.String(), r.Overrun.String(), r.Excess.String()
	}
	late := "false"
	if r.Late {
		late = "true"
	}
	count := ""
	if r.Count != nil {
		count = r.Count.String()
	}
	var priced [7]string
	var prices [3]string
	if q := r.Pricing; q != nil {
		priced[0], priced[1] = q.Model, strconv.FormatUint(q.Version, 10)
		priced[2], priced[3] = itoa(q.InputTokens), itoa(q.MaxOutputTokens)
		prices[0], prices[1] = q.Input.String(), q.Output.String()
		if q.CachedInput != nil {
			prices[2] = q.CachedInput.String()
		}
		if u := r.Usage; u != nil {
			priced[4], priced[5], priced[6] = itoa(u.InputTokens), itoa(u.OutputTokens), itoa(u.CachedInputTokens)
		}
	}
	fixed := []string{
		r.ReservationID, r.RequestID, strings.Join(scopes, ListSeparator), strings.Join(balances, ListSeparator),
		r.Unit, r.Reserved.String(),
		tf.format(r.OpenedAt), tf.format(r.ExpiresAt), tf.format(r.SettledAt), tf.format(r.ReleasedAt), tf.format(r.ExpiredAt),
		r.Status, actual, overrun, excess, r.Note, late, r.ReleaseReason,
		priced[0], priced[1], priced[2], priced[3], priced[4], priced[5], priced[6],
		count, prices[0], prices[1], prices[2], r.Tenant(),
	}
	n := copy(rec, fixed)
	for i, k := range keys {
		rec[n+i] = r.Metadata[k]
	}
	for i := range rec {
		rec[i] = SafeCell(rec[i])
	}
}

// jsonRow is one line of a JSONL export. Absent times and the amounts of
// an unsettled reservation are null.
type jsonRow struct {
	ReservationID string              `json:"reservation_id"`
	RequestID     string              `json:"request_id"`
	Scopes        []events.Scope      `json:"scopes"`
	Balances      []events.BalanceRef `json:"balances"`
	Unit          string              `json:"unit"`
	Reserved      events.Money        `json:"reserved"`
	OpenedAt      *string             `json:"opened_at"`
	ExpiresAt     *string             `json:"expires_at"`
	SettledAt     *string             `json:"settled_at"`
	ReleasedAt    *string             `json:"released_at"`
	ExpiredAt     *string             `json:"expired_at"`
	Status        string              `json:"status"`
	Actual        *events.Money       `json:"actual"`
	Overrun       *events.Money       `json:"overrun"`
	Excess        *events.Money       `json:"excess"`
	SettleNote    *string             `json:"settle_note"`
	Late          bool                `json:"late"`
	ReleaseReason *string             `json:"release_reason"`
	// The CSV's columns from model to cached_input_tokens and its three
	// price_ columns, under the same names: null for an admit not priced
	// from a model (the usage ones until it settles from usage).
	Model                 *string       `json:"model"`
	PriceVersion          *uint64       `json:"price_version"`
	QuotedInputTokens     *int64        `json:"quoted_input_tokens"`
	QuotedMaxOutputTokens *int64        `json:"quoted_max_output_tokens"`
	InputTokens           *int64        `json:"input_tokens"`
	OutputTokens          *int64        `json:"output_tokens"`
	CachedInputTokens     *int64        `json:"cached_input_tokens"`
	PriceInput            *events.Money `json:"price_input"`
	PriceOutput           *events.Money `json:"price_output"`
	PriceCachedInput      *events.Money `json:"price_cached_input"`
	// Tenant is the CSV's tenant column ("" for the untenanted
	// deployment's).
	Tenant   string            `json:"tenant"`
	Metadata map[string]string `json:"metadata"`
	// Pricing and Usage: the same quote and usage as objects, as the
	// events carry them (kept for readers written against them); absent
	// when there is none.
	Pricing *events.PriceQuote `json:"pricing,omitempty"`
	Usage   *events.Usage      `json:"usage,omitempty"`
	// Count: the CSV's count (null when it names no count budget).
	Count *events.Money `json:"count"`
}

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatTime(t)
	return &s
}

// ExportJSONL writes the reservations f selects as JSON Lines on w: one
// object per reservation, in the order Rows hands them over, with the
// fields named like ExportColumns (but the metadata columns) plus
// "metadata" (an object, {} when none), and the quote and usage also as
// the objects "pricing" and "usage"; scopes and balances are arrays, amounts decimal strings exactly
// as recorded, times RFC 3339 strings in UTC, and what did not happen is
// null. It reads the stream once.
//
// It returns the totals of what it wrote, or Rows' errors, or the first
// write or flush error.
func (p *Reader) ExportJSONL(ctx context.Context, w io.Writer, f Filter) (Totals, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	var tot totaller
	pos, err := p.rows(ctx, f, 0, func(r *Row) error {
		r = f.view(r)
		tot.add(r)
		jr := jsonRow{
			ReservationID: r.ReservationID, RequestID: r.RequestID, Scopes: r.Scopes, Balances: r.Balances,
			Unit: r.Unit, Reserved: r.Reserved,
			OpenedAt: optTime(r.OpenedAt), ExpiresAt: optTime(r.ExpiresAt), SettledAt: optTime(r.SettledAt),
			ReleasedAt: optTime(r.ReleasedAt), ExpiredAt: optTime(r.ExpiredAt),
			Status: r.Status, Late: r.Late, Metadata: r.Metadata, Pricing: r.Pricing, Usage: r.Usage, Count: r.Count,
			Tenant: r.Tenant(),
		}
		if jr.Metadata == nil {
			jr.Metadata = map[string]string{}
		}
		if q := r.Pricing; q != nil {
			jr.Model, jr.PriceVersion = &q.Model, &q.Version
			jr.QuotedInputTokens, jr.QuotedMaxOutputTokens = &q.InputTokens, &q.MaxOutputTokens
			jr.PriceInput, jr.PriceOutput, jr.PriceCachedInput = &q.Input, &q.Output, q.CachedInput
			if u := r.Usage; u != nil {
				jr.InputTokens, jr.OutputTokens, jr.CachedInputTokens = &u.InputTokens, &u.OutputTokens, &u.CachedInputTokens
			}
		}
		if r.Settled {
			jr.Actual, jr.Overrun, jr.Excess = &r.Actual, &r.Overrun, &r.Excess
			if r.Note != "" {
				jr.SettleNote = &r.Note
			}
		}
		if r.ReleaseReason != "" {
			jr.ReleaseReason = &r.ReleaseReason
		}
		return enc.Encode(jr) // one line: Encode adds the newline
	})
	if err != nil {
		return Totals{}, err
	}
	if err := bw.Flush(); err != nil {
		return Totals{}, err
	}
	return tot.totals(pos), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
