package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/testenv"
)

// chromium is the browser .ci/run installs from Debian's packages.
const chromium = "/usr/bin/chromium"

// artifactDir is where the screenshot goes: $SPENDGATE_ARTIFACTS, or a new
// temporary directory kept after the test (its path is logged).
func artifactDir(t *testing.T) string {
	if d := os.Getenv("SPENDGATE_ARTIFACTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	d, err := os.MkdirTemp("", "spendgate-dashboard-")
	require.NoError(t, err)
	return d
}

// The dashboard in a real headless Chromium: the page loads with no console
// error (a CSP violation, a 404 or a script exception is one), lists the
// seeded budgets with the right numbers, nearest to the limit first, sorts
// by a clicked column, filters, renders the chart with its forecast, and
// lists the denial. A screenshot is kept.
func TestDashboard_Browser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("skipped: no Chromium at %s (install the Debian package: apt-get install -y chromium; .ci/run does)", chromium)
	}
	s := seed(t)
	testenv.WaitFor(t, 30*time.Second, "the series to catch up", func() bool {
		var b dashboard.BudgetsReply
		getJSON(t, s.srv.URL+"/dashboard/api/budgets", &b)
		return b.Ready
	})

	ctx, problems := browser(t, 1360, 1250)
	type row struct {
		Scope    string `json:"scope"`
		Used     int    `json:"used"`
		Spent    string `json:"spent"`
		Reserved string `json:"reserved"`
		Limit    string `json:"limit"`
		Exposure string `json:"exposure"`
	}
	const readRows = `Array.from(document.querySelectorAll('#budgets tbody tr')).map(tr => ({
		scope: tr.dataset.scope, used: +tr.dataset.usedBp,
		spent: tr.querySelector('.spent').textContent, reserved: tr.querySelector('.reserved').textContent,
		limit: tr.querySelector('.limit').firstChild.textContent, exposure: tr.querySelector('.exposure').textContent}))`
	scopes := func(rs []row) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.Scope
		}
		return out
	}
	var initial, byScope, utilAsc, filtered []row
	var spentPath, forecastPath, forecastText string
	var denials int
	var shadow [][]string
	var counts []string
	var png []byte
	var fits struct{ Table, Wrap int }
	var bobRunsOut string
	var pcts []string
	var tenantCell string
	var nearOnly []string
	var disabledCell string
	var denialCells []string
	var moreHidden bool
	require.NoError(t, chromedp.Run(ctx,
		cdplog.Enable(),
		// Pages of one budget: the page walks every page of api/budgets.
		chromedp.Navigate(s.srv.URL+"/dashboard/?page=1"),
		chromedp.WaitVisible(`body[data-loaded="true"]`),
		chromedp.WaitVisible(`#chart-svg #spent-line`),
		chromedp.Evaluate(readRows, &initial),
		chromedp.Evaluate(`document.getElementById('more').hidden`, &moreHidden),
		chromedp.AttributeValue(`#spent-line`, "d", &spentPath, nil),
		chromedp.AttributeValue(`#forecast-line`, "d", &forecastPath, nil),
		chromedp.Text(`#forecast`, &forecastText),
		chromedp.Evaluate(`document.querySelectorAll('#denials tbody tr').length`, &denials),
		chromedp.Evaluate(`Array.from(document.querySelector('#denials tbody tr').cells).map(td => td.textContent)`, &denialCells),
		chromedp.WaitVisible(`#shadow tbody tr`),
		chromedp.Evaluate(`Array.from(document.querySelectorAll('#shadow tbody tr')).map(tr => Array.from(tr.cells).map(td => td.textContent))`, &shadow),
		chromedp.Evaluate(`["c-budgets", "c-near", "c-over"].map(id => document.getElementById(id).textContent)`, &counts),
		chromedp.Evaluate(fitsJS, &fits),
		chromedp.Evaluate(`document.querySelector('#budgets tr[data-scope="user:bob"] .runs-out').textContent + " | " + document.querySelector('#budgets tr[data-scope="user:bob"] .runs-out').title`, &bobRunsOut),
		chromedp.FullScreenshot(&png, 100),
		chromedp.Click(`th[data-key="scope"]`),
		chromedp.Evaluate(readRows, &byScope),
		chromedp.Click(`th[data-key="used_bp"]`), // utilization, descending
		chromedp.Click(`th[data-key="used_bp"]`), // and ascending
		chromedp.Evaluate(readRows, &utilAsc),
		chromedp.SendKeys(`#filter`, "team"),
		chromedp.Evaluate(readRows, &filtered),
		chromedp.Evaluate(`[pct(9995), pct(10000), pct(1000), pct(999), pct(78), pct(625)]`, &pcts),
		// A tenant's budget is shown with its tenant, and "near the limit"
		// lists what its card counts (80 % up to, not including, 100 %).
		chromedp.Evaluate(`(() => {
			const saved = state.budgets, which = state.which, filter = state.filter;
			const row = (scope, tenant, used) => Object.assign({}, saved[0], {scope: scope, tenant: tenant, kind: "team", used_bp: used});
			state.filter = ""; state.which = "near";
			state.budgets = [row("globex/team:search", "globex", 8000), row("team:over", undefined, 10000), Object.assign(row("team:x", undefined, 9999), {disabled: true})];
			renderBudgets();
			const out = [document.querySelector('#budgets tr[data-scope="globex/team:search"] .c-scope').textContent,
				Array.from(document.querySelectorAll('#budgets tbody tr')).map(tr => tr.dataset.scope),
				document.querySelector('#budgets tr[data-scope="team:x"] .runs-out').textContent];
			state.budgets = saved; state.which = which; state.filter = filter;
			renderBudgets();
			return out;
		})()`, &[]any{&tenantCell, &nearOnly, &disabledCell}),
	))
	require.Equal(t, []string{"99%", "100%", "10%", "9.9%", "0.7%", "6.2%"}, pcts, "rounded down: 99.95 % is not 100 %")
	require.Equal(t, "globex/teamsearch", tenantCell, "tenant, kind, id")
	require.ElementsMatch(t, []string{"globex/team:search", "team:x"}, nearOnly)
	require.Equal(t, "disabled", disabledCell, "a disabled budget says so where it runs out")
	path := filepath.Join(artifactDir(t), "dashboard.png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)

	require.Equal(t, []row{
		{Scope: "org:acme", Used: 8500, Spent: "85.00", Reserved: "0.00", Limit: "100.00", Exposure: "—"},
		{Scope: "team:search", Used: 3000, Spent: "10.00", Reserved: "5.00", Limit: "50.00", Exposure: "7.00 / 10.00"},
		{Scope: "user:bob", Used: 2000, Spent: "2.00", Reserved: "0.00", Limit: "10.00", Exposure: "—"},
		{Scope: "team:ads", Used: 1000, Spent: "100.00", Reserved: "0.00", Limit: "1,000.00", Exposure: "—"},
	}, initial, "nearest to the limit first, numbers as in the ledger, the exposure bound and its cap")
	require.True(t, moreHidden, "every budget loaded: no Show more")
	require.Equal(t, []string{"org:acme", "team:ads", "team:search", "user:bob"}, scopes(byScope))
	require.Equal(t, []string{"team:ads", "user:bob", "team:search", "org:acme"}, scopes(utilAsc))
	require.Equal(t, []string{"team:ads", "team:search"}, scopes(filtered))
	require.NotEmpty(t, spentPath, "the chart's spend line")
	require.True(t, strings.HasPrefix(spentPath, "M "), spentPath)
	require.NotEmpty(t, forecastPath, "acme burns fast: a forecast line")
	require.Contains(t, forecastText, "runs out")
	require.Equal(t, 1, denials, "the real denial; the shadow one is not a denial")
	require.Equal(t, []string{"user:bob per lifetime (USD)", "limit_reached", "9.00USD"}, denialCells[2:5], "blocked by which budget, and what it asked in its unit")
	require.Equal(t, [][]string{{"user:bob", "shadow", "0", "1", "limit_reached 1", "0.00USD", "12.00USD"}}, shadow,
		"the shadow decision, apart from denials and spend")
	require.Equal(t, []string{"4", "1", "0"}, counts, "budgets, near the limit, over it")
	require.Regexp(t, `^exhausted \| its latest admit, of 9\.00 USD, was denied \(limit reached\) .+, and 8\.00 USD available still does not hold it$`, bobRunsOut,
		"bob's 9 did not fit in the 8 left: exhausted, and the cell's title says why")
	require.LessOrEqual(t, fits.Table, fits.Wrap,
		"at 1360 px every column of the budgets table, Resets included, is on screen without a horizontal scroll")
	require.Empty(t, problems(), "console errors")
}

