package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// admit -o id prints the reservation id alone (what the README's quick
// start captures, with no sed); a denial or an error prints nothing on
// stdout and the reply on stderr, with exit 2 or 1. spendgate void voids an
// admit by its request id: landed (released at once), replayed, settled
// (refused), or not landed (a later admit of the id reserves nothing).
func TestCLI_OutputIDAndVoid(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	run := func(args ...string) (int, string, string) { t.Helper(); return e2eCLIErr(t, env.URL(), args...) }
	code, _, errOut := run("budget", "put", "--scope", "org:o", "--period", "month", "--limit", "1", "--unit", "USD")
	require.Equal(t, exitOK, code, errOut)

	admit := []string{"admit", "--scope", "org:o", "--amount", "0.6", "--request-id", "o-1", "-o", "id"}
	code, out, errOut := run(admit...)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `^rsv_[0-9a-f-]{36}\n$`, out)
	require.Empty(t, errOut)
	id := strings.TrimSpace(out)
	code, out, _ = run(admit...)
	require.Equal(t, exitOK, code)
	require.Equal(t, id+"\n", out, "a replay prints the same id")

	code, out, errOut = run("admit", "--scope", "org:o", "--amount", "0.6", "--output", "id")
	require.Equal(t, exitDenied, code)
	require.Empty(t, out, "denied: no id")
	require.Contains(t, errOut, `"reason": "limit_reached"`)
	code, out, errOut = run("admit", "--scope", "org:o", "--amount", "0.1", "--ttl", "forever", "-o", "id")
	require.Equal(t, exitError, code)
	require.Empty(t, out, "an error: no id")
	require.Contains(t, errOut, `"code": "invalid_ttl"`)

	code, _, errOut = run("settle", "--reservation", id, "--actual", "0.5")
	require.Equal(t, exitOK, code, errOut)

	// An admit that landed: the void releases it at once.
	code, out, _ = run("admit", "--scope", "org:o", "--amount", "0.2", "--request-id", "o-2", "-o", "id")
	require.Equal(t, exitOK, code)
	id2 := strings.TrimSpace(out)
	code, out, errOut = run("void", "--request-id", "o-2", "--scope", "org:o")
	require.Equal(t, exitOK, code, errOut)
	v := e2eJSON[events.VoidReply](t, []byte(out))
	require.Equal(t, events.VoidReply{RequestID: "o-2", Status: events.StatusVoided, ReservationID: id2,
		ReservationStatus: events.StatusReleased, Reserved: "0.2", Balances: v.Balances}, v)
	code, out, _ = run("void", "--request-id", "o-2", "--scope", "org:o")
	require.Equal(t, exitOK, code)
	require.True(t, e2eJSON[events.VoidReply](t, []byte(out)).Replayed)
	code, out, _ = run("admit", "--scope", "org:o", "--amount", "0.2", "--request-id", "o-2")
	require.Equal(t, exitError, code)
	require.Equal(t, events.CodeRequestVoided, e2eJSON[events.ErrorReply](t, []byte(out)).Error.Code)

	// Settled: the money was spent; the void is refused and changes nothing.
	code, out, _ = run("void", "--request-id", "o-1", "--scope", "org:o")
	require.Equal(t, exitError, code)
	require.Equal(t, events.CodeAlreadySettled, e2eJSON[events.ErrorReply](t, []byte(out)).Error.Code)

	// Not landed yet: voided first, the admit arriving later reserves nothing.
	code, out, _ = run("void", "--request-id", "o-3", "--scope", "org:o")
	require.Equal(t, exitOK, code)
	require.Empty(t, e2eJSON[events.VoidReply](t, []byte(out)).ReservationID)
	code, out, errOut = run("admit", "--scope", "org:o", "--amount", "0.2", "--request-id", "o-3", "-o", "id")
	require.Equal(t, exitError, code)
	require.Empty(t, out)
	require.Contains(t, errOut, `"code": "request_voided"`)

	code, out, _ = run("budget", "get", "--scope", "org:o", "--period", "month")
	require.Equal(t, exitOK, code)
	b := e2eJSON[events.BudgetView](t, []byte(out))
	require.Equal(t, "0.5", b.Spent)
	require.Equal(t, "0", b.Reserved)
}

// Every command's JSON output has its keys in one order, the wire
// structs' (the order the service writes them): budget get and budget
// list print a budget alike, pricing put and pricing import print a price
// alike, admit as the service sends it. In an earlier build the commands
// that print the service's reply re-encoded it through a map, sorting the
// keys, while budget list, pricing import and keys create kept the struct
// order.
func TestCLI_JSONKeyOrder(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	run := func(args ...string) []byte {
		t.Helper()
		code, out, errOut := e2eCLIErr(t, env.URL(), args...)
		require.Equal(t, exitOK, code, "%v: %s", args, errOut)
		return []byte(out)
	}
	put := run("budget", "put", "--scope", "org:k", "--period", "month", "--limit", "5", "--unit", "USD")
	requireWireOrder(t, put, events.BudgetPutReply{})
	get := run("budget", "get", "--scope", "org:k", "--period", "month")
	requireWireOrder(t, get, events.BudgetView{})
	var list struct{ Budgets []json.RawMessage }
	require.NoError(t, json.Unmarshal(run("budget", "list"), &list))
	require.Len(t, list.Budgets, 1)
	require.Equal(t, jsonKeys(t, get), jsonKeys(t, list.Budgets[0]), "budget get and budget list print a budget alike")

	requireWireOrder(t, run("admit", "--scope", "org:k", "--amount", "1"), events.AdmitReply{})

	pput := run("pricing", "put", "--model", "m-1", "--input", "2.5", "--output", "10")
	requireWireOrder(t, pput, events.PricingPutReply{})
	file := filepath.Join(t.TempDir(), "prices.csv")
	require.NoError(t, os.WriteFile(file, []byte("model,input,output\nm-2,1,2\n"), 0o600))
	var imported struct{ Prices []json.RawMessage }
	require.NoError(t, json.Unmarshal(run("pricing", "import", "--file", file), &imported))
	require.Len(t, imported.Prices, 1)
	require.Equal(t, jsonKeys(t, pput), jsonKeys(t, imported.Prices[0]), "pricing put and pricing import print a price alike")
}

// requireWireOrder checks that the keys of the JSON object out come in
// the order of wire's fields.
func requireWireOrder(t *testing.T, out []byte, wire any) {
	t.Helper()
	got := jsonKeys(t, out)
	present := map[string]bool{}
	for _, k := range got {
		present[k] = true
	}
	var want []string
	for _, k := range structKeys(reflect.TypeOf(wire)) {
		if present[k] {
			want = append(want, k)
		}
	}
	require.Equal(t, want, got, "%T's order:\n%s", wire, out)
}

// jsonKeys returns the keys of a JSON object, in order.
func jsonKeys(t *testing.T, obj []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(obj))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok, string(obj))
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return keys
}

// structKeys returns the JSON keys of a struct's fields in order, those of
// an embedded struct in its place.
func structKeys(typ reflect.Type) []string {
	var keys []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, ok := f.Tag.Lookup("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case f.Anonymous && !ok:
			keys = append(keys, structKeys(f.Type)...)
		case name == "-" || !f.IsExported():
		case name == "":
			keys = append(keys, f.Name)
		default:
			keys = append(keys, name)
		}
	}
	return keys
}
