package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

var (
	pricingCommand = command{
		name:     "spendgate pricing",
		synopsis: "put|get|list|import [flags]",
		about: `Manages the pricing table: model prices per million tokens, kept in the
ledger as versioned events (an admit may then give a model and token counts
instead of an amount):

  put     set a model's prices
  get     one model's current prices and version
  list    every priced model
  import  put every row of a JSON or CSV file`,
	}
	pricingPutCommand = command{
		name:     "spendgate pricing put",
		synopsis: "--model NAME --input DECIMAL --output DECIMAL [--cached-input DECIMAL] [--unit USD]",
		about: `Sets a model's prices per million tokens (at most 6 fractional digits). The
put is the whole definition: a --cached-input left out is removed. The reply
says what changed and gives the new version, which priced reservations record.`,
	}
	pricingGetCommand = command{
		name:     "spendgate pricing get",
		synopsis: "--model NAME",
		about:    "Prints a model's current prices and version (unpriced_model if it has none).",
	}
	pricingListCommand = command{
		name:     "spendgate pricing list",
		synopsis: "",
		about:    "Prints every priced model, sorted by model.",
	}
	pricingImportCommand = command{
		name:     "spendgate pricing import",
		synopsis: "--file PATH|- [--format json|csv]",
		about: `Puts every row of a price table. JSON is an array of objects with the fields
of pricing put (model, unit, input, output, cached_input), or the output of
pricing list. CSV has a header row naming the columns model, input, output and
optionally unit and cached_input. Every row is checked before the first put;
the puts then run in order and stop at the first error (a row already put
stays put: running the import again is safe). A file with no rows, or a JSON
object with no "prices" array (LiteLLM's per-token price file is one), is
refused and nothing is put. --format defaults to the file's extension. Prints
{"prices": [the reply of each put]}.`,
	}
)

// pricing is spendgate pricing put|get|list|import.
func pricing(args []string) int {
	if len(args) == 0 || len(args[0]) > 0 && args[0][0] == '-' {
		fs := newFlagSet("pricing")
		if code, ok := pricingCommand.parse(fs, args); !ok {
			return code
		}
		return pricingCommand.usageError(fs, "which pricing command? (put, get, list or import)")
	}
	var c clientFlags
	fs := newFlagSet("pricing " + args[0])
	c.register(fs)
	switch args[0] {
	case "put":
		var req events.PricingPutRequest
		fs.StringVar(&req.Model, "model", "", "model name, e.g. gpt-4o")
		fs.StringVar(&req.Input, "input", "", "price of a million input tokens, a decimal string")
		fs.StringVar(&req.Output, "output", "", "price of a million output tokens, a decimal string")
		fs.StringVar(&req.CachedInput, "cached-input", "", "price of a million cached input tokens (default: none, they cost --input)")
		fs.StringVar(&req.Unit, "unit", "USD", "currency of the prices")
		if code, ok := pricingPutCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if code, ok := pricingPutCommand.require(fs, "model", "input", "output"); !ok {
			return code
		}
		return c.call(streams.EndpointPricingPut, req, nil)
	case "get":
		var req events.PricingGetRequest
		fs.StringVar(&req.Model, "model", "", "model name")
		if code, ok := pricingGetCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if code, ok := pricingGetCommand.require(fs, "model"); !ok {
			return code
		}
		return c.call(streams.EndpointPricingGet, req, nil)
	case "list":
		if code, ok := pricingListCommand.parse(fs, args[1:]); !ok {
			return code
		}
		return c.call(streams.EndpointPricingList, events.PricingListRequest{}, nil)
	case "import":
		file := fs.String("file", "", "price table to import; - reads stdin")
		format := fs.String("format", "", "json or csv (default: the file's extension)")
		if code, ok := pricingImportCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if *file == "" {
			return pricingImportCommand.usageError(fs, "--file is required")
		}
		f := *format
		if f == "" {
			f = strings.TrimPrefix(strings.ToLower(filepath.Ext(*file)), ".")
		}
		if f != "json" && f != "csv" {
			return pricingImportCommand.usageError(fs, "--format must be json or csv")
		}
		var data []byte
		var err error
		if *file == "-" {
			data, err = io.ReadAll(io.LimitReader(os.Stdin, maxPriceTable+1))
		} else {
			data, err = os.ReadFile(*file)
		}
		if err == nil && len(data) > maxPriceTable {
			err = fmt.Errorf("larger than %d bytes", maxPriceTable)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "spendgate: pricing import: %v\n", err)
			return 1
		}
		rows, err := parsePriceTable(data, f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "spendgate: pricing import: %v\n", err)
			return 1
		}
		out := struct {
			Prices []events.PricingPutReply `json:"prices"`
		}{Prices: []events.PricingPutReply{}}
		for _, req := range rows {
			var reply events.PricingPutReply
			if code := c.fetch(streams.EndpointPricingPut, req, &reply); code != 0 {
				return code
			}
			out.Prices = append(out.Prices, reply)
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(os.Stdout, string(b))
		return 0
	}
	return pricingCommand.usageError(nil, fmt.Sprintf("unknown pricing command %q", args[0]))
}

