package main

import (
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
