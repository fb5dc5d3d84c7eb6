package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/testenv"
)

// e2eCLIErr is e2eCLI that also returns standard error.
func e2eCLIErr(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, clientBin(args...), args...)
	cmd.Env = append(os.Environ(), "SPENDGATE_NATS_URL="+url, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("spendgate %v: %v\n%s", args, err, stderr.String())
	}
	t.Logf("$ spendgate %v  -> exit %d\n%s%s", args, code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

// e2eOK returns a function that runs the CLI against url (offline tools
// --unverified), requires exit 0, and returns its stdout.
func e2eOK(t *testing.T, url string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		code, out, errOut := e2eCLIErr(t, url, unverified(args)...)
		require.Equal(t, 0, code, errOut)
		return out
	}
}

// Export and report through the real service and CLI: the rows and groups
// are those of what the CLI admitted, settled and released; the balances
// list an idle budget; bad times and flags are usage errors.
func TestCLI_ExportReportBalances(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1, Reports: true})
	url := env.URL()
	ok := e2eOK(t, url)
	ok("budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "100", "--unit", "USD")
	ok("budget", "put", "--scope", "user:u-17", "--period", "day", "--limit", "10", "--unit", "USD")
	ok("budget", "put", "--scope", "team:idle", "--period", "month", "--limit", "50", "--unit", "USD")
	admit := func(args ...string) string {
		t.Helper()
		var r events.AdmitReply
		require.NoError(t, json.Unmarshal([]byte(ok(append([]string{"admit"}, args...)...)), &r))
		require.True(t, r.Admitted)
		return r.ReservationID
	}
	r1 := admit("--scope", "org:acme", "--scope", "user:u-17", "--amount", "2", "--meta", "model=gpt-4o", "--meta", "feature==1+1")
	r2 := admit("--scope", "org:acme", "--amount", "1.50", "--meta", "model=claude")
	r3 := admit("--scope", "user:u-17", "--amount", "0.25")
	ok("settle", "--reservation", r1, "--actual", "2.5")
	ok("settle", "--reservation", r2, "--actual", "1")
	ok("release", "--reservation", r3)
	r4 := admit("--scope", "org:acme", "--amount", "3", "--meta", "model=gpt-4o")
	// A denied admit (exit 2): no reservation, one denial in each of its
	// scopes and under its model, once its record is published.
	code, _, _ := e2eCLIErr(t, url, "admit", "--scope", "org:acme", "--scope", "user:u-17", "--amount", "50", "--meta", "model=gpt-4o")
	require.Equal(t, 2, code)
	require.Eventually(t, func() bool {
		s, err := env.JS.Stream(context.Background(), env.Layout.DenialStreamName())
		return err == nil && s.CachedInfo().State.Msgs == 1
	}, 10*time.Second, 10*time.Millisecond, "the denial record is published")

	// CSV: header, one row per reservation (r1 once, not once per
	// balance), closed rows in closing order, the open one last.
	dir := t.TempDir()
	code, out, exportErr := e2eCLIErr(t, url, "audit", "export", "--unverified", "--totals", filepath.Join(dir, "totals.csv"))
	require.Equal(t, 0, code, exportErr)
	// The rows and the book position go to stderr, the CSV alone to stdout.
	exportPos := regexp.MustCompile(`^spendgate: audit export: 4 rows, as of book position ([1-9][0-9]*)\n$`).FindStringSubmatch(exportErr)
	require.NotNil(t, exportPos, exportErr)
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"reservation_id", "request_id", "scopes", "balances", "unit", "reserved",
		"opened_at", "expires_at", "settled_at", "released_at", "expired_at", "status", "actual", "overrun", "excess", "settle_note", "late",
		"release_reason", "model", "price_version", "quoted_input_tokens", "quoted_max_output_tokens", "input_tokens",
		"output_tokens", "cached_input_tokens", "count", "price_input", "price_output", "price_cached_input", "tenant", "metadata.feature", "metadata.model"}, recs[0])
	require.Len(t, recs, 5)
	col := func(rec []string, name string) string { return rec[indexOf(recs[0], name)] }
	require.Equal(t, []string{r1, r2, r3, r4}, []string{recs[1][0], recs[2][0], recs[3][0], recs[4][0]})
	require.Equal(t, "org:acme user:u-17", col(recs[1], "scopes"))
	require.Equal(t, "settled", col(recs[1], "status"))
	require.Equal(t, "2.5", col(recs[1], "actual"))
	require.Equal(t, "0.5", col(recs[1], "overrun"))
	require.Equal(t, "'=1+1", col(recs[1], "metadata.feature"), "a formula is defused")
	require.Equal(t, "1.5", col(recs[2], "reserved"))
	require.Equal(t, "released", col(recs[3], "release_reason"))
	require.Equal(t, "open", col(recs[4], "status"))
	_, err = time.Parse(time.RFC3339, col(recs[1], "opened_at"))
	require.NoError(t, err)
	// --times sheet: the same rows, each time as a spreadsheet reads a
	// date (UTC, whole seconds, truncated), every other cell unchanged.
	sheet, err := csv.NewReader(strings.NewReader(ok("audit", "export", "--times", "sheet"))).ReadAll()
	require.NoError(t, err)
	require.Len(t, sheet, len(recs))
	timeCols := map[string]bool{"opened_at": true, "expires_at": true, "settled_at": true, "released_at": true, "expired_at": true}
	for i := 1; i < len(recs); i++ {
		for j, name := range recs[0] {
			exact, got := recs[i][j], sheet[i][j]
			if !timeCols[name] || exact == "" {
				require.Equal(t, exact, got, "row %d %s", i, name)
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, exact)
			require.NoError(t, err)
			// Exact times all have nine fractional digits, so that the
			// column sorts as text in time order.
			require.Len(t, exact, len("2006-01-02T15:04:05.000000000Z"), "row %d %s: %s", i, name, exact)
			require.Equal(t, at.UTC().Truncate(time.Second).Format("2006-01-02 15:04:05"), got, "row %d %s", i, name)
		}
	}
	totals, err := os.ReadFile(filepath.Join(dir, "totals.csv"))
	require.NoError(t, err)
	require.Equal(t, "unit,rows,open,settled,released,expired,late,reserved,actual,overrun,excess\nUSD,4,1,2,1,0,0,6.75,3.5,0.5,0\n", string(totals))
	// --decimal comma: semicolons between the fields, a comma in each
	// decimal, every other cell as it was; the totals file too.
	r := csv.NewReader(strings.NewReader(ok("audit", "export", "--decimal", "comma", "--totals", filepath.Join(dir, "totals-comma.csv"))))
	r.Comma = ';'
	comma, err := r.ReadAll()
	require.NoError(t, err)
	require.Len(t, comma, len(recs))
	require.Equal(t, "2,5", col(comma[1], "actual"))
	require.Equal(t, "1,5", col(comma[2], "reserved"))
	decimalCols := map[string]bool{"reserved": true, "actual": true, "overrun": true, "excess": true, "count": true, "price_input": true, "price_output": true, "price_cached_input": true}
	for i := 1; i < len(recs); i++ {
		for j, name := range recs[0] {
			want := recs[i][j]
			if decimalCols[name] {
				want = strings.Replace(want, ".", ",", 1)
			}
			require.Equal(t, want, comma[i][j], "row %d %s", i, name)
		}
	}
	totals, err = os.ReadFile(filepath.Join(dir, "totals-comma.csv"))
	require.NoError(t, err)
	require.Equal(t, "unit;rows;open;settled;released;expired;late;reserved;actual;overrun;excess\nUSD;4;1;2;1;0;0;6,75;3,5;0,5;0\n", string(totals))

	// JSONL, filtered by scope.
	out = ok("audit", "export", "--format", "jsonl", "--scope", "user:u-17")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &row))
	require.Equal(t, r1, row["reservation_id"])
	require.Equal(t, map[string]any{"model": "gpt-4o", "feature": "=1+1"}, row["metadata"])
	// --from after everything: a header and nothing else.
	out = ok("audit", "export", "--from", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	require.Equal(t, 1, strings.Count(out, "\n"))

	// Reports: from the replica's aggregate by default, byte-identical
	// to the replay of the book (--replay).
	out = ok("report", "--by", "model")
	require.Contains(t, out, "Denials come from the denial records")
	require.Regexp(t, `(?m)^gpt-4o\s+USD\s+2\s+1\s+1\s+0\s+0\s+0\s+2\.5\s+0\.5\s+3\s+1\s*$`, out)
	require.Regexp(t, `(?m)^\(none\)\s+USD\s+1\s+0\s+0\s+1\s`, out)
	require.Equal(t, out, ok("report", "--by", "model", "--replay"))
	code, out, errOut := e2eCLIErr(t, url, "report", "--by", "scope", "--format", "csv")
	require.Equal(t, 0, code)
	// Nothing was written since the export: the same position.
	require.Equal(t, "spendgate: report: as of book position "+exportPos[1]+"\n", errOut)
	require.Equal(t, "scope,unit,reservations,open,settled,released,expired,late,spend,overrun,reserved,denials\n"+
		"org:acme,USD,3,1,2,0,0,0,3.5,0.5,3,1\n"+
		"user:u-17,USD,2,0,1,1,0,0,2.5,0.5,0,1\n", out)
	require.Equal(t, out, ok("report", "--by", "scope", "--format", "csv", "--replay"))
	require.Equal(t, "scope;unit;reservations;open;settled;released;expired;late;spend;overrun;reserved;denials\n"+
		"org:acme;USD;3;1;2;0;0;0;3,5;0,5;3;1\n"+
		"user:u-17;USD;2;0;1;1;0;0;2,5;0,5;0;1\n", ok("report", "--by", "scope", "--format", "csv", "--decimal", "comma"))
	hour := time.Now().UTC().Truncate(time.Hour)
	window := []string{"--from", hour.Format(time.RFC3339), "--to", hour.Add(time.Hour).Format(time.RFC3339)}
	out = ok(append([]string{"report", "--by", "model"}, window...)...)
	require.Equal(t, out, ok(append([]string{"report", "--by", "model", "--replay"}, window...)...))
	day := time.Now().UTC().Format(time.DateOnly)
	out = ok("report", "--by", "scope", "--period", day)
	require.Contains(t, out, "opened from "+day+"T00:00:00Z to ")
	require.Equal(t, out, ok("report", "--by", "scope", "--period", day, "--replay"))
	// Bad input to the endpoint: the reply's error, exit 1.
	code, out, errOut = e2eCLIErr(t, url, "report", "--by", "model", "--from", hour.Add(time.Minute).Format(time.RFC3339))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `"code": "invalid_time"`)
	require.Empty(t, out, "an error reply is not the report: report --format csv > file must not fill the file with it")

	// audit balances lists the idle budget with zeros.
	out = ok("audit", "balances")
	require.Regexp(t, `(?m)^team:idle,month,\d{4}-\d{2},USD,50,0,0,0,0,0,0,0,0,0,UTC,$`, out)
	require.Regexp(t, `(?m)^team:idle;month;\d{4}-\d{2};USD;50;0;0;0;0;0;0;0;0;0;UTC;$`, ok("audit", "balances", "--decimal", "comma"))
	require.Contains(t, out, "org:acme,month,")

	// Usage errors: a bad time names the flag and the format; exit 64.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "balances", "--at", "yesterday"}, `--at "yesterday": want an RFC 3339 time like 2026-11-30T12:00:00Z`},
		{[]string{"audit", "export", "--from", "2026-11-30"}, `--from "2026-11-30": want an RFC 3339 time like`},
		{[]string{"audit", "export", "--to", "soon"}, `--to "soon": want an RFC 3339 time`},
		{[]string{"audit", "export", "--format", "xlsx"}, `--format "xlsx": want csv or jsonl`},
		{[]string{"audit", "export", "--times", "excel"}, `--times "excel": want exact or sheet`},
		{[]string{"audit", "export", "--times", "sheet", "--format", "jsonl"}, `--times sheet is for CSV`},
		{[]string{"audit", "export", "--decimal", ","}, `--decimal ",": want point or comma`},
		{[]string{"audit", "export", "--decimal", "comma", "--format", "jsonl"}, `--decimal comma is for CSV`},
		{[]string{"audit", "balances", "--decimal", "de"}, `--decimal "de": want point or comma`},
		{[]string{"report", "--by", "model", "--decimal", "comma"}, `--decimal comma is for --format csv`},
		{[]string{"backtest", "--scope", "team:x", "--unverified", "--decimal", "comma"}, `--decimal comma is for -o csv`},
		{[]string{"audit", "export", "--scope", "acme"}, `--scope "acme"`},
		{[]string{"audit", "export", "extra"}, `unexpected arguments`},
		{[]string{"audit", "export", "--from", "2026-12-01T00:00:00Z", "--to", "2026-11-01T00:00:00Z"}, `is not before --to`},
		{[]string{"audit", "check", "--at", "2026-11-30T12:00:00Z"}, `flag provided but not defined: --at`},
		{[]string{"report"}, `--by is required`},
		{[]string{"report", "--by", "a b"}, `--by "a b"`},
		{[]string{"report", "--by", "model", "--format", "pdf"}, `--format "pdf": want table or csv`},
		{[]string{"report", "--by", "model", "--from", "x"}, `--from "x": want an RFC 3339 time`},
		{[]string{"report", "--by", "model", "--scope", "org:acme"}, `--scope needs --replay`},
		{[]string{"report", "--by", "model", "--period", "2026-13"}, `--period "2026-13": want a UTC month like 2026-11, a week like 2026-W49 or a day like 2026-11-30`},
		{[]string{"report", "--by", "model", "--period", "2026-11", "--from", "2026-11-01T00:00:00Z"}, `--period replaces --from and --to`},
		{[]string{"admit", "--scope", "org:acme", "--amount", "1", "--meta", "model"}, `--meta "model": want KEY=VALUE`},
	} {
		code, _, errOut := e2eCLIErr(t, url, c.args...)
		require.Equal(t, exitUsage, code, "%v", c.args)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
	for _, args := range [][]string{{"audit", "export", "--help"}, {"report", "--help"}} {
		r := runHelp(t, args...) // the run TestCLI_HelpExitsZero reads
		require.Equal(t, 0, r.code)
		require.Contains(t, r.stdout, "Usage: spendgate ")
		require.Contains(t, r.stdout, "  --from string")
	}

	// The shadow decisions' export: one row per decision, its time in
	// either form.
	ok("admit", "--scope", "org:acme", "--amount", "1", "--mode", "shadow", "--request-id", "sh-1", "--meta", "model=gpt-4o")
	require.Eventually(t, func() bool {
		s, err := env.JS.Stream(context.Background(), env.Layout.DenialStreamName())
		return err == nil && s.CachedInfo().State.Msgs == 2
	}, 10*time.Second, 10*time.Millisecond, "the shadow decision's record is published")
	exact, err := csv.NewReader(strings.NewReader(ok("audit", "export", "--shadow"))).ReadAll()
	require.NoError(t, err)
	sheet, err = csv.NewReader(strings.NewReader(ok("audit", "export", "--shadow", "--times", "sheet"))).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"at", "replica", "tenant", "mode", "request_id", "result", "reason", "blocked_by",
		"scopes", "amount", "unit", "model", "metadata.model"}, exact[0])
	require.Len(t, exact, 2)
	require.Equal(t, []string{"shadow", "sh-1", "admitted"}, exact[1][3:6])
	at, err := time.Parse(time.RFC3339Nano, exact[1][0])
	require.NoError(t, err)
	require.Equal(t, append([]string{at.UTC().Truncate(time.Second).Format("2006-01-02 15:04:05")}, exact[1][1:]...), sheet[1])
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	panic("no column " + v)
}

