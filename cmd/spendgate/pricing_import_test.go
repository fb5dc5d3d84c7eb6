package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A price table saved by a spreadsheet as "CSV UTF-8" (or by a Windows
// editor as JSON) starts with a UTF-8 byte-order mark and ends its lines
// with CRLF: it imports as the same table without them, its first column
// still "model".
func TestPricingImport_ByteOrderMark(t *testing.T) {
	const bom = "\ufeff"
	for format, table := range map[string]string{
		"csv":  "model,input,output,cached_input,unit\r\ngpt-a,2.50,10,1.25,USD\r\nclaude-b,3,15,,USD\r\n",
		"json": `[{"model":"gpt-a","input":"2.50","output":"10","cached_input":"1.25","unit":"USD"},{"model":"claude-b","input":"3","output":"15","unit":"USD"}]`,
	} {
		want, err := parsePriceTable([]byte(table), format)
		require.NoError(t, err, format)
		require.Len(t, want, 2, format)
		got, err := parsePriceTable([]byte(bom+table), format)
		require.NoError(t, err, "%s with a byte-order mark", format)
		require.Equal(t, want, got, format)
	}
}

// A file that holds no prices is refused, not imported as nothing with
// exit 0: an empty file, an empty array or list, a CSV with only its
// header, and a JSON object that is not {"prices": [...]}, such as
// LiteLLM's model_prices_and_context_window.json (prices per token, keyed
// by model), whose refusal says which form is read and how its prices
// convert.
func TestPricingImport_RefusesAFileWithNoPrices(t *testing.T) {
	t.Parallel()
	const litellm = `{"gpt-4o":{"input_cost_per_token":2.5e-06,"output_cost_per_token":1e-05}}`
	for _, c := range []struct {
		name, format, table, want string
	}{
		{"empty", "json", "", "no prices"},
		{"blank", "json", " \n", "no prices"},
		{"empty array", "json", "[]", "no prices"},
		{"null", "json", "null", "no prices"},
		{"empty list", "json", `{"prices":[]}`, "no prices"},
		{"null list", "json", `{"prices":null}`, "no prices"},
		{"header only", "csv", "model,input,output\n", "no prices"},
		{"litellm", "json", litellm, `no "prices" array`},
		{"other object", "json", `{"models":[{"model":"m","input":"1","output":"2"}]}`, `no "prices" array`},
	} {
		rows, err := parsePriceTable([]byte(c.table), c.format)
		require.Error(t, err, "%s: got %d rows", c.name, len(rows))
		require.Contains(t, err.Error(), c.want, c.name)
	}
	_, err := parsePriceTable([]byte(litellm), "json")
	require.ErrorContains(t, err, `{"prices": [...]}`)
	require.ErrorContains(t, err, "LiteLLM")
	require.ErrorContains(t, err, "times 1,000,000")

	// The command exits 1, as for a file it cannot parse, prints no
	// {"prices": []} and connects to nothing (the URL has no server).
	dir := t.TempDir()
	env := []string{"SPENDGATE_NATS_URL=nats://127.0.0.1:1"}
	for name, table := range map[string]string{"litellm.json": litellm, "empty.json": `{"prices":[]}`, "none.json": "[]"} {
		file := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(file, []byte(table), 0o644))
		r := runUsage(t, env, "pricing", "import", "--file", file)
		require.Equal(t, 1, r.code, "%s: %s%s", name, r.stdout, r.stderr)
		require.Empty(t, r.stdout, name)
		require.Contains(t, r.stderr, "spendgate: pricing import: ", name)
	}
}