// fitsJS measures the budgets table against the box that scrolls it.
const fitsJS = `(() => { const t = document.getElementById('budgets'); return {table: t.scrollWidth, wrap: t.parentElement.clientWidth}; })()`

// shared is the one headless Chromium the browser tests share, each in a
// tab of its own with its own viewport and console: a Chromium's start
// and stop cost about 1.5 CPU-s and a few seconds of wall, once per test
// before. It starts with the first test that asks for it; TestMain stops
// it and removes its profile.
var shared struct {
	once    sync.Once
	ctx     context.Context // the browser's first tab: tabs made from it open in the same browser
	stop    func()
	profile string
	err     error
}

// sharedBrowser starts the shared Chromium once and returns its context.
func sharedBrowser() (context.Context, error) {
	shared.once.Do(func() {
		// Chromium's profile: removed once the browser is gone (its helper
		// processes may still write to it for a moment after it exits).
		shared.profile, shared.err = os.MkdirTemp("", "spendgate-chromium-")
		if shared.err != nil {
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium),
			chromedp.Flag("headless", true),
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.Flag("disable-quic", true),
			chromedp.NoFirstRun,
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.UserDataDir(shared.profile),
			chromedp.WindowSize(1400, 1250),
		)
		actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelB := chromedp.NewContext(actx)
		shared.ctx = bctx
		shared.stop = func() { cancelB(); cancelA() }
		// The first Run starts the browser, which lives as long as its
		// context: bctx, not a test's, and bounded here instead.
		started := make(chan error, 1)
		go func() { started <- chromedp.Run(bctx) }()
		select {
		case shared.err = <-started:
		case <-time.After(90 * time.Second):
			shared.stop()
			shared.err = errors.New("Chromium did not start within 90 s")
		}
	})
	return shared.ctx, shared.err
}