// An export to a full disk exits 1 and says the file is incomplete, in
// both formats, and so does a totals file that cannot be written.
func TestAuditExport_FullDevice(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1, Reports: true})
	code, _ := e2eCLI(t, env.URL(), "budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "10", "--unit", "USD")
	require.Equal(t, 0, code)
	code, _ = e2eCLI(t, env.URL(), "admit", "--scope", "org:acme", "--amount", "1")
	require.Equal(t, 0, code)
	run := func(stdout *os.File, args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, clientBin(args...), append(unverified(args), "--nats-url", env.URL())...)
		cmd.Env = append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = stdout, &stderr
		err := cmd.Run()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return exitErr.ExitCode(), stderr.String()
		}
		require.NoError(t, err)
		return 0, stderr.String()
	}
	for _, format := range []string{"csv", "jsonl"} {
		code, errOut := run(full, "audit", "export", "--format", format)
		require.Equal(t, 1, code, errOut)
		require.Contains(t, errOut, "the export is incomplete")
		require.Contains(t, errOut, "no space left on device")
	}
	code, errOut := run(full, "report", "--by", "scope")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "the report is incomplete")
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer devnull.Close()
	code, errOut = run(devnull, "audit", "export", "--totals", "/dev/full")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "the totals file /dev/full is incomplete")
}