// maxPriceTable bounds the size of an imported price table.
const maxPriceTable = 4 << 20

// errNoPricesArray refuses a JSON object that is not what pricing list
// prints, such as LiteLLM's model_prices_and_context_window.json (model
// names as keys, prices per token), which would otherwise import nothing.
var errNoPricesArray = errors.New(`json: an object with no "prices" array: want an array of ` +
	`{"model", "input", "output", ...} or {"prices": [...]} as pricing list prints it. ` +
	`LiteLLM's model_prices_and_context_window.json is not read: its prices are per token; ` +
	`input_cost_per_token and output_cost_per_token times 1,000,000 are the input and output ` +
	`prices per million tokens this table takes`)

// parsePriceTable reads a price table (see pricing import) and checks
// every row as pricing.put would, naming the row of the first bad one.
func parsePriceTable(data []byte, format string) ([]events.PricingPutRequest, error) {
	// A spreadsheet's "CSV UTF-8" (and many a Windows editor) starts the
	// file with a byte-order mark, which would be part of the first
	// column's name, or a JSON syntax error.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	var rows []events.PricingPutRequest
	switch format {
	case "json":
		t := bytes.TrimSpace(data)
		if len(t) == 0 {
			return nil, fmt.Errorf("the file is empty: no prices to import")
		}
		if t[0] == '{' {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(t, &obj); err != nil {
				return nil, fmt.Errorf("json: %v", err)
			}
			if _, ok := obj["prices"]; !ok {
				return nil, errNoPricesArray
			}
			var list struct {
				Prices []events.PricingPutRequest `json:"prices"`
			}
			if err := json.Unmarshal(t, &list); err != nil {
				return nil, fmt.Errorf("json: %v", err)
			}
			rows = list.Prices
		} else if err := json.Unmarshal(t, &rows); err != nil {
			return nil, fmt.Errorf("json: want an array of {model, input, output, ...}: %v", err)
		}
	case "csv":
		r := csv.NewReader(bytes.NewReader(data))
		r.TrimLeadingSpace = true
		recs, err := r.ReadAll()
		if err != nil {
			return nil, fmt.Errorf("csv: %v", err)
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("csv: no header row")
		}
		col := map[string]int{}
		for i, h := range recs[0] {
			h = strings.TrimSpace(strings.ToLower(h))
			switch h {
			case "model", "unit", "input", "output", "cached_input":
				col[h] = i
			default:
				return nil, fmt.Errorf("csv: unknown column %q (want model, input, output, unit, cached_input)", h)
			}
		}
		for _, need := range []string{"model", "input", "output"} {
			if _, ok := col[need]; !ok {
				return nil, fmt.Errorf("csv: no %s column", need)
			}
		}
		get := func(rec []string, name string) string {
			if i, ok := col[name]; ok {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		for _, rec := range recs[1:] {
			rows = append(rows, events.PricingPutRequest{Model: get(rec, "model"), Unit: get(rec, "unit"),
				Input: get(rec, "input"), Output: get(rec, "output"), CachedInput: get(rec, "cached_input")})
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no prices in the file: nothing to import")
	}
	for i, row := range rows {
		if _, err := service.ParsePricingPut(row); err != nil {
			return nil, fmt.Errorf("row %d (model %q): %v", i+1, row.Model, err)
		}
	}
	return rows, nil
}