// stopBrowser stops the shared Chromium, if a test started it, and
// removes its profile, trying for up to 20 s.
func stopBrowser() error {
	if shared.stop == nil {
		return nil
	}
	shared.stop()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		err := os.RemoveAll(shared.profile)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := stopBrowser(); err != nil {
		fmt.Fprintln(os.Stderr, "Chromium's profile:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// browser opens a tab of width x height in the shared headless Chromium
// (skipping t when there is none), closed when t ends, and returns its
// context, and what it reported as console errors, warnings, exceptions
// and failed loads so far.
func browser(t *testing.T, width, height int) (context.Context, func() []string) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("skipped: no Chromium at %s (install the Debian package: apt-get install -y chromium; .ci/run does)", chromium)
	}
	bctx, err := sharedBrowser()
	require.NoError(t, err, "start Chromium")
	ctx, cancelB := chromedp.NewContext(bctx)
	t.Cleanup(cancelB)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelT)

	var mu sync.Mutex
	var problems []string
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError || e.Type == runtime.APITypeWarning || e.Type == runtime.APITypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.LevelError || e.Entry.Level == cdplog.LevelWarning {
				problems = append(problems, fmt.Sprintf("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL))
			}
		}
	})
	// The tab's viewport, as the window size of a browser of its own gave
	// it.
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(int64(width), int64(height))))
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}