// unverified adds --unverified to a command that folds the ledger itself
// (audit check, balances, export; report --replay), for the tests whose
// ledger is written without signing (testenv's).
func unverified(args []string) []string {
	folds := len(args) >= 2 && args[0] == "audit" && (args[1] == "check" || args[1] == "balances" || args[1] == "export")
	for _, a := range args {
		folds = folds || a == "--replay"
	}
	if !folds {
		return args
	}
	return append(append([]string(nil), args...), "--unverified")
}

// The export's count column holds what a reservation's requests budgets
// hold for it, so a finance engineer reconciles a requests budget's spent
// from the export: the sum of count over the settled rows that name it.
// How we know it can fail: without the column (or with the USD amount in
// it) the sum below is not the budget's spent, 4.
func TestCLI_ExportCountReconcilesRequestsBudget(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	ok := e2eOK(t, env.URL())
	ok("budget", "put", "--scope", "team:ny", "--period", "month", "--limit", "50", "--unit", "USD")
	ok("budget", "put", "--scope", "team:ny", "--period", "month", "--limit", "1000", "--unit", "requests")
	var adm struct {
		ReservationID string `json:"reservation_id"`
	}
	admit := func(rid, count string) string {
		require.NoError(t, json.Unmarshal([]byte(ok("admit", "--scope", "team:ny", "--amount", "0.5", "--count", count, "--request-id", rid)), &adm))
		return adm.ReservationID
	}
	a, b, c := admit("c1", "3"), admit("c2", "1"), admit("c3", "7")
	ok("settle", "--reservation", a, "--actual", "0.4")
	ok("settle", "--reservation", b, "--actual", "0.6")
	ok("release", "--reservation", c)

	var got struct {
		Spent string `json:"spent"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("budget", "get", "--scope", "team:ny", "--period", "month", "--unit", "requests")), &got))
	require.Equal(t, "4", got.Spent)

	recs, err := csv.NewReader(strings.NewReader(ok("audit", "export"))).ReadAll()
	require.NoError(t, err)
	col := func(rec []string, name string) string { return rec[indexOf(recs[0], name)] }
	sum := 0
	counts := map[string]string{}
	for _, rec := range recs[1:] {
		counts[col(rec, "reservation_id")] = col(rec, "count")
		require.Equal(t, "USD", col(rec, "unit"), "a row of money and count is the money's")
		if col(rec, "status") == "settled" {
			n, err := strconv.Atoi(col(rec, "count"))
			require.NoError(t, err)
			sum += n
		}
	}
	require.Equal(t, map[string]string{a: "3", b: "1", c: "7"}, counts)
	require.Equal(t, 4, sum, "the settled rows' counts are the requests budget's spent")
}

// audit export --as-of POSITION writes the file an earlier export wrote,
// however the book moved since (the finance use: the same command, the same
// numbers, for a closed period); --as-of TIME too; bad values are usage
// errors.
func TestCLI_ExportAsOf(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	url := env.URL()
	ok := e2eOK(t, url)
	ok("budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "100", "--unit", "USD")
	r1 := strings.TrimSpace(ok("admit", "--scope", "org:acme", "--amount", "2", "-o", "id"))
	code, before, stderr := e2eCLIErr(t, url, "audit", "export", "--unverified")
	require.Equal(t, 0, code, stderr)
	m := regexp.MustCompile(`as of book position ([1-9][0-9]*)`).FindStringSubmatch(stderr)
	require.NotNil(t, m, stderr)
	reportBefore := ok("report", "--by", "scope", "--format", "csv", "--replay", "--unverified")
	cut := time.Now().UTC().Format(time.RFC3339Nano)

	ok("settle", "--reservation", r1, "--actual", "1.5")
	ok("admit", "--scope", "org:acme", "--amount", "3")
	code, _, stderr = e2eCLIErr(t, url, "admit", "--scope", "org:acme", "--amount", "99")
	require.Equal(t, 2, code, "denied: %s", stderr)
	// The report replayed as of the earlier position or time: the earlier
	// report, its denials included (none then; one now).
	testenv.WaitFor(t, 30*time.Second, "the denial is on the denial stream", func() bool {
		return strings.HasSuffix(strings.TrimSpace(ok("report", "--by", "scope", "--format", "csv", "--replay", "--unverified")), ",1")
	})
	require.Equal(t, reportBefore, ok("report", "--by", "scope", "--format", "csv", "--replay", "--unverified", "--as-of", m[1]))
	require.Equal(t, reportBefore, ok("report", "--by", "scope", "--format", "csv", "--replay", "--unverified", "--as-of", cut))
	for _, bad := range [][]string{{"--as-of", m[1]}, {"--replay", "--unverified", "--as-of", "99999"}, {"--replay", "--unverified", "--as-of", "2999-01-01T00:00:00Z"}} {
		code, stdout, stderr := e2eCLIErr(t, url, append([]string{"report", "--by", "scope"}, bad...)...)
		require.Equal(t, 64, code, "%v: %s", bad, stderr)
		require.Empty(t, stdout)
	}
	now := ok("audit", "export", "--unverified")
	require.NotEqual(t, before, now, "the book moved")
	require.Equal(t, before, ok("audit", "export", "--unverified", "--as-of", m[1]), "as of the earlier position: the earlier file")
	require.Equal(t, before, ok("audit", "export", "--unverified", "--as-of", cut), "as of a time between: the same")

	for _, bad := range [][]string{{"--as-of", "yesterday"}, {"--as-of", "0"}, {"--as-of", "2999-01-01T00:00:00Z"}, {"--as-of", m[1], "--shadow"}} {
		code, _, stderr := e2eCLIErr(t, url, append([]string{"audit", "export", "--unverified"}, bad...)...)
		require.Equal(t, 64, code, "%v: %s", bad, stderr)
	}
	// A position past the book's end names no book that ever was: refused,
	// nothing written (it used to export the book now and print the
	// position given as its own, another file once traffic came).
	for _, format := range []string{"csv", "jsonl"} {
		code, stdout, stderr := e2eCLIErr(t, url, "audit", "export", "--unverified", "--format", format, "--as-of", "99999")
		require.Equal(t, 64, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "past the end of the book")
	}
}

// --decimal comma writes every decimal column with a comma, the prices a
// row is priced at included (they were written with a point, which a
// spreadsheet in a decimal-comma locale reads as text or a date).
func TestCLI_ExportDecimalCommaPrices(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	ok := e2eOK(t, env.URL())
	ok("budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "100", "--unit", "USD")
	ok("pricing", "put", "--model", "m", "--input", "0.15", "--output", "0.60", "--cached-input", "0.075")
	id := strings.TrimSpace(ok("admit", "--scope", "org:acme", "--model", "m", "--input-tokens", "1000", "--max-output-tokens", "100", "-o", "id"))
	ok("settle", "--reservation", id, "--input-tokens", "1000", "--output-tokens", "50")
	r := csv.NewReader(strings.NewReader(ok("audit", "export", "--unverified", "--decimal", "comma")))
	r.Comma = ';'
	recs, err := r.ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 2)
	for name, want := range map[string]string{"price_input": "0,15", "price_output": "0,6", "price_cached_input": "0,075", "actual": "0,00018"} {
		require.Equal(t, want, recs[1][indexOf(recs[0], name)], name)
	}
}

// What a spreadsheet needs of a month's file: --metadata fixes the
// metadata columns (in its order, set or not) so a template's columns stay
// put; tenant is a column of its own; a --scope no row names says so on
// stderr instead of a header alone and silence. How it can fail: without
// --metadata the header holds the keys seen (project absent, user last);
// the tenant was only a prefix of request_id and scopes.
func TestCLI_ExportColumnsForASpreadsheet(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	url := env.URL()
	ok := e2eOK(t, url)
	ok("budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "100", "--unit", "USD")
	ok("budget", "put", "--tenant", "globex", "--scope", "team:g", "--period", "month", "--limit", "100", "--unit", "USD")
	ok("admit", "--scope", "org:acme", "--amount", "1", "--meta", "user=ann", "--meta", "zone=eu")
	ok("admit", "--tenant", "globex", "--scope", "team:g", "--amount", "2")

	recs, err := csv.NewReader(strings.NewReader(ok("audit", "export", "--unverified", "--metadata", "project,user"))).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"tenant", "metadata.project", "metadata.user"}, recs[0][len(recs[0])-3:])
	tenants := map[string][]string{}
	for _, rec := range recs[1:] {
		require.Len(t, rec, len(recs[0]))
		tenants[rec[len(rec)-3]] = rec[len(rec)-2:]
	}
	require.Equal(t, map[string][]string{"": {"", "ann"}, "globex": {"", ""}}, tenants)

	code, stdout, stderr := e2eCLIErr(t, url, "audit", "export", "--unverified", "--scope", "team:nope")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, strings.Count(stdout, "\n"), "a header alone")
	require.Contains(t, stderr, "no reservation in the range names team:nope")
	for _, bad := range [][]string{{"--metadata", "a,,b"}, {"--metadata", "a,a"}, {"--metadata", "a", "--format", "jsonl"}} {
		code, _, stderr := e2eCLIErr(t, url, append([]string{"audit", "export", "--unverified"}, bad...)...)
		require.Equal(t, 64, code, "%v: %s", bad, stderr)
	}
}
